"""Planned Relay module -> Relax IRModule with virtual devices.

Every virtual device of the plan becomes an `I.vdevice` in the module's
`global_infos`, parameters get tensor types on their vdevice, `device_copy`
becomes `R.to_vdevice`, `on_device` a `R.hint_on_device` where the value's
device is not yet known (and nothing where it is), and each operator call
goes through `ops.convert_map`.

The walk over an expression (`relay.traverse.walk`) stops at `if` branches
and function bodies: those are lowered in their own scopes (a branch's
bindings belong inside the Relax `If`; a local function is inlined at each
call with its parameters bound to the arguments). Nodes used several times (graph
sharing) are lowered once per scope and reused.
"""

from __future__ import annotations

import json
import logging
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm import relax

from relay import ast
from relay.ast import Call, Constant, Constructor, Function, GlobalVar, If, Let, Match, MetaRef, Op, Var
from relay.device import DEVICE_TYPE_NAMES, VirtualDevice
from relay.span import Span
from relay.traverse import pre_order, walk

from . import ops
from .errors import BridgeError, UnsupportedConstruct, UnsupportedOperator
from .targets import TargetSpec, target_dict, target_map

log = logging.getLogger(__name__)

Memo = ChainMap[int, Any]  # id(node) -> lowered value, one child map per scope


def _lowered_children(node: ast.Expr) -> tuple[ast.Expr, ...]:
    """What `lower_expr` lowers before a node: an `if`'s condition (its
    branches get scopes of their own), a call's arguments (and its callee when
    that is a local variable), a tuple's fields, a projection's tuple."""
    match node:
        case If(cond=cond):
            return (cond,)
        case Call(op=op, args=args):
            return (op, *args) if isinstance(op, Var) else args
        case ast.Tuple(fields=fields):
            return fields
        case ast.TupleGetItem(tuple_value=t):
            return (t,)
    return ()


@dataclass(frozen=True)
class _LocalFunction:
    """A Relay function literal seen as a value: inlined where it is called."""

    func: Function


@dataclass(frozen=True)
class VDeviceInfo:
    """One virtual device of the plan as it appears in `global_infos`."""

    index: int
    device_type: int
    device_id: int
    target: dict[str, Any]
    memory_scope: str
    vdevice: Any = field(repr=False, compare=False)


class _Lowerer:
    def __init__(
        self,
        module: ast.Module,
        targets: Mapping[str | int, TargetSpec] | None,
        convert_map: Mapping[str, ops.Emitter],
        cuda_arch: str | None,
    ) -> None:
        self.module = module
        self.targets = target_map(targets, cuda_arch=cuda_arch)
        self.cuda_arch = cuda_arch
        self.convert_map = convert_map
        self.bb = relax.BlockBuilder()
        self.vdevices: dict[tuple[Any, ...], VDeviceInfo] = {}
        self.global_vars: dict[str, relax.GlobalVar] = {}
        self.inlining: set[int] = set()
        self._target_cache: dict[int, dict[str, Any]] = {}

    # ---------------------------------------------------------------- devices

    def resolve_meta(self, ref: MetaRef) -> Any:
        table = self.module.meta.get(ref.kind)
        if table is None or not 0 <= ref.index < len(table):
            raise BridgeError(f"meta[{ref.kind}][{ref.index}] is not in the module's metadata")
        return table[ref.index]

    def _virtual_device(self, value: Any, span: Span | None) -> VirtualDevice | None:
        if isinstance(value, MetaRef):
            value = self.resolve_meta(value)
        if value is None:
            return None
        if not isinstance(value, VirtualDevice):
            raise BridgeError(f"expected a virtual device, got {type(value).__name__}", span)
        return None if value.is_fully_unconstrained else value

    def vdevice(self, value: Any, span: Span | None) -> VDeviceInfo | None:
        """The Relax vdevice for a Relay virtual device (registered on first use)."""
        device = self._virtual_device(value, span)
        if device is None:
            return None
        device_type = device.device_type
        if device_type is None and device.target is not None:
            device_type = device.target.device_type
        if device_type is None:
            raise BridgeError(f"virtual device {device} has no device type", span)
        if device.target is not None:
            target = self._target_cache.get(id(device.target))
            if target is None:
                target = target_dict(device.target, cuda_arch=self.cuda_arch, for_compile=True)
                self._target_cache[id(device.target)] = target
        else:
            name = DEVICE_TYPE_NAMES.get(device_type)
            if name not in self.targets:
                raise BridgeError(f"no target for device type {name or device_type}", span)
            target = self.targets[name]
        device_id = device.virtual_device_id or 0
        scope = device.memory_scope or "global"
        key = (device_type, device_id, json.dumps(target, sort_keys=True), scope)
        info = self.vdevices.get(key)
        if info is None:
            vdev = relax.VDevice(tvm.target.Target(target), device_id, scope)
            info = VDeviceInfo(len(self.vdevices), device_type, device_id, target, scope, vdev)
            self.vdevices[key] = info
        return info

    def collect_vdevices(self) -> None:
        """Register every virtual device of the plan, metadata table first."""
        for entry in self.module.meta.get("VirtualDevice", []):
            if isinstance(entry, VirtualDevice):
                self.vdevice(entry, None)
        roots: list[ast.Expr] = [f for _, f in self.module.functions]
        if self.module.expr is not None:
            roots.append(self.module.expr)
        for node in pre_order(roots):
            match node:
                case Var(virtual_device=vd) if vd is not None:
                    self.vdevice(vd, node.span)
                case Function():
                    if node.virtual_device is not None:
                        self.vdevice(node.virtual_device, node.span)
                    for p in node.params:
                        if p.virtual_device is not None:
                            self.vdevice(p.virtual_device, p.span)
                case Call(op=Op(name=ast.ON_DEVICE)):
                    props = ast.on_device_props(node)
                    if props is not None:
                        self.vdevice(props.virtual_device, node.span)
                case Call(op=Op(name=ast.DEVICE_COPY)):
                    props2 = ast.device_copy_props(node)
                    if props2 is not None:
                        self.vdevice(props2.src, node.span)
                        self.vdevice(props2.dst, node.span)

    # ---------------------------------------------------------------- types

    def relax_type(self, ty: ast.Type | None, vdev: VDeviceInfo | None, span: Span | None) -> Any:
        vd = vdev.vdevice if vdev is not None else None
        match ty:
            case ast.TensorType(shape=shape, dtype=dtype):
                dims = []
                for d in shape:
                    if isinstance(d, ast.IntImm):
                        dims.append(d.value)
                    elif isinstance(d, int):
                        dims.append(d)
                    else:
                        raise UnsupportedConstruct("dynamic shape", span, f"dimension {d!r}")
                return relax.TensorType(dims, dtype, vdevice=vd)
            case ast.TupleType(fields=fields):
                return relax.TupleType([self.relax_type(f, vdev, span) for f in fields])
            case ast.FuncType():
                raise UnsupportedConstruct("higher-order function parameter", span)
            case ast.TypeCall() | ast.GlobalTypeVar():
                raise UnsupportedConstruct("algebraic data type", span)
            case ast.RefType():
                raise UnsupportedConstruct("reference", span)
            case None:
                raise UnsupportedConstruct("parameter without a type annotation", span)
        raise UnsupportedConstruct(f"type {type(ty).__name__}", span)

    # ---------------------------------------------------------------- module

    def lower_module(self) -> tvm.IRModule:
        module = self.module
        if module.type_definitions:
            td = module.type_definitions[0]
            raise UnsupportedConstruct(f"algebraic data type {td.header.name}", td.span)
        functions = list(module.functions)
        if module.expr is not None:
            if isinstance(module.expr, Function):
                functions.append((GlobalVar("main"), module.expr))
            else:
                raise UnsupportedConstruct("a bare expression module", module.expr.span, "wrap it in @main")
        self.check_constructs([f for _, f in functions])
        self.collect_vdevices()
        for gv, func in self.call_order(functions):
            self.lower_global(gv.name, func)
        mod = self.bb.get()
        if self.vdevices:
            mod.update_global_info("vdevice", [info.vdevice for info in self.vdevice_list()])
        return mod

    def vdevice_list(self) -> list[VDeviceInfo]:
        return sorted(self.vdevices.values(), key=lambda i: i.index)

    def check_constructs(self, roots: list[Function]) -> None:
        for node in pre_order(roots):
            match node:
                case Match():
                    raise UnsupportedConstruct("match", node.span)
                case Constructor():
                    raise UnsupportedConstruct(f"ADT constructor {node.name}", node.span)
                case ast.RefCreate() | ast.RefRead() | ast.RefWrite():
                    raise UnsupportedConstruct("reference", node.span)

    def call_order(self, functions: list[tuple[GlobalVar, Function]]) -> list[tuple[GlobalVar, Function]]:
        """Global functions with callees before callers (iterative DFS);
        recursion between globals is unsupported."""
        by_name = {gv.name: (gv, f) for gv, f in functions}
        callees: dict[str, list[str]] = {}
        for gv, func in functions:
            names = []
            for node in pre_order(func):
                if isinstance(node, GlobalVar):
                    if node.name not in by_name:
                        raise BridgeError(f"call of undefined global @{node.name}", node.span)
                    names.append(node.name)
            callees[gv.name] = names
        order: list[tuple[GlobalVar, Function]] = []
        state: dict[str, int] = {}  # 1 on the stack, 2 done
        for gv, _ in functions:
            if gv.name in state:
                continue
            stack: list[tuple[str, int]] = [(gv.name, 0)]
            state[gv.name] = 1
            while stack:
                name, i = stack.pop()
                if i < len(callees[name]):
                    stack.append((name, i + 1))
                    callee = callees[name][i]
                    if state.get(callee) == 1:
                        raise UnsupportedConstruct(
                            "recursive global function", by_name[callee][1].span, f"@{callee}"
                        )
                    if callee not in state:
                        state[callee] = 1
                        stack.append((callee, 0))
                else:
                    state[name] = 2
                    order.append(by_name[name])
        return order

    def lower_global(self, name: str, func: Function) -> None:
        result_device = (
            self.vdevice(func.virtual_device, func.span) if func.virtual_device is not None else None
        )
        params = []
        memo: Memo = ChainMap()
        for p in func.params:
            vdev = self.vdevice(p.virtual_device, p.span) if p.virtual_device is not None else result_device
            rv = relax.Var(p.name, self.relax_type(p.type_annotation, vdev, p.span))
            memo[id(p)] = rv
            params.append(rv)
        use_dataflow = not any(isinstance(n, If) for n in pre_order(func.body))
        with self.bb.function(name, params):
            if use_dataflow:
                with self.bb.dataflow():
                    out = self.lower_body(func, memo, result_device)
                    out = self.bb.emit_output(out)
            else:
                out = self.lower_body(func, memo, result_device)
            self.bb.emit_func_output(out)
        self.global_vars[name] = self.bb.get().get_global_var(name)

    def lower_body(self, func: Function, memo: Memo, result_device: VDeviceInfo | None) -> relax.Expr:
        value = self.lower_expr(func.body, memo)
        if isinstance(value, _LocalFunction):
            raise UnsupportedConstruct("function returning a function", func.span)
        return self.place(value, result_device, func.span, copy=True)

    # ---------------------------------------------------------------- devices of values

    def place(
        self, value: relax.Expr, vdev: VDeviceInfo | None, span: Span | None, *, copy: bool
    ) -> relax.Expr:
        """`value` on `vdev`: unchanged when it is already there, a hint when
        its device is unknown, and a copy (`copy=True`) or an error when it
        is on another device."""
        if vdev is None:
            return value
        ty = value.ty
        if not isinstance(ty, relax.TensorType):
            return value  # tuples carry their fields' devices
        have = ty.vdevice
        if isinstance(value, tvm.ir.expr.Constant):
            return self.bb.emit(relax.op.to_vdevice(value, vdev.vdevice))
        if have is None:
            dev = tvm.runtime.Device(vdev.device_type, vdev.device_id)
            return self.bb.emit(relax.op.hint_on_device(value, dev, vdev.memory_scope))
        if self._same(have, vdev):
            return value
        if copy:
            return self.copy_to(value, vdev)
        raise BridgeError(f"value is on {have} but the plan puts it on {vdev.vdevice}", span)

    def colocate(self, args: list[relax.Expr], span: Span | None) -> list[relax.Expr]:
        """Operator arguments of unknown device (constants, values computed
        from constants only) put on the device of the other arguments."""
        device = None
        for arg in args:
            vd = getattr(arg.ty, "vdevice", None)
            if vd is not None:
                device = self._info_of(vd)
                break
        if device is None:
            return args
        return [
            self.place(a, device, span, copy=True)
            if isinstance(a.ty, relax.TensorType) and a.ty.vdevice is None
            else a
            for a in args
        ]

    def _info_of(self, vd: Any) -> VDeviceInfo | None:
        for info in self.vdevices.values():
            if self._same(vd, info):
                return info
        return None

    def copy_to(self, value: relax.Expr, vdev: VDeviceInfo) -> relax.Expr:
        """`R.to_vdevice` of a tensor; a tuple is copied field by field."""
        ty = value.ty
        if isinstance(ty, relax.TupleType):
            fields = [
                self.copy_to(self.bb.emit(relax.TupleGetItem(value, i)), vdev) for i in range(len(ty.fields))
            ]
            return self.bb.emit(relax.Tuple(fields))
        return self.bb.emit(relax.op.to_vdevice(value, vdev.vdevice))

    def _same(self, have: Any, vdev: VDeviceInfo) -> bool:
        # VDevice.same_as recurses forever in TVM 0.27: compare the fields.
        return (
            int(have.vdevice_id) == vdev.device_id
            and str(have.memory_scope) == vdev.memory_scope
            and str(have.target.kind.name) == vdev.target["kind"]
        )

    # ---------------------------------------------------------------- expressions

    def lower_expr(self, root: ast.Expr, memo: Memo) -> Any:
        """Lower `root` into the current block; returns its Relax value (or a
        `_LocalFunction`). Nodes already in `memo` (this or an enclosing
        scope) are reused; `if` branches and function bodies are not entered."""

        def pre(node: ast.Expr) -> bool:
            match node:
                case Var():
                    raise BridgeError(f"unbound variable %{node.name}", node.span)
                case Function():
                    memo[id(node)] = _LocalFunction(node)
                    return False
                case Match():
                    return False  # unsupported: `finish` says so before anything inside is lowered
            return True

        def bind(node: ast.Expr, index: int) -> None:
            assert isinstance(node, Let)
            memo[id(node.var)] = memo[id(node.value)]

        def post(node: ast.Expr) -> None:
            if not isinstance(node, Function):
                memo[id(node)] = self.finish(node, memo)

        walk(root, pre=pre, post=post, bind=bind, kids=_lowered_children, done=memo)
        return memo[id(root)]

    def tensor_value(self, value: Any, span: Span | None) -> relax.Expr:
        if isinstance(value, _LocalFunction):
            raise UnsupportedConstruct("function used as a value", span, "only direct calls are lowered")
        return value

    def finish(self, node: ast.Expr, memo: Memo) -> Any:
        bb = self.bb
        match node:
            case Constant():
                # Left unbound: each use puts it on the device of that use.
                return relax.const(self.constant_data(node))
            case Let(body=body):
                return memo[id(body)]
            case ast.Tuple(fields=fields):
                return bb.emit(relax.Tuple([self.tensor_value(memo[id(f)], node.span) for f in fields]))
            case ast.TupleGetItem(tuple_value=t, index=i):
                value = self.tensor_value(memo[id(t)], node.span)
                return bb.emit(relax.TupleGetItem(value, i))
            case If():
                return self.lower_if(node, memo)
            case Call():
                return self.lower_call(node, memo)
            case GlobalVar():
                raise UnsupportedConstruct("global function used as a value", node.span, f"@{node.name}")
            case Op():
                raise UnsupportedConstruct("operator used as a value", node.span, node.name)
            case Constructor():
                raise UnsupportedConstruct(f"ADT constructor {node.name}", node.span)
            case Match():
                raise UnsupportedConstruct("match", node.span)
            case ast.RefCreate() | ast.RefRead() | ast.RefWrite():
                raise UnsupportedConstruct("reference", node.span)
        raise UnsupportedConstruct(type(node).__name__, node.span)

    def constant_data(self, node: Constant) -> np.ndarray:
        data = node.data
        if data is None and node.meta_index is not None:
            table = self.module.meta.get("relay.Constant", [])
            if 0 <= node.meta_index < len(table):
                entry = table[node.meta_index]
                data = entry.data if isinstance(entry, Constant) else entry
        if not isinstance(data, ast.NDArray):
            raise BridgeError("constant without data (metadata section missing?)", node.span)
        return np.array(data.to_numpy())

    def lower_if(self, node: If, memo: Memo) -> relax.Expr:
        cond = self.tensor_value(memo[id(node.cond)], node.span)
        branches = []
        for branch in (node.true_branch, node.false_branch):
            self.bb._begin_binding_block()
            value = self.tensor_value(self.lower_expr(branch, memo.new_child()), branch.span)
            block = self.bb._end_block()
            branches.append(relax.SeqExpr([block], value))
        return self.bb.emit(relax.If(cond, branches[0], branches[1]))

    def lower_call(self, node: Call, memo: Memo) -> Any:
        op = node.op
        args = [self.tensor_value(memo[id(a)], a.span) for a in node.args]
        match op:
            case Op(name=ast.ON_DEVICE):
                props = ast.on_device_props(node)
                assert props is not None
                vdev = self.vdevice(props.virtual_device, node.span)
                return self.place(args[0], vdev, node.span, copy=True)
            case Op(name=ast.DEVICE_COPY):
                props2 = ast.device_copy_props(node)
                assert props2 is not None
                dst = self.vdevice(props2.dst, node.span)
                if dst is None:
                    raise BridgeError("device_copy without a destination device", node.span)
                src = self.vdevice(props2.src, node.span)
                value = self.place(args[0], src, node.span, copy=True) if src is not None else args[0]
                return self.copy_to(value, dst)
            case Op(name=name):
                emitter = self.convert_map.get(name)
                if emitter is None:
                    raise UnsupportedOperator(name, node.span)
                args = self.colocate(args, node.span)
                ctx = ops.EmitContext(self.bb, name, node.span, node.attrs or ast.Attrs(), self.resolve_meta)
                try:
                    expr = emitter(ctx, args)
                except BridgeError:
                    raise
                except Exception as exc:  # TVM's type inference rejects the call
                    first = str(exc).strip().splitlines()
                    raise BridgeError(
                        f"{name}: {first[-1] if first else type(exc).__name__}", node.span
                    ) from exc
                return self.emit(expr, node.span, name)
            case GlobalVar(name=name):
                # Inlined like a local function: Relax's type check of a call
                # would reject arguments whose vdevice is only known after
                # RealizeVDevice / LegalizeOps (recursion is rejected earlier).
                return self.inline(self.module[name], args, ChainMap(), node.span)
            case Function():
                return self.inline(op, args, memo, node.span)
            case Var():
                callee = memo[id(op)]
                if not isinstance(callee, _LocalFunction):
                    raise UnsupportedConstruct("call of a non-function value", node.span)
                return self.inline(callee.func, args, memo, node.span)
        raise UnsupportedConstruct(f"call of {type(op).__name__}", node.span)

    def emit(self, expr: relax.Expr, span: Span | None, what: str) -> relax.Expr:
        if isinstance(expr, relax.Var):
            return expr
        try:
            return self.bb.emit(expr)
        except Exception as exc:  # normalisation runs Relax type inference
            lines = str(exc).strip().splitlines()
            raise BridgeError(f"{what}: {lines[-1] if lines else type(exc).__name__}", span) from exc

    def inline(self, func: Function, args: list[relax.Expr], memo: Memo, span: Span | None) -> Any:
        """A call of a local function: its body lowered with the parameters
        bound to the arguments (each on the parameter's device)."""
        if id(func) in self.inlining:
            raise UnsupportedConstruct("recursive local function", func.span)
        if len(args) != len(func.params):
            raise BridgeError(f"function of {len(func.params)} parameters called with {len(args)}", span)
        scope = memo.new_child()
        for param, arg in zip(func.params, args):
            vdev = (
                self.vdevice(param.virtual_device, param.span) if param.virtual_device is not None else None
            )
            scope[id(param)] = self.place(arg, vdev, param.span, copy=True)
        self.inlining.add(id(func))
        try:
            value = self.lower_expr(func.body, scope)
        finally:
            self.inlining.discard(id(func))
        if isinstance(value, _LocalFunction):
            raise UnsupportedConstruct("function returning a function", func.span)
        result = self.vdevice(func.virtual_device, func.span) if func.virtual_device is not None else None
        return self.place(value, result, func.span, copy=True)


def to_relax(
    planned_module: ast.Module,
    targets: Mapping[str | int, TargetSpec] | None = None,
    *,
    convert_map: Mapping[str, ops.Emitter] | None = None,
    cuda_arch: str | None = None,
) -> tvm.IRModule:
    """Lower a planned Relay module to a Relax IRModule with virtual devices.

    `targets` maps device type names (`cpu`, `cuda`) to targets (Relay-era
    strings or TVM dicts) for virtual devices that carry no target of their
    own. Raises UnsupportedConstruct / UnsupportedOperator (RelayErrors with
    spans) for what Relax cannot express.
    """
    lowerer = _Lowerer(planned_module, targets, convert_map or ops.convert_map, cuda_arch)
    return lowerer.lower_module()


def vdevices_of(mod: tvm.IRModule) -> list[Any]:
    """The `relax.VDevice`s of a lowered module, in `global_infos` order."""
    infos = mod.global_infos
    if infos is None or "vdevice" not in infos:
        return []
    return list(infos["vdevice"])
