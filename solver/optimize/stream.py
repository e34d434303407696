"""The streaming plan: a first plan for two devices with a budget on one.

Under the memory rule of `memory` a weight stored on the other device and
read on the budgeted one is copied in for its reader and freed after it, so
a model bigger than its GPU can still compute there: every kernel at its
cheapest device, its weights streamed, as many of them resident as the
budget leaves room for. `stream_plan` builds that plan greedily:

1. every weight class (a class that holds weights and reads nothing) on the
   other device when it may, every other class where the minimum cut of
   that problem (no budget) puts it (`start`, the caller's);
2. while the peak overfills the budget, the class computing at the step of
   the peak moves off the budgeted device (a few times at most);
3. weight classes become resident on the budgeted device in order of the
   copy time they save per byte (ties: larger first, since a resident weight
   also leaves the steps that streamed it), each only when the plan still
   fits; and again largest first (a large weight streamed needs its own bytes
   free at its reader's step, so keeping it resident can leave room for more
   resident bytes in all): the faster of the two plans.

It proves nothing; `offload_search` starts from it and the search's bound
says how far it is from the optimum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .memory import byte_dtype, step_usage
from .problem import Problem, Weights, budget_violations, evaluate

# How many classes step 2 may move off the budgeted device.
MAX_REPAIRS = 64


def streamed(problem: Problem, c: int) -> Problem:
    """`problem` with every weight class that may take `c` held there (step 1's problem)."""
    live = problem.liveness
    allowed = [[c] if live.weight[x] and c in ok else ok for x, ok in enumerate(problem.allowed)]
    return dataclasses.replace(problem, allowed=allowed, budgets={})


def stream_plan(problem: Problem, weights: Weights, g: int, c: int, start: Sequence[int]) -> list[int] | None:
    """The greedy streaming plan for budgeted device `g` and other device `c`
    from `start`, the optimum of `streamed(problem, c)` (module docstring), or
    None when step 2 cannot make it fit."""
    live = problem.liveness
    n = len(problem.allowed)
    plan = list(start)
    for _ in range(MAX_REPAIRS):
        if not budget_violations(problem, plan):
            break
        usage = step_usage(problem, plan).get(g)
        if not usage:
            return None
        k = max(range(len(usage)), key=usage.__getitem__)
        x = live.order[k]
        if plan[x] != g or c not in problem.allowed[x]:
            return None
        plan[x] = c
    else:
        return None
    if budget_violations(problem, plan):
        return None
    readers: dict[int, list[tuple[int, int, int]]] = {}
    for u, v, b, uses in problem.edges:
        readers.setdefault(v, []).append((u, b, uses))

    def copies_from(x: int, d: int) -> int:
        return sum(problem.edge_ns(b, d, plan[u], uses) for u, b, uses in readers.get(x, ()) if plan[u] != d)

    gains: list[tuple[float, int, int]] = []
    for x in range(n):
        if plan[x] == c and live.weight[x] and g in problem.allowed[x] and problem.weight_bytes[x]:
            saved = copies_from(x, c) - copies_from(x, g)  # weight classes have no kernel time
            if saved > 0:
                gains.append((saved / problem.weight_bytes[x], problem.weight_bytes[x], x))

    def fill(order: list[int]) -> list[int]:
        fast = _make_resident(problem, plan, g, order, readers)
        if fast is not None:
            return fast
        out = list(plan)
        for x in order:  # the memory rule checked whole, plan by plan
            out[x] = g
            if budget_violations(problem, out):
                out[x] = c
        return out

    by_ratio = [x for _r, _b, x in sorted(gains, key=lambda t: (-t[0], -t[1], t[2]))]
    by_size = [x for _r, _b, x in sorted(gains, key=lambda t: (-t[1], -t[0], t[2]))]
    first = fill(by_ratio)
    if by_size == by_ratio:
        return first
    second = fill(by_size)
    return second if evaluate(problem, weights, second)[0] < evaluate(problem, weights, first)[0] else first


def _make_resident(
    problem: Problem,
    plan: list[int],
    g: int,
    order: Sequence[int],
    readers: dict[int, list[tuple[int, int, int]]],
) -> list[int] | None:
    """Step 3 with the peak on `g` kept up to date: a weight class made
    resident adds its bytes to every step, its own step's largest result,
    and takes away the copies into `g` its readers there made (no other
    device's memory changes: a reader elsewhere copies the same bytes in
    from `g` instead). None when the result does not fit after all (the
    caller then checks each move whole)."""
    live = problem.liveness
    n = len(live.order)
    budget = problem.budgets[g]
    steps: np.ndarray = np.asarray(step_usage(problem, plan).get(g, [0] * n), dtype=byte_dtype(problem))
    out = list(plan)
    resident = sum(problem.weight_bytes[x] for x, d in enumerate(out) if d == g)
    for x in order:
        trial = steps.copy()
        for u, b, uses in readers.get(x, ()):
            if out[u] == g and b:
                trial[live.pos[u]] -= b * uses
        trial[live.pos[x]] += problem.largest[x]
        if resident + problem.weight_bytes[x] + (int(trial.max()) if n else 0) <= budget:
            out[x] = g
            steps = trial
            resident += problem.weight_bytes[x]
    return None if budget_violations(problem, out) else out


def resident_weights(problem: Problem, plan: Sequence[int], g: int) -> int:
    """Bytes of weights resident on `g` under `plan` (for logs and tests)."""
    return sum(problem.weight_bytes[x] for x, d in enumerate(plan) if d == g)
