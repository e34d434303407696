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
from .problem import Built, Problem, Solution, SupportFailure, Weights, budget_violations, evaluate
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
    return PlanningConflict(
        f"device conflict: no placement satisfies pins, support and budgets: {lines_text}", constraints
    )


def cost_reason(problem: Problem, weights: Weights, solution: Solution, ds: DomainSystem) -> CostReason:
    """For a why-answer: why the class of an element got its device in an
    optimize plan (the message and its data: predicted time with the class on
    each device, and what forbids the others)."""
    index = {root: c for c, root in enumerate(problem.classes)}
    base = evaluate(problem, weights, solution.assign)[1]

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
            trial = list(solution.assign)
            trial[c] = d
            times[name] = round(evaluate(problem, weights, trial)[1] / 1e6, 6)
            over = budget_violations(problem, trial)
            if over and d != here:
                forbidden[name] = "memory budget of " + ", ".join(problem.names[x] for x, _, _ in over)
        parts = [f"{n}: {t:.3f} ms" for n, t in times.items()]
        msg = (
            f"optimize mode chose {problem.names[here]} (predicted {base / 1e6:.3f} ms); "
            f"with this class on each device: {', '.join(parts)}"
        )
        if forbidden:
            msg += "; forbidden: " + ", ".join(f"{n} ({why})" for n, why in forbidden.items())
        return msg, {"predicted_ms": times, "chosen": problem.names[here], "forbidden": forbidden}

    return reason
