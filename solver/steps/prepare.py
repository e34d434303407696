"""Steps 2-3 of both modes: the functions to plan with meta references
resolved, on_device normalisation (and, in TVM mode, the conflicting-inputs
copies), request pins applied, shapes inferred (docs/planning.md, sections
2 and 3)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relay.ast import Attrs, Call, Expr, Function, GlobalVar, MetaRef, Module, Op, Var
from relay.device import VirtualDevice, device_name
from relay.traverse import children, free_vars

from ..collect import Collector, RequestPin, is_optimizable
from ..deadline import Deadline
from ..domains import DomainSystem
from ..errors import ConflictConstraint, PlanConfigError, PlanningConflict
from ..explain.text import short_text
from ..normalize import InputConflictCrash, copy_conflicting_inputs, may_normalise, normalise_on_device
from ..selectors import planned_roots
from ..shapes import ShapeInfo, infer_shapes
from .devices import Devices
from .pins import apply_pins
from .spine import rebuild

Functions = list[tuple[GlobalVar, Function]]


def module_functions(module: Module) -> tuple[Functions, bool]:
    """The global functions to plan. A single-expression module is planned as
    TVM's IRModule.from_expr holds it: @main over the expression's free
    variables (the flag says so)."""
    functions = list(module.functions)
    from_expr = False
    if module.expr is not None and not any(gv.name == "main" for gv, _ in module.functions):
        functions.append(
            (GlobalVar("main"), Function(tuple(free_vars(module.expr)), module.expr, span=module.expr.span))
        )
        from_expr = True
    return functions, from_expr


@dataclass(frozen=True)
class Features:
    """What a module contains that makes optional steps necessary, and where:
    `meta_nodes` holds the ids of the nodes with a `meta[VirtualDevice]`
    reference, `on_device_parents` those directly over an `on_device` call
    (what on_device normalisation may change)."""

    meta_refs: bool = False
    annotations: bool = False  # on_device or device_copy calls
    free_on_device: bool = False
    meta_nodes: frozenset[int] = frozenset()
    on_device_parents: frozenset[int] = frozenset()


def _function_has_meta_ref(func: Function) -> bool:
    return isinstance(func.virtual_device, MetaRef) or any(
        isinstance(p.virtual_device, MetaRef) for p in func.params
    )


def scan(functions: Functions) -> Features:
    """One walk over the functions: meta references, annotations, free on_devices."""
    # Hand-written walk, kept on purpose: `pre_order` plus a loop over its list
    # takes 28-30 ms on a 50k-call chain (100k nodes) where this fused walk
    # takes 19-20 ms (CPU time, best of 7, benchmarks/compare_trees.py trees):
    # the driver would cost about 45% here (the project allows a hand-written
    # walk where the driver costs more than 10%).
    annotations = free_on_device = False
    meta_nodes: set[int] = set()
    parents: set[int] = set()
    seen: set[int] = set()
    for _, func in functions:
        stack: list[Expr] = [func]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            t = type(node)
            if t is Call:
                op = node.op  # type: ignore[attr-defined]
                attrs = node.attrs  # type: ignore[attr-defined]
                if type(op) is Op and op.name in ("on_device", "device_copy"):
                    annotations = True
                    if (
                        op.name == "on_device"
                        and attrs is not None
                        and not attrs.get("constrain_body", True)
                        and not attrs.get("constrain_result", False)
                    ):
                        free_on_device = True
                if attrs is not None and any(type(v) is MetaRef for _, v in attrs.fields):
                    meta_nodes.add(id(node))
                stack.append(op)
                stack.extend(node.args)  # type: ignore[attr-defined]
                continue
            if t is Var:
                if type(node.virtual_device) is MetaRef:  # type: ignore[attr-defined]
                    meta_nodes.add(id(node))
                continue
            if t is Function and _function_has_meta_ref(node):  # type: ignore[arg-type]
                meta_nodes.add(id(node))
            if may_normalise(node):
                parents.add(id(node))
            stack.extend(children(node))
    return Features(bool(meta_nodes), annotations, free_on_device, frozenset(meta_nodes), frozenset(parents))


def _resolve_meta(value: Any, table: list[Any]) -> Any:
    if isinstance(value, MetaRef) and value.kind == "VirtualDevice":
        if not 0 <= value.index < len(table) or not isinstance(table[value.index], VirtualDevice):
            raise PlanConfigError(
                f"meta[VirtualDevice][{value.index}] is not in the virtual device table "
                f"({len(table)} entries); supply the table as `virtual_devices`"
            )
        return table[value.index]
    return value


class _MetaResolver:
    """Replaces `meta[VirtualDevice][i]` placeholders of one node by the
    table's devices (a parameter is replaced once, for its uses and its function)."""

    def __init__(self, table: list[Any]) -> None:
        self.table = table
        self.vars: dict[int, Var] = {}

    def var(self, v: Var) -> Var:
        found = self.vars.get(id(v))
        if found is None:
            vd = _resolve_meta(v.virtual_device, self.table)
            found = self.vars[id(v)] = dataclasses.replace(v, virtual_device=vd)
        return found

    def __call__(self, node: Expr) -> Expr:
        t = type(node)
        if t is Call:
            call: Call = node  # type: ignore[assignment]
            attrs = call.attrs
            if attrs is not None and any(type(v) is MetaRef for _, v in attrs.fields):
                fields = tuple((k, _resolve_meta(v, self.table)) for k, v in attrs.fields)
                return dataclasses.replace(call, attrs=Attrs(fields, attrs.type_key))
            return node
        if t is Var:
            var: Var = node  # type: ignore[assignment]
            return self.var(var) if type(var.virtual_device) is MetaRef else var
        if t is Function:
            fn: Function = node  # type: ignore[assignment]
            params = tuple(self.var(p) if type(p.virtual_device) is MetaRef else p for p in fn.params)
            vd = _resolve_meta(fn.virtual_device, self.table)
            if vd is not fn.virtual_device or any(a is not b for a, b in zip(params, fn.params)):
                return dataclasses.replace(fn, params=params, virtual_device=vd)
        return node


def crash_conflict(err: InputConflictCrash) -> PlanningConflict:
    """TVM 0.19 fails an internal check here; we report it as a conflict."""
    call = err.call
    loc = f"{call.span.line}:{call.span.column}" if call.span is not None else "?"
    constraints = [ConflictConstraint("conflicting inputs", err.args[0], short_text(call), call.span, [])]
    message = f"device conflict: {err.args[0]} at {loc} ({short_text(call)})"
    if err.arg is not None:
        arg = err.arg
        devices = [device_name(err.arg_device)] if err.arg_device is not None else []
        first = f", first on {devices[0]}" if devices else ""
        constraints.append(
            ConflictConstraint(
                "conflicting inputs",
                "argument used on two devices" + first,
                short_text(arg),
                arg.span,
                devices,
            )
        )
        where = f" at {arg.span.line}:{arg.span.column}" if arg.span is not None else ""
        message += f": its argument {short_text(arg)}{where} is used on two devices{first}"
    return PlanningConflict(message, constraints)


def normalise(
    functions: Functions,
    feats: Features,
    table: list[Any],
    canonical: Callable[[VirtualDevice], VirtualDevice],
    deadline: Deadline | None = None,
    copy_inputs: bool = True,
) -> Functions:
    """Step 2 (section 3): `meta[VirtualDevice]` references resolved against
    `table`, on_device normalisation, then (with `copy_inputs`; the optimize
    mode has no such conflicts) the conflicting-inputs copies. One spine
    rebuild does the first two (only the nodes `scan` found and the nodes above
    them are rebuilt); a function they leave alone is the same object, and
    without annotations the copies step is skipped."""
    resolver = _MetaResolver(table)
    marked = feats.meta_nodes | feats.on_device_parents if feats.annotations else feats.meta_nodes
    out: Functions = []
    for gv, func in functions:
        normalising = feats.annotations and is_optimizable(func)

        def fix(original: Expr, rebuilt: Expr, normalising: bool = normalising) -> Expr:
            if id(original) in feats.meta_nodes:
                rebuilt = resolver(rebuilt)
            return normalise_on_device(rebuilt) if normalising else rebuilt

        new = rebuild(func, marked, fix)
        assert isinstance(new, Function)
        out.append((gv, new))
    if not feats.annotations or not copy_inputs:
        return out
    try:
        optimizable = [(gv, f) for gv, f in out if is_optimizable(f)]
        rewritten, _ = copy_conflicting_inputs(optimizable, canonical, deadline)
    except InputConflictCrash as err:
        raise crash_conflict(err) from None
    replaced = {gv.name: f for gv, f in rewritten}
    return [(gv, replaced.get(gv.name, f) if is_optimizable(f) else f) for gv, f in out]


@dataclass(frozen=True)
class Front:
    """Steps 1-3 done: what collection needs (both modes)."""

    devices: Devices
    functions: Functions
    from_expr: bool
    feats: Features
    ds: DomainSystem
    annotation_kinds: dict[int, str]
    request_pins: list[RequestPin]
    shapes: ShapeInfo

    def collector(self, module: Module, deadline: Deadline, kind: type[Collector] = Collector) -> Collector:
        """A collector over these functions (`kind`: the optimize mode's subclass)."""
        ds, devices = self.ds, self.devices
        return kind(
            module,
            self.functions,
            self.shapes,
            ds,
            ds.canonical(devices.default),
            devices.host,
            self.annotation_kinds,
            deadline,
        )

    def planned_roots(self) -> list[Expr]:
        """The planner's counterparts of the input module's roots."""
        return planned_roots(self.functions, self.from_expr)


def front(module: Module, devices: Devices, deadline: Deadline, copy_inputs: bool = True) -> Front:
    """Steps 2-3: meta references, normalisation, request pins, shapes."""
    functions, from_expr = module_functions(module)
    feats = scan(functions)
    ds = DomainSystem(devices.targets())
    functions = normalise(functions, feats, devices.ref_table, ds.canonical, deadline, copy_inputs)
    pinned = apply_pins(module, functions, devices.pins, planned_roots(functions, from_expr))
    functions = pinned.functions
    shapes = infer_shapes(module, [f for _, f in functions], deadline)  # step 3
    for gv, func in functions:
        for param in func.params:
            ds.param_owner[id(param)] = f"@{gv.name}"
    return Front(
        devices, functions, from_expr, feats, ds, pinned.annotation_kinds, pinned.request_pins, shapes
    )
