"""The window search (`solver.optimize.search_lns`), the cycle-aware
topological order and the device orders of the segment plans."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random

import pytest

from solver.optimize import Problem, Weights, budget_violations, evaluate
from solver.optimize.order import topological_order
from solver.optimize.search import device_orders, obvious_plans, one_device_plan
from solver.optimize.search_lns import improve, restrict
from solver.optimize.search_milp import Effort, milp_solve
from solver.work import Work

from .test_optimize_search import brute_force, random_problem


def _seeds(count: int) -> list[object]:
    """Seeds 0..count-1; seeds 3 and 2 give the largest budgeted problems (tens of seconds
    and about ten seconds of brute force under the liveness rule), so they run in the slow stage."""
    return [pytest.param(s, marks=pytest.mark.slow) if s in (2, 3) else s for s in range(count)]


@pytest.mark.parametrize("seed", range(8))
def test_a_restricted_plan_prices_and_fits_as_in_the_whole_problem(seed: int) -> None:
    problem = random_problem(seed, 4, 14, budgets=True)
    rng = random.Random(seed)
    base = [rng.choice(ok) for ok in problem.allowed]
    free = sorted(rng.sample(range(14), 6))
    sub = restrict(problem, base, free)
    k = len(problem.devices)
    for choice in itertools.islice(itertools.product(*(problem.allowed[c] for c in free)), 200):
        whole = list(base)
        for c, d in zip(free, choice):
            whole[c] = d
        part = [*choice, *range(k)]
        # Run time, copies and bytes copied agree; so do the budgets' verdicts.
        assert evaluate(sub, Weights.of(sub), part)[1:] == evaluate(problem, Weights.of(problem), whole)[1:]
        assert {d for d, _n, _b in budget_violations(sub, part)} == {
            d for d, _n, _b in budget_violations(problem, whole)
        }


@pytest.mark.parametrize("seed", range(6))
def test_the_restricted_optimum_is_the_best_completion(seed: int) -> None:
    problem = random_problem(seed, 3, 12, budgets=seed % 2 == 0)
    weights = Weights.of(problem)
    base = [ok[0] for ok in problem.allowed]
    free = list(range(3, 9))
    sub = restrict(problem, base, free)
    found = milp_solve(sub, Weights.of(sub), None, Effort(10**6), Work(10**12), ties=False)
    completions = []
    for choice in itertools.product(*(problem.allowed[c] for c in free)):
        whole = list(base)
        for c, d in zip(free, choice):
            whole[c] = d
        if not budget_violations(problem, whole):
            completions.append(evaluate(problem, weights, whole)[1])
    if not completions:
        assert found.assign is None
        return
    assert found.ns_proven and found.assign is not None
    whole = list(base)
    for i, c in enumerate(free):
        whole[c] = found.assign[i]
    assert evaluate(problem, weights, whole)[1] == min(completions)


def _long_problem(seed: int, n: int = 400):  # type: ignore[no-untyped-def]
    """A problem long enough for windows (more than two first windows)."""
    return random_problem(seed, 3, n, budgets=True, pins=False)


@pytest.mark.parametrize("seed", range(3))
def test_windows_never_worsen_and_keep_budgets(seed: int) -> None:
    problem = _long_problem(seed)
    weights = Weights.of(problem)
    start = next(
        (
            p
            for p in (one_device_plan(problem, 0), *(c.assign for c in obvious_plans(problem, weights)))
            if p is not None and not budget_violations(problem, p)
        ),
        None,
    )
    assert start is not None
    # A small allowance: the assertions hold for any stopping point.
    got, solved = improve(problem, weights, list(start), Work(2_000))
    assert solved > 0
    assert not budget_violations(problem, got)
    assert all(got[c] in ok for c, ok in enumerate(problem.allowed))
    assert evaluate(problem, weights, got)[0] <= evaluate(problem, weights, start)[0]


def test_windows_improve_an_all_cpu_plan_and_stop_at_the_goal() -> None:
    problem = _long_problem(7)
    weights = Weights.of(problem)
    start = one_device_plan(problem, 0)
    assert start is not None and not budget_violations(problem, start)
    value = evaluate(problem, weights, start)[0]
    # The goal: any improvement (the first window's LP already has one).
    got, solved = improve(problem, weights, start, Work(10**12), goal=value - 1)
    assert evaluate(problem, weights, got)[0] < value and solved >= 1
    assert not budget_violations(problem, got)
    # A goal the start already meets: nothing is solved.
    same, solved = improve(problem, weights, start, Work(10**12), goal=value)
    assert same == start and solved == 0


def test_small_problems_are_left_to_the_full_milp() -> None:
    problem = random_problem(3, 3, 40, budgets=True)
    start = [ok[0] for ok in problem.allowed]
    assert improve(problem, Weights.of(problem), start, Work(10**12)) == (start, 0)


def test_topological_order_keeps_a_cycle_together_after_what_it_reads() -> None:
    # 0 -> 1 -> {2 <-> 3 <-> 4} -> 5, plus sources 6 (read by 2) and 7 (read by 5):
    # the cycle's classes come out together after 0 and 1, each source right
    # before its consumer's group, and 5 last.
    base = random_problem(0, 2, 8, budgets=False, pins=False)
    edges = [(1, 0), (2, 1), (3, 2), (4, 3), (2, 4), (5, 4), (2, 6), (5, 7)]
    problem = dataclasses.replace(base, edges=[(u, v, 4096, 1) for u, v in edges])
    order = topological_order(problem)
    assert sorted(order) == list(range(8))
    position = {c: i for i, c in enumerate(order)}
    cycle = sorted(position[c] for c in (2, 3, 4))
    assert cycle[-1] - cycle[0] == 2  # contiguous
    assert position[0] < position[1] < cycle[0] and position[5] == 7
    assert position[6] < cycle[0] and position[7] == position[5] - 1
    for u, v, _b, _uses in problem.edges:
        if {u, v} <= {2, 3, 4}:
            continue
        assert position[v] < position[u]


def test_device_orders_skip_swaps_of_identical_devices() -> None:
    identical = random_problem(0, 4, 10, budgets=True, pins=False)  # cpu + three identical GPUs
    orders = device_orders(identical)
    assert orders[0] == (0, 1, 2, 3)
    # Only the cpu's position tells the orders apart.
    assert sorted(o.index(0) for o in orders) == [0, 1, 2, 3]
    distinct = random_problem(0, 4, 10, budgets=True, identical=False)
    orders = device_orders(distinct)
    assert orders[0] == (0, 1, 2, 3) and len(set(orders)) == len(orders) <= 9
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders)


@functools.cache
def _budgeted(seed: int) -> tuple[Problem, Weights, tuple[int, list[int]] | None]:
    """The budgeted 4-device, 9-class problem of `seed`, its weights and its brute-force
    optimum, computed once for the two tests below (the brute force is most of their time)."""
    problem = random_problem(seed, 4, 9, budgets=True)
    weights = Weights.of(problem)
    return problem, weights, brute_force(problem, weights)


@pytest.mark.parametrize("seed", _seeds(4))
def test_obvious_plans_with_budgets_stay_valid(seed: int) -> None:
    problem, weights, best = _budgeted(seed)
    for plan in obvious_plans(problem, weights):
        assert not budget_violations(problem, plan.assign)
        assert plan.objective == evaluate(problem, weights, plan.assign)[0]
        assert best is not None and plan.objective >= best[0]


@pytest.mark.parametrize("seed", _seeds(6))
def test_a_stalled_highs_run_still_gives_a_valid_bound_and_plan(seed: int) -> None:
    # stall_nodes=0: stopped at HiGHS's first report, whatever it has by then.
    problem, weights, best = _budgeted(seed)
    found = milp_solve(problem, weights, None, Effort(10**6, stall_nodes=0), Work(10**12))
    if best is None:
        assert found.assign is None
        return
    assert found.bound_ns <= evaluate(problem, weights, best[1])[1]
    if found.assign is not None:
        assert not budget_violations(problem, found.assign)
        assert all(found.assign[c] in ok for c, ok in enumerate(problem.allowed))


def test_a_window_costs_its_milps_size() -> None:
    # A window is charged by its MILP's nonzeros (HiGHS's root work grows with
    # them), and one the allowance left cannot pay for is not solved.
    from solver.optimize.search_lns import FIRST_WINDOW, WINDOW_COST, WINDOW_NONZEROS

    problem = _long_problem(5)
    weights = Weights.of(problem)
    start = one_device_plan(problem, 0)
    assert start is not None and not budget_violations(problem, start)
    order = [c for c in topological_order(problem) if len(problem.allowed[c]) > 1]
    first = order[:FIRST_WINDOW]
    sub = restrict(problem, start, first)
    alone = milp_solve(sub, Weights.of(sub), None, Effort(1), Work(10**6), ties=False)
    assert alone.nonzeros > WINDOW_COST * WINDOW_NONZEROS  # costs more than the least a window costs
    # An allowance short of the first window's size: nothing is solved.
    short = Work(alone.nonzeros // WINDOW_NONZEROS - 1)
    assert improve(problem, weights, start, short) == (start, 0)
    # One that covers it: the window is solved and charged its size.
    enough = Work(alone.nonzeros // WINDOW_NONZEROS + 1)
    _plan, solved = improve(problem, weights, start, enough)
    assert solved == 1
    assert enough.spent >= alone.nonzeros // WINDOW_NONZEROS
