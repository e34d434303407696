"""Why an optimize problem has no plan (support and budget conflicts), and why
a class got its device (the cost reason for why-answers).

A support conflict names the class's pins and the operators each remaining
device cannot run; a budget conflict is Z3's unsat core over guarded pins,
support rules and budgets. The cost reason compares the plan's predicted time
with the class moved to each device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import z3

from relay.device import VirtualDevice, device_name

from ..domains import DomainSystem
from ..errors import ConflictConstraint, PlanningConflict
from ..explain import constraint_of, short_text
from .memory import resident_bytes, smallest_peak, step_usage
from .problem import Built, Problem, Solution, SupportFailure, Weights, evaluate
from .z3_encoding import Encoding

CostReason = Callable[[int], tuple[str, dict[str, Any]]]


def pins_of(ds: DomainSystem, root: int) -> list[tuple[int, VirtualDevice]]:
    """The logged pins (constraint id, device) on the class `root`."""
    out: list[tuple[int, VirtualDevice]] = []
    seen: set[int] = set()
    for elem, vd, cid in ds.pins:
        if cid in seen or ds.find(elem) != root:
            continue
        if ds.tags[cid].kind == "host operator" and ds.tags[cid].expr is None:
            continue
        seen.add(cid)
        out.append((cid, vd))
    return out


def support_constraints(
    ds: DomainSystem, failure: SupportFailure, names: list[str]
) -> list[ConflictConstraint]:
    """The pins of a class no device may take, and each operator a fitting
    device cannot run."""
    out: list[ConflictConstraint] = []
    for cid, vd in pins_of(ds, failure.root)[:4]:
        out.append(constraint_of(ds, cid, [device_name(vd)]))
    seen: set[tuple[int, str]] = set()
    for d, call in failure.forbidden:
        if d not in failure.fits:
            continue
        op_name = call.op.name  # type: ignore[attr-defined]
        if (d, op_name) in seen:
            continue
        seen.add((d, op_name))
        out.append(
            ConflictConstraint(
                "operator support",
                f"{op_name} is not supported on {names[d]}",
                short_text(call),
                call.span,
                [names[d]],
            )
        )
    return out


def support_conflict(ds: DomainSystem, built: Built, prefix: str) -> PlanningConflict | None:
    """The conflict of the first class pins and operator support leave without
    a device (its message `prefix` + the constraints), or None."""
    if not built.failures:
        return None
    constraints = support_constraints(ds, built.failures[0], built.problem.names)
    text = "; ".join(str(c) for c in constraints)
    return PlanningConflict(f"{prefix}{text}", constraints)


def budget_conflict(problem: Problem, ds: DomainSystem, timeout_ms: int) -> PlanningConflict:
    """Explain an infeasible problem with Z3's unsat core over guarded pins, support rules and budgets."""
    enc = Encoding(problem, Weights.of(problem), track=True)
    solver = enc.solver(timeout_ms)
    result = solver.check(*(enc.guard(g) for g in enc.guards))
    constraints: list[ConflictConstraint] = []
    if result == z3.unsat:
        core = {str(x) for x in solver.unsat_core()}
        # In the encoding's order (pins and support by class, then budgets), not
        # the set's: the message must not change from one process to the next.
        for g in (g for g in enc.guards if g in core):
            what, arg = enc.guards[g]
            if what == "budget":
                p = problem.profiles[arg]
                constraints.append(
                    ConflictConstraint(
                        "memory budget",
                        f"{problem.names[arg]} holds at most {p.memory_bytes} bytes",
                        "",
                        None,
                        [problem.names[arg]],
                    )
                )
            else:
                root = problem.classes[arg]
                for cid, vd in pins_of(ds, root)[:2]:
                    constraints.append(constraint_of(ds, cid, [device_name(vd)]))
    if not constraints:
        constraints = [
            ConflictConstraint(
                "memory budget", f"{problem.names[d]} holds at most {b} bytes", "", None, [problem.names[d]]
            )
            for d, b in problem.budgets.items()
        ]
    lines_text = "; ".join(str(c) for c in constraints)
    peaks = []
    for d, budget in problem.budgets.items():
        low, high = smallest_peak(problem, d)
        if high > budget:
            span = f"{high} bytes" if low >= high else f"between {low} and {high} bytes"
            peaks.append(f"the smallest peak possible on {problem.names[d]} is {span}")
    tail = f"; {'; '.join(peaks)}" if peaks else ""
    return PlanningConflict(
        f"device conflict: no placement satisfies pins, support and budgets: {lines_text}{tail}", constraints
    )


def cost_reason(problem: Problem, weights: Weights, solution: Solution, ds: DomainSystem) -> CostReason:
    """For a why-answer: why the class of an element got its device in an
    optimize plan (the message and its data: predicted time with the class on
    each device, and what forbids the others). Each move is priced from the
    class's own kernel and edges (`Moves`), as `evaluate` and
    `budget_violations` of the moved plan would price it, without walking the
    whole plan for every element."""
    index = {root: c for c, root in enumerate(problem.classes)}
    moves = Moves(problem, solution.assign)
    base = moves.base_ns

    def reason(elem: int) -> tuple[str, dict[str, Any]]:
        c = index.get(ds.find(elem))
        if c is None:
            return "no operator or tensor decides it; it takes the default device", {}
        here = solution.assign[c]
        times: dict[str, float] = {}
        forbidden: dict[str, str] = {}
        for d, name in enumerate(problem.names):
            if d not in problem.allowed[c]:
                partial = ds.vd[ds.find(elem)]
                fits = problem.compatible(partial, d)
                forbidden[name] = "operator support" if fits else "a pin or annotation"
                continue
            times[name] = round(moves.ns(c, d) / 1e6, 6)
            over = moves.over(c, d)
            if over and d != here:
                forbidden[name] = "memory budget of " + ", ".join(problem.names[x] for x in over)
        parts = [f"{n}: {t:.3f} ms" for n, t in times.items()]
        msg = (
            f"optimize mode chose {problem.names[here]} (predicted {base / 1e6:.3f} ms); "
            f"with this class on each device: {', '.join(parts)}"
        )
        if forbidden:
            msg += "; forbidden: " + ", ".join(f"{n} ({why})" for n, why in forbidden.items())
        return msg, {"predicted_ms": times, "chosen": problem.names[here], "forbidden": forbidden}

    return reason


class Moves:
    """A plan's run time and budget needs with one class moved: what
    `evaluate(...)[1]` and the devices of `budget_violations` give for the
    plan with `assign[c] = d`, from the class's kernel, incident edges and
    live range (and per device the bytes held at each step) instead of the
    whole plan."""

    def __init__(self, problem: Problem, assign: list[int]) -> None:
        self.problem = problem
        self.assign = assign
        self.base_ns = evaluate(problem, Weights(1, 1), assign)[1]
        self.incident: list[list[int]] = [[] for _ in assign]
        for e, (u, v, _b, _uses) in enumerate(problem.edges):
            self.incident[u].append(e)
            if v != u:
                self.incident[v].append(e)
        # Per budgeted device: its resident weights, the bytes it holds at
        # each step beyond them (`memory.step_usage`), and the steps by those
        # bytes, most first (the peak away from the steps a move touches).
        self.resident = resident_bytes(problem, assign)
        usage = step_usage(problem, assign)
        n = len(problem.liveness.order)
        self.usage: dict[int, list[int]] = {d: usage.get(d, [0] * n) for d in problem.budgets}
        self.ranked: dict[int, list[int]] = {
            d: sorted(range(n), key=lambda k, row=row: -row[k]) for d, row in self.usage.items()  # type: ignore[misc]
        }

    def _device(self, c: int, d: int, x: int) -> int:
        return d if x == c else self.assign[x]

    def ns(self, c: int, d: int) -> int:
        """The run time (ns) of the plan with class c on device d."""
        p, here = self.problem, self.assign[c]
        if d == here:
            return self.base_ns
        ns = self.base_ns - p.unary[c][here] + p.unary[c][d]
        for e in self.incident[c]:
            u, v, b, uses = p.edges[e]
            du, dv = self.assign[u], self.assign[v]
            if du != dv:
                ns -= p.edge_ns(b, dv, du, uses)
            du, dv = self._device(c, d, u), self._device(c, d, v)
            if du != dv:
                ns += p.edge_ns(b, dv, du, uses)
        return ns

    def over(self, c: int, d: int) -> list[int]:
        """The budgeted devices, in the budgets' order, that the plan with
        class c on device d overfills (the memory rule of `memory`: only the
        steps of c and of its readers, and c's live range, change)."""
        p, here = self.problem, self.assign[c]
        live = p.liveness
        out = []
        for x, budget in p.budgets.items():
            resident = self.resident.get(x, 0)
            delta: dict[int, int] = {}
            if d != here and x in (here, d):
                sign = 1 if d == x else -1
                resident += sign * p.weight_bytes[c]
                k = live.pos[c]
                if not live.weight[c]:
                    for j in range(k + 1, live.last[c] + 1):
                        delta[j] = delta.get(j, 0) + sign * live.value[c]
                delta[k] = delta.get(k, 0) + sign * p.largest[c]
                for v, nbytes in live.inputs[c]:
                    if self._device(c, here, v) != here and here == x:
                        delta[k] -= nbytes  # c's copies in, as it was
                    if self._device(c, d, v) != d and d == x:
                        delta[k] += nbytes  # and as it would be
                for e in self.incident[c]:
                    u, v, b, uses = p.edges[e]
                    if v != c or u == c:
                        continue
                    if self.assign[u] == x:  # a reader on x: its copy of c before and after
                        before = here != x
                        after = d != x
                        if before != after:
                            delta[live.pos[u]] = delta.get(live.pos[u], 0) + (b * uses if after else -b * uses)
            row = self.usage[x]
            top = max((row[k] + dk for k, dk in delta.items()), default=0)
            top = max(top, next((row[k] for k in self.ranked[x] if k not in delta), 0))
            if resident + top > budget:
                out.append(x)
        return out
