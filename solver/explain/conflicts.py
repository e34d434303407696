"""Explaining a conflict: a minimal set of tracked constraints, via Z3's unsat core.

When presolve refuses a join, the log of first-order facts (unions and pins,
each with its constraint id) locates the conflict: two pins with different
values for one field, connected by equalities. The facts on the shortest such
connection are re-encoded with one indicator literal per constraint; Z3's
unsat core, minimised by deletion, is the explanation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import z3

from relay.ast import Call, Expr, Var
from relay.device import VirtualDevice, device_name

from ..domains import DomainSystem, Incompatible
from ..errors import ConflictConstraint, PlanningConflict, SolverTimeout
from ..solve import FieldCodes
from .text import short_text

_Values = tuple[int | None, ...]
_PinInfo = tuple[int, VirtualDevice, int, _Values]  # element, device, constraint id, field codes
_Path = list[tuple[int, int, int]]  # (from, to, constraint id)
_Found = tuple[int, _Path, _PinInfo, _PinInfo]
_Fact = tuple[Any, ...]
_Adjacency = dict[int, list[tuple[int, int]]]


def _loc(ds: DomainSystem, cid: int) -> str:
    tag = ds.tags[cid]
    span = tag.expr.span if tag.expr is not None else None
    return f"{span.line}:{span.column}" if span is not None else "?"


def explain_conflict(ds: DomainSystem, err: Incompatible, timeout_ms: int) -> PlanningConflict:
    """Build the PlanningConflict for a refused join."""
    adjacency: dict[int, list[tuple[int, int]]] = {}
    for a, b, c in zip(ds.edge_a, ds.edge_b, ds.edge_c):
        if a == b:
            continue
        adjacency.setdefault(a, []).append((b, c))
        adjacency.setdefault(b, []).append((a, c))
    # Component of the failing constraint, with distances from its first element.
    start = err.a
    dist = {start: 0}
    queue = deque([start])
    while queue:
        x = queue.popleft()
        for y, _ in adjacency.get(x, ()):
            if y not in dist:
                dist[y] = dist[x] + 1
                queue.append(y)
    codes = FieldCodes()
    pins = [(e, vd, c, codes.values(vd)) for e, vd, c in ds.pins if e in dist and ds.tags[c].hard]
    pins.sort(key=lambda p: dist[p[0]])
    best: _Found | None = None
    for p in pins[:8]:
        found = _nearest_conflicting(adjacency, p, pins)
        if found is not None and (best is None or len(found[1]) < len(best[1])):
            best = found
    if best is None:
        constraints = [constraint_of(ds, err.cid, [])]
        return PlanningConflict(
            f"conflicting devices ({constraints[0].kind} at {constraints[0].location})", constraints
        )
    _, path, p_pin, q_pin = best
    if _names_parameter(ds, q_pin) and not _names_parameter(ds, p_pin):
        # Name the callee's parameter first: "parameter %x of @f is on cpu but the call passes ..."
        p_pin, q_pin = q_pin, p_pin
        path = [(b, a, c) for a, b, c in reversed(path)]
    facts: list[tuple[int, _Fact]] = [
        (p_pin[2], ("pin", p_pin[0], p_pin[3])),
        (q_pin[2], ("pin", q_pin[0], q_pin[3])),
    ]
    for a, b, c in path:
        facts.append((c, ("eq", a, b)))
    core = _unsat_core(facts, timeout_ms)
    ordered = _order(core, p_pin[2], q_pin[2], path)
    constraints = []
    for cid in ordered:
        devices: list[str] = []
        if cid == p_pin[2]:
            devices.append(device_name(p_pin[1]))
        if cid == q_pin[2]:
            devices.append(device_name(q_pin[1]))
        constraints.append(constraint_of(ds, cid, devices))
    message = _message(ds, p_pin, q_pin, ordered)
    return PlanningConflict(message, constraints)


def _nearest_conflicting(adjacency: _Adjacency, p: _PinInfo, pins: list[_PinInfo]) -> _Found | None:
    """BFS from pin p to the nearest pin disagreeing with it on some field."""
    targets: dict[int, list[_PinInfo]] = {}
    for q in pins:
        if any(a is not None and b is not None and a != b for a, b in zip(p[3], q[3])):
            targets.setdefault(q[0], []).append(q)
    if not targets:
        return None
    found = shortest_path(p[0], lambda x: adjacency.get(x, ()), targets.__contains__)
    if found is None:
        return None
    path, x = found
    return (x, path, p, targets[x][0])


def shortest_path(
    start: int, neighbours: Callable[[int], Iterable[tuple[int, int]]], goal: Callable[[int], bool]
) -> tuple[list[tuple[int, int, int]], int] | None:
    """Breadth-first search from `start` (neighbours: `(element, constraint id)`
    pairs) to the nearest element where `goal` holds: the edges `(a, b, cid)`
    walked, in order, and that element; None when no element reached qualifies."""
    prev: dict[int, tuple[int, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        x = queue.popleft()
        if goal(x):
            path: list[tuple[int, int, int]] = []
            y = x
            while (step := prev[y]) is not None:
                px, c = step
                path.append((px, y, c))
                y = px
            path.reverse()
            return path, x
        for y, c in neighbours(x):
            if y not in prev:
                prev[y] = (x, c)
                queue.append(y)
    return None


def _unsat_core(facts: list[tuple[int, _Fact]], timeout_ms: int) -> list[int]:
    """The constraint ids of `facts` once Z3 proves them unsatisfiable
    together (an indicator literal per constraint id, checked as assumptions).

    The facts are two disagreeing pins and the equalities of a shortest (so
    simple) path between their elements, so the core is all of them:
    dropping any constraint drops at least one edge of the path, and pins
    and equalities without a path between two disagreeing pins are
    satisfiable. One check proves the conflict; the deletion pass this used to
    run (one check per constraint, each over all of them) proved nothing more
    and was quadratic: 43 s on a chain of 2,000 calls, 0.3 s now."""
    ctx = z3.Context()
    cids = list(dict.fromkeys(c for c, _ in facts))
    lits = {c: z3.Bool(f"c{c}", ctx) for c in cids}
    variables: dict[tuple[int, int], z3.ArithRef] = {}

    def var(elem: int, k: int) -> z3.ArithRef:
        v = variables.get((elem, k))
        if v is None:
            v = variables[(elem, k)] = z3.Int(f"x{elem}_{k}", ctx)
        return v

    solver = z3.Solver(ctx=ctx)
    solver.set("timeout", max(1, int(timeout_ms)))
    for c, fact in facts:
        if fact[0] == "pin":
            _, elem, values = fact
            conj = [var(elem, k) == values[k] for k in range(4) if values[k] is not None]
        else:
            _, a, b = fact
            conj = [var(a, k) == var(b, k) for k in range(4)]
        solver.add(z3.Implies(lits[c], z3.And(*conj) if conj else z3.BoolVal(True, ctx)))
    result = solver.check(*lits.values())
    if result == z3.unknown:
        raise SolverTimeout(f"Z3 gave no answer while explaining a conflict ({solver.reason_unknown()})")
    return cids


def _order(core: Iterable[int], p: int, q: int, path: list[tuple[int, int, int]]) -> list[int]:
    core_set = set(core)
    out = [p] if p in core_set else []
    for _, _, c in path:
        if c in core_set and c not in out:
            out.append(c)
    if q in core_set and q not in out:
        out.append(q)
    for c in core:
        if c not in out:
            out.append(c)
    return out


def constraint_of(ds: DomainSystem, cid: int, devices: list[str]) -> ConflictConstraint:
    """The tracked constraint `cid` as a conflict entry naming `devices`."""
    tag = ds.tags[cid]
    expr = tag.expr
    text = short_text(expr)
    description = _describe(tag.kind, expr, tag.detail, devices)
    return ConflictConstraint(tag.kind, description, text, expr.span if expr is not None else None, devices)


def _describe(kind: str, expr: Expr | None, detail: str, devices: list[str]) -> str:
    on = f" on {' and '.join(devices)}" if devices else ""
    text = short_text(expr)
    if kind == "annotation":
        return (
            f"on_device puts {short_text(expr.args[0]) if isinstance(expr, Call) and expr.args else text}{on}"
        )
    if kind == "copy":
        return f"device_copy {text} reads{on or ' from its source'}"
    if kind == "parameter attribute":
        return f"parameter %{detail} is declared{on}"
    if kind == "function attribute":
        return f"function result is declared{on}"
    if kind == "call site":
        return f"call {text} passes its arguments and result to the callee's devices"
    if kind == "host operator":
        return f"{detail} keeps shape values on the host{on}"
    if kind.startswith("constraint #"):
        what = " ".join(w for w in (detail, text) if w and w != detail + "(...)")
        return f"request {kind} pins {what}{on}"
    if kind == "parameter":
        return f"parameter %{detail} is the function's argument"
    if kind == "let":
        return f"let %{detail} shares its value's device"
    return f"{kind} {text} shares one device{on}"


def _message(ds: DomainSystem, p_pin: _PinInfo, q_pin: _PinInfo, ordered: list[int]) -> str:
    """`X is on cpu (annotation at 4:7) but the call at 9:3 passes Y on cuda (...)`."""
    owners = ds.param_owner
    p_tag, q_tag = ds.tags[p_pin[2]], ds.tags[q_pin[2]]
    first = (
        f"{_subject(p_tag.kind, p_tag.expr, p_tag.detail, owners)} is on {device_name(p_pin[1])} "
        f"({p_tag.kind} at {_loc(ds, p_pin[2])})"
    )
    second_subject = _subject(q_tag.kind, q_tag.expr, q_tag.detail, owners)
    second_where = f"({q_tag.kind} at {_loc(ds, q_pin[2])})"
    links = [c for c in ordered if c not in (p_pin[2], q_pin[2])]
    calls = [c for c in links if ds.tags[c].kind == "call site"]
    if len(calls) == 1:
        call = calls[0]
        links.remove(call)
        second = (
            f"the call at {_loc(ds, call)} passes {second_subject} on {device_name(q_pin[1])} {second_where}"
        )
    else:
        second = f"{second_subject} is on {device_name(q_pin[1])} {second_where}"
    via = ""
    if links:
        via = "; linked through " + ", ".join(f"{ds.tags[c].kind} at {_loc(ds, c)}" for c in links[:6])
        if len(links) > 6:
            via += f" (and {len(links) - 6} more)"
    return f"device conflict: {first} but {second}{via}"


def _names_parameter(ds: DomainSystem, pin: _PinInfo) -> bool:
    tag = ds.tags[pin[2]]
    return _subject(tag.kind, tag.expr, tag.detail, ds.param_owner).startswith("parameter")


def _subject(kind: str, expr: Expr | None, detail: str, owners: dict[int, str] | None = None) -> str:
    owners = owners or {}
    if kind == "parameter attribute" or (kind.startswith("constraint #") and isinstance(expr, Var)):
        owner = owners.get(id(expr)) if expr is not None else None
        return f"parameter %{detail}" + (f" of {owner}" if owner else "")
    if kind == "function attribute":
        return "the function result"
    if isinstance(expr, Call) and kind == "annotation" and expr.args:
        arg = expr.args[0]
        if isinstance(arg, Var) and id(arg) in owners:
            return f"parameter %{arg.name} of {owners[id(arg)]}"
        return short_text(arg)
    return short_text(expr) or kind
