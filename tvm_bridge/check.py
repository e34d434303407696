"""Checking a heterogeneous build: the same program without its device
annotations, built for one CPU, must compute the same result."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from relay import ast
from relay.device import VirtualDevice
from relay.traverse import pre_order, rewrite

from .errors import BridgeError


class CheckInputError(BridgeError):
    """The run check cannot make inputs for a parameter (not a tensor of
    static shape): the caller's mistake, to be reported with what to change."""


def is_planned(module: ast.Module) -> bool:
    """True when every global function has a result device and every
    parameter a device, i.e. the module is a planner's output."""
    if not module.functions:
        return False
    for _, func in module.functions:
        if func.virtual_device is None or any(p.virtual_device is None for p in func.params):
            return False
    return True


def retarget(module: ast.Module, mapping: Mapping[int, VirtualDevice] | None) -> ast.Module:
    """The module with every virtual device of device type `t` replaced by
    `mapping[t]` (parameters, function results, on_device/device_copy
    attributes, the meta table), e.g. a cpu/cuda plan as cpu:0/cpu:1.
    With `mapping=None` every annotation is removed (on_device and
    device_copy calls by their argument): the unplanned program."""

    def convert(value: Any) -> Any:
        if mapping is None:
            return None
        if isinstance(value, ast.MetaRef):
            value = module.meta["VirtualDevice"][value.index]
        if (
            isinstance(value, VirtualDevice)
            and value.device_type is not None
            and value.device_type in mapping
        ):
            return mapping[value.device_type]
        return value

    new_vars: dict[int, ast.Var] = {}

    def var(v: ast.Var) -> ast.Var:
        if v.virtual_device is None:
            return v
        if id(v) not in new_vars:
            new_vars[id(v)] = dataclasses.replace(v, virtual_device=convert(v.virtual_device))
        return new_vars[id(v)]

    def visit(original: ast.Expr, rebuilt: ast.Expr) -> ast.Expr:
        match rebuilt:
            case ast.Var():
                return var(rebuilt)
            case ast.Function():
                return dataclasses.replace(
                    rebuilt,
                    params=tuple(var(p) for p in rebuilt.params),
                    virtual_device=convert(rebuilt.virtual_device),
                )
            case ast.Let():
                return dataclasses.replace(rebuilt, var=var(rebuilt.var))
            case ast.Call(op=ast.Op(name=name), attrs=attrs) if name in (ast.ON_DEVICE, ast.DEVICE_COPY):
                if mapping is None:
                    return rebuilt.args[0]
                fields = tuple((k, convert(v)) for k, v in (attrs or ast.Attrs()).fields)
                return dataclasses.replace(
                    rebuilt, attrs=ast.Attrs(fields, attrs.type_key if attrs else None)
                )
        return rebuilt

    functions = []
    for gv, func in module.functions:
        new = rewrite(func, visit)
        assert isinstance(new, ast.Function)
        functions.append((gv, new))
    meta = dict(module.meta)
    meta["VirtualDevice"] = (
        [] if mapping is None else [convert(v) for v in module.meta.get("VirtualDevice", [])]
    )
    return ast.Module(tuple(functions), module.type_definitions, meta)


def strip_devices(module: ast.Module) -> ast.Module:
    """The program without any device annotation."""
    return retarget(module, None)


def random_inputs(func: ast.Function, seed: int = 0) -> list[np.ndarray]:
    """Inputs for `func`'s parameters: standard normal, scaled by fan-in for
    weights, positive for batch-norm variances, random booleans, and 0 or 1 for
    integers (token ids, positions, masks: an index valid in any table, where a
    normal draw gave negative ones and a float scale failed on the integer array)."""
    rng = np.random.default_rng(seed)
    out = []
    for p in func.params:
        ty = p.type_annotation
        if not isinstance(ty, ast.TensorType):
            raise CheckInputError(
                f"parameter %{p.name} is not a tensor ({ty}); the run check makes random tensors "
                "only: give every parameter of @main a Tensor type, or turn the run check off",
                p.span,
            )
        if not all(isinstance(d, (int, ast.IntImm)) for d in ty.shape):
            raise CheckInputError(
                f"parameter %{p.name} has a symbolic shape ({ty}); the run check needs static "
                "shapes: give every dimension a number, or turn the run check off",
                p.span,
            )
        shape = tuple(d.value if isinstance(d, ast.IntImm) else int(d) for d in ty.shape)  # type: ignore[arg-type]
        try:
            out.append(_random_input(rng, p.name, shape, ty.dtype))
        except (ValueError, MemoryError):  # numpy cannot hold it (`2 ** 62` floats), or not here
            size = math.prod(shape) * np.dtype(ty.dtype).itemsize
            raise CheckInputError(
                f"parameter %{p.name} ({ty}) is too large for the run check's random inputs "
                f"({size} bytes): turn the run check off",
                p.span,
            ) from None
    return out


def _random_input(rng: np.random.Generator, name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return np.array(rng.random(shape) < 0.5)
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(0, 2, size=shape).astype(dtype)
    value = rng.standard_normal(shape).astype(dtype)
    if re.search(r"(moving_var|_var$)", name):
        value = np.abs(value) + 0.5
    elif len(shape) > 1 and name != "data":
        value *= 1.0 / np.sqrt(max(1, int(np.prod(shape[1:]))))
    return value


def max_abs_error(a: Any, b: Any) -> float:
    """Largest absolute difference between two results (tuples compared field by field)."""
    if isinstance(a, tuple):
        if not isinstance(b, tuple) or len(a) != len(b):
            return float("inf")
        return max((max_abs_error(x, y) for x, y in zip(a, b)), default=0.0)
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0.0))


def device_kinds(module: ast.Module) -> set[int]:
    """The device types a module's annotations mention."""
    kinds: set[int] = set()
    for vd in module.meta.get("VirtualDevice", []):
        if isinstance(vd, VirtualDevice) and vd.device_type is not None:
            kinds.add(vd.device_type)
    for node in pre_order([f for _, f in module.functions]):
        vd = node.virtual_device if isinstance(node, (ast.Var, ast.Function)) else None
        if isinstance(vd, VirtualDevice) and vd.device_type is not None:
            kinds.add(vd.device_type)
    return kinds


def _tensor_types(ty: Any) -> list[Any]:
    """The tensor types in a Relax type (tuples flattened, without recursion)."""
    from tvm import relax

    out, work = [], [ty]
    while work:
        item = work.pop()
        if isinstance(item, relax.TupleType):
            work.extend(item.fields)
        elif isinstance(item, relax.TensorType):
            out.append(item)
    return out


def _static_shape(ty: Any) -> list[int | None] | None:
    """A tensor type's dimensions (None for a symbolic one); None when its rank is unknown."""
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return None
    return [int(v.value) if hasattr(v, "value") else None for v in values]


def _bytes_of(ty: Any) -> int:
    """The bytes of a tensor type with a static shape (0 when it has none)."""
    shape = _static_shape(ty)
    if shape is None or any(d is None for d in shape):
        return 0
    try:
        width = np.dtype(str(ty.dtype)).itemsize
    except TypeError:
        width = 8
    return math.prod(d for d in shape if d is not None) * width


def output_spec(mod: Any, func: str = "main") -> Any:
    """What `func` of a Relax module returns, as the sandbox's answer reader checks it:
    `{"tuple": [...]}` or `{"dtype": str | None, "shape": [int | None, ...] | None}`;
    None when the module has no such function. Built without recursion."""
    from tvm import relax

    found = [f for gv, f in mod.functions_items() if gv.name_hint == func and isinstance(f, relax.Function)]
    if not found:
        return None
    root: dict[str, Any] = {}
    work: list[tuple[Any, dict[str, Any]]] = [(found[0].ret_ty, root)]
    while work:
        ty, into = work.pop()
        if isinstance(ty, relax.TupleType):
            fields: list[dict[str, Any]] = [{} for _ in ty.fields]
            into["tuple"] = fields
            work.extend(zip(ty.fields, fields))
        elif isinstance(ty, relax.TensorType):
            dtype = str(ty.dtype)
            into["dtype"] = dtype if dtype and dtype != "void" else None
            into["shape"] = _static_shape(ty)
        else:
            into.update({"dtype": None, "shape": None})
    return root


def run_check_bytes(mod: Any, func: str = "main") -> int:
    """An estimate of the tensor bytes a run check of `func` holds: its inputs once (drawn
    in the compile process, read by the sandboxed child) and, for each of the two builds
    (the planned library and its reference), every tensor the function binds: its
    parameters, each binding's value and its result. Symbolic shapes count nothing."""
    from tvm import relax

    found = [f for gv, f in mod.functions_items() if gv.name_hint == func and isinstance(f, relax.Function)]
    if not found:
        return 0
    main = found[0]
    inputs = sum(_bytes_of(t) for p in main.params for t in _tensor_types(p.ty))
    values = inputs
    body = main.body
    for block in getattr(body, "blocks", ()):
        for binding in block.bindings:
            values += sum(_bytes_of(t) for t in _tensor_types(binding.var.ty))
    return inputs + 2 * values


def input_bytes(func: ast.Function) -> int:
    """The bytes of the random inputs `random_inputs(func)` would draw (parameters of static
    tensor types; others count nothing), known before any is drawn."""
    total = 0
    for p in func.params:
        ty = p.type_annotation
        if not isinstance(ty, ast.TensorType) or not all(isinstance(d, (int, ast.IntImm)) for d in ty.shape):
            continue
        dims = [int(d.value) if isinstance(d, ast.IntImm) else int(d) for d in ty.shape]  # type: ignore[arg-type]
        try:
            width = np.dtype(ty.dtype).itemsize
        except TypeError:
            width = 8
        total += math.prod(dims) * width
    return total


# The most tensors one value of a compiled module may hold, its tuples flattened (a
# tuple listing the one below twice, 40 levels deep, is 2**40 tensors: TVM's passes
# walk every one).
MAX_TUPLE_TENSORS = 10_000


def widest_tuple(mod: Any) -> int:
    """The most tensors any parameter, binding or result of a Relax function of `mod`
    holds with its tuple types flattened, counted with shared sub-types remembered
    (linear in the module, however deep the sharing)."""
    from tvm import relax

    counts: dict[int, int] = {}  # by the object's address: shared sub-types counted once

    def leaves(ty: Any) -> int:
        work = [ty]
        while work:
            item = work[-1]
            key = item.__chandle__()
            if key in counts:
                work.pop()
                continue
            if isinstance(item, relax.TupleType):
                fields = list(item.fields)
                missing = [f for f in fields if f.__chandle__() not in counts]
                if missing:
                    work.extend(missing)
                    continue
                counts[key] = sum(counts[f.__chandle__()] for f in fields)
            else:
                counts[key] = 1
            work.pop()
        return counts[ty.__chandle__()]

    widest = 0
    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        types = [p.ty for p in func.params] + [func.ret_ty]
        for block in getattr(func.body, "blocks", ()):
            types.extend(binding.var.ty for binding in block.bindings)
        for ty in types:
            if ty is not None:
                widest = max(widest, leaves(ty))
    return widest


def relay_widest_tuple(module: ast.Module) -> int:
    """`widest_tuple` for a Relay module, before it is lowered (TVM's block builder walks
    every flattened tensor of a value's type when a function is finished): each tuple
    counts its fields' tensors, a projection of a tuple its field's, a let variable its
    value's, every other node one. Each node is visited once (`post_order`)."""
    from relay.traverse import post_order

    width: dict[int, int] = {}
    widest = 0
    for node in post_order([f for _, f in module.functions]):
        match node:
            case ast.Tuple(fields=fields):
                count = sum(width.get(id(f), 1) for f in fields)
            case ast.TupleGetItem(tuple_value=ast.Tuple(fields=fields) as value, index=index) if 0 <= index < len(
                fields
            ):
                count = width.get(id(fields[index]), 1) if id(value) in width else 1
            case ast.Let(var=var, value=value, body=body):
                width[id(var)] = width.get(id(value), 1)
                count = width.get(id(body), 1)
            case _:
                count = width.get(id(node), 1)
        width[id(node)] = count
        widest = max(widest, count)
    return widest
