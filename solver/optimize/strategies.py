"""Solving an optimize problem: the exact two-device minimum cut, the budget
heuristic with its Lagrangian bound, the offload program for two devices
with a budget on one (`search_dp`), and for everything else `_search`
(obvious plans, alpha-expansion, HiGHS on a coarsened and on the full MILP,
windows re-solved by HiGHS, a polish), with Z3 `Optimize` only when none of
them finds a plan.

Every step stops on counted work (`solver.work.Work`: the allowances below,
HiGHS's nodes and iterations, Z3's resource limit), never on the clock, so
the same request gets the same answer on an idle or a busy machine; the
request's deadline only ends a search that has not finished
(docs/optimize.md, "When the search stops").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

import z3

from ..errors import SolverTimeout
from ..work import Work
from .mincut import two_device_cut
from .problem import Problem, Solution, Weights, budget_violations, evaluate
from .search import Candidate, coarsen, expand, local_moves, obvious_plans
from .search_dp import offload_search
from .search_lns import improve
from .search_milp import Effort, milp_solve
from .stream import stream_plan, streamed
from .z3_encoding import Encoding

log = logging.getLogger(__name__)


def two_devices(problem: Problem) -> tuple[int, int] | None:
    used = sorted({d for ok in problem.allowed for d in ok})
    if len(used) > 2:
        return None
    if len(used) == 1:
        return (used[0], used[0])
    return (used[0], used[1])


def _cut(
    problem: Problem,
    weights: Weights,
    pair: tuple[int, int],
    penalty: Mapping[int, int] | None = None,
    intermediates: bool = True,
) -> tuple[int, list[int]]:
    """The exact two-device optimum by minimum cut, and its value without the
    problem's constants. `penalty`: an extra cost per byte placed on (weights,
    copies in, and with `intermediates` each class's largest result) a device,
    for the budget heuristic and its Lagrangian bound."""
    d0, d1 = pair
    unary: list[tuple[int | None, int | None]] = []
    for c, ok in enumerate(problem.allowed):
        costs: list[int | None] = []
        for d in (d0, d1):
            if d not in ok:
                costs.append(None)
                continue
            v = problem.unary[c][d] * weights.per_ns + (0 if d == problem.pref[c] else 1)
            if penalty and d in penalty:
                v += penalty[d] * (problem.weight_bytes[c] + (problem.largest[c] if intermediates else 0))
            costs.append(v)
        unary.append((costs[0], costs[1]))
    pairs = []
    for u, v, b, uses in problem.edges:
        # x_v=0 (producer on d0), x_u=1: copy d0->d1; and the reverse.
        c01 = problem.edge_ns(b, d0, d1, uses) * weights.per_ns + uses * weights.per_copy
        c10 = problem.edge_ns(b, d1, d0, uses) * weights.per_ns + uses * weights.per_copy
        pairs.append((v, u, c01, c10))
    value, x = two_device_cut(unary, pairs)
    return value, [pair[i] for i in x]


def _z3_optimize(
    problem: Problem, weights: Weights, start: Solution | None, work: Work
) -> Solution | None:
    """Z3 Optimize (weighted MaxSAT over `Encoding`) within Z3_RLIMIT of Z3's
    resource count, and with a warm start the bound `objective < start`
    (only better plans); None when infeasible (without a start). When the
    limit stops it: the best plan Z3 or the warm start has (its bound is the
    caller's), or SolverTimeout when there is none."""
    enc = Encoding(problem, weights, track=False)
    opt = z3.Optimize(ctx=enc.ctx)
    opt.set("rlimit", Z3_RLIMIT)
    # The deadline only as a kill switch: a run it stops ends the request.
    opt.set("timeout", max(1, work.deadline.remaining_ms()))
    opt.add(*enc.constraints())
    for lit, weight in enc.soft:
        opt.add_soft(z3.Not(lit), weight)
    if start is not None:
        opt.add(enc.objective() < start.objective - enc.constant(weights))
    result = opt.check()
    if result == z3.unknown and work.deadline.expired():
        work.stopped_by_clock("z3")
    if result == z3.unsat:
        if start is not None:  # nothing beats the warm start: it is optimal
            return dataclasses.replace(start, lower=start.objective, method="z3", variables=enc.variables)
        return None
    if result == z3.sat:
        assign = enc.read(opt.model())
        value = evaluate(problem, weights, assign)[0]
        return Solution(assign, value, value, "z3", enc.variables)
    # Stopped by its limit: the best model Z3 has, or the warm start; the bound stays the relaxation's.
    best = start
    try:
        model = opt.model()
    except z3.Z3Exception:
        model = None
    if model is not None:
        assign = enc.read(model)
        if not budget_violations(problem, assign) and all(
            assign[c] in ok for c, ok in enumerate(problem.allowed)
        ):
            value = evaluate(problem, weights, assign)[0]
            if best is None or value < best.objective:
                best = Solution(assign, value, start.lower if start else 0, "z3 (time-out)", enc.variables)
    if best is None:
        raise SolverTimeout(
            f"Z3 found no plan within its resource limit ({opt.reason_unknown()})", opt.reason_unknown()
        )
    return dataclasses.replace(best, variables=enc.variables, method="z3 (time-out)")


def cut_value(problem: Problem, weights: Weights, pair: tuple[int, int]) -> int:
    """The objective of the two-device minimum cut over `pair`, the problem's
    constants included, budgets aside: a lower bound on every plan's
    objective when the problem allows only those two devices."""
    value, _ = _cut(problem, weights, pair)
    return value + problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy


def _relaxation_bound(problem: Problem, weights: Weights) -> int:
    """A lower bound: every class at its cheapest allowed device, no copies."""
    total = problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy
    for c, ok in enumerate(problem.allowed):
        total += min(problem.unary[c][d] * weights.per_ns for d in ok)
    return total


def solve(
    problem: Problem, weights: Weights, work: Work, enough: Callable[[list[int]], list[int] | None] | None = None
) -> Solution | None:
    """The optimum (or, when the work allowances run out, the best plan and a
    bound); None if infeasible.

    Two devices: the minimum cut, exact; with budgets the priced cuts, which
    often prove their plan. Everything else (and a budget plan the cuts do not
    prove) goes to `_search`.

    `enough`, when given, may end the search at the streaming plan: it returns
    a plan (that plan or one made from it) that meets the caller's own goal,
    or None (with overlap, a plan whose overlapped time is within the gap goal
    of its bound: the synchronous search could not make it better there)."""
    first = [ok[0] for ok in problem.allowed]
    if all(len(ok) == 1 for ok in problem.allowed):
        if budget_violations(problem, first):
            return None
        value = evaluate(problem, weights, first)[0]
        return Solution(first, value, value, "single choice")
    pair = two_devices(problem)
    start: Solution | None = None
    if pair is not None:
        _, assign = _cut(problem, weights, pair)
        value = evaluate(problem, weights, assign)[0]
        if not budget_violations(problem, assign):
            # Exact without budgets; with budgets the relaxation's optimum fits, so it is optimal too.
            return Solution(assign, value, value, "min-cut")
        streaming = _streaming(problem, weights)
        if streaming is not None:
            # A model bigger than its GPU whose weights can stream: HiGHS with
            # the memory rule's rows, started from the streaming plan, closes
            # these fast (the public decoder at 0.25-0.75 of its weights: proven
            # in 2-4 s); the offload program stays for budgets nothing streams into.
            assign = local_moves(problem, weights, streaming, work.part(POLISH_UNITS))
            value = evaluate(problem, weights, assign)[0]
            good = enough(assign) if enough is not None else None
            if good is not None:
                price = evaluate(problem, weights, good)[0]
                method = "streaming" if good == assign else "streaming + overlap moves"
                return Solution(good, price, min(price, _relaxation_bound(problem, weights)), method)
            # HiGHS with less effort first: from a plan this close its root usually proves
            # the goal; else the resident-weight dual may (decoders of 80 layers, whose MILP
            # is past HiGHS's limits); else the whole search.
            quick = milp_solve(problem, weights, assign, STREAM_EFFORT, work.part(STREAM_EFFORT.nodes))
            if quick.infeasible:
                return None
            if quick.assign is not None and evaluate(problem, weights, quick.assign)[0] < value:
                assign = quick.assign
                value = evaluate(problem, weights, assign)[0]
            lower = min(value, quick.bound_ns * weights.per_ns)
            if not _within_goal(value, lower) and not quick.proven:
                dual = _resident_dual(problem, weights, pair, work.part(DUAL_UNITS))
                if dual > lower:
                    lower = min(value, dual)
                    if _within_goal(value, lower):
                        return Solution(assign, value, lower, "streaming + dual bound")
            if _within_goal(value, lower):
                method = "streaming + highs (optimal)" if lower >= value or quick.proven else "streaming + highs"
                return Solution(assign, value, value if quick.proven else lower, method)
            return _search(problem, weights, work, Solution(assign, value, lower, "streaming"))
        offload = offload_search(problem, weights, None, 0, OFFLOAD_GOAL_PPM, work.part(OFFLOAD_POINTS))
        if offload is None:  # not an offload problem: the priced cuts
            start = _budget_heuristic(problem, weights, pair, assign, value, work)
            if start is not None and start.lower >= start.objective:
                return start
        else:
            known = offload.bound_ns * weights.per_ns
            found = offload.assign
            if found is not None:
                # The program prices run time only: single-class moves settle the
                # copies and preferred devices it left open.
                assign = local_moves(problem, weights, found, work.part(POLISH_UNITS))
                value = evaluate(problem, weights, assign)[0]
                start = Solution(assign, value, min(known, value), f"offload DP ({offload.passes} passes)")
                ties_open = value // weights.per_ns <= offload.bound_ns and value > known
                if value * 1_000_000 <= known * (1_000_000 + OFFLOAD_GOAL_PPM) and not ties_open:
                    return start
            return _search(problem, weights, work, start, known)
    one_gpu = _streaming_on_one(problem, weights)
    if one_gpu is not None:
        # Several budgeted devices (two GPUs and the cpu): the streaming plan
        # over the host and one of them is a plan of this problem too; the
        # search starts from the best such plan instead of from nothing.
        assign = local_moves(problem, weights, one_gpu, work.part(POLISH_UNITS))
        start = Solution(assign, evaluate(problem, weights, assign)[0], 0, "streaming on one device")
    return _search(problem, weights, work, start)


def _within_goal(value: int, lower: int) -> bool:
    """Whether the objective `value` is within GAP_GOAL_PPM of the bound `lower`."""
    return value * 1_000_000 <= lower * (1_000_000 + GAP_GOAL_PPM)


def _resident_dual(problem: Problem, weights: Weights, pair: tuple[int, int], work: Work) -> int:
    """A lower bound on every plan's objective within the budgets, from the
    weights resident on the budgeted devices: for prices p >= 0 a byte, the
    minimum cut of the objective plus p times each resident weight byte on a
    budgeted device, less p times its budget, is below every plan within the
    budgets (a plan's resident weights fit its peak, which fits the budget;
    the Lagrangian dual of that relaxation). The dual is concave in p;
    golden-section steps around the price of copying a byte in (where keeping
    a weight resident and streaming it cost the same) look for its best, each
    step a cut (its classes and edges counted against `work`)."""
    budgeted = [d for d in pair if d in problem.budgets]
    constant = problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy
    best = _relaxation_bound(problem, weights)
    if len(budgeted) != 1 or pair[0] == pair[1]:
        return best
    g = budgeted[0]
    link = problem.links[pair[1] if g == pair[0] else pair[0]][g]
    if link is None:
        return best
    cost = len(problem.allowed) + len(problem.edges)
    per_byte = weights.per_ns / link.gbps  # objective units of copying one byte in

    def dual(scale: float) -> int:
        price = int(per_byte * scale)
        value, _ = _cut(problem, weights, pair, {g: price}, intermediates=False)
        return value + constant - price * problem.budgets[g]

    low, high = 0.0, 2.0
    ratio = (5**0.5 - 1) / 2
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    if not work.spend(2 * cost, "resident dual"):
        return best
    fa, fb = dual(a), dual(b)
    best = max(best, fa, fb)
    for _ in range(DUAL_STEPS):
        if not work.spend(cost, "resident dual"):
            break
        if fa < fb:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = dual(b)
        else:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = dual(a)
        best = max(best, fa, fb)
    return best


def _streaming(problem: Problem, weights: Weights) -> list[int] | None:
    """The greedy streaming plan (`stream.stream_plan`) of an offload problem
    (two devices, a budget on one), None for other problems or when it does
    not fit."""
    used = sorted({d for ok in problem.allowed for d in ok})
    budgeted = [d for d in used if d in problem.budgets]
    if len(used) != 2 or len(budgeted) != 1:
        return None
    g = budgeted[0]
    c = next(d for d in used if d != g)
    _, start = _cut(streamed(problem, c), weights, (used[0], used[1]))
    return stream_plan(problem, weights, g, c, start)


def _streaming_on_one(problem: Problem, weights: Weights) -> list[int] | None:
    """The best greedy streaming plan over the one device without a budget
    (the host) and a single budgeted device, for problems with several
    budgeted devices; None when there is no such problem or no plan fits."""
    used = sorted({d for ok in problem.allowed for d in ok})
    free = [d for d in used if d not in problem.budgets]
    budgeted = [d for d in used if d in problem.budgets]
    if len(free) != 1 or len(budgeted) < 2:
        return None
    c = free[0]
    best: tuple[int, list[int]] | None = None
    for g in budgeted:
        if not all(c in ok or g in ok for ok in problem.allowed):
            continue
        _, start = _cut(streamed(problem, c), weights, (min(c, g), max(c, g)))
        plan = stream_plan(problem, weights, g, c, start)
        if plan is None:
            continue
        value = evaluate(problem, weights, plan)[0]
        if best is None or value < best[0]:
            best = (value, plan)
    return best[1] if best is not None else None


# Work allowances (counted, never seconds: module docstring). Sized so that
# the corpus's requests finish well within the default 10 s time limit on a
# 2-core machine (benchmarks/optimize.py prints the times).
#
# Two devices and a budget on one (a model bigger than its GPU): the offload
# program (`search_dp`) may make this many points instead of the priced
# cuts; a plan it brings within OFFLOAD_GOAL_PPM of its bound is the answer,
# else its bound (and plan) go to `_search`.
OFFLOAD_POINTS = 20_000_000
OFFLOAD_GOAL_PPM = 8000
# The obvious plans and the expansion: classes priced (segments) plus
# classes and edges cut (each expansion move), so a larger problem gets fewer
# moves: a 10,000-operator DAG's move cuts 22,500 classes and edges, about
# 100,000 units a second on 2 cores; the corpus models use at most 160,000.
SEARCH_UNITS = 300_000
# The full MILP: HiGHS's nodes and checks (`search_milp.Effort`), and the nodes it may
# go without improving its bound or plan (past its root it rarely moves the
# bound of a budget problem).
MILP_EFFORT = Effort(nodes=600, checks=100_000, stall_nodes=150, columns=8_000)
# The windows (`search_lns`): HiGHS nodes over all windows (and WINDOW_COST a window).
WINDOW_NODES = 1_500
# The polish: classes and edges tried by single-class moves, the edges each
# move's price walks, and the classes and edges its budget checks walk.
POLISH_UNITS = 250_000
# Z3 Optimize (only when no other step finds a plan): Z3's resource count.
Z3_RLIMIT = 50_000_000
# The resident-weight dual of an offload problem (`_resident_dual`): golden-section steps
# (each a minimum cut), and their allowance in classes and edges cut.
DUAL_STEPS = 10
DUAL_UNITS = 200_000
# The windows stop once the plan is within this much (parts per million) of
# the bound: past it, the 1% goal is proven and more search buys little.
GAP_GOAL_PPM = 2500


# The coarse MILP: runs of this many classes of a topological order merged
# (`search.coarsen`), solved by HiGHS with COARSE_EFFORT, on problems with
# at least COARSE_MIN free classes.
COARSE_RUN = 8
COARSE_MIN = 256
COARSE_EFFORT = Effort(nodes=300, checks=50_000, stall_nodes=100, columns=8_000)
# HiGHS on an offload problem from its streaming plan (`solve`), before the
# whole search: a decoder's root node, warm-started this close, is quick even
# past the search's column limit (the 32-layer 7B-width decoder: about 10,000).
STREAM_EFFORT = Effort(nodes=60, checks=40_000, stall_nodes=30, columns=24_000)


def _coarse_milp(problem: Problem, weights: Weights, assign: list[int], work: Work) -> list[int]:
    """The plan, or a better one within budgets from HiGHS on the coarsened
    problem (runs of classes share a device), warm-started by the plan.
    Budgets make plans whose devices recur along the order (densenet121 with
    two 9 MB GPUs: one GPU takes the stem and a piece of the last block, the
    other everything between), which the segment plans cannot express and
    windows reach only when one window spans the whole change; the coarse
    problem spans everything and is small enough to solve (34.74 ms against
    the 36.98 of the best segment plan, the optimum being 34.73)."""
    free = sum(1 for ok in problem.allowed if len(ok) > 1)
    if free < COARSE_MIN or not work.more("coarse MILP"):
        return assign
    coarse, group = coarsen(problem, COARSE_RUN)
    if any(not ok for ok in coarse.allowed):
        return assign
    first: dict[int, int] = {}
    for c, g in enumerate(group):
        first.setdefault(g, c)
    start = [assign[first[g]] for g in range(len(coarse.allowed))]
    fits = all(start[g] in ok for g, ok in enumerate(coarse.allowed))
    found = milp_solve(coarse, Weights.of(coarse), start if fits else None, COARSE_EFFORT, work, ties=False)
    if found.assign is None:
        return assign
    trial = [found.assign[group[c]] for c in range(len(problem.allowed))]
    if (
        budget_violations(problem, trial)
        or evaluate(problem, weights, trial)[0] >= evaluate(problem, weights, assign)[0]
    ):
        return assign
    log.debug("coarse MILP: %d", evaluate(problem, weights, trial)[0])
    return trial


def _search(
    problem: Problem, weights: Weights, work: Work, start: Solution | None, known: int = 0
) -> Solution | None:
    """Three or more devices, or budgets the cuts did not prove: the obvious
    plans (`search.obvious_plans`), alpha-expansion from the best of them,
    with budgets HiGHS on the coarsened problem (`_coarse_milp`), HiGHS on
    the full MILP warm-started by the best plan (the bound, and on most
    problems without budgets the proof), then, unless HiGHS proved the run
    time or the plan is within GAP_GOAL_PPM of the bound, windows of the plan
    re-solved by HiGHS (`search_lns.improve`), then a polish. Each step starts
    from the best plan so far, so the answer is never worse than any of them.
    None when HiGHS proves that no plan fits; Z3 `Optimize` only when no step
    finds a plan.

    The bound is the best of: the priced cuts' Lagrangian bound (two
    devices), every class at its cheapest device without copies, HiGHS's dual
    bound on the run time (all lower bounds on the objective, whose run-time
    part is ns * per_ns and whose tie-break part is >= 0), and `known`, a
    bound the caller proved (the offload program's)."""
    lower = max(_relaxation_bound(problem, weights), known)
    if start is not None:
        lower = max(lower, min(start.lower, start.objective))
    # On 10k classes each minimum cut takes a good fraction of a second.
    phase = work.part(SEARCH_UNITS)
    plans = obvious_plans(problem, weights, phase)
    if start is not None:
        plans.append(Candidate(tuple(start.assign), start.objective, start.method))
    best = min(plans, key=lambda p: p.objective, default=None)
    assign: list[int] | None = None
    if best is not None:
        assign = expand(problem, weights, best.assign, phase)
        log.debug(
            "search: %s %d -> expansion %d",
            best.origin,
            best.objective,
            evaluate(problem, weights, assign)[0],
        )
    if assign is not None and problem.budgets:
        assign = _coarse_milp(problem, weights, assign, work.part(COARSE_EFFORT.nodes))
    # The full MILP: the bound, and the proof when HiGHS closes the gap.
    milp_work = work.part(MILP_EFFORT.nodes)
    found = milp_solve(problem, weights, assign, MILP_EFFORT, milp_work) if milp_work.more("highs") else None
    if found is not None and found.status.startswith("skipped"):
        found = None  # too large for HiGHS (`Effort.columns`)
    if found is not None and found.infeasible:
        return None
    method = "search"
    if found is not None:
        lower = max(lower, found.bound_ns * weights.per_ns)
        if found.assign is not None and (
            assign is None
            or evaluate(problem, weights, found.assign)[0] <= evaluate(problem, weights, assign)[0]
        ):
            assign = found.assign
        method = "search + highs"
    if assign is None:
        fallback = _z3_optimize(problem, weights, None, work)
        if fallback is None:
            return None
        return dataclasses.replace(fallback, lower=max(fallback.lower, lower))
    proven = found is not None and found.proven and found.assign == assign
    if not proven:
        goal = lower + (lower // weights.per_ns) * weights.per_ns * GAP_GOAL_PPM // 1_000_000
        if not (found is not None and found.ns_proven) and evaluate(problem, weights, assign)[0] > goal:
            assign, solved = improve(problem, weights, assign, work.part(WINDOW_NODES), goal)
            method += f" + {solved} windows" if solved else ""
        # Polish: single-class moves within the budgets (a few ms).
        assign = local_moves(problem, weights, assign, work.part(POLISH_UNITS))
    value = evaluate(problem, weights, assign)[0]
    if proven:
        lower = value
    lower = min(lower, value)
    if found is not None:
        if lower >= value:
            method = "highs (optimal)"
        elif found.ns_proven:
            method = "highs (run time optimal)"
    return Solution(assign, value, lower, method)


def _budget_heuristic(
    problem: Problem,
    weights: Weights,
    pair: tuple[int, int],
    relaxed: list[int],
    lower: int,
    work: Work,
) -> Solution | None:
    """A plan within the budgets: minimum cuts with a growing price per byte on
    the devices the relaxation overfills (Lagrangian style). Its bound is the
    best Lagrangian dual value seen: for a price p >= 0 on the weights placed
    on device d, min(objective + p * (weight bytes on d - budget of d)) is
    below every plan within the budget (its resident weights fit: the
    memory rule's peak is at least them)."""
    over = {d for d, _need, _budget in budget_violations(problem, relaxed)}
    constant = problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy
    bound = lower

    def trial(scale: int) -> Solution | None:
        nonlocal bound
        work.expired("priced cuts")
        prices = {d: scale for d in over}
        value, dual_plan = _cut(problem, weights, pair, prices, intermediates=False)
        fixed = sum(-p * problem.budgets[d] for d, p in prices.items())
        bound = max(bound, value + constant + fixed)
        _, assign = _cut(problem, weights, pair, prices)
        # Either cut may fit the budgets (the dual's plan ignores intermediates).
        fits = [a for a in (dual_plan, assign) if not budget_violations(problem, a)]
        if not fits:
            return None
        best_fit = min(fits, key=lambda a: evaluate(problem, weights, a)[0])
        return Solution(best_fit, evaluate(problem, weights, best_fit)[0], bound, "min-cut + budget")

    low, high = 0, 1
    best = trial(high)
    while best is None and high < 1 << 120:
        low, high = high, high * 4
        best = trial(high)
    # Refine: the smallest price that still fits usually moves the fewest classes.
    for _ in range(16):
        if best is None or high - low <= 1 or work.expired("priced cuts"):
            break
        mid = (low + high) // 2
        found = trial(mid)
        if found is None:
            low = mid
        else:
            high = mid
            if found.objective < best.objective:
                best = found
    if best is not None:
        best = dataclasses.replace(best, lower=min(bound, best.objective))
        if best.lower == best.objective:
            best = dataclasses.replace(best, method="min-cut + budget (dual bound)")
    return best
