"""The optimize mode's collector: TVM mode's constraints, except that the
edge between a primitive operator call and each tensor argument is cuttable
(a `device_copy` when its two ends differ). An `on_device` whose result is
free is a copy point too, unless only operators read it (a pin's wrapper):
those read its body, so its result is the body's value (`_read_through`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from relay.ast import Call, Expr, Function, Op, on_device_props
from relay.traverse import children, not_primitive, post_order

from ..collect import SPECIAL_OPS, Collector, RequestPin, is_optimizable


def look_through(expr: Expr) -> Expr:
    """The expression whose device an operator argument has (the rewriter's
    GetVirtualDevice looks through one `on_device`)."""
    if type(expr) is Call and type(expr.op) is Op and expr.op.name == "on_device" and len(expr.args) == 1:
        return expr.args[0]
    return expr


@dataclass(frozen=True)
class Cuts:
    """What the problem builder reads of a collection: the collector (its
    union-find and domains), the primitive operator calls, the cuttable
    edges (operator call or free-result annotation, argument) and the calls
    of fused (`Primitive`) functions, one kernel each."""

    collector: Collector
    op_calls: list[Call]
    cut_edges: list[tuple[Call, Expr]]
    primitive_calls: list[Call] = field(default_factory=list)


class CutCollector(Collector):
    """The TVM-mode collector, except that a primitive operator call is not
    unified with its tensor arguments: the edge is recorded as cuttable."""

    tvm_reading = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Whether an argument's edge may be cut; set from the types before collecting.
        self.is_tensor: Callable[[Expr], bool] = lambda e: True
        self.op_calls: list[Call] = []
        self.cut_edges: list[tuple[Call, Expr]] = []  # (operator call, argument looked through on_device)
        self.primitive_calls: list[Call] = []  # calls of fused functions; their edges stay hard
        # ids of the free-result annotations only operators read (`_read_through`)
        self.read_through: set[int] = set()

    def collect(self, pins: Sequence[RequestPin]) -> None:
        self.read_through = _read_through([f for _, f in self.functions if is_optimizable(f)])
        super().collect(pins)

    def _call(self, call: Call) -> None:
        op = call.op
        if type(op) is Op and op.name == "on_device" and len(call.args) == 1:
            super()._call(call)
            props = on_device_props(call)
            if props is None or props.constrain_result:
                return
            if id(call) in self.read_through:
                # Every reader is an operator, which reads the body itself (a
                # cuttable edge to it, `look_through`): the free result is
                # never read, so it is the body's value, not a class and a
                # copy point of its own. A pin's wrapper then leaves the
                # problem as it was without the pin (its classes, edges and
                # bytes), only the body's allowed devices narrowed.
                cid = self._tag(self.annotation_kinds.get(id(call), "annotation"), call)
                self.ds.unify(self.dom(call), self.dom(call.args[0]), cid)
                return
            # A result the annotation leaves free meets its body at a copy
            # point, in both modes: a cuttable edge.
            self.cut_edges.append((call, call.args[0]))
            return
        if type(op) is Op and op.name not in SPECIAL_OPS:
            cd = self.callee_domain(call)
            shared = cd[-1]  # type: ignore[index]
            if type(shared) is int:
                cid = self._tag("operator", call, op.name)
                ds = self.ds
                d = self.dom(call)
                if d != shared:
                    ds.unify(shared, d, cid)
                self.op_calls.append(call)
                for a in call.args:
                    da = self.dom(a)
                    if type(da) is int and self.is_tensor(look_through(a)):
                        self.cut_edges.append((call, look_through(a)))
                    elif type(da) is int:
                        ds.union(shared, da, cid)
                    else:
                        ds.collapse(shared, da, cid)
                return
        super()._call(call)
        if type(op) is Function and op.is_primitive:
            # A fused kernel runs on one device, its arguments and result with
            # it (TVM mode defaults them so; here it is a hard rule, or the
            # solver could split a call from its inputs without a copy).
            self.primitive_calls.append(call)
            anchor = _first_order(self.dom(call))
            if anchor is not None:
                cid = self._tag("primitive call", call, "fused function")
                self.ds.collapse(anchor, self.dom(call), cid)
                for a in call.args:
                    self.ds.collapse(anchor, self.dom(a), cid)

    def cuts(self) -> Cuts:
        """This collection's operator calls, cuttable edges and fused calls."""
        return Cuts(self, self.op_calls, self.cut_edges, self.primitive_calls)


def _read_through(roots: list[Function]) -> set[int]:
    """The `on_device` calls with a free result (and one argument) that only
    operator calls read, as arguments: the operators read through them
    (`look_through`). One read by anything else (a tuple, a let, a function's
    result, a call of a function or of another annotation) is left out."""
    annotations: set[int] = set()
    other: set[int] = set()
    for node in post_order(roots, enter=not_primitive):
        operator = type(node) is Call and type(node.op) is Op and node.op.name not in SPECIAL_OPS
        for child in children(node):
            if type(child) is Call and type(child.op) is Op and child.op.name == "on_device":
                props = on_device_props(child)
                if props is None or props.constrain_result or len(child.args) != 1:
                    continue
                annotations.add(id(child))
                if not operator:
                    other.add(id(child))
    return annotations - other


def _first_order(d: Any) -> int | None:
    """The first device variable of a domain (itself when first-order)."""
    stack = [d]
    while stack:
        x = stack.pop()
        if isinstance(x, int):
            return x
        if isinstance(x, tuple):
            stack.extend(reversed(x))
    return None


def as_cut(collector: Collector) -> Cuts:
    """A TVM-mode collection read as cuts: its operator calls are every
    primitive operator call it collected, and its cuttable edges only the
    annotations whose result is free (operator edges are all hard there)."""
    nodes = post_order([f for _, f in collector.functions if is_optimizable(f)], enter=not_primitive)
    calls = [n for n in nodes if type(n) is Call and type(n.op) is Op]
    op_calls = [c for c in calls if c.op.name not in SPECIAL_OPS]  # type: ignore[attr-defined]
    # The copy points of the TVM plan besides device_copy calls: annotations
    # whose result is free (their two classes differ when a copy is needed).
    cut_edges: list[tuple[Call, Expr]] = []
    for call in calls:
        props = on_device_props(call) if call.op.name == "on_device" else None  # type: ignore[attr-defined]
        if props is not None and not props.constrain_result and len(call.args) == 1:
            cut_edges.append((call, call.args[0]))
    primitive_calls = [n for n in nodes if type(n) is Call and type(n.op) is Function and n.op.is_primitive]
    return Cuts(collector, op_calls, cut_edges, primitive_calls)
