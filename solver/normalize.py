"""Normalisations applied before constraint collection (docs/planning.md, section 3).

- `rewrite_on_devices`: an `on_device` that is a function body or a let-bound
  value also constrains its result; `on_device(e).i` becomes `on_device(on_device(e).i)`
  (the projection is copied, not the whole tuple).
- `copy_conflicting_inputs`: TVM's "conflicting inputs" walk (PR #15090): call
  arguments whose recorded device disagrees get a `device_copy` first.
- `maybe_on_device`: TVM's MaybeOnDevice, shared with the rewrite step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from relay import ast
from relay.ast import Call, Constructor, Expr, Function, GlobalVar, Let, Op, TupleGetItem, on_device_props
from relay.device import VirtualDevice
from relay.traverse import children, rewrite, walk

from .deadline import MASK, Deadline
from .domains import FREE
from .tvm_reading import tvm_copy_props


def make_on_device(body: Expr, device: VirtualDevice, constrain_result: bool, constrain_body: bool) -> Call:
    """TVM's OnDevice: with neither flag the device is dropped (fully unconstrained)."""
    if not constrain_result and not constrain_body:
        device = FREE
    return ast.on_device(
        body, device, constrain_body=constrain_body, constrain_result=constrain_result, span=body.span
    )


def maybe_on_device(
    body: Expr, device: VirtualDevice, constrain_result: bool = True, constrain_body: bool = True
) -> Expr:
    """Wrap `body` in `on_device` unless its device is already evident (TVM's MaybeOnDevice)."""
    if device.is_fully_unconstrained:
        return body
    if isinstance(body, (Op, Constructor, GlobalVar, ast.Var, Function)):
        return body
    props = on_device_props(body)
    if props is not None:
        inner = props.virtual_device
        constrain_outer = constrain_result
        constrain_inner = props.constrain_body
        chosen = device if (constrain_inner or constrain_outer) else inner
        assert isinstance(chosen, VirtualDevice)
        return make_on_device(props.body, chosen, constrain_outer, constrain_inner)
    return make_on_device(body, device, constrain_result, constrain_body)


def _is_normal(expr: Expr) -> bool:
    props = on_device_props(expr)
    return props is not None and props.constrain_body and not props.constrain_result


def normalise_on_device(node: Expr) -> Expr:
    """Phase 0 of TVM's PlanDevices at one node (its children done): an
    `on_device` that is a function body or a let-bound value also constrains
    its result; `on_device(e).i` becomes `on_device(on_device(e).i)`. Any
    other node comes back as is."""
    t = type(node)
    if t is TupleGetItem:
        tgi: TupleGetItem = node  # type: ignore[assignment]
        props = on_device_props(tgi.tuple_value)
        if props is not None and props.constrain_body and not props.constrain_result:
            assert isinstance(props.virtual_device, VirtualDevice)
            return make_on_device(tgi, props.virtual_device, props.constrain_result, props.constrain_body)
        return node
    if t is Let:
        let: Let = node  # type: ignore[assignment]
        if _is_normal(let.value):
            props = on_device_props(let.value)
            assert props is not None and isinstance(props.virtual_device, VirtualDevice)
            return dataclasses.replace(let, value=maybe_on_device(props.body, props.virtual_device))
        return node
    if t is Function:
        func: Function = node  # type: ignore[assignment]
        if _is_normal(func.body):
            props = on_device_props(func.body)
            assert props is not None and isinstance(props.virtual_device, VirtualDevice)
            return dataclasses.replace(func, body=maybe_on_device(props.body, props.virtual_device))
    return node


def may_normalise(node: Expr) -> bool:
    """Whether `normalise_on_device` may change `node`: a projection, let or
    function directly over an `on_device` call (a cheap test, for marking)."""
    t = type(node)
    if t is TupleGetItem:
        child = node.tuple_value  # type: ignore[attr-defined]
    elif t is Let:
        child = node.value  # type: ignore[attr-defined]
    elif t is Function:
        child = node.body  # type: ignore[attr-defined]
    else:
        return False
    return type(child) is Call and type(child.op) is Op and child.op.name == "on_device"


def rewrite_on_devices(func: Function) -> Function:
    """Phase 0 of TVM's PlanDevices on one global function (every node)."""
    out = rewrite(func, lambda original, rebuilt: normalise_on_device(rebuilt))
    assert isinstance(out, Function)
    return out


_WRAPPER_OPS = frozenset({"on_device", "device_copy"})


def _arguments(node: Expr) -> tuple[Expr, ...]:
    return node.args if type(node) is Call else children(node)


class InputConflictCrash(Exception):
    """TVM fails an internal check in the conflicting-inputs walk."""

    def __init__(
        self, call: Call, message: str, arg: Expr | None = None, arg_device: VirtualDevice | None = None
    ) -> None:
        super().__init__(message)
        self.call = call
        self.arg = arg
        self.arg_device = arg_device


def copy_conflicting_inputs(
    functions: list[tuple[GlobalVar, Function]],
    canonical: Callable[[VirtualDevice], VirtualDevice],
    deadline: Deadline | None = None,
) -> tuple[list[tuple[GlobalVar, Function]], int]:
    """TVM's ConflictedNodeFinder + ConflictedNodeRewriter over the given globals.

    Returns the rewritten functions and how many copies were inserted.
    """
    records: dict[int, VirtualDevice] = {}
    conflicted: dict[int, Expr] = {}
    calls: dict[int, Call] = {}

    def update(node: Expr, device: VirtualDevice) -> bool:
        key = id(node)
        old = records.get(key)
        if old is None:
            records[key] = device
            return True
        if old is device:
            return True
        joined = old.join(device)
        if joined is None:
            return False
        records[key] = joined
        return True

    visited = 0

    def record(node: Expr) -> None:
        nonlocal visited
        visited += 1
        if deadline is not None and not visited & MASK:
            deadline.check("conflicting inputs")
        if type(node) is not Call:
            return
        key = id(node)
        calls[key] = node
        call_dev = records.setdefault(key, FREE)
        body_dev = call_dev
        op = node.op
        wrapper = type(op) is Op and op.name in _WRAPPER_OPS
        od = on_device_props(node) if wrapper else None
        dc = tvm_copy_props(node) if wrapper else None  # nested copies read as TVM 0.19 does
        if od is not None and isinstance(od.virtual_device, VirtualDevice):
            if od.constrain_body:
                body_dev = od.virtual_device
            if od.constrain_result:
                call_dev = od.virtual_device
        elif dc is not None and isinstance(dc.src, VirtualDevice) and isinstance(dc.dst, VirtualDevice):
            body_dev = dc.src
            call_dev = dc.dst
        if not update(node, call_dev) and od is None:
            raise InputConflictCrash(node, "mismatched device of a call after iterating its arguments")
        for arg in node.args:
            if not update(arg, body_dev):
                conflicted[id(arg)] = arg

    # TVM's finder visits a call's arguments, not its callee.
    walk([f for _, f in functions], pre=record, kids=_arguments)
    for key in list(conflicted):
        node = conflicted[key]
        if isinstance(node, Call) and ast.is_op(node.op, "on_device"):
            del conflicted[key]
    if not conflicted:
        return functions, 0

    copies = 0

    def visit(original: Expr, rebuilt: Expr) -> Expr:
        nonlocal copies
        if not isinstance(original, Call) or not isinstance(rebuilt, Call):
            return rebuilt
        new_args = list(rebuilt.args)
        changed = rebuilt.args is not original.args
        for i, arg in enumerate(new_args):
            if id(arg) in conflicted and conflicted[id(arg)] is arg:
                src_raw = records.get(id(arg), FREE)
                dst_raw = records.get(id(original), FREE)
                if src_raw.device_type is None and src_raw.target is None:
                    raise InputConflictCrash(original, "conflicting argument whose device is unknown", arg)
                if dst_raw.device_type is None and dst_raw.target is None:
                    raise InputConflictCrash(
                        original, "call with a conflicting argument on an unknown device", arg, src_raw
                    )
                src, dst = canonical(src_raw), canonical(dst_raw)
                if src != dst:
                    new_args[i] = ast.device_copy(arg, src, dst, span=arg.span)
                    copies += 1
                    changed = True
        if not changed and rebuilt.op is original.op:
            return original
        return dataclasses.replace(original, args=tuple(new_args))

    out: list[tuple[GlobalVar, Function]] = []
    for gv, func in functions:
        new = rewrite(func, visit)
        assert isinstance(new, Function)
        out.append((gv, new))
    return out, copies
