"""Unit tests of optimize mode's search for three or more devices and budgets:
the obvious plans, alpha-expansion, identical devices, HiGHS's
plan and bound, and `solve` on small problems built directly (no parsing).

Every expected value is computed here by brute force over the problem's
assignments, priced with the project's own `evaluate`/`budget_violations`.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Sequence

import pytest

from relay.device import VirtualDevice, parse_target
from solver.optimize import Problem, Weights, budget_violations, evaluate
from solver.optimize.cost_model import DeviceProfile, LinkProfile
from solver.optimize.problem import identical_devices
from solver.optimize.search import (
    expand,
    obvious_plans,
    one_device_plan,
    segment_plan,
    topological_order,
)
from solver.optimize.search_milp import Effort, milp_solve, relabel
from solver.optimize.strategies import solve
from solver.work import Work

CPU = DeviceProfile(50.0, 20.0, 2.0)
GPU = DeviceProfile(20000.0, 2000.0, 5.0)


def _devices(k: int) -> tuple[list[VirtualDevice], list[str], list[DeviceProfile]]:
    devices = [VirtualDevice(1, 0, parse_target("llvm"))]
    names = ["cpu"]
    profiles = [CPU]
    for i in range(k - 1):
        devices.append(VirtualDevice(2, i, parse_target("cuda")))
        names.append("cuda" if i == 0 else f"cuda:{i}")
        profiles.append(GPU)
    return devices, names, profiles


def _links(devices: Sequence[VirtualDevice]) -> list[list[LinkProfile | None]]:
    out: list[list[LinkProfile | None]] = []
    for a in devices:
        row: list[LinkProfile | None] = []
        for b in devices:
            if a is b:
                row.append(None)
            elif a.device_type == b.device_type:
                row.append(LinkProfile(20.0, 1.0))
            else:
                row.append(LinkProfile(12.0, 10.0))
        out.append(row)
    return out


def random_problem(
    seed: int, k: int, n: int, budgets: bool, identical: bool = True, pins: bool = True
) -> Problem:
    """A random problem: a chain with skip edges over n classes, kernel costs
    cheaper on the GPUs (identical when `identical`), a pin or an unsupported
    device now and then, weights, and budgets on the GPUs when asked."""
    rng = random.Random(seed)
    devices, names, profiles = _devices(k)
    allowed: list[list[int]] = []
    unary: list[dict[int, int]] = []
    for c in range(n):
        ok = list(range(k))
        if pins and rng.random() < 0.15:
            ok = [rng.randrange(k)]
        elif pins and rng.random() < 0.15 and k > 2:
            ok.remove(rng.randrange(1, k))
        allowed.append(ok)
        cpu = rng.randint(2_000, 60_000)
        gpu = rng.randint(500, 20_000)
        unary.append({d: cpu if d == 0 else (gpu if identical else gpu + 97 * d) for d in range(k)})
    edges: list[tuple[int, int, int, int]] = []
    for u in range(1, n):
        edges.append((u, u - 1, rng.choice((4_096, 65_536, 1 << 20)), 1))
        if u > 2 and rng.random() < 0.4:
            edges.append((u, rng.randrange(0, u - 2), rng.choice((4_096, 1 << 18)), rng.randint(1, 2)))
    weight_bytes = [rng.choice((0, 0, 1 << 16, 1 << 20, 3 << 20)) for _ in range(n)]
    largest = [rng.choice((4_096, 1 << 16, 1 << 20)) for _ in range(n)]
    total = sum(weight_bytes) + max(largest)
    share = max(1 << 16, int(total * rng.uniform(0.3, 0.8)))
    budget_of = {d: share + (0 if identical else 4096 * d) for d in range(1, k)} if budgets else {}
    profiles = [
        DeviceProfile(p.peak_gflops, p.mem_gbps, p.launch_us, budget_of.get(d))
        for d, p in enumerate(profiles)
    ]
    return Problem(
        devices=devices,
        names=names,
        profiles=profiles,
        links=_links(devices),
        classes=list(range(n)),
        allowed=allowed,
        unary=unary,
        ops=[1] * n,
        pref=[ok[0] if 1 not in ok else 1 for ok in allowed],
        edges=edges,
        weight_bytes=weight_bytes,
        largest=largest,
        budgets=budget_of,
    )


def brute_force(problem: Problem, weights: Weights) -> tuple[int, list[int]] | None:
    """The minimum objective over every assignment within support and budgets."""
    best: tuple[int, list[int]] | None = None
    for assign in itertools.product(*problem.allowed):
        plan = list(assign)
        if budget_violations(problem, plan):
            continue
        value = evaluate(problem, weights, plan)[0]
        if best is None or value < best[0]:
            best = (value, plan)
    return best


def test_topological_order_puts_producers_first() -> None:
    problem = random_problem(1, 3, 12, budgets=False)
    order = topological_order(problem)
    assert sorted(order) == list(range(12))
    position = {c: i for i, c in enumerate(order)}
    for u, v, _b, _uses in problem.edges:
        assert position[v] < position[u]


def test_segment_plan_is_the_best_contiguous_split() -> None:
    # Small enough that every split point is a cell: the plan must equal the
    # best of all non-decreasing splits, enumerated here.
    for seed in range(6):
        problem = random_problem(seed, 3, 9, budgets=seed % 2 == 0, pins=False)
        weights = Weights.of(problem)
        plan = segment_plan(problem, weights)
        order = topological_order(problem)
        best = None
        for b1 in range(10):
            for b2 in range(b1, 10):
                assign = [0] * 9
                for i, c in enumerate(order):
                    assign[c] = 0 if i < b1 else (1 if i < b2 else 2)
                if budget_violations(problem, assign) or any(
                    assign[c] not in ok for c, ok in enumerate(problem.allowed)
                ):
                    continue
                value = evaluate(problem, weights, assign)[0]
                best = value if best is None else min(best, value)
        if best is None:
            assert plan is None
        else:
            assert plan is not None
            assert evaluate(problem, weights, plan)[0] == best


def test_obvious_plans_fit_and_include_each_device() -> None:
    problem = random_problem(3, 4, 10, budgets=False, pins=False)
    weights = Weights.of(problem)
    plans = obvious_plans(problem, weights)
    origins = {p.origin for p in plans}
    assert {"all on cpu", "all on cuda", "all on cuda:1", "all on cuda:2"} <= origins
    for p in plans:
        assert not budget_violations(problem, p.assign)
        assert all(p.assign[c] in ok for c, ok in enumerate(problem.allowed))
        assert p.objective == evaluate(problem, weights, p.assign)[0]


def test_expansion_never_worsens_and_keeps_budgets() -> None:
    for seed in range(8):
        problem = random_problem(seed, 3, 8, budgets=seed % 2 == 1)
        weights = Weights.of(problem)
        start = one_device_plan(problem, 0)
        assert start is not None
        if budget_violations(problem, start):
            continue
        plan = expand(problem, weights, start, Work(10**12))
        assert evaluate(problem, weights, plan)[0] <= evaluate(problem, weights, start)[0]
        assert not budget_violations(problem, plan)
        assert all(plan[c] in ok for c, ok in enumerate(problem.allowed))


def test_expansion_reaches_the_optimum_without_budgets_on_a_chain() -> None:
    # A chain is a tree: expansion moves from the cpu plan reach the optimum here.
    problem = random_problem(5, 3, 8, budgets=False, pins=False)
    weights = Weights.of(problem)
    start = one_device_plan(problem, 0)
    assert start is not None
    plan = expand(problem, weights, start, Work(10**12))
    found = brute_force(problem, weights)
    assert found is not None
    assert evaluate(problem, weights, plan)[1] <= evaluate(problem, weights, found[1])[1] * 1.01


def test_identical_gpus_form_a_group_and_relabel_prefers_the_default() -> None:
    problem = random_problem(2, 4, 6, budgets=True, pins=False)
    assert identical_devices(problem) == [[1, 2, 3]]
    skewed = random_problem(2, 4, 6, budgets=True, identical=False, pins=False)
    assert identical_devices(skewed) == []
    problem = random_problem(2, 4, 6, budgets=False, pins=False)
    weights = Weights.of(problem)
    plan = [2, 2, 3, 3, 0, 2]
    better = relabel(problem, weights, plan, [[1, 2, 3]])
    assert evaluate(problem, weights, better)[1] == evaluate(problem, weights, plan)[1]
    assert evaluate(problem, weights, better)[0] <= evaluate(problem, weights, plan)[0]
    assert better.count(1) == 3  # the most used GPU becomes the preferred one


@pytest.mark.parametrize("seed", range(6))
def test_highs_matches_brute_force_and_bounds_it(seed: int) -> None:
    problem = random_problem(100 + seed, 3 + seed % 2, 6, budgets=seed % 3 != 0)
    weights = Weights.of(problem)
    found = brute_force(problem, weights)
    result = milp_solve(problem, weights, None, Effort(10**6), Work(10**12))
    if found is None:
        assert result.infeasible
        return
    assert result.assign is not None and result.proven
    assert evaluate(problem, weights, result.assign)[0] == found[0]
    assert result.bound_ns <= evaluate(problem, weights, found[1])[1]


def test_solve_proves_small_three_device_problems() -> None:
    problem = random_problem(7, 3, 7, budgets=True)
    weights = Weights.of(problem)
    found = brute_force(problem, weights)
    solution = solve(problem, weights, Work(10**12))
    if found is None:
        assert solution is None
        return
    assert solution is not None
    assert solution.objective == found[0]
    assert solution.lower == solution.objective
    assert solution.method == "highs (optimal)"


def test_no_work_for_highs_still_answers_with_a_valid_bound() -> None:
    # No work allowed: HiGHS, the windows and the polish are skipped, the
    # answer is the best obvious plan with the relaxation's bound.
    problem = random_problem(9, 3, 8, budgets=False)
    weights = Weights.of(problem)
    solution = solve(problem, weights, Work(0))
    found = brute_force(problem, weights)
    assert solution is not None and found is not None
    assert solution.method == "search"
    assert solution.lower <= found[0] <= solution.objective
    for plan in obvious_plans(problem, weights):
        assert solution.objective <= plan.objective


@pytest.mark.parametrize("seed", range(3))
def test_z3_encoding_agrees_with_evaluate_and_budgets(seed: int) -> None:
    # The pseudo-Boolean budgets (weights, copies in, the largest intermediate
    # as a staircase) and the objective term, against the problem's own
    # functions, on sampled assignments (every device in the domain: track).
    import z3

    from solver.optimize.z3_encoding import Encoding

    problem = random_problem(200 + seed, 3, 6, budgets=True, pins=False)
    weights = Weights.of(problem)
    rng = random.Random(seed)
    enc = Encoding(problem, weights, track=False)
    for _ in range(40):
        assign = [rng.choice(ok) for ok in problem.allowed]
        checker = enc.solver(10_000)
        obj = z3.Int("obj", enc.ctx)
        checker.add(obj == enc.objective())
        checker.add(*(enc.lits[c][d] for c, d in enumerate(assign)))
        fits = not budget_violations(problem, assign)
        result = checker.check()
        assert (result == z3.sat) == fits
        if fits:
            value = checker.model().eval(obj).as_long() + enc.constant(weights)
            assert value == evaluate(problem, weights, assign)[0]


def test_local_moves_keep_budgets_and_never_worsen() -> None:
    from solver.optimize.search import local_moves

    for seed in range(6):
        problem = random_problem(300 + seed, 3, 8, budgets=True, pins=False)
        weights = Weights.of(problem)
        start = one_device_plan(problem, 0)
        assert start is not None
        if budget_violations(problem, start):
            continue
        plan = local_moves(problem, weights, start, Work(10**12))
        assert not budget_violations(problem, plan)
        assert evaluate(problem, weights, plan)[0] <= evaluate(problem, weights, start)[0]
        # A local optimum: no single feasible move improves it.
        for c, ok in enumerate(problem.allowed):
            for d in ok:
                trial = list(plan)
                trial[c] = d
                if not budget_violations(problem, trial):
                    assert evaluate(problem, weights, trial)[0] >= evaluate(problem, weights, plan)[0]


def test_local_moves_count_the_edges_their_prices_walk() -> None:
    # A hub: class 0 feeds every other class, so pricing it walks every edge.
    # The polish counts those walks, not one unit per class or edge tried, so
    # a large class's moves cost as much as they take.
    from solver.optimize.search import local_moves

    base = random_problem(310, 3, 60, budgets=False, pins=False)
    hub_edges = [(u, 0, 1 << 16, 1) for u in range(2, 60)]
    problem = dataclasses.replace(base, edges=[*base.edges, *hub_edges])
    weights = Weights.of(problem)
    start = [1] * 60
    start[0] = 0  # the hub where it costs most: moving it pays
    polished = local_moves(problem, weights, start, Work(10**12))
    assert evaluate(problem, weights, polished)[0] < evaluate(problem, weights, start)[0]
    # From the polished plan no move improves, so one pass over the classes and
    # one over the edges is all the polish does; twice a unit per class and
    # edge tried does not pay for the walks of that pass.
    tried = len(problem.allowed) + len(problem.edges)
    short = Work(2 * tried)
    assert local_moves(problem, weights, polished, short) == polished
    assert short.left() == 0
    enough = Work(10**12)
    assert local_moves(problem, weights, polished, enough) == polished
    assert enough.spent > 2 * tried


def test_highs_is_not_given_a_milp_over_its_column_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from solver.optimize import search_milp
    from solver.optimize.search_milp import milp_columns

    for seed in range(4):
        problem = random_problem(320 + seed, 3, 12, budgets=seed % 2 == 0)
        weights = Weights.of(problem)
        columns = milp_columns(problem)
        # The limit is exact: a model of `columns` is solved, one column less is not.
        fits = milp_solve(problem, weights, None, Effort(50, columns=columns), Work(10**6))
        assert not fits.status.startswith("skipped") and fits.nonzeros > 0
        skipped = milp_solve(problem, weights, None, Effort(50, columns=columns - 1), Work(10**6))
        assert skipped.status == "skipped: too large" and skipped.assign is None
        assert skipped.nonzeros == 0
        # A model over a nonzero limit is built (to count them) but not solved.
        few = milp_solve(problem, weights, None, Effort(50, nonzeros=fits.nonzeros - 1), Work(10**6))
        assert few.status == "skipped: too large" and few.assign is None

    # Over the column limit the model is not even built: on a large problem
    # building it walks every step of the memory rule.
    def never(*_args: object) -> None:
        raise AssertionError("the MILP was built")

    monkeypatch.setattr(search_milp, "_Model", never)
    problem = random_problem(330, 3, 40, budgets=True)
    limit = Effort(50, columns=milp_columns(problem) - 1)
    assert milp_solve(problem, Weights.of(problem), None, limit, Work(10**6)).status == "skipped: too large"
