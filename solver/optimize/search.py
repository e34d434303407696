"""Heuristic search for optimize problems with three or more devices or with
budgets: the obvious plans the answer must never be worse than,
and alpha-expansion moves that improve a plan.

Everything here returns plans (assignments) priced with the problem's own
`evaluate` and checked with `budget_violations`; none of it proves anything.
The lower bound comes from `search_milp` (or the exact two-device paths).

- `obvious_plans`: every free class on one device (for each device); the best
  split of a topological order of the free classes into contiguous segments,
  one per device in the table's order (pipeline style, `segment_plan`);
  every class at its cheapest device.
- `expand`: alpha-expansion (Boykov, Veksler and Zabih, 2001). Each move
  lets every class keep its device or switch to device `a`; the best such
  move is one minimum cut (`mincut.two_device_cut`), exact for the move
  because copy costs here satisfy the triangle inequality (a pair term that
  would not is dropped from the cut and the move is re-priced exactly). With
  budgets, a price per byte on the over-full devices steers the moves, and a
  move is kept only when the re-priced plan fits and is better.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..work import Work
from .memory import peak_memory
from .mincut import two_device_cut
from .order import topological_order
from .problem import Problem, Weights, budget_violations, evaluate, identical_devices

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """A plan with its objective and where it came from."""

    assign: tuple[int, ...]
    objective: int
    origin: str


def feasible(problem: Problem, assign: Sequence[int]) -> bool:
    """Whether a plan satisfies support (allowed devices) and budgets."""
    return all(assign[c] in ok for c, ok in enumerate(problem.allowed)) and not budget_violations(
        problem, assign
    )


def _dataflow(problem: Problem) -> tuple[list[list[int]], list[int]]:
    """Each class's consumers (producer -> consumer along every copy edge) and
    its number of producers, for the topological orders below."""
    succ: list[list[int]] = [[] for _ in problem.allowed]
    indeg = [0] * len(problem.allowed)
    for u, v, _b, _uses in problem.edges:
        succ[v].append(u)
        indeg[u] += 1
    return succ, indeg


def depth_first_order(problem: Problem) -> list[int]:
    """Another topological order: Kahn's algorithm taking the most recently
    readied class first (depth first), which keeps a weight next to the
    operator that reads it (weights are numbered after every operator, so
    `topological_order` puts them all first). Cycles as there."""
    n = len(problem.allowed)
    succ, indeg = _dataflow(problem)
    ready = [c for c in range(n) if indeg[c] == 0]
    ready.reverse()
    done = [False] * n
    order: list[int] = []
    next_stuck = 0
    while len(order) < n:
        if not ready:
            while done[next_stuck]:
                next_stuck += 1
            ready.append(next_stuck)
            indeg[next_stuck] = 0
        c = ready.pop()
        if done[c]:
            continue
        done[c] = True
        order.append(c)
        for s in succ[c]:
            indeg[s] -= 1
            if indeg[s] == 0 and not done[s]:
                ready.append(s)
    return order


def one_device_plan(problem: Problem, device: int) -> list[int] | None:
    """Every free class on `device`; None when some free class may not take it."""
    out = []
    for ok in problem.allowed:
        if len(ok) == 1:
            out.append(ok[0])
        elif device in ok:
            out.append(device)
        else:
            return None
    return out


def _segments_assign(
    problem: Problem, free: Sequence[int], bounds: Sequence[int], devices: Sequence[int]
) -> list[int]:
    assign = [ok[0] for ok in problem.allowed]
    start = 0
    for seg, end in enumerate([*bounds, len(free)]):
        for i in range(start, end):
            assign[free[i]] = devices[seg]
        start = end
    return assign


def _cells_for(k: int, n: int, limit: int = 200_000, most: int = 400) -> int:
    """The most cells (<= n, <= most) whose splits into k runs number at most `limit`."""
    cells = 1
    while cells < min(n, most) and math.comb(cells + 1 + k - 1, k - 1) <= limit:
        cells += 1
    return cells


def _prefix2(a: np.ndarray) -> np.ndarray:
    """2-D prefix sums over the first two axes, with a zero row and column."""
    out = np.zeros((a.shape[0] + 1, a.shape[1] + 1, *a.shape[2:]))
    out[1:, 1:] = a.cumsum(axis=0).cumsum(axis=1)
    return out


def segment_plan(
    problem: Problem,
    weights: Weights,
    work: Work | None = None,
    devices: Sequence[int] | None = None,
    limit: int = 200_000,
    order: Sequence[int] | None = None,
) -> list[int] | None:
    """The best split of a topological order of the free classes into
    contiguous segments, one per device in the table's order (or in the order
    `devices` gives; some may be empty), within support and budgets; None when
    no split fits. `limit` caps the splits priced at once.

    The order is cut into cells (each free class its own cell when the splits
    are few enough to list, else equal runs); every split on cell edges is
    priced at once with numpy from prefix sums (kernels, copies between and
    into segments, the budgets' bytes), the best few that fit are re-priced
    exactly, then each split point moves one class at a time while that
    improves the exact objective (coordinate descent; each exact price
    spends the classes it places from `work`). Exhaustive when every class
    is a cell; otherwise the best split found."""
    k = len(problem.devices)
    perm = list(range(k)) if devices is None else list(devices)
    if order is None:
        order = topological_order(problem)
    free = [c for c in order if len(problem.allowed[c]) > 1]
    n = len(free)
    if n == 0 or k < 2:
        return None
    cells = _cells_for(k, n, limit)
    edges_at = [round(i * n / cells) for i in range(cells + 1)]
    cell: dict[int, int] = {}
    for i in range(cells):
        for c in free[edges_at[i] : edges_at[i + 1]]:
            cell[c] = i
    fixed = {c: ok[0] for c, ok in enumerate(problem.allowed) if len(ok) == 1}
    big = float(1 << 62)
    unary = np.zeros((cells, k))
    wbytes = np.zeros(cells)
    largest = np.zeros(cells)
    for c in free:
        i = cell[c]
        for d in range(k):
            unary[i, d] += problem.unary[c][d] if d in problem.allowed[c] else big
        wbytes[i] += problem.weight_bytes[c]
        largest[i] = max(largest[i], problem.largest[c])
    pair = np.zeros((cells, cells, k, k))  # producer cell, consumer cell, their devices: copy ns
    pair_bytes = np.zeros((cells, cells))  # bytes copied when the two cells' devices differ
    extra_bytes = np.zeros((cells, k, k))  # cell, its device, device charged: bytes
    const_bytes = np.zeros(k)
    ns_of = problem.edge_ns
    for u, v, b, uses in problem.edges:
        if u in cell and v in cell:
            for a in range(k):
                for t in range(k):
                    if a != t:
                        pair[cell[v], cell[u], a, t] += ns_of(b, a, t, uses)
            pair_bytes[cell[v], cell[u]] += b * uses
        elif u in cell:  # fixed producer, free consumer on a
            f = fixed[v]
            for a in range(k):
                if a != f:
                    unary[cell[u], a] += ns_of(b, f, a, uses)
                    extra_bytes[cell[u], a, a] += b * uses
        elif v in cell:  # free producer on a, fixed consumer
            f = fixed[u]
            for a in range(k):
                if a != f:
                    unary[cell[v], a] += ns_of(b, a, f, uses)
                    extra_bytes[cell[v], a, f] += b * uses
        elif fixed[u] != fixed[v]:
            const_bytes[fixed[u]] += b * uses
    fixed_w = np.zeros(k)
    fixed_l = np.zeros(k)
    for c, f in fixed.items():
        fixed_w[f] += problem.weight_bytes[c]
        fixed_l[f] = max(fixed_l[f], problem.largest[c])
    pre_u = np.vstack([np.zeros((1, k)), unary.cumsum(axis=0)])
    pre_w = np.concatenate([[0.0], wbytes.cumsum()])
    pre_e = np.vstack([np.zeros((1, k, k)), extra_bytes.cumsum(axis=0)])
    pre_p = _prefix2(pair)
    pre_b = _prefix2(pair_bytes)
    # Range maxima of `largest` over cells [i, j): a table, cells is small.
    rmax = np.zeros((cells + 1, cells + 1))
    for i in range(cells):
        rmax[i, i + 1 :] = np.maximum.accumulate(largest[i:])
    combos = np.array(
        list(itertools.combinations_with_replacement(range(cells + 1), k - 1)), dtype=np.int64
    ).reshape(-1, k - 1)
    m = len(combos)
    bnd = np.hstack([np.zeros((m, 1), dtype=np.int64), combos, np.full((m, 1), cells, dtype=np.int64)])

    def rect(pre: np.ndarray, r0: np.ndarray, r1: np.ndarray, c0: np.ndarray, c1: np.ndarray) -> np.ndarray:
        out: np.ndarray = pre[r1, c1] - pre[r0, c1] - pre[r1, c0] + pre[r0, c0]
        return out

    cost = np.zeros(m)
    # Segment a holds device perm[a].
    for a in range(k):
        cost += pre_u[bnd[:, a + 1], perm[a]] - pre_u[bnd[:, a], perm[a]]
        for t in range(k):
            if a != t:
                sub = pre_p[:, :, perm[a], perm[t]]
                cost += rect(sub, bnd[:, a], bnd[:, a + 1], bnd[:, t], bnd[:, t + 1])
    ok = cost < big
    for d, budget in problem.budgets.items():
        seg = perm.index(d)
        s0, s1 = bnd[:, seg], bnd[:, seg + 1]
        need = pre_w[s1] - pre_w[s0] + fixed_w[d] + const_bytes[d]
        need += np.maximum(rmax[s0, s1], fixed_l[d])
        zero = np.zeros(m, dtype=np.int64)
        full = np.full(m, cells, dtype=np.int64)
        need += rect(pre_b, zero, full, s0, s1) - rect(pre_b, s0, s1, s0, s1)
        for a in range(k):
            need += pre_e[bnd[:, a + 1], perm[a], d] - pre_e[bnd[:, a], perm[a], d]
        ok &= need <= budget
    picks = np.nonzero(ok)[0]
    picks = picks[np.argsort(cost[picks], kind="stable")[:8]]
    best: tuple[int, tuple[int, ...]] | None = None
    for pick in picks:
        bounds = tuple(edges_at[int(x)] for x in combos[pick])
        value = _segment_price(problem, weights, free, bounds, perm)
        if value is not None and (best is None or value < best[0]):
            best = (value, bounds)
    if best is None:
        return None
    value, bounds = best
    improved = cells < n
    while improved:
        improved = False
        for j in range(k - 1):
            for step in (-1, 1):
                while work is None or work.spend(len(free), "segments"):
                    trial = list(bounds)
                    trial[j] += step
                    lo_b = trial[j - 1] if j > 0 else 0
                    hi_b = trial[j + 1] if j + 1 < k - 1 else n
                    if not lo_b <= trial[j] <= hi_b:
                        break
                    got = _segment_price(problem, weights, free, trial, perm)
                    if got is None or got >= value:
                        break
                    value, bounds = got, tuple(trial)
                    improved = True
    return _segments_assign(problem, free, bounds, perm)


def _segment_price(
    problem: Problem, weights: Weights, free: Sequence[int], bounds: Sequence[int], perm: Sequence[int]
) -> int | None:
    """The exact objective of a segment split, None when it breaks support or budgets."""
    assign = _segments_assign(problem, free, bounds, perm)
    if not feasible(problem, assign):
        return None
    return evaluate(problem, weights, assign)[0]


def cheapest_plan(problem: Problem) -> list[int]:
    """Every class at its cheapest allowed device (kernels only)."""
    return [min(ok, key=problem.unary[c].__getitem__) for c, ok in enumerate(problem.allowed)]


def obvious_plans(problem: Problem, weights: Weights, work: Work | None = None) -> list[Candidate]:
    """The plans every answer must match or beat (those within support and
    budgets): each device alone, the best contiguous-segment split, and every
    class at its cheapest device."""
    out: list[Candidate] = []

    def add(assign: Sequence[int] | None, origin: str) -> None:
        if assign is not None and feasible(problem, assign):
            out.append(Candidate(tuple(assign), evaluate(problem, weights, assign)[0], origin))

    for d in range(len(problem.devices)):
        add(one_device_plan(problem, d), f"all on {problem.names[d]}")
    order = topological_order(problem)
    add(segment_plan(problem, weights, work, order=order), "segments")
    add(segment_plan(problem, weights, work, order=depth_first_order(problem)), "segments (depth first)")
    # More starting points: the segments in other device orders (the cpu
    # last takes the weight-heavy, compute-light tail a budget leaves over).
    for perm in device_orders(problem)[1:] if problem.budgets else []:
        if work is not None and not work.more("segments"):
            break
        names = ", ".join(problem.names[d] for d in perm)
        add(segment_plan(problem, weights, work, devices=perm, order=order), f"segments ({names})")
    add(cheapest_plan(problem), "cheapest")
    return out


def device_orders(problem: Problem, most: int = 6) -> list[tuple[int, ...]]:
    """Orders of the devices for segment plans, the table's first: every
    order that differs other than by swapping interchangeable devices (same
    profile, budget, links, support and costs) when there are at most `most`,
    else the table's order with each device moved to the front and to the end."""
    k = len(problem.devices)
    label = list(range(k))
    for group in identical_devices(problem):
        for d in group:
            label[d] = group[0]
    table = tuple(range(k))
    seen: set[tuple[int, ...]] = set()
    distinct: list[tuple[int, ...]] = []
    for perm in itertools.permutations(table):
        key = tuple(label[d] for d in perm)
        if key not in seen:
            seen.add(key)
            distinct.append(perm)
        if len(distinct) > most:
            break
    if len(distinct) <= most:
        return distinct
    out = [table]
    for d in table:
        rest = tuple(x for x in table if x != d)
        for perm in ((d, *rest), (*rest, d)):
            if perm not in out:
                out.append(perm)
    return out


def _bytes_on(problem: Problem, assign: Sequence[int]) -> dict[int, int]:
    """Peak bytes each budgeted device holds under a plan (`memory.peak_memory`,
    as `budget_violations` compares them)."""
    peak = peak_memory(problem, assign)
    return {d: peak.get(d, 0) for d in problem.budgets}


def _move(
    problem: Problem,
    weights: Weights,
    assign: Sequence[int],
    target: int,
    prices: Mapping[int, int],
) -> list[int]:
    """The best plan that keeps or moves each class to `target` (one cut) under
    the objective plus `prices` per byte on the priced devices."""
    unary: list[tuple[int | None, int | None]] = []
    for c, ok in enumerate(problem.allowed):
        cur = assign[c]

        def cost(d: int, c: int = c) -> int:
            v = problem.unary[c][d] * weights.per_ns + (0 if d == problem.pref[c] else 1)
            p = prices.get(d, 0)
            if p:
                v += p * (problem.weight_bytes[c] + problem.largest[c])
            return v

        keep = cost(cur)
        move = cost(target) if target in ok and target != cur else (keep if target == cur else None)
        unary.append((keep, move))
    pairs: list[tuple[int, int, int, int]] = []
    extra = [[0, 0] for _ in problem.allowed]

    def pair_cost(dv: int, du: int, b: int, uses: int) -> int:
        if dv == du:
            return 0
        v = problem.edge_ns(b, dv, du, uses) * weights.per_ns + uses * weights.per_copy
        p = prices.get(du, 0)
        return v + p * b * uses

    for u, v, b, uses in problem.edges:
        cv, cu = assign[v], assign[u]
        # Labels: 0 keeps the current device, 1 moves to target.
        e00 = pair_cost(cv, cu, b, uses)
        e01 = pair_cost(cv, target, b, uses)  # v keeps, u moves
        e10 = pair_cost(target, cu, b, uses)
        e11 = 0
        # E = e00 + (e10 - e00) x_v + (e11 - e10) x_u + (e01 + e10 - e00 - e11) [x_v=0, x_u=1]
        extra[v][1] += e10 - e00
        extra[u][1] += e11 - e10
        extra[v][0] += e00
        w = e01 + e10 - e00 - e11
        if w > 0:
            pairs.append((v, u, w, 0))
    shifted: list[tuple[int | None, int | None]] = []
    for c, (stay, go) in enumerate(unary):
        a0 = None if stay is None else stay + extra[c][0]
        a1 = None if go is None else go + extra[c][0] + extra[c][1]
        shifted.append((a0, a1))
    _, x = two_device_cut(shifted, pairs)
    return [target if x[c] and shifted[c][1] is not None else assign[c] for c in range(len(assign))]


def expand(
    problem: Problem,
    weights: Weights,
    start: Sequence[int],
    work: Work,
    sweeps: int = 4,
) -> list[int]:
    """Alpha-expansion from a plan within support and budgets: sweeps over the
    devices, each move one minimum cut, kept when the re-priced plan fits and
    is better; stops when a sweep changes nothing, after `sweeps`, or when
    `work` is spent (a move spends the classes and edges it cuts). With budgets, a price per byte on a device that a move would
    overfill is raised (x4) and the move retried, a few times."""
    best = list(start)
    best_value = evaluate(problem, weights, best)[0]
    k = len(problem.devices)
    prices: dict[int, int] = {}
    size = len(problem.allowed) + len(problem.edges)
    for _ in range(sweeps):
        changed = False
        for target in range(k):
            for _attempt in range(6 if problem.budgets else 1):
                if not work.spend(size, "expansion"):
                    return best
                trial = _move(problem, weights, best, target, prices)
                over = budget_violations(problem, trial)
                if not over:
                    value = evaluate(problem, weights, trial)[0]
                    if value < best_value:
                        best, best_value, changed = trial, value, True
                    break
                for d, _need, _budget in over:
                    prices[d] = max(1, prices.get(d, 0) * 4, weights.per_ns // 1000)
        if not changed:
            break
    return best


def used_bytes(problem: Problem, assign: Sequence[int]) -> dict[int, int]:
    """Bytes each budgeted device holds under a plan (for logs and tests)."""
    return _bytes_on(problem, assign)


def fingerprint(problem: Problem) -> str:
    """A short digest of everything that decides a problem's optimum (allowed
    devices, kernel and copy costs, bytes, budgets): the benchmark records its
    optima with it, so a test compares against a recorded optimum only while
    the profiles still give the same problem."""
    k = len(problem.devices)
    copy = [[None if s == t else (problem.links[s][t]) for t in range(k)] for s in range(k)]
    text = repr(
        (
            problem.allowed,
            [sorted(u.items()) for u in problem.unary],
            problem.edges,
            problem.weight_bytes,
            problem.largest,
            sorted(problem.budgets.items()),
            copy,
            problem.fixed_ns,
            sorted(problem.fixed_copy_bytes.items()),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def coarsen(problem: Problem, size: int) -> tuple[Problem, list[int]]:
    """The problem with runs of `size` consecutive free classes of the
    topological order merged into one class each (single-choice classes stay
    alone): kernels, weights and support add up, the largest intermediate is
    the run's largest, edges inside a run vanish and the others are kept one
    by one (so copies are priced exactly). Every plan of the coarse problem is
    a plan of the original with the same objective up to the preferred-device
    tie-break, so its optimum is an upper bound and a good start: it keeps the
    shape of plans that segments cannot express (a device used in several
    places). Returns the coarse problem and each original class's coarse class."""
    order = topological_order(problem)
    group = [0] * len(problem.allowed)
    count = 0
    run = 0
    for c in order:
        if len(problem.allowed[c]) == 1:
            group[c] = count
            count += 1
            run = 0
            continue
        if run == 0:
            count += 1
        group[c] = count - 1
        run = (run + 1) % size
    n = count
    allowed: list[set[int]] = [set(range(len(problem.devices))) for _ in range(n)]
    unary: list[dict[int, int]] = [dict.fromkeys(range(len(problem.devices)), 0) for _ in range(n)]
    ops = [0] * n
    weight_bytes = [0] * n
    largest = [0] * n
    prefs: list[list[int]] = [[] for _ in range(n)]
    for c, g in enumerate(group):
        allowed[g] &= set(problem.allowed[c])
        for d, ns in problem.unary[c].items():
            unary[g][d] = unary[g].get(d, 0) + ns
        ops[g] += problem.ops[c]
        weight_bytes[g] += problem.weight_bytes[c]
        largest[g] = max(largest[g], problem.largest[c])
        prefs[g].append(problem.pref[c])
    allowed_lists = [sorted(a) for a in allowed]
    pref = []
    for g, ok in enumerate(allowed_lists):
        counts = {d: prefs[g].count(d) for d in ok}
        pref.append(max(ok, key=lambda d: (counts.get(d, 0), -d)) if ok else 0)
    edges = [(group[u], group[v], b, uses) for u, v, b, uses in problem.edges if group[u] != group[v]]
    coarse = dataclasses.replace(
        problem,
        classes=list(range(n)),
        allowed=allowed_lists,
        unary=unary,
        ops=ops,
        pref=pref,
        edges=edges,
        weight_bytes=weight_bytes,
        largest=largest,
    )
    return coarse, group


def local_moves(problem: Problem, weights: Weights, start: Sequence[int], work: Work) -> list[int]:
    """Single-class moves (then moves of both ends of an edge) that keep
    support and budgets and lower the objective, first improvement, until none
    is left or `work` is spent (a unit per class or edge tried and per edge
    its price walks, the classes and edges for each budget check): the
    cheap polish expansion cannot do under tight budgets (an expansion move
    that overfills a device is dropped whole, while moving one class may fit).
    The change of the objective is computed from the class's own kernels and
    edges; budgets are re-checked only for improving moves."""
    assign = list(start)
    checked = len(problem.allowed) + len(problem.edges)  # what a budget check walks
    incident: list[list[tuple[int, int, int, int]]] = [[] for _ in problem.allowed]
    for edge in problem.edges:
        incident[edge[0]].append(edge)
        incident[edge[1]].append(edge)

    def local(c: int, d: int) -> int:
        value = problem.unary[c][d] * weights.per_ns + (0 if d == problem.pref[c] else 1)
        for u, v, b, uses in incident[c]:
            du = d if u == c else assign[u]
            dv = d if v == c else assign[v]
            if du != dv:
                value += problem.edge_ns(b, dv, du, uses) * weights.per_ns + uses * weights.per_copy
        return value

    def pair_move(u: int, v: int, d: int) -> bool:
        # Both ends of an edge to d: the change is the two moves in turn.
        old_u, old_v = assign[u], assign[v]
        change = local(u, d) - local(u, old_u)
        assign[u] = d
        change += local(v, d) - local(v, old_v)
        assign[v] = d
        if change < 0 and work.spend(checked, "local moves") and not budget_violations(problem, assign):
            return True
        assign[u], assign[v] = old_u, old_v
        return False

    improved = True
    while improved:
        improved = False
        for c, ok in enumerate(problem.allowed):
            if len(ok) == 1:
                continue
            # Pricing the class walks its edges once per device and once where it is.
            if not work.spend(1 + (len(ok) + 1) * len(incident[c]), "local moves"):
                return assign
            here = assign[c]
            base = local(c, here)
            for d in ok:
                if d == here or local(c, d) >= base:
                    continue
                assign[c] = d
                if not work.spend(checked, "local moves") or budget_violations(problem, assign):
                    assign[c] = here
                    continue
                improved = True
                break
        if improved:
            continue
        # No single move left: moves of both ends of an edge (a copy removed).
        for u, v, _b, _uses in problem.edges:
            shared = set(problem.allowed[u]) & set(problem.allowed[v])
            # Each pair move prices both ends twice.
            if not work.spend(1 + 2 * len(shared) * (len(incident[u]) + len(incident[v])), "local moves"):
                return assign
            for d in shared:
                if (assign[u] != d or assign[v] != d) and pair_move(u, v, d):
                    improved = True
                    break
    return assign
