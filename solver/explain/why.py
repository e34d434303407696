"""Why-queries: for an expression, its device and the shortest chain
of collected constraints that decided it.

Expressions are addressed by selectors (`solver.selectors`). The planner logs
every union (an edge between two union-find elements with the constraint that
made it) and every pin (an element fixed to a device, also defaults). An
answer is a breadth-first search over that log from the expression's element
to the pin that decided its device:

1. a hard pin (annotation, request pin, host operator, parameter or function
   attribute) reachable over hard edges; else
2. a hard pin reachable once the soft `free on_device` unifications count; else
3. in optimize mode, the cost reason (`cost_reason`, given by the optimize
   mode: the predicted time with the class on each device); else
4. the first default applied to the class (TVM's defaulting walk order). A
   default that copies another element's device (parameters follow their
   function's result, a let variable its let) continues from that element.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relay.ast import Call, Constructor, Expr, GlobalVar, Let, Module, Op
from relay.device import VirtualDevice, device_name

from ..collect import Collector
from ..domains import DomainSystem
from ..result import MAX_ANSWERS, Answer, ConstraintLog, Step, WhyResult
from ..selectors import align, input_roots, node_ids, resolve, wrapper_op
from .conflicts import shortest_path
from .text import short_text

CostReason = Callable[[int], tuple[str, Mapping[str, Any]]]
"""Optimize mode: element -> (message, cost details) for a class no pin decides."""

_HARD_END_KINDS = {
    "annotation": "annotation",
    "copy": "annotation",
    "host operator": "host rule",
    "parameter attribute": "parameter attribute",
    "function attribute": "function attribute",
}


@dataclass(frozen=True)
class _Decision:
    chain: list[Step]
    reason: str
    message: str
    then: int | None  # the element to continue from (a default that copied another's device)
    also: tuple[int, ...] = ()
    cost: Mapping[str, Any] | None = None


class _Graph:
    """Adjacency over the planner's log, built once per plan."""

    def __init__(self, ds: DomainSystem) -> None:
        n = len(ds.parent)
        self.hard_adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.all_adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        tags = ds.tags
        for a, b, c in zip(ds.edge_a, ds.edge_b, ds.edge_c):
            if a == b:
                continue
            self.all_adj[a].append((b, c))
            self.all_adj[b].append((a, c))
            if tags[c].hard:
                self.hard_adj[a].append((b, c))
                self.hard_adj[b].append((a, c))
        self.pins: dict[int, list[tuple[VirtualDevice, int]]] = {}
        for elem, vd, cid in ds.pins:
            self.pins.setdefault(elem, []).append((vd, cid))


def _component(start: int, adj: list[list[tuple[int, int]]]) -> set[int]:
    seen = {start}
    queue = [start]
    while queue:
        x = queue.pop()
        for y, _ in adj[x]:
            if y not in seen:
                seen.add(y)
                queue.append(y)
    return seen


class Explainer:
    """Answers why-queries over one finished TVM-mode plan."""

    def __init__(
        self,
        module: Module,
        collector: Collector,
        planned_roots: Sequence[Expr],
        default: VirtualDevice,
        device_of: Callable[[int], VirtualDevice] | None = None,
        cost_reason: CostReason | None = None,
    ) -> None:
        self.module = module
        self.c = collector
        self.ds = collector.ds
        self.default = default
        self._device_of = device_of
        # Optimize mode: element -> (message, cost details) for classes no pin decides.
        self.cost_reason = cost_reason
        self.graph = _Graph(collector.ds)
        self.mapping = align(input_roots(module), planned_roots).mapping
        self.ids = node_ids(module)
        self.id_of = {id(n): i for i, n in enumerate(self.ids)}
        self.input_of = {id(p): self.id_of[id(a)] for a, p in _pairs(self.ids, self.mapping)}
        self.follows: dict[int, dict[int, int]] = {}
        # Per adjacency (0 hard, 1 all): each element's component, shared by its
        # members, and the elements known to reach no hard pin. A report asks
        # about every node; without these each answer walked the whole
        # component again (quadratic: densenet121's report took seconds).
        self._components: tuple[dict[int, set[int]], dict[int, set[int]]] = ({}, {})
        self._unpinned: tuple[set[int], set[int]] = (set(), set())
        self._first_default: dict[int, tuple[int, int, VirtualDevice] | None] = {}

    def _component_of(self, elem: int, which: int) -> set[int]:
        """`elem`'s component over the hard (0) or all (1) edges, computed once per component."""
        known = self._components[which]
        comp = known.get(elem)
        if comp is None:
            comp = _component(elem, self.graph.hard_adj if which == 0 else self.graph.all_adj)
            for x in comp:
                known[x] = comp
        return comp

    # ---- elements

    def element(self, node: Expr) -> int | None:
        """The union-find element of an input expression's result (None when
        the planner did not collect it: inside a primitive function)."""
        target = self.mapping.get(id(node))
        if target is None:
            return None
        if wrapper_op(target) == "on_device":
            target = target.args[0]  # type: ignore[attr-defined]
        if isinstance(target, (Op, Constructor)):
            return None
        d = self.c.doms.get(id(target))
        if d is None and isinstance(target, GlobalVar):
            d = self.c.global_doms.get(target.name)
        if d is None:
            return None
        return DomainSystem.result_of(d)

    def device_of(self, elem: int) -> VirtualDevice:
        vd = self._device_of(elem) if self._device_of is not None else self.ds.device(elem)
        return self.default if vd.is_fully_unconstrained else vd

    def _follow_source(self, elem: int, cid: int) -> int | None:
        """For a default pin that copied another element's device (parameters
        follow their function's result; a let variable its let), that element."""
        tag = self.ds.tags[cid]
        node = tag.expr
        if node is None:
            return None
        if tag.kind == "let default" and isinstance(node, Let):
            d = self.c.doms.get(id(node))
        elif isinstance(node, Call):
            d = self.c.callee.get(id(node))
        else:
            d = self.c.doms.get(id(node))
        if d is None:
            return None
        src = DomainSystem.result_of(d)
        return None if self.ds.find(src) == self.ds.find(elem) else src

    # ---- chains

    def _step(self, a: int, b: int | None, cid: int, message: str | None = None) -> Step:
        tag = self.ds.tags[cid]
        span = getattr(tag.expr, "span", None) if tag.expr is not None else None
        text = short_text(tag.expr)
        if message is None:
            message = f"{tag.detail}: {text}" if tag.detail and tag.detail not in text else text
        return Step(
            tag.kind,
            message,
            span.line if span is not None else None,
            span.column if span is not None else None,
            self.input_of.get(id(tag.expr)) if tag.expr is not None else None,
            cid,
            a,
            b,
        )

    def _decide(self, elem: int) -> _Decision:
        """The chain, reason and message for one element, the element to
        continue from, and what else the answer carries (agreeing pins, cost)."""
        g = self.graph
        hard = self.ds.tags

        def hard_pin(x: int) -> bool:
            return any(hard[c].hard and vd.device_type is not None for vd, c in g.pins.get(x, ()))

        for which, adj in enumerate((g.hard_adj, g.all_adj)):
            if elem in self._unpinned[which]:
                continue
            found = shortest_path(elem, adj.__getitem__, hard_pin)
            if found is None:  # no hard pin in elem's component: none for its members either
                self._unpinned[which].update(self._component_of(elem, which))
            if found is not None:
                path, end = found
                vd, cid = next((v, c) for v, c in g.pins[end] if hard[c].hard and v.device_type is not None)
                chain = [self._step(a, b, c) for a, b, c in path]
                kind = hard[cid].kind
                reason = "request pin" if kind.startswith("constraint #") else _HARD_END_KINDS.get(kind, kind)
                if kind == "host operator":
                    msg = f"{short_text(hard[cid].expr) or 'the host'} keeps this value on the host device {device_name(vd)}"
                else:
                    msg = f"{kind} puts it on {device_name(vd)}"
                chain.append(self._step(end, None, cid, msg))
                also = self._agreeing(elem, which, cid)
                if also:
                    msg += f" (also fixed by {len(also)} other constraint(s))"
                return _Decision(chain, reason, msg, None, also=also)
        if self.cost_reason is not None:
            msg, cost = self.cost_reason(elem)
            return _Decision([], "cost", msg, None, cost=cost)
        comp = self._component_of(elem, 1)
        # The first default applied to the class (log order is the walk's order).
        if id(comp) not in self._first_default:
            self._first_default[id(comp)] = next(
                (
                    (c, x, vd)
                    for x, vd, c in self.ds.pins
                    if x in comp and not hard[c].hard and vd.device_type is not None
                ),
                None,
            )
        best = self._first_default[id(comp)]
        if best is None:
            msg = (
                f"nothing constrains it (no annotation, pin, host operator or attribute reaches "
                f"its {len(comp)} element(s)); it takes the default device {device_name(self.default)}"
            )
            return _Decision([], "default", msg, None)
        cid, end, vd = best
        found = shortest_path(elem, g.all_adj.__getitem__, lambda x: x == end)
        assert found is not None
        chain = [self._step(a, b, c) for a, b, c in found[0]]
        src = self._follow_source(end, cid)
        if src is not None and self.ds.device(src).device_type == vd.device_type:
            self.follows.setdefault(cid, {})[end] = src
            what = (
                "let variable takes its let's device"
                if hard[cid].kind == "let default"
                else "parameter takes its function's result device"
            )
            msg = f"{what} ({device_name(vd)})"
            chain.append(self._step(end, src, cid, msg))
            return _Decision(chain, "default", msg, src)
        msg = (
            f"no annotation, pin, host operator or attribute reaches it ({len(comp)} element(s) "
            f"share its device); TVM's defaulting walk gave it the default device {device_name(vd)}"
        )
        chain.append(
            self._step(end, None, cid, f"TVM's defaulting walk: the default device {device_name(vd)}")
        )
        return _Decision(chain, "default", msg, None)

    def _agreeing(self, elem: int, which: int, cid: int) -> tuple[int, ...]:
        """Node ids of the other hard pins that fix the same class (flipping
        only the chain's end would leave the device to them); `which` as in
        `_component_of`."""
        tags = self.ds.tags
        comp = self._component_of(elem, which)
        out: list[int] = []
        for x, vd, c in self.ds.pins:
            if c != cid and x in comp and tags[c].hard and vd.device_type is not None:
                expr = tags[c].expr
                nid = self.input_of.get(id(expr)) if expr is not None else None
                if nid is not None and nid not in out:
                    out.append(nid)
        return tuple(out)

    def answer(self, node: Expr) -> Answer:
        nid = self.id_of.get(id(node))
        span = getattr(node, "span", None)
        line = span.line if span is not None else None
        column = span.column if span is not None else None
        text = short_text(node)
        if isinstance(node, (Op, Constructor)):
            return Answer(
                nid, text, line, column, "?", (), "none", "an operator has no device; select its call"
            )
        elem = self.element(node)
        if elem is None:
            return Answer(
                nid, text, line, column, "?", (), "none", "not planned: inside a primitive function"
            )
        chain: list[Step] = []
        seen = set()
        current: int | None = elem
        reason, msg = "default", ""
        also: tuple[int, ...] = ()
        cost: Mapping[str, Any] | None = None
        while current is not None and current not in seen:
            seen.add(current)
            decision = self._decide(current)
            chain.extend(decision.chain)
            reason, msg, current = decision.reason, decision.message, decision.then
            also = decision.also or also
            cost = decision.cost if decision.cost is not None else cost
        return Answer(
            nid,
            text,
            line,
            column,
            device_name(self.device_of(elem)),
            tuple(chain),
            reason,
            msg,
            elem,
            cost=cost,
            also=also,
        )

    def answer_selector(self, selector: Mapping[str, Any], where: str = "why") -> WhyResult:
        nodes = resolve(self.module, selector, where, self.ids)
        answers = tuple(self.answer(n) for n in nodes[:MAX_ANSWERS])
        return WhyResult(dict(selector), answers, len(nodes), len(nodes) > MAX_ANSWERS)

    def log(self) -> ConstraintLog:
        ds = self.ds
        elements = {}
        devices = {}
        names: dict[int, tuple[VirtualDevice, str]] = {}  # keeps each device alive with its name
        for i, n in enumerate(self.ids):
            e = self.element(n)
            if e is not None:
                elements[i] = e
                vd = self.device_of(e)
                found = names.get(id(vd))
                if found is None:
                    found = names[id(vd)] = (vd, device_name(vd))
                devices[i] = found[1]
        return ConstraintLog(
            tuple(zip(ds.edge_a, ds.edge_b, ds.edge_c)),
            tuple(ds.pins),
            tuple(t.kind for t in ds.tags),
            tuple(t.hard for t in ds.tags),
            {k: dict(v) for k, v in self.follows.items()},
            elements,
            devices,
        )


def _pairs(ids: Sequence[Expr], mapping: Mapping[int, Expr]) -> list[tuple[Expr, Expr]]:
    return [(n, mapping[id(n)]) for n in ids if id(n) in mapping]
