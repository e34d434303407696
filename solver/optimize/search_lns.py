"""Large-neighbourhood search: improve a plan by solving windows of
it exactly, every class outside the window held where the plan has it.

Budgets couple the whole plan, which is what alpha-expansion and single-class
moves cannot see past: densenet121 with three 6 MB GPUs needs a dense block
moved to another GPU and the classes around it re-split at once. A window of
a few hundred consecutive classes of a topological order, with the rest
fixed, is a small MILP that HiGHS solves in a fraction of a second (the fixed
classes' bytes leave each device a residual budget, and its LP bound is much
tighter than the full problem's). How the windows move and grow is
`improve`'s docstring. A window's answer is kept only when the whole plan,
re-priced with `evaluate` and checked with `budget_violations`, fits and is
better.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from ..work import Work
from .order import topological_order
from .problem import Edge, Problem, Weights, budget_violations, evaluate
from .search_milp import Effort, milp_solve

log = logging.getLogger(__name__)

# The first window's classes, the smallest window, and the HiGHS effort one
# window may take (nodes, checks, nodes without progress).
FIRST_WINDOW = 160
MIN_WINDOW = 40
WINDOW_EFFORT = Effort(nodes=200, checks=20_000, stall_nodes=60, columns=8_000)
# What a window costs besides its nodes (building its MILP and HiGHS's root
# LP), in nodes: WINDOW_COST, or a node per WINDOW_NONZEROS nonzeros of its
# MILP when that is more. The root's work grows with the model (a window of
# a 10,000-operator DAG has up to 100,000 nonzeros, a corpus model's at
# most about 25,000), which its checks and nodes do not count finely; a
# window whose MILP would cost more than the allowance has left is not
# solved (`Effort.nonzeros`) but retried smaller.
WINDOW_COST = 150
WINDOW_NONZEROS = 100


def restrict(problem: Problem, assign: Sequence[int], free: Sequence[int]) -> Problem:
    """The problem over the classes `free` (in that order), every other class
    fixed at its device in `assign`. The fixed classes fold into one anchor
    class per device (only that device allowed, their weights and largest
    intermediate, no kernel time), edges between fixed classes into the
    constants, and edges to a fixed class into edges to its device's anchor.
    A plan of the restricted problem, with the fixed classes as in `assign`,
    has the same run time, copies and budget bytes as in `problem`; only the
    preferred-device tie-break of the fixed classes is left out."""
    k = len(problem.devices)
    n = len(free)
    index = {c: i for i, c in enumerate(free)}
    allowed = [list(problem.allowed[c]) for c in free] + [[d] for d in range(k)]
    unary = [dict(problem.unary[c]) for c in free] + [dict.fromkeys(range(k), 0) for _ in range(k)]
    weight_bytes = [problem.weight_bytes[c] for c in free] + [0] * k
    largest = [problem.largest[c] for c in free] + [0] * k
    fixed_ns = problem.fixed_ns
    fixed_copies = problem.fixed_copies
    fixed_copy_bytes = dict(problem.fixed_copy_bytes)
    fixed_copy_ns = dict(problem.fixed_copy_ns)
    for c, d in enumerate(assign):
        if c not in index:
            weight_bytes[n + d] += problem.weight_bytes[c]
            largest[n + d] = max(largest[n + d], problem.largest[c])
            fixed_ns += problem.unary[c][d]
    edges: list[Edge] = []
    for u, v, b, uses in problem.edges:
        iu, iv = index.get(u), index.get(v)
        if iu is None and iv is None:
            du, dv = assign[u], assign[v]
            if du != dv:
                ns = problem.edge_ns(b, dv, du, uses)
                fixed_ns += ns
                fixed_copies += uses
                fixed_copy_bytes[du] = fixed_copy_bytes.get(du, 0) + b * uses
                fixed_copy_ns[du] = fixed_copy_ns.get(du, 0) + ns
            continue
        edges.append((n + assign[u] if iu is None else iu, n + assign[v] if iv is None else iv, b, uses))
    return dataclasses.replace(
        problem,
        classes=list(range(n + k)),
        allowed=allowed,
        unary=unary,
        ops=[problem.ops[c] for c in free] + [0] * k,
        pref=[problem.pref[c] for c in free] + list(range(k)),
        edges=edges,
        weight_bytes=weight_bytes,
        largest=largest,
        fixed_ns=fixed_ns,
        fixed_copies=fixed_copies,
        fixed_copy_bytes=fixed_copy_bytes,
        fixed_copy_ns=fixed_copy_ns,
    )


def improve(
    problem: Problem, weights: Weights, start: Sequence[int], work: Work, goal: int = 0
) -> tuple[list[int], int]:
    """The best plan found from `start` (within support and budgets) by
    windows solved with HiGHS, and the number of windows solved.

    Windows move along the order by half a window, wrapping around. Their
    size adapts to what HiGHS proves within `WINDOW_EFFORT`: a window proven
    in under a quarter of its nodes makes the next one half as large again,
    one that runs out of effort or stalls is retried two thirds the size (how
    hard a window is depends on how tight the budgets are there, not on its
    size alone). The search stops once every class has been in a window
    proven optimal (or tried at the smallest size) since the last
    improvement, when `work` (HiGHS nodes, and per window WINDOW_COST or
    more by its size) is spent, or once the objective is at most `goal`.
    Problems of at most two first windows are left to the full MILP.
    """
    best = list(start)
    order = [c for c in topological_order(problem) if len(problem.allowed[c]) > 1]
    n = len(order)
    if n <= 2 * FIRST_WINDOW:
        return best, 0
    best_value = evaluate(problem, weights, best)[0]
    k = len(problem.devices)
    size = FIRST_WINDOW
    position = 0
    settled = [False] * n  # in a window proven optimal since the last improvement
    solved = 0
    while best_value > goal and not all(settled) and work.more("windows"):
        hi = min(n, position + size)
        lo = max(0, hi - size)
        free = order[lo:hi]
        sub = restrict(problem, best, free)
        start_sub = [best[c] for c in free] + list(range(k))
        effort = dataclasses.replace(WINDOW_EFFORT, nonzeros=work.left() * WINDOW_NONZEROS)
        found = milp_solve(sub, Weights.of(sub), start_sub, effort, work, ties=False)
        solved += 0 if found.status.startswith("skipped") else 1
        log.debug("window [%d, %d) of %d: %s in %d nodes", lo, hi, n, found.status, found.nodes)
        if found.assign is not None:
            trial = list(best)
            for i, c in enumerate(free):
                trial[c] = found.assign[i]
            value = evaluate(problem, weights, trial)[0]
            if value < best_value and not budget_violations(problem, trial):
                best, best_value = trial, value
                settled = [False] * n
                log.debug("window [%d, %d): better plan %d", lo, hi, value)
        work.spend(max(WINDOW_COST, found.nonzeros // WINDOW_NONZEROS), "windows")
        if not found.ns_proven:
            if size > MIN_WINDOW:
                size = max(MIN_WINDOW, size * 2 // 3)
                continue  # the same place, smaller
            settled[lo:hi] = [True] * (hi - lo)  # as small as windows go: move on
        else:
            settled[lo:hi] = [True] * (hi - lo)
            if found.nodes < WINDOW_EFFORT.nodes // 4:
                size = min(n, size * 3 // 2)
        # The next window starts half a window on, at the first class not yet settled.
        step = lo + max(1, (hi - lo) // 2)
        position = next((i for i in [*range(step, n), *range(step)] if not settled[i]), 0)
    return best, solved
