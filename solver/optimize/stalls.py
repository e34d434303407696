"""A lower bound on the overlapped run time that sees the budget: the stalls
it forces on streamed weights (`memory.schedule`, with overlap).

`overlap.overlap_lower` prices kernels and activation copies and lets every
weight copy hide; under a tight budget that is far from true. A weight copy
into a budgeted device is issued at some step j before its reader's step k,
and at every step s from j to k the device holds, beside the resident
weights: the copy itself, every weight read on the device in [s, k)
(resident, or streamed: copies on the same link are issued in reader order,
so those are already issued and held), and the activations of step s. Where
that cannot fit, j is later, the window [j, k) shorter, and the reader waits
for whatever of the copy the window's kernels do not cover:

    stall >= copy time - time of the window's kernels.

Windows of different copies that do not overlap add up:

    run time >= (every step outside the windows) + sum of max(copy, window)

and the first term is a minimum cut with the windows' kernels free.

What the window can hold depends on the plan. The bound takes the classes
*held on the device*: those whose kernel anywhere else would cost more than
the plan being bounded (`target_ns`); a plan that moves one is at least that
slow, so the bound is the smaller of the two. The weights of their readers
are either resident (no stall, but less room for every window: a fractional
knapsack takes the stalls that resident weights could save; a copy that
cannot fit even at its reader's step makes its weight resident) or streamed. For
the largest weights the two are split into cases (resident: every other
window shrinks; streamed: its own window counts whole) and the smaller case
is the bound.

Two devices only (one link carries every copy into the budgeted device);
elsewhere the bound is 0.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .cost_model import LinkProfile, copy_ns
from .overlap import kernels_and_activation_copies
from .problem import Problem, Weights
from .strategies import two_devices

# Weights split into cases (resident or streamed), largest first.
SPLITS = 2
# Steps the windows' searches walk at most (past it a window is taken as long as it can be).
SCAN_STEPS = 200_000
# A case no plan fits (above every bound; `stall_lower` caps it).
INFEASIBLE = 1 << 62


@dataclass(frozen=True)
class _Copy:
    """A weight `weight` (`nbytes`, `ns` on the link) read at step `step`."""

    step: int
    weight: int
    nbytes: int
    ns: int


@dataclass
class _Device:
    """What the bound needs of one budgeted device `d` (module docstring)."""

    problem: Problem
    weights: Weights
    pair: tuple[int, int]  # the problem's two devices
    budget: int
    prefix: np.ndarray  # prefix sums of each step's kernel at its cheapest device
    act: np.ndarray  # per step: activations on d there, in every plan that keeps `held` on d
    pinned: int  # bytes resident on d in every such plan
    pinned_weights: set[int]
    copies: list[_Copy]  # weight reads by held classes, weights that may be stored elsewhere
    movable: set[int]  # those weights that may also be resident on d
    scan_left: int = SCAN_STEPS

    def case(self, resident: int | None, streamed: int | None) -> int:
        """The bound (ns, the constants included) when weight `resident` is resident
        on d, or weight `streamed` is not (its reads by held classes are copies);
        INFEASIBLE when no plan that keeps the held classes on d fits the budget."""
        p = self.problem
        known = self.pinned_weights | ({resident} if resident is not None else set())
        pinned = self.pinned + (p.weight_bytes[resident] if resident is not None else 0)
        # A copy that cannot fit at its reader's step at all makes its weight resident.
        changed = True
        while changed:
            changed = False
            for c in self.copies:
                if c.weight not in known and pinned + c.nbytes + int(self.act[c.step]) > self.budget:
                    if c.weight not in self.movable or c.weight == streamed:
                        return INFEASIBLE
                    known.add(c.weight)
                    pinned += p.weight_bytes[c.weight]
                    changed = True
        if pinned + int(self.act.max(initial=0)) > self.budget:
            return INFEASIBLE
        # Bytes of the weights read at each step by held classes, each weight at its first such
        # reader (a weight read again later in a window is then counted once or not at all).
        first: dict[int, int] = {}
        for c in self.copies:
            if c.weight not in known:
                first.setdefault(c.weight, c.step)
        n = len(self.act)
        per_step = np.zeros(n, dtype=np.int64)
        forced_at = np.zeros(n, dtype=np.int64)  # copies made in every plan of the case
        for c in self.copies:
            if first.get(c.weight) == c.step:
                per_step[c.step] += min(p.weight_bytes[c.weight], c.nbytes)
            if c.weight not in known and (c.weight not in self.movable or c.weight == streamed):
                forced_at[c.step] += c.nbytes
        reads = np.concatenate(([0], np.cumsum(per_step)))
        windows: list[tuple[int, int, int, _Copy]] = []  # (start, reader step, stall, copy)
        for c in self.copies:
            if c.weight in known:
                continue
            start = self._window(c, pinned, reads)
            stall = c.ns - int(self.prefix[c.step] - self.prefix[start])
            if stall > 0:
                windows.append((start, c.step, stall, c))
        # Resident weights save their stalls, in the room the peak leaves beside the copies made anyway.
        room = self.budget - pinned - int((self.act + forced_at).max(initial=0))
        # Two families of windows, the larger bound: those of copies made in every plan, and those
        # of every copy less what keeping some of their weights resident could save.
        forced = [w for w in windows if w[3].weight not in self.movable or w[3].weight == streamed]
        best = self._family(_disjoint(forced), {}, room)
        if len(forced) < len(windows):
            chosen = _disjoint(windows)
            saved: dict[int, int] = {}
            for _start, _k, stall, c in chosen:
                if c.weight in self.movable and c.weight != streamed:
                    saved[c.weight] = saved.get(c.weight, 0) + stall
            best = max(best, self._family(chosen, saved, room))
        return best

    def _family(self, chosen: Sequence[tuple[int, int, int, _Copy]], saved: dict[int, int], room: int) -> int:
        """The bound of the disjoint windows `chosen`, less the most that making weights
        resident could save (`saved`: weight -> its stalls) within `room` bytes."""
        p = self.problem
        savings = _knapsack([(stall, p.weight_bytes[w]) for w, stall in saved.items()], room)
        free = [s for start, k, _stall, _c in chosen for s in range(start, k)]
        windows_ns = sum(max(c.ns, int(self.prefix[k] - self.prefix[start])) for start, k, _s, c in chosen)
        return kernels_and_activation_copies(p, self.weights, self.pair, free) + windows_ns - savings

    def _window(self, c: _Copy, pinned: int, reads: np.ndarray) -> int:
        """The earliest step the copy `c` can be issued at in any plan: the copy is held at
        every step s from there to its reader, with the weights read on the device in [s, k)
        and the activations of s (module docstring)."""
        room = self.budget - pinned - c.nbytes
        k = c.step
        if room < 0:
            return k
        # Walking back from the reader: the first step where they cannot fit ends the window;
        # so does the step from which the window's kernels take the copy's time (no stall).
        s = k - 1
        covered = self.prefix[k] - c.ns
        stop = max(-1, k - 1 - self.scan_left)
        while s > stop and int(reads[k] - reads[s]) + int(self.act[s]) <= room:
            if self.prefix[s] <= covered:
                break  # [s, k) covers the copy
            s -= 1
        self.scan_left -= k - 1 - s
        if s == stop and s >= 0:
            return 0  # out of steps to walk: the longest window it might be
        if s >= 0 and int(reads[k] - reads[s]) + int(self.act[s]) <= room:
            return s  # covered
        return s + 1


def stall_lower(problem: Problem, weights: Weights, target_ns: int) -> int:
    """A lower bound (ns) on the overlapped run time of every plan (module
    docstring), at most `target_ns`; 0 where it does not apply."""
    pair = two_devices(problem)
    if pair is None or pair[0] == pair[1] or not problem.budgets:
        return 0
    best = 0
    for d, budget in sorted(problem.budgets.items()):
        other = pair[1] if d == pair[0] else pair[0]
        link = problem.links[other][d]
        if link is not None:
            best = max(best, _device_lower(problem, weights, pair, d, budget, link, target_ns))
    return best


def _device_lower(
    problem: Problem, weights: Weights, pair: tuple[int, int], d: int, budget: int, link: LinkProfile, target_ns: int
) -> int:
    live = problem.liveness
    order = live.order
    n = len(order)
    cheap = np.array([min(problem.unary[x][e] for e in problem.allowed[x]) for x in order], dtype=np.int64)
    prefix = np.concatenate(([0], np.cumsum(cheap)))
    everything = problem.fixed_ns + int(prefix[-1])
    # Classes held on d: leaving it costs a plan at least the target.
    held = [False] * n
    escape = target_ns
    for s, x in enumerate(order):
        ok = problem.allowed[x]
        if d not in ok or problem.unary[x][d] != cheap[s] or live.weight[x]:
            continue
        away = min((problem.unary[x][e] for e in ok if e != d), default=None)
        if away is None:
            held[s] = True
        elif everything + away - int(cheap[s]) >= target_ns:
            held[s] = True
            escape = min(escape, everything + away - int(cheap[s]))
    held_classes = {order[s] for s in range(n) if held[s]}
    pinned_weights = {c for c, ok in enumerate(problem.allowed) if problem.weight_bytes[c] and list(ok) == [d]}
    pinned_weights |= {x for x in held_classes if problem.weight_bytes[x]}
    pinned = sum(problem.weight_bytes[c] for c in pinned_weights)
    # Activations on d at each step: live values of held classes, and a held step's own working set.
    diff = np.zeros(n + 1, dtype=np.int64)
    copies: list[_Copy] = []
    for s, x in enumerate(order):
        if not held[s]:
            continue
        if live.last[x] > s:
            diff[s + 1] += live.value[x]
            diff[live.last[x] + 1] -= live.value[x]
        own = problem.largest[x]
        for u, nbytes in live.inputs[x]:
            if live.weight[u]:
                if u not in pinned_weights and nbytes:
                    copies.append(_Copy(s, u, nbytes, copy_ns(nbytes, link)))
            elif u not in held_classes:
                own += min(live.value[u], nbytes)
        diff[s] += own
        diff[s + 1] -= own
    act = np.cumsum(diff[:n])
    if not copies:
        return 0
    movable = {c.weight for c in copies if d in problem.allowed[c.weight]}
    device = _Device(problem, weights, pair, budget, prefix, act, pinned, pinned_weights, copies, movable)
    best = device.case(None, None)
    largest = sorted(movable, key=lambda w: (-problem.weight_bytes[w], w))[:SPLITS]
    for w in largest:
        if best >= escape:
            break
        # Resident or streamed: the smaller of the two cases.
        bound = min(device.case(w, None), device.case(None, w))
        best = max(best, bound)
    return min(best, escape)


def _disjoint(windows: Sequence[tuple[int, int, int, _Copy]]) -> list[tuple[int, int, int, _Copy]]:
    """The windows [start, step] that share no step with the largest sum of stalls."""
    ordered = sorted(windows, key=lambda w: (w[1], w[0]))
    ends = [w[1] for w in ordered]
    best = [0] * (len(ordered) + 1)
    take = [False] * len(ordered)
    for i, (start, _k, stall, _c) in enumerate(ordered):
        before = bisect.bisect_left(ends, start, 0, i)  # windows ending before this one starts
        with_it = best[before] + stall
        take[i] = with_it > best[i]
        best[i + 1] = max(best[i], with_it)
    chosen = []
    i = len(ordered)
    while i > 0:
        if take[i - 1]:
            chosen.append(ordered[i - 1])
            i = bisect.bisect_left(ends, ordered[i - 1][0], 0, i - 1)
        else:
            i -= 1
    return chosen[::-1]


def _knapsack(items: Sequence[tuple[int, int]], room: int) -> int:
    """The most (value, bytes) items fit in `room` bytes, fractions allowed (rounded up)."""
    total = 0
    fitting = [it for it in items if it[1] <= room]  # a weight larger than the room is never resident
    for value, nbytes in sorted(fitting, key=lambda it: -it[0] / max(1, it[1])):
        if room <= 0:
            break
        if nbytes <= room:
            total += value
            room -= nbytes
        else:
            total += -(-value * room // nbytes)
            room = 0
    return total
