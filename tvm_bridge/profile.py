"""`devplan profile`: measure every distinct operator call of a module on the
devices present and write the optimizer's cost table.

A key is the optimizer's own (the caller passes `solver.cost_key` and the
optimizer's type view, so this package does not import the solver), the same string
the optimizer looks up, so a table written here replaces the roofline for
exactly the calls it measured. Each key is compiled as a one-operator
function (its tensor arguments become parameters) for each device's target
(`llvm` for cpu, `cuda` with the GPU's own arch) and timed with
`tvm_bridge.timed_run` on random inputs. The table is
`{"version": 1, "entries": [{"key": KEY, "device": "cpu", "ns": 12345}, ...]}`.

Calls that cannot be measured (a type that is not known and static, an
operator the bridge does not lower, a compile failure) are listed as
`Skipped` with the reason; the optimizer falls back to the roofline there.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import tvm

import relay
from relay import ast
from relay.span import Span
from relay.traverse import post_order

from .build import compile, timed_run
from .check import random_inputs
from .errors import BridgeError
from .lower import to_relax

log = logging.getLogger(__name__)

TypeOf = Callable[[ast.Expr], ast.Type | None]
"""The type of an expression, None where it is not known."""
KeyFn = Callable[[str, Sequence[ast.Type], ast.Attrs | None], str]
"""The cost-table key of one call: operator name, argument types, attributes."""

TABLE_VERSION = 1

# Operators that are placement annotations or run on the host by TVM's rules:
# they have no kernel of their own to time.
_NOT_KERNELS = ("on_device", "device_copy", "shape_of")
_HOST_PREFIXES = ("vm.", "memory.")


@dataclass(frozen=True)
class CallKey:
    """One distinct (operator, argument types, attributes) of a module."""

    key: str
    op: str
    arg_types: tuple[ast.Type, ...]
    attrs: ast.Attrs | None
    span: Span | None  # the first call with this key
    calls: int  # how many calls of the module share it


@dataclass(frozen=True)
class Skipped:
    """A key (or a whole call) that was not measured, and why."""

    op: str
    reason: str
    span: Span | None
    key: str | None = None
    device: str | None = None


@dataclass(frozen=True)
class Profile:
    """The measured table plus what could not be measured."""

    entries: tuple[dict[str, Any], ...]
    skipped: tuple[Skipped, ...]
    keys: tuple[CallKey, ...]
    devices: tuple[str, ...]  # the devices measured
    missing: tuple[str, ...]  # requested devices not present, with the reason

    def table(self) -> dict[str, Any]:
        """The cost-table JSON document the optimizer reads (`cost_table`)."""
        return {"version": TABLE_VERSION, "entries": [dict(e) for e in self.entries]}


def _is_kernel(name: str) -> bool:
    return name not in _NOT_KERNELS and not name.startswith(_HOST_PREFIXES)


def _static_tensors(ty: ast.Type) -> list[ast.TensorType] | None:
    """The tensors of an argument type (a tuple argument gives several), or
    None when a shape is not static or the type is not tensors."""
    if isinstance(ty, ast.TensorType):
        return [ty] if all(isinstance(d, int) for d in ty.shape) else None
    if isinstance(ty, ast.TupleType):
        out: list[ast.TensorType] = []
        for field in ty.fields:
            inner = _static_tensors(field)
            if inner is None:
                return None
            out.extend(inner)
        return out
    return None


def distinct_calls(module: ast.Module, type_of: TypeOf, key_of: KeyFn) -> tuple[list[CallKey], list[Skipped]]:
    """Every distinct kernel call of `module` (first occurrence order), by
    `key_of`, and the calls that cannot be keyed. Pass the optimizer's own type
    view and key (`solver.module_types`, `solver.cost_key`) so the keys agree."""
    found: dict[str, CallKey] = {}
    skipped: list[Skipped] = []
    roots: list[ast.Expr] = [func for _, func in module.functions]
    if module.expr is not None:
        roots.append(module.expr)
    for node in post_order(roots):
        if not (isinstance(node, ast.Call) and isinstance(node.op, ast.Op) and _is_kernel(node.op.name)):
            continue
        name = node.op.name
        found_types = [type_of(arg) for arg in node.args]
        arg_types = tuple(t for t in found_types if t is not None)
        if len(arg_types) < len(found_types) or any(_static_tensors(t) is None for t in arg_types):
            skipped.append(Skipped(name, "argument type not known or not static", node.span))
            continue
        key = key_of(name, arg_types, node.attrs)
        seen = found.get(key)
        if seen is None:
            found[key] = CallKey(key, name, arg_types, node.attrs, node.span, 1)
        else:
            found[key] = dataclasses.replace(seen, calls=seen.calls + 1)
    return list(found.values()), skipped


def one_op_module(call: CallKey) -> ast.Module:
    """`@main` taking the call's tensors as parameters and applying the
    operator once (a tuple argument is rebuilt from its tensors)."""
    params: list[ast.Var] = []
    args: list[ast.Expr] = []

    def param(ty: ast.TensorType) -> ast.Var:
        var = ast.Var(f"a{len(params)}", ty)
        params.append(var)
        return var

    for ty in call.arg_types:
        if isinstance(ty, ast.TensorType):
            args.append(param(ty))
        else:
            tensors = _static_tensors(ty)
            assert tensors is not None  # distinct_calls keeps static types only
            args.append(ast.Tuple(tuple(param(t) for t in tensors)))
    body = ast.Call(ast.op(call.op), tuple(args), call.attrs)
    func = ast.Function(tuple(params), body)
    return ast.Module(functions=((ast.GlobalVar("main"), func),))


@dataclass(frozen=True)
class DeviceSlot:
    """A device to measure on: its request name, target and runtime device."""

    name: str
    target: str
    device: Any
    cuda_arch: str | None = None


def present_devices(names: Iterable[str]) -> tuple[list[DeviceSlot], list[str]]:
    """The requested devices that exist here (`cpu` always; `cuda`/`cuda:N`
    only with that GPU) and a note for each one that does not."""
    slots: list[DeviceSlot] = []
    missing: list[str] = []
    for name in names:
        kind, _, ident = name.strip().partition(":")
        index = int(ident) if ident.isdigit() else 0
        if kind == "cpu":
            slots.append(DeviceSlot(name, "llvm", tvm.cpu(index)))
            continue
        if kind == "cuda":
            dev = tvm.cuda(index)
            if dev.exist:
                arch = "sm_" + str(dev.compute_version).replace(".", "")
                slots.append(DeviceSlot(name, "cuda", dev, arch))
            else:
                missing.append(f"{name}: no such GPU on this machine")
            continue
        missing.append(f"{name}: only cpu and cuda devices can be profiled")
    return slots, missing


def measure(call: CallKey, slot: DeviceSlot, repeat: int) -> int:
    """Median run time of the call's one-operator function on `slot`, in ns.
    Raises BridgeError (or a RelayError from lowering) when it cannot run."""
    module = one_op_module(call)
    compiled = compile(to_relax(module), target=slot.target, cuda_arch=slot.cuda_arch)
    compiled = dataclasses.replace(compiled, devices=[slot.device])
    inputs = random_inputs(module.functions[0][1])
    _, ms = timed_run(compiled, inputs, repeat)
    return max(1, math.ceil(ms * 1e6))


def profile(
    module: ast.Module,
    devices: Sequence[str] = ("cpu",),
    *,
    type_of: TypeOf,
    key_of: KeyFn,
    repeat: int = 10,
    progress: Callable[[str], None] | None = None,
) -> Profile:
    """Measure every distinct call of `module` on each device present."""
    keys, skipped = distinct_calls(module, type_of, key_of)
    slots, missing = present_devices(devices)
    entries: list[dict[str, Any]] = []
    for call in keys:
        for slot in slots:
            try:
                ns = measure(call, slot, repeat)
            except (BridgeError, relay.RelayError) as err:
                skipped.append(Skipped(call.op, str(err).splitlines()[0], call.span, call.key, slot.name))
                continue
            entries.append({"key": call.key, "device": slot.name, "ns": ns})
            if progress is not None:
                progress(f"{slot.name} {call.op} x{call.calls}: {ns / 1e3:.1f} us")
    return Profile(tuple(entries), tuple(skipped), tuple(keys), tuple(s.name for s in slots), tuple(missing))
