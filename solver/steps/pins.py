"""Request pins on the planner's functions (docs/planning.md, section 1).

A pin's selector names input expressions (`solver.selectors.resolve`). A
global function or one of its parameters becomes a collector pin on the
planned function (`RequestPin`); a parameter pattern pins every matching
parameter that way and wraps the operators that read them
(`selectors.weight_readers`) as below; any other expression is wrapped in
`on_device(e, d)` with only its body constrained, as an annotation in the
module would be. Several pins on one expression count for each: identical
devices plan like one pin, different devices are refused naming both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from relay import ast
from relay.ast import Call, Expr, Function, GlobalVar, Module, Op, Var
from relay.device import VirtualDevice, device_name
from relay.traverse import rewrite

from ..collect import RequestPin
from ..errors import PlanConfigError
from ..explain.text import short_text
from ..selectors import Pin, align, input_roots, is_computation, node_ids, resolve, weight_readers

Functions = list[tuple[GlobalVar, Function]]


@dataclass(frozen=True)
class PinnedFunctions:
    """The functions with pinned expressions wrapped, the annotation kind of
    each wrapper (id -> "constraint #k"), and the collector's pins."""

    functions: Functions
    annotation_kinds: dict[int, str]
    request_pins: list[RequestPin]


def apply_pins(
    module: Module, functions: Functions, pins: Sequence[Pin], planned_roots: Sequence[Expr]
) -> PinnedFunctions:
    """Apply every pin of the request to the planner's `functions` (the input
    `module` normalised; `planned_roots` their counterparts of the input roots)."""
    kinds: dict[int, str] = {}
    if not pins:
        return PinnedFunctions(functions, kinds, [])
    globals_ = {id(f): gv.name for gv, f in module.functions}
    params = {id(p): (gv.name, p.name) for gv, f in module.functions for p in f.params}
    by_name = {gv.name: func for gv, func in functions}
    input_by_name = {gv.name: func for gv, func in module.functions}
    request: list[RequestPin] = []
    converted: list[RequestPin] = []  # node selectors naming a global or a parameter
    wrap: dict[int, tuple[VirtualDevice, int]] = {}
    mapping: dict[int, Expr] | None = None
    ids: list[Expr] | None = None  # the module's node ids, walked once for every node pin
    for pin in pins:
        where = f"constraint #{pin.k}"
        nodes: list[Expr]
        if pin.selector.is_pattern():
            # Every matching parameter, and the operators that read them.
            matched = [p for p in resolve(module, pin.selector, where) if isinstance(p, Var)]
            request.extend(_named(by_name, pin, where, p.name) for p in matched)
            nodes = list(weight_readers(input_by_name[pin.selector.function_name()], matched))
        elif pin.kind in ("param", "function"):
            # Named by text: the planned function of that name (its parameters may be rebuilt).
            request.append(_named(by_name, pin, where))
            continue
        else:
            if pin.kind == "node" and ids is None:
                ids = node_ids(module)
            nodes = resolve(module, pin.selector, where, ids)
        for node in nodes:
            if id(node) in globals_:
                converted.append(RequestPin("function", by_name[globals_[id(node)]], pin.device, pin.k))
            elif id(node) in params:
                gname, pname = params[id(node)]
                param = next(p for p in by_name[gname].params if p.name == pname)
                converted.append(RequestPin("param", param, pin.device, pin.k))
            elif not is_computation(node):
                raise PlanConfigError(
                    f"{where}: node {short_text(node)} is not a computation; select the call instead"
                )
            else:
                if mapping is None:
                    mapping = align(input_roots(module), planned_roots).mapping
                target = mapping.get(id(node))
                if target is None:
                    raise PlanConfigError(
                        f"{where}: the selected expression is not planned (inside a primitive function)"
                    )
                _add_wrap(wrap, target, pin)
    request.extend(converted)
    if not wrap:
        return PinnedFunctions(functions, kinds, request)
    out: Functions = []
    for gv, func in functions:

        def visit(original: Expr, rebuilt: Expr) -> Expr:
            if isinstance(rebuilt, Call) and rebuilt.args and id(rebuilt.args[0]) in kinds:
                rebuilt = _pinned_under_annotation(rebuilt, kinds)
            found = wrap.get(id(original))
            if found is None:
                return rebuilt
            wrapped = ast.on_device(
                rebuilt, found[0], constrain_body=True, constrain_result=False, span=rebuilt.span
            )
            kinds[id(wrapped)] = f"constraint #{found[1]}"
            return wrapped

        new = rewrite(func, visit)
        out.append((gv, new if isinstance(new, Function) else func))
    return PinnedFunctions(out, kinds, request)


def _pinned_under_annotation(call: Call, kinds: dict[int, str]) -> Call:
    """`call` with its pinned argument's wrapper also pinning its result when
    `call` fixes that argument's device (an on_device constraining its body, a
    device_copy's source): the pin and the annotation then constrain one value,
    so a pin against the annotation is a conflict naming both
    instead of a copy between the pinned computation and the annotation."""
    hard = ast.device_copy_props(call) is not None
    props = ast.on_device_props(call)
    if props is not None:
        hard = props.constrain_body
    wrapper = call.args[0]
    inner = ast.on_device_props(wrapper)
    if not hard or inner is None or not isinstance(inner.virtual_device, VirtualDevice):
        return call
    fixed = ast.on_device(
        inner.body, inner.virtual_device, constrain_body=True, constrain_result=True, span=wrapper.span
    )
    kinds[id(fixed)] = kinds[id(wrapper)]
    return dataclasses.replace(call, args=(fixed, *call.args[1:]))


def _add_wrap(wrap: dict[int, tuple[VirtualDevice, int]], target: Expr, pin: Pin) -> None:
    """Pin `target`; a second pin must agree on the device."""
    found = wrap.get(id(target))
    if found is None:
        wrap[id(target)] = (pin.device, pin.k)
        return
    if found[0] != pin.device:
        what = (
            f"call of {target.op.name}"
            if isinstance(target, Call) and isinstance(target.op, Op)
            else f"expression {short_text(target)}"
        )
        raise PlanConfigError(
            f"constraints #{found[1]} and #{pin.k} pin the same {what} "
            f"to {device_name(found[0])} and to {device_name(pin.device)}"
        )


def _named(by_name: dict[str, Function], pin: Pin, where: str, param_name: str | None = None) -> RequestPin:
    """A `param`/`function` pin on the planned function it names (`param_name`:
    the parameter, for a pattern's match)."""
    sel = pin.selector
    func = by_name.get(sel.function_name())
    if pin.kind == "function":
        if func is None:
            raise PlanConfigError(f"{where}: selector {sel.text()} matches no global function")
        return RequestPin("function", func, pin.device, pin.k)
    param: Var | None = None
    if func is not None:
        name = sel.param_name() if param_name is None else param_name
        param = next((p for p in func.params if p.name == name), None)
    if param is None:
        raise PlanConfigError(f"{where}: selector {sel.text()} matches no parameter")
    return RequestPin("param", param, pin.device, pin.k)
