"""The offload program (solver/optimize/search_dp.py): its bound is a bound,
its plans fit, and on a knapsack whose relaxation fills the budget to the byte
it proves more than the Lagrangian bound."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from solver.optimize import Problem, Weights, budget_violations, evaluate
from solver.optimize.cost_model import DeviceProfile
from solver.optimize.order import topological_order
from solver.optimize.search_dp import (
    _build,
    _cases,
    _frontiers,
    _lagrangian,
    _pair,
    offload_search,
)
from solver.work import Work
from tests.solver.test_optimize_search import random_problem


def least_run_time(problem: Problem, weights: Weights) -> int | None:
    """The least run time (ns) of any plan within support and budgets (None: no plan fits)."""
    best = None
    for assign in itertools.product(*problem.allowed):
        plan = list(assign)
        if not budget_violations(problem, plan):
            ns = evaluate(problem, weights, plan)[1]
            best = ns if best is None else min(best, ns)
    return best


def assert_sound(problem: Problem, weights: Weights) -> None:
    """The program's bound is at most the least run time, and its plan (if
    any) keeps support and budgets and is no faster than that; no plan when
    none fits."""
    least = least_run_time(problem, weights)
    found = offload_search(problem, weights, None, 0, 0, Work(10**12))
    assert found is not None
    if least is None:  # pins and the budget leave no plan
        assert found.assign is None
        return
    assert found.bound_ns <= least
    if found.assign is not None:
        assert not budget_violations(problem, found.assign)
        assert all(d in ok for d, ok in zip(found.assign, problem.allowed))
        assert evaluate(problem, weights, found.assign)[1] >= least


@pytest.mark.parametrize("seed", range(40))
def test_bound_and_plan_are_sound_on_random_problems(seed: int) -> None:
    problem = random_problem(seed, 2, 11, budgets=True)
    weights = Weights.of(problem)
    assert_sound(problem, weights)


@pytest.mark.parametrize("seed", range(10))
def test_an_incumbent_is_kept_or_beaten(seed: int) -> None:
    problem = random_problem(100 + seed, 2, 10, budgets=True, pins=False)
    weights = Weights.of(problem)
    cpu = [0] * len(problem.allowed)  # device 0 has no budget
    assert not budget_violations(problem, cpu)
    found = offload_search(problem, weights, cpu, 0, 0, Work(10**12))
    assert found is not None
    if found.assign is not None:
        assert evaluate(problem, weights, found.assign)[1] < evaluate(problem, weights, cpu)[1]
        assert not budget_violations(problem, found.assign)
    least = least_run_time(problem, weights)
    assert least is not None and found.bound_ns <= least


def knapsack(sizes: list[int], budget: int) -> Problem:
    """Independent weighted kernels (each a class that holds its own weight,
    resident where the kernel runs) that run 1000x faster on the budgeted GPU, time in proportion
    to the weight's bytes: the relaxation fills the budget exactly, whole
    kernels cannot."""
    base = random_problem(0, 2, 2, budgets=True, pins=False)
    n = len(sizes)
    unary: list[dict[int, int]] = [{0: size, 1: size // 1000} for size in sizes]
    weight_bytes = list(sizes)
    edges: list[tuple[int, int, int, int]] = []
    gpu = next(iter(base.budgets))
    profiles = list(base.profiles)
    profiles[gpu] = dataclasses.replace(profiles[gpu], memory_bytes=budget)
    return dataclasses.replace(
        base,
        profiles=profiles,
        classes=list(range(n)),
        allowed=[[0, 1]] * n,
        unary=unary,
        ops=[1] * n,
        pref=[1] * n,
        edges=edges,
        weight_bytes=weight_bytes,
        largest=[0] * n,
        budgets={gpu: budget},
    )


def test_knapsack_bound_beats_the_lagrangian() -> None:
    sizes = [3_000_000, 5_000_000, 7_000_000, 3_000_000, 5_000_000, 7_000_000, 11_000_000]
    problem = knapsack(sizes, 20_500_000)
    weights = Weights.of(problem)
    least = least_run_time(problem, weights)
    assert least is not None
    g, c = _pair(problem) or (0, 0)
    order = topological_order(problem)
    shape = _frontiers(problem, order)
    assert shape is not None
    steps = _build(problem, order, shape[0], g, c, 0)
    lagrangian = min(_lagrangian(steps, k.allow, k.budget)[0] for k in _cases(problem, order, g, c, 0.0, steps))
    found = offload_search(problem, weights, None, 0, 0, Work(10**12))
    assert found is not None and found.assign is not None
    # The relaxation could fill 20.5 MB; whole kernels fill 20 MB at best.
    assert lagrangian < found.bound_ns <= least
    assert evaluate(problem, weights, found.assign)[1] == least == found.bound_ns


def test_not_an_offload_problem() -> None:
    weights_of = Weights.of
    three = random_problem(3, 3, 8, budgets=True)
    assert offload_search(three, weights_of(three), None, 0, 0, Work(10**12)) is None
    free = random_problem(3, 2, 8, budgets=False)
    assert offload_search(free, weights_of(free), None, 0, 0, Work(10**12)) is None
    both = random_problem(3, 2, 8, budgets=True)
    profiles = [DeviceProfile(p.peak_gflops, p.mem_gbps, p.launch_us, 1 << 30) for p in both.profiles]
    both = dataclasses.replace(both, profiles=profiles, budgets={0: 1 << 30, 1: 1 << 30})
    assert offload_search(both, weights_of(both), None, 0, 0, Work(10**12)) is None
