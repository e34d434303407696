"""Read each operator call's device from a planned module's lexical form alone
(docs/planning.md, section 5), independently of the planner's own classes."""

from __future__ import annotations

from collections.abc import Iterator

from relay.ast import (
    Call,
    Expr,
    Function,
    Let,
    Module,
    Op,
    Tuple,
    TupleGetItem,
    device_copy_props,
    on_device_props,
)
from relay.device import VirtualDevice, device_name


def operator_devices(module: Module) -> Iterator[tuple[Call, str]]:
    """(operator call, device name) for every primitive operator call of every
    global function, read from function attributes, `on_device` and
    `device_copy` wrappers (enough for the corpus models: no closures)."""
    seen: dict[int, str] = {}
    for _, func in module.functions:
        assert isinstance(func.virtual_device, VirtualDevice), "planned functions carry their result device"
        stack: list[tuple[Expr, VirtualDevice]] = [(func.body, func.virtual_device)]
        while stack:
            node, vd = stack.pop()
            if isinstance(node, Call):
                od = on_device_props(node)
                if od is not None:
                    assert isinstance(od.virtual_device, VirtualDevice)
                    stack.append((od.body, od.virtual_device))
                    continue
                dc = device_copy_props(node)
                if dc is not None:
                    assert isinstance(dc.src, VirtualDevice)
                    stack.append((dc.body, dc.src))
                    continue
                if isinstance(node.op, Op):
                    name = device_name(vd)
                    previous = seen.get(id(node))
                    assert previous in (None, name), f"{node.op.name} read on {previous} and {name}"
                    if previous is None:
                        seen[id(node)] = name
                        yield node, name
                stack.extend((a, vd) for a in node.args)
            elif isinstance(node, Let):
                stack.append((node.value, vd))
                stack.append((node.body, vd))
            elif isinstance(node, Tuple):
                stack.extend((f, vd) for f in node.fields)
            elif isinstance(node, TupleGetItem):
                stack.append((node.tuple_value, vd))
            elif isinstance(node, Function):
                raise TypeError("closures are not read by this helper")
