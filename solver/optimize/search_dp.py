"""Offload problems (a model bigger than its GPU): two devices, a memory budget on one of them,
solved by dynamic programming over a path decomposition of the class graph.

A model bigger than its GPU leaves a knapsack: which weight-reading kernels
keep their weights on the GPU. Its LP relaxation (and the Lagrangian bound
of the priced cuts, which equals it) fills the budget to the byte, while a
plan can only move whole kernels, and the kernels of a decoder are nearly
tied in time per byte. On Llama-shaped decoders with most of the model on
the GPU that integrality gap is 2 to 3% of the run time, and HiGHS's branch
and bound needs tens of seconds to close it (the eight near-identical
layers make it search many equivalent plans). A dynamic program sees
equivalent plans as one point.

The program walks the classes in the search's topological order (each
producer right before its first consumer, `search.topological_order`); the *frontier* at a step is the set of
classes already placed that still have an edge to a class not yet placed,
and its devices are the DP state. Each state keeps the Pareto set of
(run time, resident bytes on the budgeted device) of the partial plans
reaching it. Bytes follow the memory rule by liveness (`memory`): weights
placed on the budgeted device are resident (the knapsack); what it holds at a
step beyond them (live activations, the step's largest result, copies in: a
streamed weight among them) depends on the step's frontier state only, and
is taken out by cases.
Points are dropped when dominated, when the bytes cannot fit whatever the
rest does, and when a Lagrangian lower bound on the rest (exact backward
DPs over the same states, one per price per byte) shows the plan cannot
beat the target. The bytes held beyond the resident ones (a maximum over
the steps, not a sum) are taken out by cases: for each bucket [lo, hi] of
them, choices holding more than hi at their step are priced infinite and
the budget shrinks by lo (by hi where a case must give a plan that fits).

Two passes:

- The bound, on a relaxation: kernels whose two devices differ by at most
  `LIGHT_SHARE` of the plan's run time cost their cheaper device's time on
  both, and copies no longer than that cost no time (their bytes still
  count; a streamed weight's copy is usually priced). Every plan costs
  at least its relaxed cost, so the relaxation's optimum is a lower bound on
  the optimum; with only the heavy kernels' times left, plans that differ in
  light placements only collapse into few Pareto points. The relaxed
  optimum is found by iterative deepening: the pass runs with an upper
  target, and a pass that completes without a plan below the target proves
  the target itself a bound.
- The plan: the heavy kernels where the relaxed optimum puts them, every
  other class re-placed by the exact program (run times and copies as
  priced; points within `POLISH_COARSE` of each other in time collapse, so
  the completion is near-optimal for that choice of heavy kernels, not
  proven).

Where the Lagrangian bound is weak (its best plan within the budget more
than COARSE_GAP above it), two more steps come first:

- The coarse relaxation (`_coarse_pass`): light kernels up to LIGHT_SHARE of
  that bound, solved exactly by a backward pass that keeps every suffix's
  Pareto set; its optimum is a bound, its plan an incumbent, and the sets
  prune the finer passes.
- The quick plan (`_quick`), when still no plan is within COARSE_GAP of the
  bound: the relaxed program with points within QUICK_COARSE of the bound
  collapsed. The first pass then goes just below it, where a pass that
  completes finds the relaxed optimum (a gap of 30% closed in one pass on
  the decoder at 0.65 of its weights, where windows from the bound ran out
  of time).

Both passes stop at their point cap (`_cap`: a share of the points the
search's `Work` has left, within `POINT_CAP`), leaving the bound
they proved so far; `offload_search` returns None where it does not apply
(other device sets, several budgets, a frontier wider than `MAX_FRONTIER`,
run times or budgets past the Pareto keys).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..work import Work
from .order import topological_order
from .problem import Problem, Weights, budget_violations, evaluate

log = logging.getLogger(__name__)

# At most 2**MAX_FRONTIER states per step.
MAX_FRONTIER = 14
# Points a pass may keep (over all its steps; a tenth of that at one step):
# half the points the search has left, at least the first, at most the
# second (the history of a pass takes 5 bytes a point). Every pass spends
# the points it made from the search's `Work` (one unit a point).
POINT_CAP = (5_000_000, 40_000_000)
# What one step of a backward pass costs beyond its states, in points (the
# fixed cost of a step's array operations).
STEP_POINTS = 40
# A class is light when its two kernel times differ by at most this share of
# the incumbent's run time (its choice of device moves the total by less).
LIGHT_SHARE = 1e-3
# Prices per byte for the pruning bounds, as multiples of the best price.
PRICE_GRID = (0.0, 0.5, 0.9, 1.0, 1.1, 2.0)
# Big classes (their weights take this share of the budget), at most
# MAX_BIG, are fixed to each device in turn: one case per choice.
BIG_SHARE = 0.1
MAX_BIG = 3
# The transient bytes of the cases (`_size_buckets`): at most MAX_SIZES
# buckets, values within TOLERANCE of the budget sharing one at first.
MAX_SIZES = 8
TOLERANCE = 0.01
# The first target is this share above the bound (the window doubles after a
# pass that completes, halves after one that stops); the search stops when
# the interval left is NARROWEST of the bound.
FIRST_WINDOW = 0.001
NARROWEST = 0.0005
# A pass may take this share of the points left when it goes straight to the
# goal (the last two passes' points extrapolate to a target there).
GOAL_SHARE = 0.9
# The search gives up after this many passes in a row that stop.
MAX_STOPS = 2
# The exact completion's targets above the relaxed optimum, tried in turn,
# and its dominance step (share of the run time; `_forward`'s coarse_ns).
POLISH_WINDOWS = (0.005, 0.02, 0.08)
POLISH_COARSE = 2e-5
# The coarse relaxation (`_coarse_pass`) runs when the least case's
# Lagrangian plan within the budget is more than COARSE_GAP above its bound
# (the finer passes would climb that gap slowly); its suffix sets keep at
# most COARSE_CAP points over all cases (16 bytes a point).
COARSE_GAP = 0.1
COARSE_CAP = 8_000_000
# `_quick`'s dominance step, a share of the bound: coarse enough to keep few
# points (a plan to aim below, not a proof).
QUICK_COARSE = 0.02
# The Pareto keys: run times below 2**41 ns (36 minutes), bytes below 2**40
# (1 TiB); a problem past either is not taken (`_fits_keys`).
_COST_BITS = 41
_BYTE_BITS = 40


@dataclass(frozen=True)
class OffloadResult:
    """What the program proved and found: a lower bound on the run time (ns,
    the problem's constants included), and the best plan within the budget
    it found (None when none beat the incumbent)."""

    bound_ns: int
    assign: list[int] | None
    passes: int


# ---------------------------------------------------------------------------
# Steps and frontiers


@dataclass
class _Steps:
    """Per step k (placing class order[k]): its frontier (the classes placed
    before it that still have an edge to it or later), run time and resident
    bytes (weights) of placing it on the budgeted device `g` or the other
    device `c` in each frontier state (a bit per frontier class, 1 = on `g`),
    the state after, and the bytes `g` holds at that step beyond the resident
    ones (`memory.step_usage`: live activations on `g`, and on `g` the class's
    largest result and the copies into it).

    `cap`: a case's most transient bytes; `masked(cap)` is the view whose run
    times are infinite where a choice holds more at its step."""

    order: list[int]
    fronts: list[list[int]]
    ns_g: list[np.ndarray]
    ns_c: list[np.ndarray]
    bytes_g: list[np.ndarray]
    bytes_c: list[np.ndarray]
    next_g: list[np.ndarray]
    next_c: list[np.ndarray]
    trans_g: list[np.ndarray] = dataclasses.field(default_factory=list)
    trans_c: list[np.ndarray] = dataclasses.field(default_factory=list)
    views: dict[float, _Steps] = dataclasses.field(default_factory=dict)
    top: float | None = None  # `most()`, once computed
    states: int = 0  # over all steps, plus STEP_POINTS a step
    # States the backward passes visited since the search last billed them
    # (`_bill`: one unit of the search's `Work` a state, as a pass's point);
    # one counter shared by the steps' masked views.
    visited: list[int] = dataclasses.field(default_factory=lambda: [0])

    def choices(self, k: int, ok: tuple[bool, bool]) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """The devices `ok` allows at step k, the budgeted one first: (1 on it,
        else 0; run times, bytes and next states per state)."""
        ok_g, ok_c = ok
        out = []
        if ok_g:
            out.append((1, self.ns_g[k], self.bytes_g[k], self.next_g[k]))
        if ok_c:
            out.append((0, self.ns_c[k], self.bytes_c[k], self.next_c[k]))
        return out

    def masked(self, cap: float) -> _Steps:
        """These steps with every choice that holds more than `cap` transient
        bytes on `g` at its step priced infinite (cached per cap)."""
        if not self.trans_g or cap >= self.most():
            return self
        view = self.views.get(cap)
        if view is None:
            inf = np.inf
            view = dataclasses.replace(
                self,
                ns_g=[np.where(t > cap, inf, ns) for t, ns in zip(self.trans_g, self.ns_g)],
                ns_c=[np.where(t > cap, inf, ns) for t, ns in zip(self.trans_c, self.ns_c)],
                views={},
                top=None,
            )
            self.views[cap] = view
        return view

    def most(self) -> float:
        """The most transient bytes any choice holds."""
        if self.top is None:
            self.top = max(float(max(t.max(), u.max())) for t, u in zip(self.trans_g, self.trans_c))
        return self.top

    def transients(self) -> np.ndarray:
        """Every distinct transient byte count of a choice, ascending."""
        return np.unique(np.concatenate([*self.trans_g, *self.trans_c, np.zeros(1)]))


def _frontiers(problem: Problem, order: Sequence[int]) -> tuple[list[list[int]], list[int]] | None:
    """The frontier before each step and each class's last step, or None when
    one is wider than MAX_FRONTIER."""
    n = len(problem.allowed)
    pos = [0] * n
    for i, c in enumerate(order):
        pos[c] = i
    last = list(pos)
    for u, v, _b, _uses in problem.edges:
        last[u] = max(last[u], pos[v])
        last[v] = max(last[v], pos[u])
    fronts: list[list[int]] = []
    frontier: list[int] = []
    for k, c in enumerate(order):
        if len(frontier) > MAX_FRONTIER:
            return None
        fronts.append(frontier)
        frontier = [x for x in [*frontier, c] if last[x] > k]
    return fronts, last


def _build(problem: Problem, order: list[int], fronts: list[list[int]], g: int, c: int, light_ns: int | None) -> _Steps:
    """The step arrays. `light_ns`: None for the exact costs; else the
    relaxation (light classes at their cheaper time, light copies free: a
    streamed weight's copy is priced when it is heavier). Bytes on
    `g` follow the memory rule (`memory`): a class's weights are resident
    where it is placed; an activation is live on `g` from the step after its
    producer to its last reader; a copy into `g` is held at its reader's step
    (edges whose reader comes first, inside a cycle of classes, are left to
    the exact check of every plan)."""
    n = len(problem.allowed)
    live = problem.liveness
    pos = {x: i for i, x in enumerate(order)}
    at: list[list[int]] = [[] for _ in range(n)]  # edges priced when their later end is placed
    for e, (u, v, _b, _uses) in enumerate(problem.edges):
        at[u if pos[u] > pos[v] else v].append(e)
    steps = _Steps(order, fronts, [], [], [], [], [], [])
    for k, x in enumerate(order):
        front = fronts[k]
        where = {y: i for i, y in enumerate(front)}
        states = np.arange(1 << len(front), dtype=np.int64)
        tg, tc = problem.unary[x].get(g, 0), problem.unary[x].get(c, 0)
        if light_ns is not None and abs(tg - tc) <= light_ns:
            tg = tc = min(tg, tc)
        ns_g = np.full(len(states), float(tg))
        ns_c = np.full(len(states), float(tc))
        bytes_g = np.full(len(states), float(problem.weight_bytes[x]))
        bytes_c = np.zeros(len(states))
        # live activations on g crossing this step: frontier classes on g that are not weights
        crossing = np.zeros(len(states))
        for i, y in enumerate(front):
            if not live.weight[y] and live.value[y] and live.last[y] >= k:
                crossing += ((states >> i) & 1) * float(live.value[y])
        trans_g = crossing + float(problem.largest[x])
        for e in at[x]:
            u, v, b, uses = problem.edges[e]
            other = v if u == x else u
            if other == x:
                continue
            on_g = ((states >> where[other]) & 1).astype(bool)
            if u == x:  # x reads `other`: a copy into g when x is on g and other is not
                trans_g += np.where(on_g, 0.0, float(b * uses))
            into_g, into_c = float(problem.edge_ns(b, c, g, uses)), float(problem.edge_ns(b, g, c, uses))
            if light_ns is not None:  # light copies are free in the relaxation
                into_g = into_g if into_g > light_ns else 0.0
                into_c = into_c if into_c > light_ns else 0.0
            if u == x:
                ns_g += np.where(on_g, 0.0, into_g)
                ns_c += np.where(on_g, into_c, 0.0)
            else:  # `other` reads x
                ns_g += np.where(on_g, 0.0, into_c)
                ns_c += np.where(on_g, into_g, 0.0)
        after = fronts[k + 1] if k + 1 < len(order) else []
        full = {y: i for i, y in enumerate([*front, x])}
        for bit, target in ((1, steps.next_g), (0, steps.next_c)):
            extended = states | (bit << len(front))
            nxt = np.zeros(len(states), dtype=np.int64)
            for j, y in enumerate(after):
                nxt |= ((extended >> full[y]) & 1) << j
            target.append(nxt)
        steps.ns_g.append(ns_g)
        steps.ns_c.append(ns_c)
        steps.bytes_g.append(bytes_g)
        steps.bytes_c.append(bytes_c)
        steps.trans_g.append(trans_g)
        steps.trans_c.append(crossing)
    steps.states = sum(len(a) for a in steps.ns_g) + STEP_POINTS * len(order)
    return steps


def _bill(work: Work, *steps: _Steps | None) -> None:
    """Spend the states the backward passes of `steps` visited from `work`."""
    for one in steps:
        if one is not None and one.visited[0]:
            work.spend(one.visited[0], "offload")
            one.visited[0] = 0


# ---------------------------------------------------------------------------
# Backward (Lagrangian) and forward (Pareto) passes


Allow = list[tuple[bool, bool]]


def _backward(steps: _Steps, allow: Allow, price: float, with_time: bool = True) -> list[np.ndarray]:
    """For each step and state: the least run time + price * bytes of placing
    the rest. `with_time=False`: bytes only (the fewest the rest can take)."""
    n = len(steps.order)
    steps.visited[0] += steps.states
    values: list[np.ndarray] = [np.zeros(0)] * (n + 1)
    values[n] = np.zeros(1)
    inf = np.inf
    for k in range(n - 1, -1, -1):
        ok_g, ok_c = allow[k]
        later = values[k + 1]
        if ok_g:
            on_g = price * steps.bytes_g[k] + later[steps.next_g[k]]
            if with_time:
                on_g += steps.ns_g[k]
        if ok_c:
            on_c = price * steps.bytes_c[k] + later[steps.next_c[k]]
            if with_time:
                on_c += steps.ns_c[k]
        if ok_g and ok_c:
            values[k] = np.minimum(on_g, on_c)
        elif ok_g:
            values[k] = on_g
        elif ok_c:
            values[k] = on_c
        else:
            values[k] = np.full(len(steps.ns_g[k]), inf)
    return values


def _priced(steps: _Steps, allow: Allow, price: float) -> tuple[float, float]:
    """(run time, bytes) of the plan of least run time + price * bytes."""
    values = _backward(steps, allow, price)
    state = 0
    ns = nbytes = 0.0
    for k in range(len(steps.order)):
        ok_g, ok_c = allow[k]
        on_g = steps.ns_g[k][state] + price * steps.bytes_g[k][state] + values[k + 1][steps.next_g[k][state]]
        on_c = steps.ns_c[k][state] + price * steps.bytes_c[k][state] + values[k + 1][steps.next_c[k][state]]
        if ok_g and (not ok_c or on_g <= on_c):
            ns += steps.ns_g[k][state]
            nbytes += steps.bytes_g[k][state]
            state = int(steps.next_g[k][state])
        else:
            ns += steps.ns_c[k][state]
            nbytes += steps.bytes_c[k][state]
            state = int(steps.next_c[k][state])
    return float(ns), float(nbytes)


def _lagrangian(steps: _Steps, allow: Allow, budget: float) -> tuple[float, float, float]:
    """The Lagrangian bound max over prices p of min(run time + p * (bytes -
    budget)), and its price: the dual is concave and piecewise linear, so the
    price where the lines of two plans (one over the budget, one within)
    cross is tried next (Kelley's cutting planes in one dimension)."""
    ns, nbytes = _priced(steps, allow, 0.0)
    if nbytes <= budget:
        return ns, 0.0, ns
    best_value, best_price = ns, 0.0  # the price-0 bound: the unconstrained optimum
    over = (ns, nbytes)  # a plan over the budget
    under: tuple[float, float] | None = None
    fitting = math.inf
    price = 1.0
    for _ in range(40):  # find a price whose plan fits
        ns, nbytes = _priced(steps, allow, price)
        value = ns + price * (nbytes - budget)
        if value > best_value:
            best_value, best_price = value, price
        if nbytes <= budget:
            under = (ns, nbytes)
            fitting = ns
            break
        over = (ns, nbytes)
        price *= 8
    if under is None:
        return best_value, best_price, fitting
    for _ in range(12):
        if over[1] <= under[1]:
            break
        price = (under[0] - over[0]) / (over[1] - under[1])
        ns, nbytes = _priced(steps, allow, price)
        value = ns + price * (nbytes - budget)
        if value > best_value:
            best_value, best_price = value, price
        if nbytes <= budget:
            fitting = min(fitting, ns)
        line = over[0] + price * (over[1] - budget)
        if value >= line - 1e-6 * abs(line):
            break  # the crossing is on the dual: the maximum
        if nbytes > budget:
            over = (ns, nbytes)
        else:
            under = (ns, nbytes)
    return best_value, best_price, fitting


# The suffix Pareto sets of a relaxation (`_suffix_sets`): per step k, for the
# states before placing order[k], every (bytes, least run time) of placing
# the rest, sorted by state then bytes with the run time falling within a
# state; as keys (state << _BYTE_BITS | bytes) and run times.
Sets = list[tuple[np.ndarray, np.ndarray]]


def _prefix_fewest(steps: _Steps, allow: Allow) -> list[np.ndarray]:
    """For each step and state: the fewest bytes a plan of the classes before
    it can take to reach that state (inf where none does)."""
    n = len(steps.order)
    out = [np.zeros(1)]
    for k in range(n):
        size = len(steps.ns_g[k + 1]) if k + 1 < n else 1
        reach = np.full(size, np.inf)
        for _bit, _ns, step_bytes, nxt in steps.choices(k, allow[k]):
            np.minimum.at(reach, nxt, out[k] + step_bytes)
        out.append(reach)
    return out


def _pareto(
    t: np.ndarray, b: np.ndarray, cost: np.ndarray, *extra: np.ndarray, coarse_ns: float = 1.0
) -> list[np.ndarray]:
    """The points that no point of their state beats with fewer or as many
    bytes, sorted by state then bytes (points of equal bytes may both stay:
    redundant, never wrong); `extra` arrays follow their points. With
    `coarse_ns` > 1 a point must be faster by that much (`_forward`)."""
    if len(t) == 0:
        return [t, b, cost, *extra]
    o = np.argsort((t << _BYTE_BITS) | b.astype(np.int64), kind="stable")
    t, b, cost = t[o], b[o], cost[o]
    first = np.ones(len(t), dtype=bool)
    first[1:] = t[1:] != t[:-1]
    segment = np.cumsum(first) - 1
    key = (segment[-1] - segment) * (1 << _COST_BITS) + (cost // coarse_ns).astype(np.int64)
    running = np.minimum.accumulate(key)
    front = first.copy()
    front[1:] |= key[1:] < running[:-1]
    return [t[front], b[front], cost[front], *(e[o][front] for e in extra)]


def _suffix_sets(steps: _Steps, allow: Allow, budget: float, cap: int, work: Work) -> tuple[Sets, int] | None:
    """The exact Pareto sets of placing the rest (a backward pass over the
    same states as `_forward`; points whose bytes cannot fit with the fewest
    bytes of any way to reach their state are dropped), and their total size;
    None past `cap` points (or when the deadline cut the search short)."""
    n = len(steps.order)
    reach = _prefix_fewest(steps, allow)
    state = np.zeros(1, dtype=np.int64)
    nbytes = np.zeros(1)
    ns = np.zeros(1)
    sets: Sets = [(np.zeros(0, dtype=np.int64), np.zeros(0))] * (n + 1)
    sets[n] = (state.copy(), ns.copy())
    total = 0
    for k in range(n - 1, -1, -1):
        if k % 64 == 0 and work.expired("offload"):
            return None
        size = len(steps.ns_g[k + 1]) if k + 1 < n else 1
        counts = np.bincount(state, minlength=size)
        starts = np.cumsum(counts) - counts
        parts = []
        for _bit, step_ns, step_bytes, nxt in steps.choices(k, allow[k]):
            many = counts[nxt]
            src = np.repeat(np.arange(len(nxt), dtype=np.int64), many)
            at = np.repeat(starts[nxt] - (np.cumsum(many) - many), many) + np.arange(int(many.sum()))
            parts.append((src, nbytes[at] + step_bytes[src], ns[at] + step_ns[src]))
        if not parts:
            return None
        t = np.concatenate([p[0] for p in parts])
        b = np.concatenate([p[1] for p in parts])
        cost = np.concatenate([p[2] for p in parts])
        keep = (b + reach[k][t] <= budget) & np.isfinite(cost)
        state, nbytes, ns = _pareto(t[keep], b[keep], cost[keep])
        sets[k] = ((state << _BYTE_BITS) | nbytes.astype(np.int64), ns)
        total += len(state)
        if total > cap:
            return None
    return sets, total


def _least_suffix(entry: tuple[np.ndarray, np.ndarray], state: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Per query: the least run time of placing the rest from `state` within
    `room` bytes (inf when nothing fits), from one step's suffix set."""
    keys, ns = entry
    if len(keys) == 0:
        return np.full(len(state), np.inf)
    # Rooms are at most the budget, below 2**_BYTE_BITS (`_fits_keys`).
    room_bytes = np.floor(room).astype(np.int64)
    i = np.searchsorted(keys, (state << _BYTE_BITS) | np.maximum(room_bytes, 0), side="right") - 1
    j = np.maximum(i, 0)
    ok = (keys[j] >> _BYTE_BITS) == state
    ok &= (i >= 0) & (room_bytes >= 0)
    return np.where(ok, ns[j], np.inf)


def _plan_in(steps: _Steps, allow: Allow, sets: Sets, room: float) -> tuple[float, list[int]] | None:
    """The least run time within `room` bytes by the suffix sets, and its
    choices (1: on the budgeted device), read off step by step."""
    n = len(steps.order)
    state = 0
    one = np.zeros(1, dtype=np.int64)
    value = float(_least_suffix(sets[0], one, np.array([room]))[0])
    if not math.isfinite(value):
        return None
    bits: list[int] = []
    for k in range(n):
        best: tuple[float, int] | None = None
        for bit, step_ns, step_bytes, nxt in steps.choices(k, allow[k]):
            rest = _least_suffix(sets[k + 1], one + int(nxt[state]), np.array([room - step_bytes[state]]))[0]
            total = float(step_ns[state] + rest)
            if best is None or total < best[0]:
                best = (total, bit)
        if best is None or not math.isfinite(best[0]):
            return None
        bit = best[1]
        bits.append(bit)
        room -= float((steps.bytes_g if bit else steps.bytes_c)[k][state])
        state = int((steps.next_g if bit else steps.next_c)[k][state])
    return value, bits


@dataclass
class _Pass:
    """One forward pass's outcome: "found" (the least relaxed or exact run
    time at most the target, and its plan), "none" (nothing at most the
    target: the target is a bound) or "stopped" (point cap, or the deadline
    cut the search short)."""

    status: str
    ns: float = math.inf
    bits: list[int] | None = None
    points: int = 0


def _forward(
    steps: _Steps,
    allow: Allow,
    budget: float,
    target: float,
    prices: Sequence[float],
    suffix: Sequence[list[np.ndarray]],
    fewest: list[np.ndarray],
    work: Work,
    coarse_ns: float = 1.0,
    cap: int = POINT_CAP[0],
    sets: Sets | None = None,
) -> _Pass:
    """The Pareto program (vectorised per step): the least run time of a plan
    whose bytes fit `budget`, if it is at most `target`. With `coarse_ns` >
    1, a heuristic: a point must be faster by that much than every point of
    its state with fewer bytes (plans differing in light placements only
    collapse), so it finds a good plan without proving it best. `sets`: a
    coarser relaxation's suffix sets (`_suffix_sets`), whose least run time
    of the rest within the bytes left bounds every completion of a point."""
    n = len(steps.order)
    state = np.zeros(1, dtype=np.int64)
    nbytes = np.zeros(1)
    ns = np.zeros(1)
    history: list[tuple[np.ndarray, np.ndarray]] = []
    total = 0
    slack = target * (1 + 1e-12) + 1.0
    for k in range(n):
        if k % 64 == 0 and work.expired("offload"):
            return _Pass("stopped", points=total)
        ok_g = allow[k][0]
        parts = [
            (nxt[state], nbytes + step_bytes[state], ns + step_ns[state])
            for _bit, step_ns, step_bytes, nxt in steps.choices(k, allow[k])
        ]
        if not parts:
            return _Pass("none", points=total)
        t = np.concatenate([p[0] for p in parts])
        b = np.concatenate([p[1] for p in parts])
        cost = np.concatenate([p[2] for p in parts])
        keep = (b + fewest[k + 1][t] <= budget) & np.isfinite(cost)
        for price, values in zip(prices, suffix):
            keep &= cost + price * (b - budget) + values[k + 1][t] <= slack
        at = np.flatnonzero(keep)  # the candidate's index: its parent point, and g's part first
        t, b, cost = t[at], b[at], cost[at]
        if sets is not None:
            near = cost + _least_suffix(sets[k + 1], t, budget - b) <= slack
            at, t, b, cost = at[near], t[near], b[near], cost[near]
        if len(at) == 0:
            return _Pass("none", points=total)
        m = len(state)
        parent = (at % m).astype(np.int32)
        bits = ((at < m) if ok_g else np.zeros(len(at), dtype=bool)).astype(np.int8)
        t, b, cost, parent, bits = _pareto(t, b, cost, parent, bits, coarse_ns=coarse_ns)
        history.append((parent, bits))
        state, nbytes, ns = t, b, cost
        total += len(t)
        if total > cap or len(t) > cap // 10:
            return _Pass("stopped", points=total)
    i = int(np.argmin(ns))
    found = float(ns[i])
    out: list[int] = []
    for parent, bits in reversed(history):
        out.append(int(bits[i]))
        i = int(parent[i])
    out.reverse()
    return _Pass("found", found, out, total)


# ---------------------------------------------------------------------------
# The search


def _pair(problem: Problem) -> tuple[int, int] | None:
    """(budgeted device, other device) when the problem has exactly two
    devices and a budget on one of them only."""
    used = sorted({d for ok in problem.allowed for d in ok})
    budgeted = [d for d in used if d in problem.budgets]
    if len(used) != 2 or len(budgeted) != 1:
        return None
    g = budgeted[0]
    return g, next(d for d in used if d != g)


@dataclass
class _Case:
    """One case of the program (`_cases`): which classes may take which
    device, and the budget left."""

    size: int
    allow: Allow
    budget: float
    lower: float  # proven lower bound on the relaxed run time of this case (ns, without constants)
    name: str = ""
    done: bool = False  # lower is this case's relaxed optimum
    exact: bool = False  # lower is this case's optimum (an exact pass found it)
    price: float | None = None  # its best price per byte, once found
    fitting: float = math.inf  # the least relaxed run time of a plan within the budget its Lagrangian met
    prices: tuple[float, ...] = ()
    suffix: tuple[list[np.ndarray], ...] = ()
    fewest: list[np.ndarray] = dataclasses.field(default_factory=list)
    sets: Sets | None = None  # the coarse relaxation's suffix sets (`_coarse_pass`)
    cap: float = math.inf  # the most transient bytes a choice may hold on the budgeted device
    unpriced: bool = False  # lower includes the case's optimum without its budget
    strict: float = math.inf  # the budget less the cap: what a plan of the case surely fits


def offload_search(
    problem: Problem,
    weights: Weights,
    incumbent: Sequence[int] | None,
    bound_ns: int,
    goal_ppm: int,
    work: Work,
) -> OffloadResult | None:
    """Raise the bound on the run time and find a better plan (module
    docstring) until the plan is within `goal_ppm` of the bound, the
    interval left is too narrow, passes stop or `work` (points) is spent.

    `bound_ns` is the bound already known (the problem's constants
    included). Each pass runs at a target above the bound, at most halfway
    to the incumbent or to the least target that made too many points: a
    pass that finds nothing raises the bound to its target, one that stops
    lowers the top, one that finds a case's relaxed optimum settles that
    case and gives a plan (targets close to the bound are cheap; the window
    above it doubles or halves with each pass). None when the problem is not an
    offload problem the program can take."""
    pair = _pair(problem)
    if pair is None:
        return None
    g, c = pair
    order = topological_order(problem)
    shape = _frontiers(problem, order)
    if shape is None:
        log.debug("offload DP: frontier wider than %d", MAX_FRONTIER)
        return None
    fronts, _ = shape
    if not _fits_keys(problem, g, c):
        return None
    fixed = problem.fixed_ns
    best_assign = list(incumbent) if incumbent is not None else None
    best_ns = evaluate(problem, weights, best_assign)[1] - fixed if best_assign is not None else math.inf
    scale = best_ns if math.isfinite(best_ns) else sum(min(problem.unary[x].values()) for x in order)
    light = int(LIGHT_SHARE * scale)
    relaxed = _build(problem, order, fronts, g, c, light)
    cases = _cases(problem, order, g, c, float(bound_ns - fixed), relaxed)
    if not cases:
        return None
    for case in cases:  # one backward pass each: most cases end here
        _unpriced(relaxed, case)
    exact: _Steps | None = None
    passes = 0

    def bound() -> float:
        return min(case.lower for case in cases)

    def goal() -> float:
        return best_ns / (1 + goal_ppm / 1e6)

    def settle(case: _Case, bits: Sequence[int], light_ns: int, windows: Sequence[float] = POLISH_WINDOWS) -> None:
        """A relaxed optimum's plan, polished, as the incumbent if it is better."""
        nonlocal exact, passes
        if exact is None:
            exact = _build(problem, order, fronts, g, c, None)
        heavy = [(order[k], g if bit else c) for k, bit in enumerate(bits)]
        plan = _polish(problem, exact, case, heavy, light_ns, best_ns, g, c, work, windows)
        passes += 1
        if plan is not None:
            improve(plan)

    def improve(plan: list[int]) -> None:
        """A plan within the budget as the incumbent if it is faster (the
        caller's single-class moves settle copies and preferred devices)."""
        nonlocal best_assign, best_ns
        if not budget_violations(problem, plan):
            ns_plan = evaluate(problem, weights, plan)[1] - fixed
            if ns_plan < best_ns:
                best_assign, best_ns = plan, ns_plan

    coarse = _coarse_pass(problem, order, fronts, g, c, cases, relaxed, light, scale, goal, settle, work)
    passes += coarse
    straight = False  # the first pass goes straight to the goal
    least = min(cases, key=lambda k: k.lower)
    weak = least.price is not None and least.fitting > (1 + COARSE_GAP) * least.lower
    if weak and (not math.isfinite(best_ns) or best_ns > (1 + COARSE_GAP) * bound()):
        # No plan near a weak bound: it is far below the optimum (a knapsack
        # whose items are large against the run time left). Windows would
        # climb that gap slowly; a quick plan gives a goal, and the first
        # pass goes straight to it.
        quick = _quick(relaxed, cases, work)
        if quick is not None:
            passes += 1
            if quick.bits is not None:
                improve(_plan_of(problem, order, quick.bits, g, c))
                straight = math.isfinite(best_ns)
    # A coarse bound that meets the goal by itself gets up to two passes just
    # below the plan: the finer relaxation's (its optimum and plan), then for
    # cases it settled the exact costs' (their optimum, or the plan proven).
    # A quick plan gets one, even when it meets the goal: its light
    # placements are the program's guess, the relaxed optimum's are better.
    confirm = 2 if coarse > 0 else 1 if straight else 0
    top = math.inf  # targets at or above this made too many points
    window = FIRST_WINDOW
    stops = 0
    completed: list[tuple[float, int]] = []  # (target, points) of the passes that found nothing
    while work.more("offload") and stops < MAX_STOPS:
        _bill(work, relaxed, exact)
        low = bound()
        if not math.isfinite(low) or (low >= goal() and not (confirm > 0 and math.isfinite(best_ns))):
            break
        high = min(top, best_ns)
        if high - low <= NARROWEST * max(low, 1.0):
            break
        cap = _cap(work)
        target = min((low + high) / 2, low + window * max(low, 1.0), _affordable(completed, cap))
        proving = low >= goal()
        if proving:
            target, confirm = best_ns * (1 - 1e-9), confirm - 1
            if exact is None:
                exact = _build(problem, order, fronts, g, c, None)
        elif math.isfinite(goal()):
            target = min(target, goal())  # a pass that proves the goal ends the search
            whole = _cap(work, GOAL_SHARE)
            if straight and best_ns < top:
                # Just below the quick plan: a pass that completes finds the
                # relaxed optimum (a bound, and a plan better than the quick one).
                target, cap = best_ns * (1 - 1e-9), whole
            elif goal() < top and len(completed) >= 2 and _affordable(completed, whole) >= goal():
                target, cap = goal(), whole  # straight to the goal when the points left afford it
        straight = False
        if not proving:
            confirm = 0
        ran = stopped = pending = False
        for case in sorted(cases, key=lambda k: k.lower):
            if case.exact or (case.done and not proving) or case.lower >= target:
                continue
            pending = True
            if not case.suffix and not _prepare(relaxed, case, target):
                continue  # its own bounds put it at or above the target
            # The relaxation's bounds (suffix values, coarse sets) hold for the exact costs too.
            on_exact = proving and case.done
            outcome = _forward(
                (exact if on_exact and exact is not None else relaxed).masked(case.cap), case.allow, case.budget,
                target, case.prices, case.suffix, case.fewest, work, cap=cap, sets=case.sets,
            )
            work.spend(outcome.points, "offload")
            passes += 1
            ran = True
            log.debug("offload DP: %s target %.0f: %s (%d points)", case.name, target, outcome.status, outcome.points)
            if outcome.status == "stopped":
                stopped = True
                break
            if outcome.status == "none":
                case.lower = max(case.lower, target)
                completed.append((target, outcome.points))
                continue
            case.lower, case.done, case.exact = outcome.ns, True, on_exact
            assert outcome.bits is not None
            if on_exact:  # the exact optimum of the case: its plan as it is
                improve(_plan_of(problem, order, outcome.bits, g, c))
            else:
                settle(case, outcome.bits, light)
        if stopped:
            top, window, stops = target, window / 2, stops + 1
        elif ran:
            window, stops = window * 2, 0
        elif not pending:
            break  # every case below the target is settled: nothing left to prove
    found = best_assign if best_assign is not None and best_assign != incumbent else None
    lower = bound()
    bound_out = math.ceil(lower - 1e-6) + fixed if math.isfinite(lower) else bound_ns
    return OffloadResult(max(bound_out, bound_ns), found, passes)


def _coarse_pass(
    problem: Problem,
    order: list[int],
    fronts: list[list[int]],
    g: int,
    c: int,
    cases: list[_Case],
    relaxed: _Steps,
    light: int,
    scale: float,
    goal: Callable[[], float],
    settle: Callable[[_Case, Sequence[int], int, Sequence[float]], None],
    work: Work,
) -> int:
    """The coarse relaxation (light kernels up to LIGHT_SHARE of a lower
    bound on the run time, where `relaxed` takes it of `scale`): for each
    case below the goal, its exact Pareto sets of the rest (`_suffix_sets`),
    whose least run time is the case's coarse optimum, a bound; its plan,
    polished, is an incumbent, and the sets prune the finer passes that
    follow (a point goes when no completion within the bytes left can reach
    the target). Returns the passes run; skipped when the coarse threshold
    is not well above `light`, or the sets would pass COARSE_CAP points."""
    while work.more("offload"):  # the least Lagrangian bound of the cases: the run time's scale
        _bill(work, relaxed)
        first = min(cases, key=lambda k: k.lower)
        if first.price is not None or not math.isfinite(first.lower):
            break
        _price(relaxed, first, math.inf)
    first = min(cases, key=lambda k: k.lower)
    if not math.isfinite(first.lower):
        return 0  # no case has a plan
    coarse_light = int(LIGHT_SHARE * max(scale, first.lower))
    log.debug("offload DP: coarse light %d ns (fine %d), Lagrangian %.0f, its plan %.0f",
              coarse_light, light, first.lower, first.fitting)
    if coarse_light <= 2 * light or first.fitting <= (1 + COARSE_GAP) * first.lower:
        return 0
    coarse = _build(problem, order, fronts, g, c, coarse_light)
    passes = stored = 0
    for case in sorted(cases, key=lambda k: k.lower):
        _bill(work, relaxed, coarse)
        if not work.more("offload"):
            break
        if case.lower >= goal():
            continue
        if not _price(relaxed, case, goal()):
            continue
        built = _suffix_sets(coarse.masked(case.cap), case.allow, case.budget, COARSE_CAP - stored, work)
        passes += 1
        if built is None:
            log.debug("offload DP: %s coarse sets past %d points", case.name, COARSE_CAP - stored)
            break  # too many points (or out of time): the finer passes go without
        sets, points = built
        work.spend(points, "offload")
        first_ns = sets[0][1]
        if len(first_ns) == 0:
            case.lower, case.done = math.inf, True  # nothing fits this case
            continue
        relaxed_ns = float(first_ns.min())
        log.debug("offload DP: %s coarse optimum %.0f (%d points)", case.name, relaxed_ns, points)
        case.lower = max(case.lower, relaxed_ns)
        plan = _plan_in(coarse.masked(case.cap), case.allow, sets, min(case.budget, case.strict))
        if plan is not None:
            settle(case, plan[1], coarse_light, POLISH_WINDOWS[1:])  # the coarse optimum is further below
        if case.lower < goal():
            case.sets, stored = sets, stored + points
            # The sets bound the rest better than any price but the best one.
            _prepare(relaxed, case, math.inf, (1.0,))
    return passes


@dataclass(frozen=True)
class _Quick:
    """`_quick`'s plan (None when it found none)."""

    bits: list[int] | None


def _quick(relaxed: _Steps, cases: list[_Case], work: Work) -> _Quick | None:
    """A plan for the case with the least bound, fast: the relaxed program
    with points within QUICK_COARSE of that bound in time collapsed (a
    heuristic, as in `_polish`), pruned below the plan its Lagrangian met.
    None when it did not run."""
    case = min(cases, key=lambda k: k.lower)
    if not math.isfinite(case.lower) or work.expired("offload"):
        return None
    if not case.suffix and not _prepare(relaxed, case, math.inf):
        return None
    outcome = _forward(
        relaxed.masked(case.cap), case.allow, case.budget, case.fitting, case.prices, case.suffix, case.fewest,
        work, coarse_ns=max(1.0, QUICK_COARSE * case.lower), cap=POINT_CAP[0],
    )
    work.spend(outcome.points, "offload")
    log.debug("offload DP: %s quick plan: %s %.0f (%d points)", case.name, outcome.status, outcome.ns, outcome.points)
    return _Quick(outcome.bits if outcome.status == "found" else None)


def _cap(work: Work, share: float = 0.5) -> int:
    """The points a pass may keep: `share` of the points `work` has left,
    within POINT_CAP."""
    low, high = POINT_CAP
    return int(min(high, max(low, work.left() * share)))


def _affordable(completed: Sequence[tuple[float, int]], cap: int) -> float:
    """The target a pass can afford: points grow about exponentially with
    the target, so the last two passes that completed (target, points) give
    the target at which a pass would reach most of `cap` (inf before two
    passes, or when the points did not grow)."""
    if len(completed) < 2:
        return math.inf
    (t0, p0), (t1, p1) = completed[-2], completed[-1]
    if t1 <= t0 or p1 <= p0 or p0 <= 0:
        return math.inf
    rate = math.log(p1 / p0) / (t1 - t0)
    return t1 + math.log(0.8 * cap / p1) / rate


def _fits_keys(problem: Problem, g: int, c: int) -> bool:
    """Whether every run time and byte count of a plan fits the Pareto keys."""
    worst = sum(max(problem.unary[x].get(g, 0), problem.unary[x].get(c, 0)) for x in range(len(problem.allowed)))
    worst += sum(max(problem.edge_ns(b, g, c, uses), problem.edge_ns(b, c, g, uses)) for _u, _v, b, uses in problem.edges)
    return worst < 1 << _COST_BITS and problem.budgets[g] < 1 << _BYTE_BITS


def _size_buckets(values: np.ndarray, room: float) -> list[tuple[float, float]]:
    """The transient byte counts within `room` grouped into at most
    MAX_SIZES buckets (lowest, highest): values within a span of TOLERANCE
    of the room (doubled until few enough) share one."""
    within = [float(v) for v in values if v <= room]
    tol = TOLERANCE * max(room, 1.0)
    while True:
        buckets: list[tuple[float, float]] = []
        for v in within:
            if buckets and v - buckets[-1][0] <= tol:
                buckets[-1] = (buckets[-1][0], v)
            else:
                buckets.append((v, v))
        if len(buckets) <= MAX_SIZES:
            return buckets
        tol *= 2


def _cases(problem: Problem, order: Sequence[int], g: int, c: int, known: float, steps: _Steps) -> list[_Case]:
    """The cases: each bucket [lo, hi] of the most bytes `g` holds at a step
    beyond its resident weights (choices holding more than hi priced
    infinite, the budget less lo: every plan is in the case of its own
    maximum, so the cases together relax the problem exactly where a bucket
    holds one value), times the devices of the few big classes (those whose
    weights take `BIG_SHARE` of the budget: a Lagrangian bound is weakest on
    them; their readers stay free, to stream them or not). A case starts with the bound of every class
    at its cheapest allowed device (no pass needed) or `known`, whichever
    is more."""
    n = len(problem.allowed)
    room = problem.budgets[g]
    big = sorted((x for x in range(n) if len(problem.allowed[x]) == 2 and problem.weight_bytes[x] >= BIG_SHARE * room),
                 key=lambda x: -problem.weight_bytes[x])[:MAX_BIG]
    pos = {x: k for k, x in enumerate(order)}
    unary_g = np.array([problem.unary[x].get(g, 0) for x in order], dtype=float)
    unary_c = np.array([problem.unary[x].get(c, 0) for x in order], dtype=float)
    base = [(g in problem.allowed[x], c in problem.allowed[x]) for x in order]
    out: list[_Case] = []
    for lo, hi in reversed(_size_buckets(steps.transients(), float(room))):
        for devices in itertools.product((g, c), repeat=len(big)):
            allow = list(base)
            for x, d in zip(big, devices):
                ok_g, ok_c = allow[pos[x]]
                allow[pos[x]] = (ok_g and d == g, ok_c and d == c)
            if any(not a and not b for a, b in allow):
                continue
            if sum(problem.weight_bytes[x] for x, d in zip(big, devices) if d == g) > room - lo:
                continue  # the big weights alone overfill this case
            on_g = np.array([a for a, _ in allow])
            on_c = np.array([b for _, b in allow])
            cheapest = np.minimum(np.where(on_g, unary_g, np.inf), np.where(on_c, unary_c, np.inf)).sum()
            name = f"M={lo:.0f}..{hi:.0f}" + "".join(f" #{x}:{'g' if d == g else 'c'}" for x, d in zip(big, devices))
            out.append(_Case(int(hi), allow, float(room - lo), max(float(cheapest), known), name=name, cap=hi,
                             strict=float(room - hi)))
    return out


def _price(steps: _Steps, case: _Case, target: float) -> bool:
    """A case's unconstrained optimum and Lagrangian bound, and its best
    price, unless the first already puts it at or above `target` (False
    then, as when the bound does)."""
    steps = steps.masked(case.cap)
    if case.price is None:
        _unpriced(steps, case)
        if case.lower >= target:
            return False
        value, case.price, case.fitting = _lagrangian(steps, case.allow, case.budget)
        case.lower = max(case.lower, value)
    return case.lower < target


def _unpriced(steps: _Steps, case: _Case) -> None:
    """A case's optimum without its budget (transient cap included) as its bound, once."""
    if not case.unpriced:
        case.lower = max(case.lower, float(_backward(steps.masked(case.cap), case.allow, 0.0)[0][0]))
        case.unpriced = True


def _prepare(steps: _Steps, case: _Case, target: float, grid: Sequence[float] = PRICE_GRID) -> bool:
    """The suffix bounds of a case, unless a cheaper bound already puts it at
    or above `target` (False then): the unconstrained optimum (price 0) and
    its own best price's bound first, then backward passes at the price grid
    around that price and the fewest bytes of every suffix."""
    if not _price(steps, case, target):
        return False
    steps = steps.masked(case.cap)
    price = case.price
    assert price is not None
    case.prices = tuple(price * f for f in grid)
    case.suffix = tuple(_backward(steps, case.allow, p) for p in case.prices)
    case.fewest = _backward(steps, case.allow, 1.0, with_time=False)
    return True


def _polish(
    problem: Problem,
    exact: _Steps,
    case: _Case,
    relaxed_plan: Sequence[tuple[int, int]],
    light: int,
    best_ns: float,
    g: int,
    c: int,
    work: Work,
    windows: Sequence[float] = POLISH_WINDOWS,
) -> list[int] | None:
    """The relaxed plan's heavy classes where it has them and everything else
    placed by the exact program; None when it finds nothing faster than
    `best_ns`."""
    exact = exact.masked(case.cap)
    device = dict(relaxed_plan)
    allow: Allow = []
    for (ok_g, ok_c), x in zip(case.allow, exact.order):
        heavy = abs(problem.unary[x].get(g, 0) - problem.unary[x].get(c, 0)) > light
        if heavy:
            allow.append((ok_g and device[x] == g, ok_c and device[x] == c))
        else:
            allow.append((ok_g, ok_c))
    suffix = _backward(exact, allow, 0.0)
    fewest = _backward(exact, allow, 1.0, with_time=False)
    # Targets just above the relaxed optimum (the plan costs at least that):
    # a loose one would keep too many points.
    for window in windows:
        target = min(best_ns, case.lower * (1 + window))
        # The case's relaxed suffix bounds hold here too (fewer classes held,
        # cheaper costs), and bring the budget into the pruning.
        outcome = _forward(
            exact, allow, min(case.budget, case.strict), target, (0.0, *case.prices), (suffix, *case.suffix), fewest,
            work,
            coarse_ns=max(1.0, POLISH_COARSE * case.lower),
        )
        work.spend(outcome.points, "offload")
        if outcome.status == "found" and outcome.bits is not None:
            return _plan_of(problem, exact.order, outcome.bits, g, c)
        if target >= best_ns:
            break
    return None


def _plan_of(problem: Problem, order: Sequence[int], bits: Sequence[int], g: int, c: int) -> list[int]:
    """A program's choices (1: on `g`) as an assignment."""
    plan = [0] * len(problem.allowed)
    for x, bit in zip(order, bits):
        plan[x] = g if bit else c
    return plan
