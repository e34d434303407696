"""A plan of the translated Relay module written back onto the Relax IRModule.

`read_placement` walks the planned Relay module beside the translated one
(the planner only adds `on_device` / `device_copy` wrappers, so once those
are looked through both have the same shape) and reads, for every Relay node
made from a binding, its device, and for every operand position the device
the consumer expects there.

`write_back` rebuilds each Relax function binding by binding, in the same
order and with the same names: every tensor parameter, binding and return
type gets its vdevice, an operand on another device than its consumer
expects is copied by a new `R.to_vdevice` binding just before the consumer
(named `<operand>_to_<device>`), and each `R.hint_on_device` becomes `b = a`
(already there) or `b = R.to_vdevice(a, d)` (what `RealizeVDevice` would make
of it), so the output is a fixed point of `RealizeVDevice`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import relax

from relay import ast
from relay.device import DEVICE_TYPE_NAMES, VirtualDevice

from .relax_translate import Translation, _key, is_data, real_node
from .targets import target_dict

log = logging.getLogger(__name__)

_WRAPPERS = (ast.ON_DEVICE, ast.DEVICE_COPY)


def _is_wrapper(node: ast.Expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.op, ast.Op) and node.op.name in _WRAPPERS


def _kids(node: ast.Expr) -> tuple[ast.Expr, ...]:
    match node:
        case ast.Call(args=args):
            return args
        case ast.Tuple(fields=fields):
            return fields
        case ast.TupleGetItem(tuple_value=t):
            return (t,)
        case ast.If(cond=c, true_branch=t, false_branch=f):
            return (c, t, f)
    return ()


@dataclass
class Placement:
    """Devices read from a planned module, keyed by the translated nodes."""

    device: dict[int, VirtualDevice] = field(default_factory=dict)  # id(real node) -> device
    expected: dict[tuple[int, int], VirtualDevice] = field(default_factory=dict)  # (id(parent), i)
    params: dict[str, list[VirtualDevice]] = field(default_factory=dict)
    results: dict[str, VirtualDevice] = field(default_factory=dict)


def _descend(planned: ast.Expr, ctx: VirtualDevice) -> tuple[ast.Expr, VirtualDevice, VirtualDevice]:
    """Through the planner's wrappers: (the wrapped node, the device the
    consumer expects, the device the node is on)."""
    expected: VirtualDevice | None = None
    while _is_wrapper(planned):
        assert isinstance(planned, ast.Call)
        on = ast.on_device_props(planned)
        if on is not None:
            assert isinstance(on.virtual_device, VirtualDevice)
            expected = on.virtual_device if expected is None else expected
            ctx = on.virtual_device
        else:
            copy = ast.device_copy_props(planned)
            assert copy is not None and isinstance(copy.src, VirtualDevice)
            assert isinstance(copy.dst, VirtualDevice)
            expected = copy.dst if expected is None else expected
            ctx = copy.src
        planned = planned.args[0]
    return planned, (ctx if expected is None else expected), ctx


def read_placement(translation: Translation, planned: ast.Module) -> Placement:
    """The devices of the plan, per translated node (iterative zip walk)."""
    out = Placement()
    for name, original in translation.functions.items():
        func = planned[name]
        out.params[name] = [p.virtual_device for p in func.params]  # type: ignore[misc]
        assert isinstance(func.virtual_device, VirtualDevice)
        result = out.results[name] = func.virtual_device
        p_body, _, ctx = _descend(func.body, result)
        stack: list[tuple[ast.Expr, ast.Expr, VirtualDevice]] = [(real_node(original.body), p_body, ctx)]
        while stack:
            o, p, dev = stack.pop()
            if id(o) in out.device:
                continue
            if isinstance(o, (ast.Var, ast.GlobalVar, ast.Op)):
                continue
            out.device[id(o)] = dev
            o_kids, p_kids = _kids(o), _kids(p)
            if len(o_kids) != len(p_kids):
                raise RuntimeError(f"planned module differs in shape at {o.span}")
            for i, (ok, pk) in enumerate(zip(o_kids, p_kids)):
                pk_real, expected, kid_dev = _descend(pk, dev)
                out.expected[(id(o), i)] = expected
                stack.append((real_node(ok), pk_real, kid_dev))
    return out


# ---------------------------------------------------------------------------
# Writing back


_NAME_RE = re.compile(r"[^A-Za-z0-9_]")
_UPDATE_TYPE = tvm.get_global_func("relax.UpdateType")


def _with_type(expr: Any, ty: Any) -> Any:
    """A freshly built expression with its type set (what normalising would
    infer: the binding's type, whose devices the plan decided). Setting it
    directly is most of the speed of writing back: TVM's Normalize pass takes
    about 0.4 ms per binding."""
    if ty is not None and not isinstance(expr, (relax.Var, tvm.ir.expr.Constant)) and not _has_type(expr):
        _UPDATE_TYPE(expr, ty)
    return expr


class _Writer:
    def __init__(self, translation: Translation, placement: Placement, devices: list[VirtualDevice]) -> None:
        self.t = translation
        self.p = placement
        self.vdevices: list[Any] = list(translation.vdevices)
        self.rdevices: list[VirtualDevice] = list(translation.table)
        for vd in devices:
            self.relax_vdevice(vd)
        self.remap: dict[int, Any] = {}
        self.dev: dict[int, VirtualDevice | None] = {}
        self.copies = 0
        # Bindings of operators whose result TVM types without a vdevice
        # (`DROPS_VDEVICE`): written so, their users read a copy.
        self.off_device: set[int] = set()
        self.copied: dict[int, dict[tuple[int, VirtualDevice], Any]] = {}  # per block: copies made
        self.names: set[str] = set()
        self.result: VirtualDevice | None = None  # the current function's result device
        # The functions' new GlobalVars: a GlobalVar carries its function's type,
        # and callers infer their results from it (typed once the callee is written).
        self.globals: dict[int, Any] = {}

    # ---- devices

    def relax_vdevice(self, vd: VirtualDevice) -> Any:
        for i, known in enumerate(self.rdevices):
            if known == vd:
                return self.vdevices[i]
        if vd.target is None:
            raise RuntimeError(f"device {vd} has no target")
        scope = vd.memory_scope or "global"
        vdev = relax.VDevice(tvm.target.Target(target_dict(vd.target)), vd.virtual_device_id or 0, scope)
        self.rdevices.append(vd)
        self.vdevices.append(vdev)
        return vdev

    def typed(self, ty: Any, vd: VirtualDevice | None) -> Any:
        """`ty` with every tensor on `vd`."""
        if vd is None:
            return ty
        if isinstance(ty, relax.TensorType):
            vdev = self.relax_vdevice(vd)
            if ty.shape is not None:
                return relax.TensorType(ty.shape, ty.dtype, vdev, span=ty.span)
            return relax.TensorType(None, ty.dtype, vdev, ndim=ty.ndim, span=ty.span)
        if isinstance(ty, relax.TupleType):
            return relax.TupleType([self.typed(f, vd) for f in ty.fields])
        return ty

    def callee(self, op: Any) -> Any:
        """A call's operator, a rewritten function's new GlobalVar where it is one."""
        if isinstance(op, relax.GlobalVar):
            return self.globals.get(_key(op), op)
        return op

    def device_of(self, var: Any) -> VirtualDevice | None:
        return self.dev.get(_key(var))

    # ---- functions

    def function(self, name: str, func: Any) -> Any:
        params = []
        for p, vd in zip(func.params, self.p.params[name]):
            new = relax.Var(p.name, self.typed(p.ty, vd if is_data(p.ty) else None), p.span)
            self.remap[_key(p)] = new
            self.dev[_key(p)] = vd if is_data(p.ty) else None
            params.append(new)
        result = self.p.results[name]
        self.result = result
        relay_func = self.t.functions[name]
        body = self.seq(func.body, expected_body=result, parent=relay_func, position=None)
        ret_ty = self.typed(func.ret_ty, result)
        return relax.Function(params, body, ret_ty, func.is_pure, func.attrs, func.span)

    def seq(self, seq: Any, expected_body: VirtualDevice | None, parent: Any, position: int | None) -> Any:
        blocks = []
        for block in seq.blocks:
            dataflow = isinstance(block, relax.DataflowBlock)
            out: list[Any] = []
            for b in block.bindings:
                self.binding(b, out, dataflow)
            blocks.append(relax.DataflowBlock(out, block.span) if dataflow else relax.BindingBlock(out, block.span))
        tail: list[Any] = []
        body = self.leaf(seq.body, tail, False, expected_body, parent, position)
        if tail:
            # Copies of the result: into the last block unless it is a dataflow
            # block (TVM merges adjacent plain blocks; so does this, to stay a fixed point).
            if blocks and not isinstance(blocks[-1], relax.DataflowBlock):
                last = blocks.pop()
                blocks.append(relax.BindingBlock([*last.bindings, *tail], last.span))
            else:
                blocks.append(relax.BindingBlock(tail))
        return _with_type(relax.SeqExpr(blocks, body, seq.span), body.ty)

    # ---- operands

    def copy(self, value: Any, vd: VirtualDevice, out: list[Any], dataflow: bool, counted: bool = True) -> Any:
        """A binding `<value>_to_<device> = R.to_vdevice(value, vd)` in `out`
        (one per block, value and device). `counted`: a copy the plan made
        (not one TVM's typing needs: an inline constant's, or that of a
        result TVM infers off the device)."""
        cache = self.copied.setdefault(id(out), {})
        found = cache.get((_key(value), vd))
        if found is not None:
            return found
        base = CONSTANT_COPY if _is_tensor_constant(value) else _NAME_RE.sub("_", getattr(value, "name", "value"))
        kind = DEVICE_TYPE_NAMES.get(vd.device_type or 0, "dev")
        name = f"{base}_to_{kind}{vd.virtual_device_id or 0}"
        n, candidate = 1, name
        while candidate in self.names:
            n += 1
            candidate = f"{name}{n}"
        self.names.add(candidate)
        ty = self.typed(value.ty, vd)
        call = _with_type(relax.op.to_vdevice(value, self.relax_vdevice(vd)), ty)
        var = relax.DataflowVar(candidate, ty) if dataflow else relax.Var(candidate, ty)
        out.append(relax.VarBinding(var, call))
        self.dev[_key(var)] = vd
        if counted:
            self.copies += 1
        cache[(_key(value), vd)] = var
        return var

    def leaf(
        self,
        e: Any,
        out: list[Any],
        dataflow: bool,
        expected: VirtualDevice | None,
        parent: Any,
        position: int | None,
    ) -> Any:
        """An operand `e` (var, constant, tuple of them) of a consumer that
        expects it on `expected`; copies are added to `out`. `parent` is the
        consumer's Relay node, `position` the operand's index in it, used for
        the expected devices of an inline tuple's fields."""
        if isinstance(e, relax.Var):
            new = self.remap.get(_key(e), e)
            have = self.device_of(e)
            if expected is not None and have is not None and have != expected and is_data(e.ty):
                return self.copy(new, expected, out, dataflow)
            if expected is not None and _key(e) in self.off_device:
                return self.copy(new, expected, out, dataflow, counted=False)
            return new
        if isinstance(e, relax.Tuple):
            node = self._kid(parent, position)
            fields = []
            for j, f in enumerate(e.fields):
                exp = self.p.expected.get((id(node), j)) if node is not None else expected
                fields.append(self.leaf(f, out, dataflow, exp, node, j))
            return _with_type(relax.Tuple(fields, e.span), relax.TupleType([f.ty for f in fields]))
        if isinstance(e, relax.TupleGetItem):
            inner = self.leaf(e.tuple_value, out, dataflow, None, None, None)
            return _with_type(relax.TupleGetItem(inner, e.index), inner.ty.fields[int(e.index)])
        return e

    def _kid(self, parent: Any, position: int | None) -> ast.Expr | None:
        """The Relay node of operand `position` of `parent` (a function: its body)."""
        if parent is None:
            return None
        if isinstance(parent, ast.Function):
            return real_node(parent.body)
        if position is None:
            return None
        kids = _kids(parent)
        return real_node(kids[position]) if position < len(kids) else None

    # ---- bindings

    def binding(self, b: Any, out: list[Any], dataflow: bool) -> None:
        var, value = b.var, b.value
        info = self.t.bindings.get(_key(var))
        node = info.node if info is not None else None
        real = real_node(node) if node is not None else None
        kind = info.kind if info is not None else "other"
        self.names.add(str(var.name))
        folded_into = self.t.folded.get(_key(var))
        device: VirtualDevice | None = None
        if isinstance(b, relax.MatchCast):
            new_value = self.leaf(value, out, dataflow, None, None, None)
            device = self.device_of(value) if isinstance(value, relax.Var) else None
            new_var = self.new_var(var, b.struct_info if hasattr(b, "struct_info") else var.ty, device)
            out.append(relax.MatchCast(new_var, new_value, new_var.ty, b.span))
            return
        dead = (
            real is not None and folded_into is None and kind in ("op", "call", "tuple", "item", "const", "if")
            and id(real) not in self.p.device
        )
        if dead:
            # Not used by the result: the plan never reached it. It goes with its
            # first placed operand (else the function's result device).
            device = next(
                (d for d in (self.device_of(v) for v in _operand_vars(value)) if d is not None), self.result
            )
            new_value = self.rebuild(value, out, dataflow, device)
            if kind == "const" and device is not None:
                new_value = _with_type(
                    relax.op.to_vdevice(value, self.relax_vdevice(device)), self.typed(value.ty, device)
                )
        elif folded_into is not None:
            dense = real_node(self.t.bindings[folded_into].node)  # type: ignore[arg-type]
            device = self.p.device.get(id(dense))
            expected = self.p.expected.get((id(dense), 1))
            arg = self.leaf(value.args[0], out, dataflow, expected, None, None)
            new_value = relax.Call(value.op, [arg, *value.args[1:]], value.attrs, value.ty_args, value.span)
        elif kind == "hint":
            arg_var = value.args[0]
            arg = self.leaf(arg_var, out, dataflow, None, None, None)
            assert isinstance(node, ast.Call)
            props = ast.on_device_props(node)
            assert props is not None and isinstance(props.virtual_device, VirtualDevice)
            device = self._complete(props.virtual_device, real)
            have = self.device_of(arg_var) if isinstance(arg_var, relax.Var) else None
            new_value = arg if have == device else relax.op.to_vdevice(arg, self.relax_vdevice(device))
        elif kind == "copy":
            arg = self.leaf(value.args[0], out, dataflow, None, None, None)
            new_value = relax.Call(value.op, [arg], value.attrs, value.ty_args, value.span)
            assert isinstance(node, ast.Call)
            dc = ast.on_device_props(node)
            assert dc is not None and isinstance(dc.virtual_device, VirtualDevice)
            device = self._complete(dc.virtual_device, None)
        elif kind == "alias":
            new_value = self.leaf(value, out, dataflow, None, None, None)
            device = self.device_of(value) if isinstance(value, relax.Var) else (
                self.p.device.get(id(real)) if real is not None else None
            )
        elif kind == "if" and real is not None:
            device = self.p.device.get(id(real))
            cond = self.leaf(value.cond, out, dataflow, self.p.expected.get((id(real), 0)), real, 0)
            then = self.seq(value.true_branch, self.p.expected.get((id(real), 1)), real, 1)
            other = self.seq(value.false_branch, self.p.expected.get((id(real), 2)), real, 2)
            new_value = relax.If(cond, then, other, value.span)
        elif real is not None and kind == "const":
            # A constant has no device of its own: it is put on its binding's
            # (TVM would otherwise infer the binding off the device again).
            device = self.p.device.get(id(real))
            new_value = value
            if device is not None:
                vdev = self.relax_vdevice(device)
                new_value = _with_type(relax.op.to_vdevice(value, vdev), self.typed(value.ty, device))
        elif real is not None and kind in ("op", "call", "tuple", "item"):
            device = self.p.device.get(id(real))
            new_value = self.operands(value, real, out, dataflow)
            if kind == "op" and device is not None:
                new_value = self.constants_placed(new_value, device, out, dataflow)
                if _typed_off_device(value):
                    # Typed as TVM types it (no vdevice), so that the output stays
                    # a fixed point of RealizeVDevice and TVM's build sees what it
                    # infers; each user reads a copy on its device. (The bridge's
                    # build runs such a kernel on its input's device.)
                    self.off_device.add(_key(var))
                    device = None
        else:
            new_value = self.rebuild(value, out, dataflow)
        new_var = self.new_var(var, None, device, new_value)
        if _infers_own_type(new_value):
            # `call_tir` states its outputs' types: they name the device too, or
            # TVM's own passes would infer the result off the device again.
            ty_args = [self.typed(a, device) for a in new_value.ty_args] if device is not None else None
            if ty_args is not None and isinstance(new_value.op, tvm.ir.Op):
                new_value = relax.Call(new_value.op, new_value.args, new_value.attrs, ty_args, new_value.span)
            new_value = _normalized(new_value)
        _with_type(new_value, new_var.ty)
        out.append(relax.VarBinding(new_var, new_value, b.span))

    def _complete(self, vd: VirtualDevice, real: ast.Expr | None) -> VirtualDevice:
        if vd.is_fully_constrained:
            return vd
        for known in self.rdevices:
            if vd.compatible(known) and known.target is not None:
                return known
        return vd

    def new_var(self, var: Any, ty: Any, device: VirtualDevice | None, value: Any = None) -> Any:
        if ty is None:
            ty = var.ty  # the binding's own type (TVMScript or JSON gave it): only its vdevice changes
        ty = self.typed(ty, device if is_data(ty) else None)
        new = relax.DataflowVar(var.name, ty, var.span) if isinstance(var, relax.DataflowVar) else relax.Var(
            var.name, ty, var.span
        )
        self.remap[_key(var)] = new
        self.dev[_key(var)] = device if is_data(ty) else None
        return new

    def operands(self, value: Any, real: ast.Expr, out: list[Any], dataflow: bool) -> Any:
        """A call, tuple or projection with its data operands moved where the
        plan expects them (positions as in the Relay node)."""
        if isinstance(value, relax.Call):
            position = 0
            args = []
            op_name = value.op.name if isinstance(value.op, tvm.ir.Op) else ""
            for k, a in enumerate(value.args):
                if op_name in ("relax.call_tir", "relax.call_dps_packed", "relax.call_tir_with_grad",
                               "relax.call_tir_inplace") and k == 1 and isinstance(a, relax.Tuple):
                    fields = []
                    for f in a.fields:
                        exp = self.p.expected.get((id(real), position))
                        fields.append(self.leaf(f, out, dataflow, exp, real, position))
                        position += 1
                    args.append(relax.Tuple(fields, a.span))
                    continue
                if is_data(getattr(a, "ty", None)):
                    exp = self.p.expected.get((id(real), position))
                    args.append(self.leaf(a, out, dataflow, exp, real, position))
                    position += 1
                else:
                    args.append(self.leaf(a, out, dataflow, None, None, None))
            return relax.Call(self.callee(value.op), args, value.attrs, value.ty_args, value.span)
        if isinstance(value, relax.Tuple):
            fields = [
                self.leaf(f, out, dataflow, self.p.expected.get((id(real), j)), real, j)
                for j, f in enumerate(value.fields)
            ]
            return relax.Tuple(fields, value.span)
        if isinstance(value, relax.TupleGetItem):
            inner = self.leaf(value.tuple_value, out, dataflow, None, None, None)
            return relax.TupleGetItem(inner, value.index)
        return value

    def constants_placed(self, call: Any, device: VirtualDevice, out: list[Any], dataflow: bool) -> Any:
        """`call` with its inline constants copied to `device` when TVM would
        type part of its result from them: torch exports write batch_norm's
        running statistics inline, and TVM gives the mean and variance fields
        the constants' device, which is none, so `RealizeVDevice` would retype
        the binding off the device. Each such constant becomes a binding
        `const_to_<device> = R.to_vdevice(constant, d)` before the call (a
        constant stating its vdevice does not read back from TVMScript)."""
        if not isinstance(call, relax.Call) or not any(_is_tensor_constant(a) for a in call.args):
            return call
        if all(v is not None for v in _vdevices(_normalized(call).ty)):
            return call
        args = [
            self.copy(a, device, out, dataflow, counted=False) if _is_tensor_constant(a) else a for a in call.args
        ]
        return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)

    def rebuild(self, value: Any, out: list[Any], dataflow: bool, device: VirtualDevice | None = None) -> Any:
        """A value the plan does not place (shapes, prim values, dead code): its
        variables renamed, and with `device` its data operands copied there."""
        if isinstance(value, relax.Call):
            args = [
                self.leaf(a, out, dataflow, device if is_data(getattr(a, "ty", None)) else None, None, None)
                for a in value.args
            ]
            return relax.Call(self.callee(value.op), args, value.attrs, value.ty_args, value.span)
        if isinstance(value, relax.If):
            cond = self.leaf(value.cond, out, dataflow, device, None, None)
            then = self.seq(value.true_branch, device, None, None)
            other = self.seq(value.false_branch, device, None, None)
            return relax.If(cond, then, other, value.span)
        return self.leaf(value, out, dataflow, None, None, None)


_OPAQUE_CALLS = frozenset(
    ("relax.call_tir", "relax.call_dps_packed", "relax.call_tir_with_grad", "relax.call_tir_inplace")
)


def _infers_own_type(value: Any) -> bool:
    """Calls whose type TVM infers from what they state (`call_tir`'s output
    types, a packed call's type arguments), not from their inputs' devices: they
    keep the inferred type, and only the binding's variable names the device."""
    if not isinstance(value, relax.Call):
        return False
    op = value.op
    return not isinstance(op, tvm.ir.Op) or str(op.name) in _OPAQUE_CALLS


def _normalized(value: Any) -> Any:
    try:
        return relax.BlockBuilder().normalize(value)
    except Exception:  # noqa: BLE001 - TVM cannot infer it alone (a call of another function)
        log.debug("no inferred type for a %s call", type(value.op).__name__)
        return value


def _operand_vars(value: Any) -> list[Any]:
    """The variables a binding's value reads directly (inline tuples looked into)."""
    if isinstance(value, relax.Var):
        return [value]
    if isinstance(value, relax.Call):
        found = []
        for a in value.args:
            found.extend(_operand_vars(a) if isinstance(a, (relax.Var, relax.Tuple)) else [])
        return found
    if isinstance(value, relax.Tuple):
        return [v for f in value.fields for v in _operand_vars(f)]
    if isinstance(value, relax.TupleGetItem):
        return _operand_vars(value.tuple_value)
    if isinstance(value, relax.If):
        return _operand_vars(value.cond)
    return []


DROPS_VDEVICE = frozenset({"relax.nn.pad"})
"""Operators whose result TVM 0.27 types without a vdevice whatever their
inputs' (`InferStructInfoPad` builds the result type from shape and dtype
only). `RealizeVDevice` re-infers every binding, so such a result cannot
state a device in a fixed point. tests/relax/ checks the list against TVM."""

def _typed_off_device(call: Any) -> bool:
    """Whether TVM types the result of `call` without a vdevice: an operator of
    `DROPS_VDEVICE`, or one without tensor arguments (`R.arange(0, 32, 1)`:
    nothing to take a device from). Stating one anyway is undone by
    `RealizeVDevice`, and TVM 0.27's build breaks on it: LegalizeOps folds the
    arange into a constant of no device, and `RewriteDataflowReshape` then
    leaves a user of the retyped binding naming a variable it removed ("Var
    lv20 is not defined", hf_bert)."""
    if not isinstance(call.op, tvm.ir.Op):
        return False
    return str(call.op.name) in DROPS_VDEVICE or not any(is_data(getattr(a, "ty", None)) for a in call.args)


CONSTANT_COPY = "const"
"""The name `write_back` gives a constant it copies (`const_to_cuda0`)."""


def _is_tensor_constant(e: Any) -> bool:
    return isinstance(e, tvm.ir.expr.Constant) and type(e.ty) is relax.TensorType


def _vdevices(ty: Any) -> list[Any]:
    """The vdevice of every tensor in a type (None where a tensor has none)."""
    if isinstance(ty, relax.TensorType):
        return [ty.vdevice]
    if isinstance(ty, relax.TupleType):
        return [v for f in ty.fields for v in _vdevices(f)]
    return []


def _has_type(expr: Any) -> bool:
    ty = getattr(expr, "ty", None)
    return ty is not None and type(ty) is not tvm.ir.Type


def write_back(translation: Translation, placement: Placement, devices: list[VirtualDevice]) -> tuple[Any, int]:
    """The Relax module with the plan's devices; returns it and the number of
    `R.to_vdevice` bindings added."""
    mod = translation.relax_module
    writer = _Writer(translation, placement, [])
    funcs: dict[Any, Any] = {}
    planned = [gv for gv in mod.get_global_vars() if str(gv.name_hint) in translation.functions]
    for gv in planned:
        writer.globals[_key(gv)] = relax.GlobalVar(str(gv.name_hint))
    for gv in mod.get_global_vars():
        func = mod[gv]
        name = str(gv.name_hint)
        if _key(gv) in writer.globals:
            new_gv = writer.globals[_key(gv)]
            funcs[new_gv] = new_func = writer.function(name, func)
            _UPDATE_TYPE(new_gv, new_func.ty)
        else:
            funcs[gv] = func
    used = list(writer.vdevices)
    infos = dict(mod.global_infos.items()) if mod.global_infos is not None else {}
    if used:
        infos["vdevice"] = used
    return tvm.IRModule(funcs, mod.attrs, infos), writer.copies
