"""Plans and bounds for the overlapped schedule (`memory.schedule` with
`overlap`, the default): weight copies run on a copy stream per link beside
compute, prefetched as far ahead as a budget leaves room.

The search (`strategies.solve`) minimises the synchronous price. Under a
budget that plan is rarely the best overlapped one: it keeps as many weights
resident as fit, which leaves no room to prefetch the streamed ones, so their
readers wait for every copy. Streaming a few more weights frees that room,
and copies that run beside compute cost nothing. `overlap_plan` moves weight
classes between their devices while the overlapped schedule gets shorter;
`overlap_lower` bounds every plan's overlapped time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

from ..work import Work
from .memory import overlap_bound, schedule
from .problem import Problem, Weights, budget_violations, evaluate
from .strategies import cut_value, two_devices

# What a schedule counts at least (`overlap_plan`): below this size its fixed costs dominate.
SCHEDULE_UNITS = 2_000


def overlap_plan(
    problem: Problem, weights: Weights, start: Sequence[int], work: Work, goal_ns: int = 0
) -> list[int]:
    """From `start` (the synchronous search's plan), moves kept when the
    overlapped schedule gets shorter (on a tie, when the synchronous
    objective falls) and the budgets still hold, first improvement:

    0. once, first: every weight class resident on a budgeted device to a
       device without a budget (everything streamed, as offloading runtimes
       do; the moves below keep what is better resident);
    1. a weight class (it holds weights and reads nothing) to another
       allowed device: those resident on a budgeted device first (moving
       one frees room to prefetch the others), largest first;
    2. when none helps, two weight classes trading devices (one made
       resident frees no room unless another leaves: budgets make these
       pairs);
    3. when none helps, an operator class to another allowed device.

    Until no move improves, the schedule is no longer than `goal_ns` (a
    bound with the search's gap goal), or `work` is spent (each schedule
    counts the classes and edges it walks, at least SCHEDULE_UNITS). Only problems with a budget:
    without one, a weight already sits with its readers or streams for a
    reason the synchronous price saw."""
    plan = list(start)
    if not problem.budgets:
        return plan
    live = problem.liveness
    # Weights resident on a budgeted device first (moving one frees room for prefetching), then
    # the rest; largest first within each.
    movable = sorted(
        (c for c, ok in enumerate(problem.allowed) if live.weight[c] and len(ok) > 1 and problem.weight_bytes[c]),
        key=lambda c: (plan[c] not in problem.budgets, -problem.weight_bytes[c], c),
    )
    operators = [c for c, ok in enumerate(problem.allowed) if not live.weight[c] and len(ok) > 1]
    cost = max(SCHEDULE_UNITS, len(problem.allowed) + len(problem.edges))
    best_ns = schedule(problem, plan, True).total_ns
    best_objective = evaluate(problem, weights, plan)[0]  # the tie-break

    def attempt(moves: Sequence[tuple[int, int]]) -> bool | None:
        """Try `moves` (class, device) and keep them when better: True, or False;
        None when the work is spent or the goal is met (the moves then stop)."""
        nonlocal best_ns, best_objective
        if not work.spend(cost, "overlap moves"):
            return None
        old = [(c, plan[c]) for c, _ in moves]
        for c, d in moves:
            plan[c] = d
        if not budget_violations(problem, plan):  # any move may add copies into a budgeted device
            ns = schedule(problem, plan, True).total_ns
            objective = evaluate(problem, weights, plan)[0] if ns <= best_ns else 0
            if ns < best_ns or (ns == best_ns and objective < best_objective):
                best_ns, best_objective = ns, objective
                return None if ns <= goal_ns else True
        for c, d in old:
            plan[c] = d
        return False

    def first(tries: Iterable[list[tuple[int, int]]]) -> bool | None:
        """The first of `tries` kept (True), none kept (False), or stopped (None)."""
        for moves in tries:
            found = attempt(moves)
            if found is not False:
                return found
        return False

    def singles(classes: Sequence[int]) -> Iterator[list[tuple[int, int]]]:
        for c in classes:
            yield from ([(c, d)] for d in problem.allowed[c] if d != plan[c])

    def swaps() -> Iterator[list[tuple[int, int]]]:
        for a in movable:
            for b in movable:
                da, db = plan[a], plan[b]
                if a < b and da != db and db in problem.allowed[a] and da in problem.allowed[b]:
                    yield [(a, db), (b, da)]

    # First every weight resident on a budgeted device streamed from where it may live without
    # one (the room they leave prefetches the rest; the moves below make some resident again).
    unbudgeted = {c: next((d for d in problem.allowed[c] if d not in problem.budgets), None) for c in movable}
    streamed = [(c, d) for c, d in unbudgeted.items() if d is not None and plan[c] in problem.budgets]
    step: bool | None = attempt(streamed) if streamed else False
    while best_ns > goal_ns and step is not None:
        step = first(singles(movable))
        if step is False:
            step = first(swaps())
        if step is False:
            step = first(singles(operators))
        if not step:
            break
    return plan


def overlap_lower(problem: Problem, weights: Weights, sync_lower_ns: int) -> int:
    """A lower bound (ns) on every plan's overlapped run time: the best of
    `memory.overlap_bound` (the synchronous bound less every weight copy
    overlap could hide) and, on two devices, the least time of kernels and
    synchronous copies alone. Overlap hides only weight copies, so each plan
    runs at least its kernels and the copies of everything else, one after
    another; the minimum cut of the problem without the weight copies (and
    without budgets) is the least such time over all plans. Edges are priced
    as the schedule prices them: all uses of a value as one copy, an empty
    value as none."""
    bound = overlap_bound(problem, sync_lower_ns)
    pair = two_devices(problem)
    if pair is None or pair[0] == pair[1]:
        return bound  # one device: no copies, and the bound is every kernel's time
    return max(bound, kernels_and_activation_copies(problem, weights, pair))


def kernels_and_activation_copies(
    problem: Problem, weights: Weights, pair: tuple[int, int], free_steps: Sequence[int] = ()
) -> int:
    """The least time (ns) of the kernels and activation copies of every step but
    `free_steps` over the two devices `pair`: the minimum cut without the weight
    copies (they run on the side) and the budgets, the free steps' kernels and the
    copies into them costing nothing (`stalls` prices those steps itself)."""
    live = problem.liveness
    free = {live.order[s] for s in free_steps}
    relaxed = dataclasses.replace(
        problem,
        unary=[{e: 0 for e in ok} if c in free else problem.unary[c] for c, ok in enumerate(problem.allowed)]
        if free
        else problem.unary,
        edges=[
            (u, v, b * uses, 1) for u, v, b, uses in problem.edges if b and not live.weight[v] and u not in free
        ],
        budgets={},
    )
    return cut_value(relaxed, weights, pair) // weights.per_ns
