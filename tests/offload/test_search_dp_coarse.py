"""The offload program's coarse relaxation (solver/optimize/search_dp.py):
the suffix Pareto sets give the least relaxed run time within any
room, the plan read off them has that run time, the sets prune a finer pass
without losing its optimum, and with the coarse pass forced on the program's
bound and plan stay sound."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from solver.optimize import Problem, Weights, search_dp
from solver.optimize.order import topological_order
from solver.optimize.search_dp import (
    _build,
    _cases,
    _forward,
    _frontiers,
    _least_suffix,
    _pair,
    _plan_in,
    _prepare,
    _Steps,
    _suffix_sets,
)
from solver.work import Work
from tests.offload.test_search_dp import assert_sound
from tests.solver.test_optimize_search import random_problem


def walk(steps: _Steps, bits: tuple[int, ...]) -> tuple[float, float]:
    """(run time, bytes) of one choice per step under the steps' costs."""
    state = 0
    ns = nbytes = 0.0
    for k, bit in enumerate(bits):
        ns += float((steps.ns_g if bit else steps.ns_c)[k][state])
        nbytes += float((steps.bytes_g if bit else steps.bytes_c)[k][state])
        state = int((steps.next_g if bit else steps.next_c)[k][state])
    return ns, nbytes


def every_plan(steps: _Steps, allow: list[tuple[bool, bool]]) -> list[tuple[float, float, tuple[int, ...]]]:
    choices = [[bit for bit, ok in ((1, g), (0, c)) if ok] for g, c in allow]
    return [(*walk(steps, bits), bits) for bits in itertools.product(*choices)]


def program_of(problem: Problem, light_share: float) -> tuple[int, int, list[int], _Steps]:
    """(budgeted device, other device, the program's order, its steps with
    kernels light up to `light_share` of the least run time)."""
    pair = _pair(problem)
    assert pair is not None
    g, c = pair
    order = topological_order(problem)
    shape = _frontiers(problem, order)
    assert shape is not None
    scale = sum(min(problem.unary[x].values()) for x in order)
    return g, c, order, _build(problem, order, shape[0], g, c, int(light_share * scale))


def setup(seed: int, light_share: float) -> tuple[Problem, _Steps, list[tuple[bool, bool]], float]:
    problem = random_problem(300 + seed, 2, 10, budgets=True)
    g, c, order, steps = program_of(problem, light_share)
    # The case whose plans' bytes spread most around its budget (some fit, some do not).
    def spread(case: search_dp._Case) -> int:
        plans = every_plan(steps, case.allow)
        fit = sum(1 for _, nbytes, _ in plans if nbytes <= case.budget)
        return min(fit, len(plans) - fit)

    case = max(_cases(problem, order, g, c, 0.0, steps), key=spread)
    return problem, steps, case.allow, case.budget


@pytest.mark.parametrize("seed", range(16))
def test_suffix_sets_give_the_least_run_time_within_each_room(seed: int) -> None:
    _problem, steps, allow, budget = setup(seed, 0.2)
    built = _suffix_sets(steps, allow, budget, 10**7, Work(10**12))
    assert built is not None
    sets, _points = built
    plans = every_plan(steps, allow)
    for room in (budget, budget * 0.7, budget * 0.4, 0.0):
        fitting = [ns for ns, nbytes, _ in plans if nbytes <= room]
        least = _least_suffix(sets[0], np.zeros(1, dtype=np.int64), np.array([room]))[0]
        if not fitting:
            assert least == math.inf
            assert _plan_in(steps, allow, sets, room) is None
            continue
        assert least == pytest.approx(min(fitting), abs=1e-6)
        read = _plan_in(steps, allow, sets, room)
        assert read is not None
        value, bits = read
        ns, nbytes = walk(steps, tuple(bits))
        assert value == pytest.approx(min(fitting), abs=1e-6)
        assert ns == pytest.approx(value, abs=1e-6) and nbytes <= room


@pytest.mark.parametrize("seed", range(16))
def test_coarse_sets_prune_a_finer_pass_without_losing_its_optimum(seed: int) -> None:
    _problem, coarse, allow, budget = setup(seed, 0.2)
    _, fine, _, _ = setup(seed, 0.0)
    built = _suffix_sets(coarse, allow, budget, 10**7, Work(10**12))
    assert built is not None
    fitting = sorted(ns for ns, nbytes, _ in every_plan(fine, allow) if nbytes <= budget)
    if not fitting:
        return
    case = search_dp._Case(0, allow, budget, 0.0)
    _prepare(fine, case, math.inf, (1.0,))
    best = fitting[0]
    for target in (best * 0.99, best, best * 1.01):
        outcome = _forward(
            fine, allow, budget, target, case.prices, case.suffix, case.fewest, Work(10**12), sets=built[0]
        )
        if target < best:
            assert outcome.status == "none"
        else:
            assert outcome.status == "found" and outcome.ns == pytest.approx(best, abs=1e-6)
            assert outcome.bits is not None
            assert walk(fine, tuple(outcome.bits))[1] <= budget


@pytest.mark.parametrize("seed", range(30))
def test_bound_and_plan_are_sound_with_the_coarse_pass(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_dp, "COARSE_GAP", -1.0)  # the coarse pass on every problem it can take
    problem = random_problem(400 + seed, 2, 11, budgets=True)
    weights = Weights.of(problem)
    assert_sound(problem, weights)
