"""Memory by liveness and the copy/compute schedule of a plan.

The planner assumes the classes run in one order, `order.topological_order`
(each producer right before its first consumer), one class's kernels after
another's whichever device they are on. Along that order the memory a device
needs is, at each step, the bytes it holds then:

- *resident* bytes: the weights of every class placed on it (parameters of
  the entry function, data inputs among them, and constants), for the whole
  run;
- *live activations*: the value of every class (`Liveness.value`: the bytes
  its readers read) placed on it, from the step after it is computed to the
  step of its last reader on any device (a copy is made at its reader's step,
  so the original lives until then);
- the step's *working set*: the largest result the class computes there
  (`Problem.largest`, a `device_copy` of the module's own included) and every
  copy into it (a copy per use, made at the
  step and freed after it; a streamed weight is one: a weight stored on
  another device and read here is copied in for its reader and freed after);
- with overlap (below), weights being copied ahead of their reader.

`peak_memory_bytes[d]` is the maximum over the steps; a budget holds when the
peak fits it. Copies (and only copies) make the peak depend on the order:
`peak_memory` is exact for the planner's order.

The schedule (`schedule`): each device has one compute stream; kernels run one
after another in the order. A copy of an activation is made by its reader,
synchronously (it is on the critical path). A copy of a weight (a class that
holds weights and reads nothing: ready before the run) goes on the copy
stream of its link, first in first out, and the reader waits for it. With
`overlap` it is issued ahead of its reader (prefetched, as FlexGen and
DeepSpeed ZeRO-Inference prefetch the next layers), never before the copy
ahead of it on the link is issued:

- into a device with a budget, as early as the budget leaves room for its
  bytes at every step it is held before its reader (as far ahead as the
  memory allows);
- into a device without one, when the previous kernel reading a streamed
  weight there starts (one streamed reader ahead: double buffering).

Without overlap (as accelerate executes a device map) every copy is
synchronous and the run time is the sum of kernel and copy times,
`problem.evaluate`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .cost_model import LinkProfile, copy_ns
from .order import topological_order


class Planned(Protocol):
    """What the memory rule reads of a `problem.Problem` (a protocol, so that
    `problem`, which checks budgets by this rule, can import it)."""

    @property
    def allowed(self) -> Sequence[Sequence[int]]: ...
    @property
    def edges(self) -> Sequence[tuple[int, int, int, int]]: ...
    @property
    def ops(self) -> Sequence[int]: ...
    @property
    def weight_bytes(self) -> Sequence[int]: ...
    @property
    def largest(self) -> Sequence[int]: ...
    @property
    def unary(self) -> Sequence[Mapping[int, int]]: ...
    @property
    def links(self) -> Sequence[Sequence[LinkProfile | None]]: ...
    @property
    def budgets(self) -> Mapping[int, int]: ...
    @property
    def devices(self) -> Sequence[object]: ...
    @property
    def fixed_ns(self) -> int: ...
    @property
    def fixed_copy_ns(self) -> Mapping[int, int]: ...
    @property
    def liveness(self) -> Liveness: ...

    def edge_ns(self, nbytes: int, src: int, dst: int, uses: int) -> int: ...


@dataclass(frozen=True)
class Liveness:
    """What liveness needs of a problem, independent of a plan.

    `order`: the classes in the order they run; `pos[c]` its step;
    `weight[c]`: c holds weights and computes nothing (no kernel, nothing
    read): a copy of it can start before the run; `value[c]`: the bytes of
    c's value as its readers read it (the largest per-use size of an edge
    out of it); `last[c]`: the step of its last reader (its own step when
    nothing reads it); `inputs[c]`: (producer, bytes over all uses) of every
    cuttable edge into c."""

    order: list[int]
    pos: list[int]
    weight: list[bool]
    value: list[int]
    last: list[int]
    inputs: list[list[tuple[int, int]]]


def liveness(problem: Planned) -> Liveness:
    """The liveness data of a `Problem` (see `Problem.liveness`, cached)."""
    n = len(problem.allowed)
    order = topological_order(problem)
    pos = [0] * n
    for k, c in enumerate(order):
        pos[c] = k
    reads = [False] * n
    value = [0] * n
    last = list(pos)
    inputs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for u, v, b, uses in problem.edges:
        reads[u] = True
        value[v] = max(value[v], b // max(1, uses))
        last[v] = max(last[v], pos[u])
        inputs[u].append((v, b * uses))
    weight = [problem.weight_bytes[c] > 0 and problem.ops[c] == 0 and not reads[c] for c in range(n)]
    return Liveness(order, pos, weight, value, last, inputs)


def resident_bytes(problem: Planned, assign: Sequence[int]) -> dict[int, int]:
    """Bytes each device holds for the whole run under `assign`: the weights
    of the classes placed on it."""
    out: dict[int, int] = {}
    for c, d in enumerate(assign):
        if problem.weight_bytes[c]:
            out[d] = out.get(d, 0) + problem.weight_bytes[c]
    return out


def step_usage(problem: Planned, assign: Sequence[int]) -> dict[int, list[int]]:
    """Per device, the bytes beyond the resident ones it holds at each step
    of the order without overlap: live activations and the step's working set."""
    arrays = _arrays(problem)
    n = len(problem.liveness.order)
    a = np.asarray(assign, dtype=np.int64)
    out: dict[int, list[int]] = {}
    for d in np.unique(a).tolist():
        on = a == d
        diff = np.zeros(n + 2, dtype=arrays.value.dtype)
        live = on & arrays.activation
        np.add.at(diff, arrays.pos[live] + 1, arrays.value[live])
        np.add.at(diff, arrays.last[live] + 1, -arrays.value[live])
        np.add.at(diff, arrays.pos[on], arrays.largest[on])
        np.add.at(diff, arrays.pos[on] + 1, -arrays.largest[on])
        into = (a[arrays.reader] == d) & (a[arrays.source] != d)
        np.add.at(diff, arrays.at[into], arrays.nbytes[into])
        np.add.at(diff, arrays.at[into] + 1, -arrays.nbytes[into])
        steps = np.cumsum(diff[:n])
        if steps.any():
            out[int(d)] = [int(x) for x in steps.tolist()]
    return out


@dataclass(frozen=True)
class _Arrays:
    """`Liveness` as numpy arrays per class and per cuttable edge."""

    pos: np.ndarray
    last: np.ndarray
    value: np.ndarray
    largest: np.ndarray
    activation: np.ndarray  # classes whose value lives on (not weights)
    reader: np.ndarray  # per edge: the consumer class
    source: np.ndarray  # per edge: the producer class
    at: np.ndarray  # per edge: the consumer's step
    nbytes: np.ndarray  # per edge: bytes over all uses


_CACHE: dict[int, tuple[object, _Arrays]] = {}
_INT64_SUMS = 2**62  # below this, no sum of a problem's byte counts overflows int64


def _arrays(problem: Planned) -> _Arrays:
    hit = _CACHE.get(id(problem))
    if hit is not None and hit[0] is problem:
        return hit[1]
    live = problem.liveness
    edges = [(u, v, b * uses) for u, v, b, uses in problem.edges if b]
    pos = np.asarray(live.pos, dtype=np.int64)
    nbytes = [b for _u, _v, b in edges]
    # Bytes are exact: int64 while every sum of them fits, Python integers past that
    # (a caller may declare tensors whose sizes add up beyond 2**63).
    total = sum(live.value) + sum(problem.largest) + sum(nbytes)
    kind: type = np.int64 if total < _INT64_SUMS else object
    made = _Arrays(
        pos,
        np.asarray(live.last, dtype=np.int64),
        np.asarray(live.value, dtype=kind),
        np.asarray(problem.largest, dtype=kind),
        ~np.asarray(live.weight, dtype=bool),
        np.asarray([u for u, _v, _b in edges], dtype=np.int64),
        np.asarray([v for _u, v, _b in edges], dtype=np.int64),
        pos[np.asarray([u for u, _v, _b in edges], dtype=np.int64)] if edges else np.zeros(0, dtype=np.int64),
        np.asarray(nbytes, dtype=kind),
    )
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[id(problem)] = (problem, made)
    return made


def byte_dtype(problem: Planned) -> np.dtype:
    """The numpy dtype that holds `problem`'s byte counts and their sums exactly:
    int64, or Python integers when a caller's sizes add up past it."""
    return _arrays(problem).value.dtype


def peak_memory(problem: Planned, assign: Sequence[int]) -> dict[int, int]:
    """Peak bytes per device (every device that holds anything) under the
    memory rule of the module docstring, without prefetching."""
    resident = resident_bytes(problem, assign)
    usage = step_usage(problem, assign)
    out = dict(resident)
    for d, steps in usage.items():
        out[d] = out.get(d, 0) + max(steps, default=0)
    return out


@dataclass(frozen=True)
class Schedule:
    """The timed run of a plan.

    `total_ns`: its length (the predicted run time); `kernel_ns[d]` and
    `copy_ns[d]`: kernel time on d and time of the copies into d (the
    module's own included); `hidden_ns[d]`: the part of `copy_ns[d]` that ran
    beside compute (0 without overlap); `peak_bytes[d]`: the peak memory,
    prefetched weights included; so `total_ns` = sum of kernel and copy
    times less the hidden ones."""

    total_ns: int
    kernel_ns: dict[int, int]
    copy_ns: dict[int, int]
    hidden_ns: dict[int, int]
    peak_bytes: dict[int, int]


def schedule(problem: Planned, assign: Sequence[int], overlap: bool) -> Schedule:
    """The schedule of `assign` (module docstring): with `overlap`, weight
    copies on a copy stream per link, prefetched one streamed reader ahead
    within the budgets; without it, every copy synchronous."""
    live = problem.liveness
    n = len(live.order)
    resident = resident_bytes(problem, assign)
    usage = step_usage(problem, assign)
    kernel: dict[int, int] = {}
    copies: dict[int, int] = dict(problem.fixed_copy_ns)
    hidden: dict[int, int] = {}
    # Weight copies (reader step, source, destination, bytes, ns) in reader order.
    streamed: list[tuple[int, int, int, int, int]] = []
    sync_ns = [0] * n  # per step: its kernels and synchronous copies
    for k, x in enumerate(live.order):
        d = assign[x]
        ns = problem.unary[x][d]
        kernel[d] = kernel.get(d, 0) + ns
        sync_ns[k] += ns
        for v, nbytes in live.inputs[x]:
            s = assign[v]
            if s == d:
                continue
            link = problem.links[s][d]
            assert link is not None
            t = copy_ns(nbytes, link) if nbytes else 0
            copies[d] = copies.get(d, 0) + t
            if overlap and live.weight[v]:
                streamed.append((k, s, d, nbytes, t))
            else:
                sync_ns[k] += t
    extra: dict[int, np.ndarray] = {}
    issue: list[int] = []
    if overlap:
        kind = byte_dtype(problem)
        last_issue: dict[tuple[int, int], int] = {}
        # device -> (the step of its latest streamed reader, of the one before)
        readers: dict[int, tuple[int, int]] = {}
        # per budgeted device: what each step holds beyond the resident weights, prefetches included
        taken: dict[int, np.ndarray] = {}
        for k, s, d, nbytes, _t in streamed:
            held = extra.get(d)
            if held is None:
                held = extra[d] = np.zeros(n, dtype=kind)
            budget = problem.budgets.get(d)
            if budget is None:
                latest, before = readers.get(d, (-1, 0))
                if k != latest:
                    readers[d] = latest, before = k, max(latest, 0)
                j = min(k, max(before, last_issue.get((s, d), 0)))
            else:
                earliest = min(k, last_issue.get((s, d), 0))
                now = taken.get(d)
                if now is None:
                    now = taken[d] = np.asarray(usage.get(d, [0] * n), dtype=kind)
                # the earliest issue step from which the copy fits at every step it is held
                room = budget - resident.get(d, 0) - nbytes
                full = np.flatnonzero(now[earliest:k] > room)
                j = earliest + int(full[-1]) + 1 if full.size else earliest
                now[j:k] += nbytes
            held[j:k] += nbytes
            issue.append(j)
            last_issue[(s, d)] = j
    # Simulate: copies issued at step j enter their link's queue when step j is reached.
    by_issue: dict[int, list[int]] = {}
    for i, j in enumerate(issue):
        by_issue.setdefault(j, []).append(i)
    done = [0] * len(streamed)
    link_free: dict[tuple[int, int], int] = {}
    waits: dict[int, list[int]] = {}
    for i, (k, _s, _d, _b, _t) in enumerate(streamed):
        waits.setdefault(k, []).append(i)
    clock = 0
    stall: dict[int, int] = {}
    for k in range(n):
        for i in by_issue.get(k, ()):
            _k, s, d, _b, t = streamed[i]
            start = max(link_free.get((s, d), 0), clock)
            done[i] = link_free[(s, d)] = start + t
        ready = clock
        for i in waits.get(k, ()):
            ready = max(ready, done[i])
        if ready > clock:
            d = assign[live.order[k]]
            stall[d] = stall.get(d, 0) + ready - clock
        clock = ready + sync_ns[k]
    total = clock + problem.fixed_ns
    for _k, _s, d, _b, t in streamed:
        hidden[d] = hidden.get(d, 0) + t
    for d, waited in stall.items():
        hidden[d] = hidden.get(d, 0) - waited
    peak = dict(resident)
    for d in {*usage, *extra}:
        steps = np.asarray(usage.get(d, [0] * n), dtype=byte_dtype(problem))
        ahead = extra.get(d)
        held = steps if ahead is None else steps + ahead
        peak[d] = peak.get(d, 0) + (int(held.max()) if n else 0)
    return Schedule(total, kernel, copies, {d: max(0, h) for d, h in hidden.items()}, peak)


def overlap_bound(problem: Planned, sync_bound_ns: int) -> int:
    """A lower bound (ns) on the overlapped run time of every plan, from a
    lower bound on the synchronous one: overlap hides at most the copies of
    weights, so the bound less the longest each weight's copies can take,
    and never below every kernel at its cheapest device. Without budgets a
    weight free to go anywhere can sit with the reader of its longest copy,
    so its hidden copies are at most the others (the plan that moves it there
    costs at least the synchronous bound)."""
    live = problem.liveness
    cheapest = problem.fixed_ns + sum(min(problem.unary[c][d] for d in ok) for c, ok in enumerate(problem.allowed))
    k = len(problem.devices)
    times: dict[int, list[int]] = {}
    for _u, v, b, uses in problem.edges:
        if live.weight[v]:
            longest = max(
                (problem.edge_ns(b, s, t, uses) for s in range(k) for t in range(k) if s != t and problem.links[s][t]),
                default=0,
            )
            times.setdefault(v, []).append(longest)
    hidden = 0
    for v, spans in times.items():
        free = not problem.budgets and len(problem.allowed[v]) == k
        hidden += sum(spans) - (max(spans) if free else 0)
    return max(cheapest, sync_bound_ns - hidden)


def smallest_peak(problem: Planned, d: int) -> tuple[int, int]:
    """(low, high): every plan holds at least `low` bytes at once on device
    `d`, and the plan that keeps every class it can off `d` holds `high`
    (when they are equal, that is the smallest peak possible). The low end:
    the weights of the classes pinned to `d`, and at the step of one of them
    its largest result and every input it reads (a copy, a live value or a
    resident weight: there in any case)."""
    live = problem.liveness
    pinned = [len(ok) == 1 and ok[0] == d for ok in problem.allowed]
    resident = sum(problem.weight_bytes[c] for c, p in enumerate(pinned) if p)
    step = 0
    for c, p in enumerate(pinned):
        if p:
            reads = sum(live.value[v] for v, _b in live.inputs[c] if not (pinned[v] and live.weight[v]))
            step = max(step, problem.largest[c] + reads)
    away = [next((x for x in ok if x != d), ok[0]) for ok in problem.allowed]
    return resident + step, peak_memory(problem, away).get(d, 0)
