"""Type relations of the primitive operators, one table keyed by operator name.

`RELATIONS[name](arg_types, attrs)` gives the type of a call of `name`: the
argument types in order and the call's attributes completed with TVM's
defaults (`relay.op_attrs.complete_attrs(...).as_dict()`, done once by the
engine). It returns `UNKNOWN` when an argument or attribute it needs is not
known (an unknown type, an unresolved `meta[...]` reference) and raises
`RelationError("<op>: <what disagrees>")` when the arguments do not fit.

The facts (output shapes, dtypes, how `?` propagates) follow the type
relations of TVM v0.19 (`src/relay/op/**`); where TVM unifies an argument
with the type it expects (a bias, batch-norm statistics, a conv weight given
`channels` and `kernel_size`), the relation checks the argument instead.
Relations are called once per call node, so they avoid re-completing
attributes and build tuples, not lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .. import ast
from ..ast import ANY, UNKNOWN, AnyDim, Constant, Dim, FuncType, IntImm, MetaRef, TensorType, TupleType, Type
from ..typetext import dim_text, shape_text, type_text
from . import dims as D
from .dims import RelationError

__all__ = ["RELATIONS", "Relation", "RelationError"]

Relation = Callable[[tuple[Type, ...], Mapping[str, Any]], Type]
Attrs = Mapping[str, Any]
_Impl = Callable[[str, tuple[Type, ...], Attrs], Type]


class _Undetermined(Exception):
    """An input the relation needs is not known: the result is UNKNOWN."""


# ------------------------------------------------------------ input helpers


def _undetermined(t: Type) -> bool:
    return isinstance(t, (ast.UnknownType, ast.IncompleteType, ast.TypeVar))


def _tensor(op: str, t: Type, what: str = "data") -> TensorType:
    if type(t) is TensorType:
        return t
    if _undetermined(t):
        raise _Undetermined
    raise RelationError(f"{op}: {what} must be a tensor, got {type_text(t)}")


def _tensors(op: str, t: Type, what: str = "data") -> tuple[TensorType, ...]:
    """The tensors of a tuple argument (concatenate, stack)."""
    if isinstance(t, TupleType):
        if not t.fields:
            raise RelationError(f"{op}: {what} is an empty tuple")
        return tuple(_tensor(op, f, f"{what} field {i}") for i, f in enumerate(t.fields))
    if _undetermined(t):
        raise _Undetermined
    raise RelationError(f"{op}: {what} must be a tuple of tensors, got {type_text(t)}")


def _expect(op: str, what: str, t: Type, shape: Sequence[Dim], dtype: str | None) -> None:
    """Check an argument TVM would unify with `Tensor[shape, dtype]`; an
    unknown argument passes, `?` matches anything."""
    if type(t) is TensorType and t.shape == shape and (dtype is None or t.dtype == dtype):
        return
    if _undetermined(t):
        return
    tt = _tensor(op, t, what)
    if dtype is not None and tt.dtype != dtype:
        raise RelationError(f"{op}: {what} has dtype {tt.dtype}, expected {dtype}")
    if len(tt.shape) != len(shape) or not all(D.compatible(a, b) for a, b in zip(tt.shape, shape)):
        raise RelationError(
            f"{op}: {what} has shape {shape_text(tt.shape)}, expected {shape_text(shape)}"
        )


def _value(v: Any) -> Any:
    if isinstance(v, MetaRef):
        raise _Undetermined
    if isinstance(v, IntImm):
        return v.value
    boxed = getattr(v, "boxed_value", None)
    if callable(boxed):
        unboxed = boxed()
        if unboxed is None:
            raise _Undetermined
        return unboxed
    return v


def _int(attrs: Attrs, name: str, default: int | None = None) -> int | None:
    v = attrs.get(name)
    if v is None:
        return default
    v = _value(v)
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise _Undetermined
        v = _value(v[0])
    return int(v)


def _ints(attrs: Attrs, name: str) -> tuple[int, ...] | None:
    v = attrs.get(name)
    if v is None:
        return None
    v = _value(v)
    if isinstance(v, (tuple, list)):
        return tuple(int(_value(x)) for x in v)
    return (int(v),)


def _dims_attr(attrs: Attrs, name: str) -> tuple[Dim, ...] | None:
    """An IndexExprs attribute as dimensions (IntImm of int64 kept)."""
    v = attrs.get(name)
    if v is None:
        return None
    if type(v) is tuple and all(type(x) is int for x in v):
        return v
    if isinstance(v, MetaRef):
        raise _Undetermined
    items = v if isinstance(v, (tuple, list)) else (v,)
    out: list[Dim] = []
    for x in items:
        if isinstance(x, IntImm):
            out.append(x if x.dtype != "int32" else x.value)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            out.append(int(x))
        elif x is None or isinstance(x, AnyDim):
            out.append(ANY)
        elif isinstance(x, str):
            out.append(x)
        else:
            out.append(int(_value(x)))
    return tuple(out)


def _str(attrs: Attrs, name: str, default: str = "") -> str:
    v = attrs.get(name)
    if v is None:
        return default
    if isinstance(v, MetaRef):
        raise _Undetermined
    return str(v)


def _dtype(attrs: Attrs, name: str, fallback: str) -> str:
    """A dtype attribute; TVM's void dtype ("") means `fallback`."""
    v = attrs.get(name)
    return v if isinstance(v, str) and v else fallback


def _arity(op: str, types: tuple[Type, ...], n: int) -> None:
    if len(types) != n:
        raise RelationError(f"{op}: takes {n} argument{'s' if n != 1 else ''}, got {len(types)}")


# ----------------------------------------------------------- elementwise


def _pass_through(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """Annotations (`on_device`, `device_copy`, ...): the argument's type."""
    t = types[0]
    if _undetermined(t):
        raise _Undetermined
    return t


def _unary(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    return _tensor(op, types[0])


def _unary_bool(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    return TensorType(_tensor(op, types[0]).shape, "bool")


def _axis_identity(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """softmax and friends: the data type, with the axis checked."""
    data = _tensor(op, types[0])
    axis = _int(attrs, "axis")
    if axis is not None and data.shape:
        D.normalize_axis(op, axis, len(data.shape))
    return data


def _same_dtype(op: str, a: TensorType, b: TensorType) -> None:
    if a.dtype != b.dtype:
        raise RelationError(f"{op}: dtypes {a.dtype} and {b.dtype} differ")


def _broadcast(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    a, b = _tensor(op, types[0], "lhs"), _tensor(op, types[1], "rhs")
    _same_dtype(op, a, b)
    if a.shape == b.shape:
        return a
    return TensorType(D.broadcast(op, a.shape, b.shape), a.dtype)


def _compare(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    a, b = _tensor(op, types[0], "lhs"), _tensor(op, types[1], "rhs")
    _same_dtype(op, a, b)
    return TensorType(D.broadcast(op, a.shape, b.shape), "bool")


def _where(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    cond = _tensor(op, types[0], "condition")
    x, y = _tensor(op, types[1], "x"), _tensor(op, types[2], "y")
    _same_dtype(op, x, y)
    shape = D.broadcast(op, cond.shape, D.broadcast(op, x.shape, y.shape))
    return TensorType(shape, x.dtype)


def _prelu(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    axis = D.normalize_axis(op, _int(attrs, "axis", 1) or 0, len(data.shape))
    _expect(op, "alpha", types[1], (data.shape[axis],), data.dtype)
    return data


def _cast(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    dtype = attrs.get("dtype")
    if not isinstance(dtype, str) or not dtype:
        raise RelationError(f"{op}: no target dtype")
    return TensorType(data.shape, dtype)


def _cast_like(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, like = _tensor(op, types[0]), _tensor(op, types[1], "dtype_like")
    return TensorType(data.shape, like.dtype)


def _shape_of(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    shape: tuple[Dim, ...] = (len(data.shape),) if data.shape else ()
    return TensorType(shape, _dtype(attrs, "dtype", "int32"))


def _ndarray_size(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    _tensor(op, types[0])
    return TensorType((), _dtype(attrs, "dtype", "int32"))


# ------------------------------------------------------------- creation


def _shape_attr(op: str, attrs: Attrs) -> tuple[Dim, ...]:
    shape = _dims_attr(attrs, "shape")
    if shape is None:
        raise _Undetermined  # dynamic shape (the dyn.* variants)
    return shape


def _init(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """zeros / ones: shape and dtype from the attributes."""
    return TensorType(_shape_attr(op, attrs), _dtype(attrs, "dtype", "float32"))


def _full(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    fill = _tensor(op, types[0], "fill_value")
    if fill.shape:
        raise RelationError(f"{op}: fill_value must be a scalar, got {type_text(fill)}")
    return TensorType(_shape_attr(op, attrs), _dtype(attrs, "dtype", fill.dtype))


def _full_like(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, fill = _tensor(op, types[0]), _tensor(op, types[1], "fill_value")
    if fill.shape:
        raise RelationError(f"{op}: fill_value must be a scalar, got {type_text(fill)}")
    return data


def _broadcast_to(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    shape = _shape_attr(op, attrs)
    D.broadcast(op, data.shape, shape)
    return TensorType(shape, _dtype(attrs, "dtype", data.dtype))


def _like_shape(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """broadcast_to_like / collapse_sum_like: the shape of the second argument."""
    data, like = _tensor(op, types[0]), _tensor(op, types[1], "shape_like")
    return TensorType(like.shape, data.dtype)


def _arange(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    dtype = _dtype(attrs, "dtype", "float32")
    values: list[float] = []
    for name in ("start", "stop", "step"):
        c = attrs.get(name)
        if not (isinstance(c, Constant) and c.data is not None and c.data.is_scalar):
            return TensorType((ANY,), dtype)
        values.append(float(c.data.scalar_value()))
    start, stop, step = values
    if step == 0:
        raise RelationError(f"{op}: step is zero")
    return TensorType((max(0, math.ceil((stop - start) / step)),), dtype)


# ----------------------------------------------------- shape manipulation


def _check_size(op: str, before: Sequence[Dim], after: Sequence[Dim]) -> None:
    a, b = D.product(before), D.product(after)
    if D.same(a, b) is False:
        raise RelationError(f"{op}: cannot reshape {shape_text(before)} into {shape_text(after)}")


def _new_shape(op: str, ishape: Sequence[Dim], newshape: Sequence[int], allowzero: bool) -> tuple[Dim, ...]:
    """TVM's reshape rule: 0 copies a dimension (unless allowzero), -1 is
    inferred, -2 copies the rest, -3 merges two, -4 splits one into the next
    two values (one of which may be -1)."""
    out: list[Dim] = []
    used_in: set[int] = set()
    used_out: set[int] = set()
    src = 0
    infer = -1
    i = 0
    n_in = len(ishape)
    while i < len(newshape):
        v = newshape[i]
        if v > 0 or (v == 0 and allowzero):
            out.append(v)
            src += 1
        elif v == 0:
            if src >= n_in:
                raise RelationError(f"{op}: newshape copies dimension {src} of a rank-{n_in} input")
            used_in.add(src)
            used_out.add(len(out))
            out.append(ishape[src])
            src += 1
        elif v == -1:
            if infer >= 0:
                raise RelationError(f"{op}: newshape has more than one -1")
            infer = len(out)
            out.append(1)
            src += 1
        elif v == -2:
            while src < n_in:
                used_in.add(src)
                used_out.add(len(out))
                out.append(ishape[src])
                src += 1
        elif v == -3:
            if src + 1 >= n_in:
                raise RelationError(f"{op}: -3 needs two input dimensions at {src}, input has {n_in}")
            used_in.update((src, src + 1))
            used_out.add(len(out))
            d1, d2 = ishape[src], ishape[src + 1]
            out.append(ANY if D.is_any(d1) or D.is_any(d2) else D.mul(d1, d2))
            src += 2
        elif v == -4:
            if i + 2 >= len(newshape) or src >= n_in:
                raise RelationError(f"{op}: -4 needs two values after it and an input dimension")
            used_in.add(src)
            d0 = ishape[src]
            src += 1
            d1, d2 = newshape[i + 1], newshape[i + 2]
            i += 2
            if d1 == -1 and d2 == -1:
                raise RelationError(f"{op}: -4 split dimensions cannot both be -1")
            used_out.update((len(out), len(out) + 1))
            if d1 == -1:
                out.extend((ANY if D.is_any(d0) else D.floordiv(d0, d2), d2))
            elif d2 == -1:
                out.extend((d1, ANY if D.is_any(d0) else D.floordiv(d0, d1)))
            else:
                out.extend((d1, d2))
        else:
            raise RelationError(f"{op}: unsupported newshape value {v}")
        i += 1
    if infer >= 0:
        inferred: Dim = 1
        for k, d in enumerate(ishape):
            if k in used_in:
                continue
            if D.is_any(d):
                inferred = ANY
                break
            inferred = D.mul(inferred, d)
        if not D.is_any(inferred):
            for k, d in enumerate(out):
                if k in used_out or k == infer:
                    continue
                if D.is_any(d):
                    inferred = ANY
                    break
                inferred = D.floordiv(inferred, d)
        out[infer] = inferred
    return tuple(out)


def _reshape(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    newshape = _ints(attrs, "newshape")
    if newshape is None:
        raise _Undetermined
    allowzero = bool(attrs.get("allowzero", False))
    if op == "contrib_reverse_reshape":
        shape = _new_shape(op, data.shape[::-1], newshape[::-1], allowzero)[::-1]
    else:
        shape = _new_shape(op, data.shape, newshape, allowzero)
    _check_size(op, data.shape, shape)
    return TensorType(shape, data.dtype)


def _reshape_like(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, like = _tensor(op, types[0]), _tensor(op, types[1], "shape_like")

    def bounds(begin: int, end: int | None, n: int) -> tuple[int, int]:
        b = begin + n if begin < 0 else begin
        e = n if end is None else (end + n if end < 0 else end)
        if not 0 <= b <= e <= n:
            raise RelationError(f"{op}: range [{begin}, {end}) is invalid for rank {n}")
        return b, e

    lb, le = bounds(_int(attrs, "lhs_begin", 0) or 0, _int(attrs, "lhs_end"), len(data.shape))
    rb, re = bounds(_int(attrs, "rhs_begin", 0) or 0, _int(attrs, "rhs_end"), len(like.shape))
    shape = data.shape[:lb] + like.shape[rb:re] + data.shape[le:]
    _check_size(op, data.shape, shape)
    return TensorType(shape, data.dtype)


def _transpose(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    ndim = len(data.shape)
    axes = _ints(attrs, "axes")
    if not axes:
        return TensorType(data.shape[::-1], data.dtype)
    if len(axes) != ndim:
        raise RelationError(f"{op}: axes has {len(axes)} elements, data has {ndim} dimensions")
    order = tuple(D.normalize_axis(op, a, ndim) for a in axes)
    if len(set(order)) != ndim:
        raise RelationError(f"{op}: axes {axes} repeat an axis")
    return TensorType(tuple(data.shape[a] for a in order), data.dtype)


def _expand_dims(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    ndim = len(data.shape)
    axis = _int(attrs, "axis", 0) or 0
    count = _int(attrs, "num_newaxis", 1)
    if count is None or count < 0:
        raise RelationError(f"{op}: num_newaxis must be >= 0")
    if not -ndim - 1 <= axis <= ndim:
        raise RelationError(f"{op}: axis {axis} is out of range for {ndim} dimensions")
    pivot = axis + ndim + 1 if axis < 0 else axis
    return TensorType(data.shape[:pivot] + (1,) * count + data.shape[pivot:], data.dtype)


def _squeeze(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    axes = _ints(attrs, "axis")
    if axes is None:
        if any(D.const(d) is None for d in data.shape):
            raise RelationError(f"{op}: axis must be given for a shape with unknown dimensions")
        return TensorType(tuple(d for d in data.shape if D.const(d) != 1), data.dtype)
    drop = {D.normalize_axis(op, a, len(data.shape)) for a in axes}
    for a in drop:
        if D.const(data.shape[a]) not in (None, 1):
            raise RelationError(f"{op}: cannot squeeze axis {a} of size {dim_text(data.shape[a])}")
    return TensorType(tuple(d for i, d in enumerate(data.shape) if i not in drop), data.dtype)


def _concatenate(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    fields = _tensors(op, types[0])
    first = fields[0]
    ndim = len(first.shape)
    axis = D.normalize_axis(op, _int(attrs, "axis", 0) or 0, ndim)
    for i, f in enumerate(fields):
        if len(f.shape) != ndim:
            raise RelationError(f"{op}: field {i} has {len(f.shape)} dimensions, field 0 has {ndim}")
        if f.dtype != first.dtype:
            raise RelationError(f"{op}: field {i} has dtype {f.dtype}, field 0 has {first.dtype}")
    shape: list[Dim] = []
    for k in range(ndim):
        if k == axis:
            total: Dim = 0
            for f in fields:
                if D.is_any(f.shape[k]):
                    total = ANY
                    break
                total = D.add(total, f.shape[k])
            shape.append(total)
            continue
        known = [f.shape[k] for f in fields if not D.is_any(f.shape[k])]
        for i, d in enumerate(known[1:], 1):
            if D.same(known[0], d) is False:
                raise RelationError(
                    f"{op}: dimension {k} differs between fields ({dim_text(known[0])} and {dim_text(d)})"
                )
        shape.append(known[0] if known else ANY)
    return TensorType(tuple(shape), first.dtype)


def _stack(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    fields = _tensors(op, types[0])
    first = fields[0]
    ndim = len(first.shape)
    axis = _int(attrs, "axis", 0) or 0
    if not -(ndim + 1) <= axis < ndim + 1:
        raise RelationError(f"{op}: axis {axis} is out of range for {ndim + 1} dimensions")
    axis = axis + ndim + 1 if axis < 0 else axis
    for i, f in enumerate(fields):
        if len(f.shape) != ndim or f.dtype != first.dtype:
            raise RelationError(f"{op}: field {i} is {type_text(f)}, field 0 is {type_text(first)}")
        if not all(D.compatible(a, b) for a, b in zip(f.shape, first.shape)):
            raise RelationError(f"{op}: field {i} is {type_text(f)}, field 0 is {type_text(first)}")
    return TensorType(first.shape[:axis] + (len(fields),) + first.shape[axis:], first.dtype)


def _split(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    if not data.shape:
        raise RelationError(f"{op}: cannot split a scalar")
    axis = D.normalize_axis(op, _int(attrs, "axis", 0) or 0, len(data.shape))
    spec = attrs.get("indices_or_sections")
    if spec is None:
        raise _Undetermined
    spec = _value(spec)
    size = data.shape[axis]
    pieces: list[Dim] = []
    if isinstance(spec, (tuple, list)):
        begin = 0
        for raw in spec:
            index = int(_value(raw))
            if index <= begin:
                raise RelationError(
                    f"{op}: indices {tuple(int(_value(x)) for x in spec)} must be positive and ascending"
                )
            pieces.append(index - begin)
            begin = index
        n = D.const(size)
        if n is not None and begin >= n:
            raise RelationError(f"{op}: index {begin} is past the axis size {n}")
        pieces.append(ANY if D.is_any(size) else D.sub(size, begin))
    else:
        sections = int(spec)
        if sections < 1:
            raise RelationError(f"{op}: sections must be positive, got {sections}")
        n = D.const(size)
        if n is not None and n % sections:
            raise RelationError(f"{op}: {sections} sections do not divide axis {axis} of size {n}")
        piece = ANY if D.is_any(size) else D.floordiv(size, sections)
        pieces = [piece] * sections
    return TupleType(
        tuple(TensorType(data.shape[:axis] + (p,) + data.shape[axis + 1 :], data.dtype) for p in pieces)
    )


def _tile(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    reps = _ints(attrs, "reps")
    if reps is None:
        raise _Undetermined
    if any(r <= 0 for r in reps):
        raise RelationError(f"{op}: reps {reps} must be positive")
    n = max(len(data.shape), len(reps))
    shape: tuple[Dim, ...] = (1,) * (n - len(data.shape)) + data.shape
    full_reps = (1,) * (n - len(reps)) + reps
    out = tuple(ANY if D.const(d) is None else D.mul(d, r) for d, r in zip(shape, full_reps))
    return TensorType(out, data.dtype)


def _repeat(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    ndim = len(data.shape)
    repeats = _int(attrs, "repeats")
    if repeats is None:
        raise _Undetermined
    if repeats < 1:
        raise RelationError(f"{op}: repeats must be >= 1, got {repeats}")
    axis = D.normalize_axis(op, _int(attrs, "axis", 0) or 0, ndim)
    d = data.shape[axis]
    new = ANY if D.is_any(d) else D.mul(d, repeats)
    return TensorType(data.shape[:axis] + (new,) + data.shape[axis + 1 :], data.dtype)


def _reverse(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    axis = _int(attrs, "axis")
    if axis is not None:
        D.normalize_axis(op, axis, len(data.shape))
    return data


def _slice_index(index: int, extent: int, stride: int) -> int:
    low, high = (-1, extent - 1) if stride < 0 else (0, extent)
    if index < 0:
        index += extent
    return min(max(index, low), high)


_INT64_MAX: Final = 2**63 - 1


def _strided_slice(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    ndim = len(data.shape)
    begin = _optional_ints(attrs, "begin")
    end = _optional_ints(attrs, "end")
    strides = _optional_ints(attrs, "strides")
    if begin is None or end is None:
        raise _Undetermined
    mode = _str(attrs, "slice_mode", "end")
    axes = _ints(attrs, "axes")
    stride_list: list[int | None] = list(strides or ())
    begin_list, end_list = list(begin), list(end)
    if axes is not None:
        if not len(axes) == len(begin_list) == len(end_list) == len(stride_list):
            raise RelationError(f"{op}: axes, begin, end and strides must have the same length")
        axis_list = [D.normalize_axis(op, a, ndim) for a in axes]
    else:
        axis_list = list(range(ndim))
        stride_list += [1] * (ndim - len(stride_list))
        for i in range(len(begin_list), ndim):
            begin_list.append(0 if (stride_list[i] or 1) > 0 else _INT64_MAX)
        for i in range(len(end_list), ndim):
            end_list.append(0 if (stride_list[i] or 1) < 0 else _INT64_MAX)
        if len(begin_list) > ndim or len(end_list) > ndim:
            raise RelationError(f"{op}: begin/end have more entries than the {ndim} dimensions")
    shape = list(data.shape)
    for i, axis in enumerate(axis_list):
        given = stride_list[i]
        stride = 1 if mode == "size" or given is None else given
        if stride == 0:
            raise RelationError(f"{op}: stride of axis {axis} is zero")
        b_raw = begin_list[i]
        b = (0 if stride > 0 else _INT64_MAX) if b_raw is None else b_raw
        e_raw = end_list[i]
        if e_raw is None:
            e = 0 if stride < 0 else _INT64_MAX
        elif mode == "size":
            e = (0 if stride < 0 else _INT64_MAX) if e_raw < 0 else b + e_raw
        else:
            e = e_raw
        extent = D.const(data.shape[axis])
        if extent is None:
            shape[axis] = ANY
            continue
        b_c = _slice_index(b, extent, stride)
        e_c = _slice_index(e, extent, stride)
        if (e_c > b_c) if stride < 0 else (b_c > e_c):
            raise RelationError(
                f"{op}: begin {b} and end {e} select nothing on axis {axis} (stride {stride})"
            )
        size = (abs(e_c - b_c) + abs(stride) - 1) // abs(stride)
        shape[axis] = D.make(size, data.shape[axis])
    return TensorType(tuple(shape), data.dtype)


def _optional_ints(attrs: Attrs, name: str) -> tuple[int | None, ...] | None:
    v = attrs.get(name)
    if v is None:
        return None
    v = _value(v)
    items = v if isinstance(v, (tuple, list)) else (v,)
    return tuple(None if x is None else int(_value(x)) for x in items)


def _take(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, indices = _tensor(op, types[0]), _tensor(op, types[1], "indices")
    if not indices.dtype.startswith(("int", "uint")):
        raise RelationError(f"{op}: indices must be integers, got {indices.dtype}")
    axis = _int(attrs, "axis")
    if axis is None:
        return TensorType(indices.shape, data.dtype)
    nd, ni = len(data.shape), len(indices.shape)
    axis = D.normalize_axis(op, axis, nd)
    batch = _int(attrs, "batch_dims", 0) or 0
    if batch < 0:
        batch += ni
    if not 0 <= batch <= min(axis, ni):
        raise RelationError(f"{op}: batch_dims {batch} must be at most axis {axis} and indices rank {ni}")
    shape = data.shape[:axis] + indices.shape[batch:] + data.shape[axis + 1 :]
    return TensorType(shape, data.dtype)


def _gather(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, indices = _tensor(op, types[0]), _tensor(op, types[1], "indices")
    if len(indices.shape) != len(data.shape):
        raise RelationError(f"{op}: indices have {len(indices.shape)} dimensions, data has {len(data.shape)}")
    D.normalize_axis(op, _int(attrs, "axis", 0) or 0, len(data.shape))
    return TensorType(indices.shape, data.dtype)


def _one_hot(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    indices = _tensor(op, types[0], "indices")
    _tensor(op, types[1], "on_value")
    _tensor(op, types[2], "off_value")
    depth = _int(attrs, "depth", 1)
    axis = _int(attrs, "axis", -1)
    if depth is None or axis is None:
        raise _Undetermined
    n = len(indices.shape)
    pivot = n if axis == -1 else axis
    if not 0 <= pivot <= n:
        raise RelationError(f"{op}: axis {axis} is out of range for {n + 1} dimensions")
    return TensorType(
        indices.shape[:pivot] + (depth,) + indices.shape[pivot:], _dtype(attrs, "dtype", "float32")
    )


def _layout_transform(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    src = D.layout(op, attrs.get("src_layout"), what="src_layout")
    dst = D.layout(op, attrs.get("dst_layout"), what="dst_layout")
    if src.primal != dst.primal:
        raise RelationError(f"{op}: cannot transform layout {src.name} to {dst.name}")
    return TensorType(dst.from_primal(src.to_primal(op, data.shape)), data.dtype)


# ------------------------------------------------------------- reductions


def _reduce_shape(op: str, data: TensorType, attrs: Attrs) -> tuple[Dim, ...]:
    ndim = len(data.shape)
    axes = _ints(attrs, "axis")
    if not axes:
        reduced = set(range(ndim))
    else:
        given = {D.normalize_axis(op, a, ndim) for a in axes}
        reduced = set(range(ndim)) - given if attrs.get("exclude") else given
    if attrs.get("keepdims"):
        return tuple(1 if i in reduced else d for i, d in enumerate(data.shape))
    return tuple(d for i, d in enumerate(data.shape) if i not in reduced)


def _reduce(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    return TensorType(_reduce_shape(op, data, attrs), data.dtype)


def _arg_reduce(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """argmax / argmin: indices in the index dtype of the data's shape."""
    data = _tensor(op, types[0])
    if not data.shape:
        raise RelationError(f"{op}: data must have at least one dimension")
    first = data.shape[0]
    dtype = first.dtype if isinstance(first, IntImm) else "int32"
    return TensorType(_reduce_shape(op, data, attrs), dtype)


def _variance(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, mean = _tensor(op, types[0]), _tensor(op, types[1], "mean")
    if not data.shape:
        raise RelationError(f"{op}: data must have at least one dimension")
    if len(mean.shape) != len(data.shape):
        raise RelationError(f"{op}: mean has {len(mean.shape)} dimensions, data has {len(data.shape)}")
    return TensorType(_reduce_shape(op, data, attrs), data.dtype)


def _argsort(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    D.normalize_axis(op, _int(attrs, "axis", -1) or 0, len(data.shape))
    return TensorType(data.shape, _dtype(attrs, "dtype", "int32"))


def _sort(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    D.normalize_axis(op, _int(attrs, "axis", -1) or 0, len(data.shape))
    return data


def _topk(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    axis = D.normalize_axis(op, _int(attrs, "axis", -1) or 0, len(data.shape))
    k = _int(attrs, "k")
    if k is None:
        raise _Undetermined
    shape = data.shape[:axis] + ((k if k >= 1 else data.shape[axis]),) + data.shape[axis + 1 :]
    values = TensorType(shape, data.dtype)
    indices = TensorType(shape, _dtype(attrs, "dtype", "int32"))
    ret = _str(attrs, "ret_type", "both")
    if ret == "both":
        return TupleType((values, indices))
    if ret == "values":
        return values
    if ret == "indices":
        return indices
    raise RelationError(f"{op}: unsupported ret_type {ret!r}")


# -------------------------------------------------------------------- nn


def _padding(op: str, padding: tuple[Dim, ...] | None, rank: int) -> tuple[Dim, ...]:
    """Total padding per spatial axis from 1, `rank` or 2*`rank` values."""
    if not padding:
        return (0,) * rank
    if len(padding) == 1:
        return (D.mul(padding[0], 2),) * rank
    if len(padding) == rank:
        return tuple(D.mul(p, 2) for p in padding)
    if len(padding) == 2 * rank:
        return tuple(D.add(padding[i], padding[i + rank]) for i in range(rank))
    raise RelationError(f"{op}: padding needs 1, {rank} or {2 * rank} values, got {len(padding)}")


def _per_axis(op: str, attrs: Attrs, name: str, rank: int, default: int) -> tuple[Dim, ...]:
    values = _dims_attr(attrs, name)
    if values is None or len(values) == 0:
        return (default,) * rank
    if len(values) == 1 and rank > 1:
        return values * rank
    if len(values) != rank:
        raise RelationError(f"{op}: {name} needs {rank} values, got {len(values)}")
    return values


def _positive(op: str, what: str, d: Dim) -> Dim:
    n = D.const(d)
    if n is not None and n < 1:
        raise RelationError(f"{op}: output {what} would be {n}")
    return d


_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def _conv(rank: int, *, transpose: bool) -> _Impl:
    spatial = _SPATIAL[rank]
    canonical_data = "NC" + spatial
    canonical_kernel = ("IO" if transpose else "OI") + spatial

    def relation(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
        data = _tensor(op, types[0])
        weight_t = types[1]
        weight = None if _undetermined(weight_t) else _tensor(op, weight_t, "weight")
        data_layout = D.layout(op, attrs.get("data_layout") or canonical_data, what="data_layout")
        kernel_layout = D.layout(op, attrs.get("kernel_layout") or canonical_kernel, what="kernel_layout")
        out_layout = D.layout(op, attrs.get("out_layout") or data_layout.name, what="out_layout")
        if "G" in kernel_layout.primal:
            raise _Undetermined  # DNNL grouped kernels (GOIHW): not modelled
        D.convertible(op, data_layout, canonical_data)
        D.convertible(op, kernel_layout, canonical_kernel)
        D.convertible(op, out_layout, canonical_data)
        d = data_layout.to_primal(op, data.shape)
        w = kernel_layout.to_primal(op, weight.shape, "weight") if weight is not None else None
        groups = _int(attrs, "groups", 1) or 1
        channels_attr = _dims_attr(attrs, "channels")
        channels = channels_attr[0] if channels_attr else None
        kernel_size = _dims_attr(attrs, "kernel_size") or None
        strides = _per_axis(op, attrs, "strides", rank, 1)
        dilation = _per_axis(op, attrs, "dilation", rank, 1)
        pads = _padding(op, _dims_attr(attrs, "padding"), rank)
        in_channels = d["C"]
        if kernel_size is not None and len(kernel_size) != rank:
            raise RelationError(f"{op}: kernel_size needs {rank} values, got {len(kernel_size)}")
        if kernel_size is not None and channels is not None:
            if transpose:
                expected = {"I": in_channels, "O": D.floordiv(channels, groups)}
            elif (
                groups > 1 and w is not None and D.same(groups, in_channels) and D.same(groups, w["O"])
            ):  # depthwise
                expected = {"O": in_channels, "I": D.floordiv(channels, in_channels)}
            else:
                expected = {"O": channels, "I": D.floordiv(in_channels, groups)}
            expected.update(zip(spatial, kernel_size))
            if weight is not None:
                expected_shape = kernel_layout.from_primal(expected)
                _expect(op, "weight", weight, expected_shape, None)
            out_channels: Dim = channels
            ksize = kernel_size
        else:
            if w is None:
                raise _Undetermined
            ksize = tuple(w[a] for a in spatial)
            if kernel_size is not None and not all(D.compatible(a, b) for a, b in zip(kernel_size, ksize)):
                raise RelationError(
                    f"{op}: kernel_size {shape_text(kernel_size)} disagrees with the weight's "
                    f"{shape_text(ksize)}"
                )
            if transpose:
                if channels is not None and not D.compatible(D.floordiv(channels, groups), w["O"]):
                    raise RelationError(
                        f"{op}: channels {dim_text(channels)} / groups {groups} disagrees with the "
                        f"weight's {dim_text(w['O'])} output channels"
                    )
                if not D.compatible(in_channels, w["I"]):
                    raise RelationError(
                        f"{op}: data has {dim_text(in_channels)} input channels, weight has "
                        f"{dim_text(w['I'])}"
                    )
                out_channels = w["O"]
            else:
                if channels is not None and not D.compatible(channels, w["O"]):
                    raise RelationError(
                        f"{op}: channels {dim_text(channels)} disagrees with the weight's "
                        f"{dim_text(w['O'])} output channels"
                    )
                per_group = D.floordiv(in_channels, groups)
                if not D.compatible(per_group, w["I"]):
                    where = f" / groups {groups}" if groups != 1 else ""
                    raise RelationError(
                        f"{op}: data has {dim_text(in_channels)} input channels{where}, weight expects "
                        f"{dim_text(w['I'])}"
                    )
                out_channels = w["O"]
        out: dict[str, Dim] = {"N": d["N"], "C": out_channels}
        output_padding = _per_axis(op, attrs, "output_padding", rank, 0) if transpose else None
        for i, axis in enumerate(spatial):
            size = d[axis]
            if D.is_any(size):
                out[axis] = size
                continue
            dilated = D.add(D.mul(D.sub(ksize[i], 1), dilation[i]), 1)
            if transpose:
                assert output_padding is not None
                grown = D.add(D.mul(strides[i], D.sub(size, 1)), dilated)
                out[axis] = _positive(op, axis, D.add(D.sub(grown, pads[i]), output_padding[i]))
            else:
                span = D.sub(D.add(size, pads[i]), dilated)
                out[axis] = _positive(op, axis, D.add(D.floordiv(span, strides[i]), 1))
        return TensorType(out_layout.from_primal(out), _dtype(attrs, "out_dtype", data.dtype))

    return relation


def _dense(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    if not data.shape:
        raise RelationError(f"{op}: data must have at least one dimension")
    transpose_a = bool(attrs.get("transpose_a", False))
    transpose_b = bool(attrs.get("transpose_b", op != "nn.matmul"))
    if transpose_a and len(data.shape) < 2:
        raise RelationError(f"{op}: transpose_a needs data of rank >= 2")
    reduce = data.shape[-2] if transpose_a else data.shape[-1]
    out = list(data.shape)
    if transpose_a:
        out[-2] = data.shape[-1]
    units_attr = _dims_attr(attrs, "units")
    units = units_attr[0] if units_attr else None
    weight_t = types[1]
    if _undetermined(weight_t):
        if units is None:
            raise _Undetermined
        out[-1] = units
    else:
        weight = _tensor(op, weight_t, "weight")
        if len(weight.shape) != 2:
            raise RelationError(f"{op}: weight must have 2 dimensions, got {shape_text(weight.shape)}")
        w_units, w_reduce = (
            (weight.shape[0], weight.shape[1]) if transpose_b else (weight.shape[1], weight.shape[0])
        )
        if not D.compatible(reduce, w_reduce):
            raise RelationError(
                f"{op}: data has {dim_text(reduce)} input units, weight has {dim_text(w_reduce)}"
            )
        if units is not None and not D.compatible(units, w_units):
            raise RelationError(f"{op}: units is {dim_text(units)}, weight has {dim_text(w_units)}")
        out[-1] = units if units is not None else w_units
    return TensorType(tuple(out), _dtype(attrs, "out_dtype", data.dtype))


def _batch_matmul(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    x, y = _tensor(op, types[0], "x"), _tensor(op, types[1], "y")
    if len(x.shape) != 3 or len(y.shape) != 3:
        raise RelationError(
            f"{op}: x and y must have 3 dimensions, got {shape_text(x.shape)} and {shape_text(y.shape)}"
        )
    ta = bool(attrs.get("transpose_a", False))
    tb = bool(attrs.get("transpose_b", False))  # TVM 0.19's BatchMatmulAttrs default
    xb, xi, xk = x.shape[0], x.shape[2 if ta else 1], x.shape[1 if ta else 2]
    yb, yk, yj = y.shape[0], y.shape[2 if tb else 1], y.shape[1 if tb else 2]
    if not any(D.is_any(d) for d in x.shape + y.shape):
        if not (D.compatible(xb, yb) or D.const(xb) == 1 or D.const(yb) == 1):
            raise RelationError(f"{op}: batch sizes {dim_text(xb)} and {dim_text(yb)} differ")
        if not D.compatible(xk, yk):
            raise RelationError(f"{op}: x has {dim_text(xk)} reduction units, y has {dim_text(yk)}")
    if D.is_any(xb) or D.is_any(yb):
        batch: Dim = ANY
    elif D.const(xb) == 1:
        batch = yb
    elif D.const(yb) == 1 or D.same(xb, yb):
        batch = xb
    else:
        batch = ANY
    return TensorType((batch, xi, yj), _dtype(attrs, "out_dtype", x.dtype))


def _bias_add(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    axis = D.normalize_axis(op, _int(attrs, "axis", 1) or 0, len(data.shape))
    _expect(op, "bias", types[1], (data.shape[axis],), data.dtype)
    return data


def _batch_norm(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    axis = D.normalize_axis(op, _int(attrs, "axis", 1) or 0, len(data.shape))
    vector = (data.shape[axis],)
    for what, t in zip(("gamma", "beta", "moving_mean", "moving_var"), types[1:]):
        _expect(op, what, t, vector, data.dtype)
    stat = TensorType(vector, data.dtype)
    return TupleType((data, stat, stat))


def _layer_norm(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """layer_norm / instance_norm / group_norm: gamma and beta along `axis`."""
    data = _tensor(op, types[0])
    axis = D.normalize_axis(op, _int(attrs, "axis", -1) or 0, len(data.shape))
    vector = (data.shape[axis],)
    for what, t in zip(("gamma", "beta"), types[1:]):
        _expect(op, what, t, vector, data.dtype)
    return data


def _dropout(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    return TupleType((data, data))


def _pad(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    if len(types) > 1:
        value = _tensor(op, types[1], "pad_value")
        if value.shape:
            raise RelationError(f"{op}: pad_value must be a scalar, got {type_text(value)}")
    width = attrs.get("pad_width")
    if width is None or isinstance(width, MetaRef):
        raise _Undetermined
    if len(width) != len(data.shape):
        raise RelationError(f"{op}: {len(width)} pad width pairs for {len(data.shape)} dimensions")
    shape: list[Dim] = []
    for i, (pair, d) in enumerate(zip(width, data.shape)):
        if len(pair) != 2:
            raise RelationError(f"{op}: pad width {i} is not a pair")
        total = int(_value(pair[0])) + int(_value(pair[1]))
        shape.append(d if D.is_any(d) else _positive(op, f"dimension {i}", D.add(d, D.make(total, d))))
    return TensorType(tuple(shape), data.dtype)


def _batch_flatten(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    if not data.shape:
        raise RelationError(f"{op}: data must have at least one dimension")
    rest: Dim = 1
    for d in data.shape[1:]:
        if D.is_any(d):
            rest = d
            break
        rest = D.mul(rest, d)
    return TensorType((data.shape[0], rest), data.dtype)


def _scaled(d: Dim, scale: float) -> Dim:
    n = D.const(d)
    if n is None:
        return ANY
    return D.make(math.floor(n * scale + 0.5), d)


def _upsampling(rank: int) -> _Impl:
    spatial = _SPATIAL[rank]
    canonical = "NC" + spatial

    def relation(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
        data = _tensor(op, types[0])
        lay = D.layout(op, attrs.get("layout") or canonical)
        D.convertible(op, lay, canonical)
        sizes = lay.to_primal(op, data.shape)
        for axis in spatial:
            scale = attrs.get("scale_" + axis.lower())
            if scale is None:
                raise _Undetermined
            sizes[axis] = _scaled(sizes[axis], float(scale))
        return TensorType(lay.from_primal(sizes), data.dtype)

    return relation


def _spatial_indices(op: str, data: TensorType, attrs: Attrs, spatial: str) -> tuple[int, ...]:
    """Where the spatial axes are in a pooling operator's `layout` (unsplit)."""
    lay = D.layout(op, attrs.get("layout") or "NC" + spatial)
    if len(data.shape) != len(lay.axes):
        raise RelationError(
            f"{op}: data has {len(data.shape)} dimensions, layout {lay.name} needs {len(lay.axes)}"
        )
    out: list[int] = []
    for axis in spatial:
        index = lay.index(axis)
        if index < 0 or lay.factor_of(axis):
            raise RelationError(f"{op}: layout {lay.name} must have an unsplit {axis} axis")
        out.append(index)
    return tuple(out)


def _pool(rank: int) -> _Impl:
    spatial = _SPATIAL[rank]

    def relation(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
        data = _tensor(op, types[0])
        indices = _spatial_indices(op, data, attrs, spatial)
        pool_size = _per_axis(op, attrs, "pool_size", rank, 1)
        strides = _per_axis(op, attrs, "strides", rank, 1)
        dilation = _per_axis(op, attrs, "dilation", rank, 1)
        pads = _padding(op, _dims_attr(attrs, "padding"), rank)
        ceil_mode = bool(attrs.get("ceil_mode", False))
        shape = list(data.shape)
        for i, index in enumerate(indices):
            size = shape[index]
            if D.is_any(size):
                continue
            span = D.sub(D.add(size, pads[i]), D.add(D.mul(D.sub(pool_size[i], 1), dilation[i]), 1))
            if ceil_mode:
                span = D.add(span, D.sub(strides[i], 1))
            shape[index] = _positive(op, spatial[i], D.add(D.floordiv(span, strides[i]), 1))
        return TensorType(tuple(shape), data.dtype)

    return relation


def _global_pool(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    shape = list(data.shape)
    for index in _spatial_indices(op, data, attrs, "HW"):
        shape[index] = 1
    return TensorType(tuple(shape), data.dtype)


def _adaptive_pool(rank: int) -> _Impl:
    spatial = _SPATIAL[rank]

    def relation(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
        data = _tensor(op, types[0])
        indices = _spatial_indices(op, data, attrs, spatial)
        size = _dims_attr(attrs, "output_size") or ()
        if len(size) not in (0, 1, rank):
            raise RelationError(f"{op}: output_size needs up to {rank} values, got {len(size)}")
        shape = list(data.shape)
        for i, index in enumerate(indices):
            if size:
                d = size[0] if len(size) == 1 else size[i]
                if not D.is_any(d):
                    shape[index] = d
        return TensorType(tuple(shape), data.dtype)

    return relation


def _resize(rank: int) -> _Impl:
    spatial = _SPATIAL[rank]
    canonical = "NC" + spatial

    def relation(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
        data = _tensor(op, types[0])
        lay = D.layout(op, attrs.get("layout") or canonical)
        D.convertible(op, lay, canonical)
        sizes = lay.to_primal(op, data.shape)
        size = _dims_attr(attrs, "size")
        if size is None:
            raise _Undetermined
        if len(size) != rank:
            raise RelationError(f"{op}: size needs {rank} values, got {len(size)}")
        sizes.update(zip(spatial, size))
        return TensorType(lay.from_primal(sizes), _dtype(attrs, "out_dtype", data.dtype))

    return relation


def _depth_space(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """nn.depth_to_space / nn.space_to_depth by `block_size`."""
    data = _tensor(op, types[0])
    lay = D.layout(op, attrs.get("layout") or "NCHW")
    D.convertible(op, lay, "NCHW")
    sizes = lay.to_primal(op, data.shape)
    block = _int(attrs, "block_size", 1) or 1
    area = block * block
    if op == "nn.depth_to_space":
        sizes["C"] = D.floordiv(sizes["C"], area)
        sizes["H"], sizes["W"] = D.mul(sizes["H"], block), D.mul(sizes["W"], block)
    else:
        sizes["C"] = D.mul(sizes["C"], area)
        sizes["H"], sizes["W"] = D.floordiv(sizes["H"], block), D.floordiv(sizes["W"], block)
    return TensorType(lay.from_primal(sizes), data.dtype)


# ------------------------------------------------------ memory / VM dialect

_STORAGE: Final = ast.TypeCall(ast.GlobalTypeVar("Storage"), ())
_EMPTY: Final = TupleType(())


def _scalar_int64(op: str, what: str, t: Type) -> None:
    if _undetermined(t):
        return
    tt = _tensor(op, t, what)
    if tt.shape or tt.dtype != "int64":
        raise RelationError(f"{op}: {what} must be an int64 scalar, got {type_text(tt)}")


def _alloc_storage(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """memory.alloc_storage(size, shape, alignment): TVM's `Storage` ADT."""
    _scalar_int64(op, "size", types[0])
    if not _undetermined(types[1]):
        _tensor(op, types[1], "shape")
    _scalar_int64(op, "alignment", types[2])
    return _STORAGE


def _alloc_tensor(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """memory.alloc_tensor(storage, offset, shape): the shape comes from the
    constant `const_shape` or from `assert_shape`."""
    if not _undetermined(types[0]) and types[0] != _STORAGE:
        raise RelationError(f"{op}: storage must be Storage[], got {type_text(types[0])}")
    dtype = _dtype(attrs, "dtype", "float32")
    const_shape = attrs.get("const_shape")
    if isinstance(const_shape, Constant):
        if const_shape.data is None:
            raise _Undetermined
        values = tuple(int(v) for v in const_shape.data.to_numpy().reshape(-1))
        return TensorType(values, dtype)
    asserted = _dims_attr(attrs, "assert_shape")
    if asserted is None:
        raise _Undetermined
    return TensorType(asserted, dtype)


def _kill(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    return _EMPTY


def _reshape_tensor(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    if not _undetermined(types[1]):
        _tensor(op, types[1], "shape")
    newshape = _dims_attr(attrs, "newshape")
    if newshape is None:
        raise _Undetermined
    return TensorType(newshape, data.dtype)


def _invoke_tvm_op(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """vm.invoke_tvm_op(func, inputs, outputs): checks the tuples against the
    function's type; the call itself returns the empty tuple."""
    func, inputs, outputs = types
    if isinstance(func, FuncType):
        expected_out = func.ret_type if isinstance(func.ret_type, TupleType) else TupleType((func.ret_type,))
        if isinstance(inputs, TupleType) and inputs != TupleType(func.arg_types):
            raise RelationError(
                f"{op}: inputs {type_text(inputs)} do not match the function's {type_text(TupleType(func.arg_types))}"
            )
        if isinstance(outputs, TupleType) and outputs != expected_out:
            raise RelationError(
                f"{op}: outputs {type_text(outputs)} do not match the function's {type_text(expected_out)}"
            )
    elif not _undetermined(func):
        raise RelationError(f"{op}: the first argument must be a function, got {type_text(func)}")
    return _EMPTY


# --------------------------------------------- less common operators


def _dynamic_rank(op: str, t: Type, what: str) -> int:
    """The length of a 1-D shape tensor argument (the rank it describes)."""
    tt = _tensor(op, t, what)
    if len(tt.shape) != 1:
        raise RelationError(f"{op}: {what} must be 1-D, got {type_text(tt)}")
    rank = D.const(tt.shape[0])
    if rank is None:
        raise _Undetermined
    return rank


def _dyn_init(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """dyn.zeros / dyn.ones(shape), dyn.full(fill, shape): rank from the shape tensor."""
    rank = _dynamic_rank(op, types[-1], "shape")
    fallback = _tensor(op, types[0], "fill_value").dtype if len(types) == 2 else "float32"
    return TensorType((ANY,) * rank, _dtype(attrs, "dtype", fallback))


def _dyn_broadcast_to(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    return TensorType((ANY,) * _dynamic_rank(op, types[1], "shape"), _dtype(attrs, "dtype", data.dtype))


def _dyn_same_rank(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """dyn.nn.pad and the dynamic resizes: the rank stays, the sizes are unknown."""
    data = _tensor(op, types[0])
    return TensorType((ANY,) * len(data.shape), data.dtype)


def _dyn_resize(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """dyn.nn.upsampling(3d) / dyn.image.resize2d: batch and channels stay."""
    data = _tensor(op, types[0])
    lay = D.layout(op, attrs.get("layout") or ("NCDHW" if len(data.shape) == 5 else "NCHW"))
    sizes = lay.to_primal(op, data.shape)
    out = {axis: (d if axis in "NC" else ANY) for axis, d in sizes.items()}
    return TensorType(lay.from_primal(out), _dtype(attrs, "out_dtype", data.dtype))


def _dyn_squeeze(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    dropped = _dynamic_rank(op, types[1], "axis")
    return TensorType((ANY,) * (len(data.shape) - dropped), data.dtype)


def _dyn_tile(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    return TensorType((ANY,) * max(len(data.shape), _dynamic_rank(op, types[1], "reps")), data.dtype)


def _dyn_one_hot(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    indices = _tensor(op, types[0], "indices")
    axis = _int(attrs, "axis", -1)
    n = len(indices.shape)
    pivot = n if axis is None or axis == -1 else axis
    return TensorType(
        indices.shape[:pivot] + (ANY,) + indices.shape[pivot:], _dtype(attrs, "dtype", "float32")
    )


def _dyn_topk(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    axis = D.normalize_axis(op, _int(attrs, "axis", -1) or 0, len(data.shape))
    shape = data.shape[:axis] + (ANY,) + data.shape[axis + 1 :]
    values, indices = TensorType(shape, data.dtype), TensorType(shape, _dtype(attrs, "dtype", "int32"))
    ret = _str(attrs, "ret_type", "both")
    return TupleType((values, indices)) if ret == "both" else values if ret == "values" else indices


def _call_lowered(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """call_lowered(func, (args...)): the function's result type."""
    func = types[0]
    if isinstance(func, FuncType):
        return func.ret_type
    if _undetermined(func):
        raise _Undetermined
    raise RelationError(f"{op}: the first argument must be a function, got {type_text(func)}")


def _mirror_pad(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    return _pad(op, types[:1], attrs)


def _dilate(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    strides = _ints(attrs, "strides") or (1,) * len(data.shape)
    if len(strides) != len(data.shape):
        raise RelationError(f"{op}: {len(strides)} strides for {len(data.shape)} dimensions")
    shape = tuple(
        D.add(D.mul(D.sub(d, 1), s), 1) if D.const(d) is not None else ANY
        for d, s in zip(data.shape, strides)
    )
    return TensorType(shape, data.dtype)


def _first_arg(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """reverse_sequence, matrix_set_diag, fixed_point_multiply_per_axis,
    the simulated quantizers: the type of the data argument."""
    return _tensor(op, types[0])


def _searchsorted(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    _tensor(op, types[0], "sorted_sequence")
    values = _tensor(op, types[1], "values")
    return TensorType(values.shape, _dtype(attrs, "dtype", "int32"))


def _slice_like(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, like = _tensor(op, types[0]), _tensor(op, types[1], "shape_like")
    axes = _ints(attrs, "axis" if "axis" in attrs else "axes")
    shape = list(data.shape)
    if not axes:
        if len(like.shape) > len(shape):
            raise RelationError(f"{op}: shape_like has more dimensions than data")
        shape[: len(like.shape)] = like.shape
    else:
        for a in axes:
            i = D.normalize_axis(op, a, len(shape))
            if i >= len(like.shape):
                raise RelationError(f"{op}: axis {a} is out of range for shape_like")
            shape[i] = like.shape[i]
    return TensorType(tuple(shape), data.dtype)


def _meshgrid(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    fields = _tensors(op, types[0])
    lengths = [f.shape[0] if len(f.shape) == 1 else D.product(f.shape) for f in fields]
    if _str(attrs, "indexing", "ij") == "xy" and len(lengths) >= 2:
        lengths[0], lengths[1] = lengths[1], lengths[0]
    return TupleType(tuple(TensorType(tuple(lengths), f.dtype) for f in fields))


def _gather_nd(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, indices = _tensor(op, types[0]), _tensor(op, types[1], "indices")
    if not indices.shape:
        raise RelationError(f"{op}: indices must have at least one dimension")
    m = D.const(indices.shape[0])
    if m is None:
        raise _Undetermined
    batch = _int(attrs, "batch_dims", 0) or 0
    if m + batch > len(data.shape):
        raise RelationError(f"{op}: indices address {m} dimensions of a rank-{len(data.shape)} tensor")
    return TensorType(indices.shape[1:] + data.shape[m + batch :], data.dtype)


def _sparse_to_dense(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    _tensor(op, types[0], "sparse_indices")
    values = _tensor(op, types[1], "sparse_values")
    shape = _dims_attr(attrs, "output_shape")
    if shape is None:
        raise _Undetermined
    return TensorType(shape, values.dtype)


def _nll_loss(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    predictions = _tensor(op, types[0], "predictions")
    targets = _tensor(op, types[1], "targets")
    if _str(attrs, "reduction", "mean") == "none":
        return TensorType(targets.shape, predictions.dtype)
    return TensorType((), predictions.dtype)


def _threefry_generate(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    key = _tensor(op, types[0], "key")
    shape = _dims_attr(attrs, "out_shape")
    if shape is None:
        raise _Undetermined
    return TupleType((key, TensorType(shape, "uint64")))


def _random_tensor(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """random.uniform / random.normal(key, a, b): the next key and the sample."""
    key = _tensor(op, types[0], "key")
    shape = _dims_attr(attrs, "out_shape")
    if shape is None:
        raise _Undetermined
    return TupleType((key, TensorType(shape, _dtype(attrs, "out_dtype", "float32"))))


def _yolo_reorg(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    if len(data.shape) != 4:
        raise RelationError(f"{op}: data must be NCHW, got {type_text(data)}")
    stride = _int(attrs, "stride", 1) or 1
    n, c, h, w = data.shape
    return TensorType(
        (n, D.mul(c, stride * stride), D.floordiv(h, stride), D.floordiv(w, stride)), data.dtype
    )


def _multinomial(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    key, probs = _tensor(op, types[0], "key"), _tensor(op, types[1], "probabilities")
    if not probs.shape:
        raise RelationError(f"{op}: probabilities must have at least one dimension")
    samples = _int(attrs, "num_samples", 1) or 1
    return TupleType((key, TensorType(probs.shape[:-1] + (samples,), "int32")))


def _affine_grid(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    target = _dims_attr(attrs, "target_shape")
    if target is None or len(target) != 2 or not data.shape:
        raise _Undetermined
    return TensorType((data.shape[0], 2, *target), data.dtype)


def _crop_and_resize(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, boxes = _tensor(op, types[0]), _tensor(op, types[1], "boxes")
    _tensor(op, types[2], "box_indices")
    crop = _dims_attr(attrs, "crop_size")
    if crop is None or len(crop) != 2 or not boxes.shape:
        raise _Undetermined
    lay = D.layout(op, attrs.get("layout") or "NCHW")
    D.convertible(op, lay, "NCHW")
    sizes = lay.to_primal(op, data.shape)
    sizes.update(N=boxes.shape[0], H=crop[0], W=crop[1])
    return TensorType(lay.from_primal(sizes), _dtype(attrs, "out_dtype", data.dtype))


def _pool_grad(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """max/avg_pool2d_grad(out_grad, data): a gradient shaped like the data."""
    _tensor(op, types[0], "out_grad")
    return _tensor(op, types[1])


def _einsum(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """einsum over a tuple of tensors, for equations without `...`."""
    fields = _tensors(op, types[0])
    equation = _str(attrs, "equation").replace(" ", "")
    if "." in equation:
        raise _Undetermined
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(fields):
        raise RelationError(f"{op}: equation {equation!r} has {len(terms)} operands, got {len(fields)}")
    sizes: dict[str, Dim] = {}
    counts: dict[str, int] = {}
    for term, f in zip(terms, fields):
        if len(term) != len(f.shape):
            raise RelationError(f"{op}: operand {term!r} has {len(f.shape)} dimensions")
        for letter, d in zip(term, f.shape):
            counts[letter] = counts.get(letter, 0) + 1
            known = sizes.get(letter)
            if known is None or D.const(known) == 1:
                sizes[letter] = d
            elif D.const(d) != 1 and D.same(known, d) is False:
                raise RelationError(f"{op}: index {letter} has sizes {dim_text(known)} and {dim_text(d)}")
    if not arrow:
        output = "".join(sorted(letter for letter, n in counts.items() if n == 1))
    return TensorType(tuple(sizes[letter] for letter in output), fields[0].dtype)


def _pairs(attrs: Attrs, name: str) -> tuple[tuple[int, int], ...]:
    value = attrs.get(name)
    if value is None or isinstance(value, MetaRef):
        raise _Undetermined
    out = []
    for pair in value:
        if len(pair) != 2:
            raise ValueError(f"{name} entries must be pairs")
        out.append((int(_value(pair[0])), int(_value(pair[1]))))
    return tuple(out)


def _space_batch(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """nn.space_to_batch_nd / nn.batch_to_space_nd over the axes after the batch."""
    data = _tensor(op, types[0])
    block = _ints(attrs, "block_shape") or ()
    to_batch = op == "nn.space_to_batch_nd"
    pads = _pairs(attrs, "paddings" if to_batch else "crops")
    if len(pads) != len(block) or len(block) >= len(data.shape):
        raise RelationError(f"{op}: {len(block)} block sizes, {len(pads)} pairs for rank {len(data.shape)}")
    if any(b < 1 for b in block):
        raise RelationError(f"{op}: block sizes must be positive, got {block}")
    shape = list(data.shape)
    area = math.prod(block)
    shape[0] = D.mul(shape[0], area) if to_batch else D.floordiv(shape[0], area)
    for i, (b, (before, after)) in enumerate(zip(block, pads), 1):
        d = shape[i]
        if to_batch:
            shape[i] = D.floordiv(D.add(d, D.make(before + after, d)), b)
        else:
            shape[i] = D.sub(D.mul(d, b), D.make(before + after, d))
    return TensorType(tuple(shape), data.dtype)


def _sliding_window(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    axis = _int(attrs, "axis", 0) or 0
    window = _ints(attrs, "window_shape") or ()
    strides = _ints(attrs, "strides") or ()
    if len(strides) != len(window) or axis < 0 or axis + len(window) > len(data.shape):
        raise RelationError(
            f"{op}: window {window} with strides {strides} does not fit rank {len(data.shape)}"
        )
    windows = tuple(
        D.floordiv(D.add(D.sub(data.shape[axis + i], w - 1), s - 1), s)
        for i, (w, s) in enumerate(zip(window, strides))
    )
    return TensorType(data.shape[:axis] + windows + window, data.dtype)


def _fifo_buffer(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data, buffer = _tensor(op, types[0]), _tensor(op, types[1], "buffer")
    if len(data.shape) != len(buffer.shape):
        raise RelationError(f"{op}: data has rank {len(data.shape)}, buffer {len(buffer.shape)}")
    axis = D.normalize_axis(op, _int(attrs, "axis", 0) or 0, len(buffer.shape))
    for i, (a, b) in enumerate(zip(data.shape, buffer.shape)):
        if i != axis and not D.compatible(a, b):
            raise RelationError(
                f"{op}: data and buffer differ on axis {i} ({dim_text(a)} and {dim_text(b)})"
            )
    return buffer


def _dense_pack(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """nn.contrib_dense_pack(data, weight packed as (N / n, K, n[, ...]))."""
    data, weight = _tensor(op, types[0]), _tensor(op, types[1], "weight")
    if len(data.shape) != 2 or len(weight.shape) not in (3, 4):
        raise RelationError(f"{op}: needs 2-D data and a 3-D or 4-D packed weight")
    units = D.mul(weight.shape[0], weight.shape[2])
    return TensorType((data.shape[0], units), _dtype(attrs, "out_dtype", data.dtype))


def _conv2d_backward_weight(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """The weight gradient of a conv2d; TVM keeps the gradient's layout in
    `data_layout`, the data's in `kernel_layout` and the result's in `out_layout`."""
    grad, data = _tensor(op, types[0], "grad"), _tensor(op, types[1])
    kernel_size = _dims_attr(attrs, "kernel_size")
    if kernel_size is None or len(kernel_size) != 2:
        raise RelationError(f"{op}: kernel_size must be given (2 values)")
    grad_layout = D.layout(op, attrs.get("data_layout") or "NCHW")
    data_layout = D.layout(op, attrs.get("kernel_layout") or "NCHW")
    weight_layout = D.layout(op, attrs.get("out_layout") or "OIHW")
    D.convertible(op, grad_layout, "NCHW")
    D.convertible(op, data_layout, "NCHW")
    D.convertible(op, weight_layout, "OIHW")
    in_channels = data_layout.to_primal(op, data.shape)["C"]
    out_channels = grad_layout.to_primal(op, grad.shape, "grad")["C"]
    groups = _int(attrs, "groups", 1) or 1
    channels = _dims_attr(attrs, "channels")
    if D.same(in_channels, out_channels) and D.same(in_channels, groups) and channels:
        per_group = D.floordiv(channels[0], groups)
    else:
        per_group = D.floordiv(in_channels, groups)
    sizes = {"O": out_channels, "I": per_group, "H": kernel_size[0], "W": kernel_size[1]}
    return TensorType(weight_layout.from_primal(sizes), _dtype(attrs, "out_dtype", grad.dtype))


def _scan(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """cumsum / cumprod: the data's shape along `axis`, flattened without one."""
    data = _tensor(op, types[0])
    dtype = _dtype(attrs, "dtype", data.dtype)
    axis = _int(attrs, "axis")
    if axis is not None:
        D.normalize_axis(op, axis, len(data.shape))
        return TensorType(data.shape, dtype)
    return TensorType((D.product(data.shape),), dtype)


def _argwhere(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    return TensorType((ANY, len(data.shape)), "int32")


def _cross_entropy(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    x, y = _tensor(op, types[0], "predictions"), _tensor(op, types[1], "targets")
    if not all(D.compatible(a, b) for a, b in zip(x.shape, y.shape)) or len(x.shape) != len(y.shape):
        raise RelationError(f"{op}: predictions {type_text(x)} and targets {type_text(y)} differ")
    return TensorType((), x.dtype)


def _unravel_index(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    indices, shape = _tensor(op, types[0], "indices"), _tensor(op, types[1], "shape")
    if len(shape.shape) != 1:
        raise RelationError(f"{op}: shape must be 1-D, got {type_text(shape)}")
    return TensorType(shape.shape + indices.shape[:1], indices.dtype)


def _dyn_reshape(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    return TensorType((ANY,) * _dynamic_rank(op, types[1], "newshape"), data.dtype)


def _dilation2d(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """image.dilation2d: a per-channel window (kernel layout IHW), sized like a conv2d."""
    data, weight = _tensor(op, types[0]), _tensor(op, types[1], "weight")
    data_layout = D.layout(op, attrs.get("data_layout") or "NCHW", what="data_layout")
    kernel_layout = D.layout(op, attrs.get("kernel_layout") or "IHW", what="kernel_layout")
    D.convertible(op, data_layout, "NCHW")
    D.convertible(op, kernel_layout, "IHW")
    d = data_layout.to_primal(op, data.shape)
    w = kernel_layout.to_primal(op, weight.shape, "weight")
    strides = _per_axis(op, attrs, "strides", 2, 1)
    dilations = _per_axis(op, attrs, "dilations", 2, 1)
    pads = _padding(op, _dims_attr(attrs, "padding"), 2)
    out: dict[str, Dim] = {"N": d["N"], "C": w["I"]}
    for i, axis in enumerate("HW"):
        size = d[axis]
        if D.is_any(size):
            out[axis] = size
            continue
        dilated = D.add(D.mul(D.sub(w[axis], 1), dilations[i]), 1)
        span = D.sub(D.add(size, pads[i]), dilated)
        out[axis] = _positive(op, axis, D.add(D.floordiv(span, strides[i]), 1))
    return TensorType(data_layout.from_primal(out), _dtype(attrs, "out_dtype", data.dtype))


def _multibox_prior(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    data = _tensor(op, types[0])
    if len(data.shape) != 4:
        raise RelationError(f"{op}: data must be NCHW, got {type_text(data)}")
    sizes, ratios = attrs.get("sizes") or (1.0,), attrs.get("ratios") or (1.0,)
    if isinstance(sizes, MetaRef) or isinstance(ratios, MetaRef):
        raise _Undetermined
    anchors = len(sizes) + len(ratios) - 1
    return TensorType((1, D.mul(D.mul(data.shape[2], data.shape[3]), anchors), 4), data.dtype)


def _on_first(impl: _Impl, count: int) -> _Impl:
    """A QNN operator: the float relation on its first `count` arguments (the
    scales and zero points that follow do not change the type)."""

    def relation(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
        return impl(op, types[:count], attrs)

    relation.__doc__ = impl.__doc__
    return relation


def _quantize(op: str, types: tuple[Type, ...], attrs: Attrs) -> Type:
    """qnn.quantize / dequantize / requantize: the data's shape in `out_dtype`."""
    data = _tensor(op, types[0])
    fallback = "float32" if op == "qnn.dequantize" else "int8"
    return TensorType(data.shape, _dtype(attrs, "out_dtype", fallback))


# ------------------------------------------------------------------ table

_UNARY: Final = (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "bitwise_not", "ceil", "copy", "cos", "cosh",
    "erf", "exp", "fast_erf", "fast_exp", "fast_tanh", "floor", "log", "log10", "log2", "logical_not",
    "negative", "ones_like", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh",
    "trunc", "zeros_like", "clip", "fixed_point_multiply", "nn.relu", "nn.leaky_relu", "stop_gradient",
    "invert_permutation", "nn.fast_softmax", "nn.l2_normalize", "nn.lrn",
)  # fmt: skip
_UNARY_BOOL: Final = ("isfinite", "isinf", "isnan")
_BINARY: Final = (
    "add", "subtract", "multiply", "divide", "floor_divide", "trunc_divide", "power", "mod", "floor_mod",
    "trunc_mod", "maximum", "minimum", "logical_and", "logical_or", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
)  # fmt: skip
_COMPARE: Final = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
_ANNOTATIONS: Final = (
    "on_device", "device_copy", "annotation.stop_fusion", "annotation.checkpoint", "annotation.cast_hint",
    "annotation.compiler_begin", "annotation.compiler_end", "annotation.bitpack_start",
    "annotation.bitpack_end",
)  # fmt: skip
_REDUCE: Final = ("sum", "mean", "max", "min", "prod", "all", "any", "logsumexp")

# (operator names, number of arguments, relation)
_RULES: Final[tuple[tuple[tuple[str, ...], int, _Impl], ...]] = (
    (_UNARY, 1, _unary),
    (_UNARY_BOOL, 1, _unary_bool),
    (_BINARY, 2, _broadcast),
    (_COMPARE, 2, _compare),
    (_ANNOTATIONS, 1, _pass_through),
    (("where",), 3, _where),
    (("nn.softmax", "nn.log_softmax"), 1, _axis_identity),
    (("nn.prelu",), 2, _prelu),
    (("cast", "reinterpret"), 1, _cast),
    (("cast_like",), 2, _cast_like),
    (("shape_of", "vm.shape_of"), 1, _shape_of),
    (("ndarray_size",), 1, _ndarray_size),
    (("zeros", "ones"), 0, _init),
    (("full",), 1, _full),
    (("full_like",), 2, _full_like),
    (("broadcast_to",), 1, _broadcast_to),
    (("broadcast_to_like", "collapse_sum_like"), 2, _like_shape),
    (("arange",), 3, _arange),
    (("reshape", "contrib_reverse_reshape"), 1, _reshape),
    (("reshape_like",), 2, _reshape_like),
    (("transpose",), 1, _transpose),
    (("expand_dims",), 1, _expand_dims),
    (("squeeze",), 1, _squeeze),
    (("concatenate",), 1, _concatenate),
    (("stack",), 1, _stack),
    (("split",), 1, _split),
    (("tile",), 1, _tile),
    (("repeat",), 1, _repeat),
    (("reverse",), 1, _reverse),
    (("strided_slice",), 1, _strided_slice),
    (("take",), 2, _take),
    (("gather",), 2, _gather),
    (("one_hot",), 3, _one_hot),
    (("layout_transform",), 1, _layout_transform),
    (_REDUCE, 1, _reduce),
    (("argmax", "argmin"), 1, _arg_reduce),
    (("variance", "std"), 2, _variance),
    (("argsort",), 1, _argsort),
    (("sort",), 1, _sort),
    (("topk",), 1, _topk),
    (("nn.conv1d",), 2, _conv(1, transpose=False)),
    (("nn.conv2d",), 2, _conv(2, transpose=False)),
    (("nn.conv3d",), 2, _conv(3, transpose=False)),
    (("nn.conv1d_transpose",), 2, _conv(1, transpose=True)),
    (("nn.conv2d_transpose",), 2, _conv(2, transpose=True)),
    (("nn.conv3d_transpose",), 2, _conv(3, transpose=True)),
    (("nn.dense", "nn.matmul"), 2, _dense),
    (("nn.batch_matmul",), 2, _batch_matmul),
    (("nn.bias_add",), 2, _bias_add),
    (("nn.batch_norm",), 5, _batch_norm),
    (("nn.layer_norm", "nn.instance_norm", "nn.group_norm"), 3, _layer_norm),
    (("nn.dropout",), 1, _dropout),
    (("nn.pad",), 2, _pad),
    (("nn.batch_flatten",), 1, _batch_flatten),
    (("nn.upsampling",), 1, _upsampling(2)),
    (("nn.upsampling3d",), 1, _upsampling(3)),
    (("nn.max_pool1d", "nn.avg_pool1d"), 1, _pool(1)),
    (("nn.max_pool2d", "nn.avg_pool2d"), 1, _pool(2)),
    (("nn.max_pool3d", "nn.avg_pool3d"), 1, _pool(3)),
    (("nn.global_max_pool2d", "nn.global_avg_pool2d"), 1, _global_pool),
    (("nn.adaptive_max_pool1d", "nn.adaptive_avg_pool1d"), 1, _adaptive_pool(1)),
    (("nn.adaptive_max_pool2d", "nn.adaptive_avg_pool2d"), 1, _adaptive_pool(2)),
    (("nn.adaptive_max_pool3d", "nn.adaptive_avg_pool3d"), 1, _adaptive_pool(3)),
    (("nn.depth_to_space", "nn.space_to_depth"), 1, _depth_space),
    (("image.resize1d",), 1, _resize(1)),
    (("image.resize2d",), 1, _resize(2)),
    (("image.resize3d",), 1, _resize(3)),
    (("memory.alloc_storage",), 3, _alloc_storage),
    (("memory.alloc_tensor",), 3, _alloc_tensor),
    (("memory.kill",), 1, _kill),
    (("vm.reshape_tensor",), 2, _reshape_tensor),
    (("vm.invoke_tvm_op",), 3, _invoke_tvm_op),
    (("debug",), 1, _pass_through),
    (("call_lowered",), 2, _call_lowered),
    (("dyn.zeros", "dyn.ones"), 1, _dyn_init),
    (("dyn.full",), 2, _dyn_init),
    (("dyn.broadcast_to",), 2, _dyn_broadcast_to),
    (("dyn.nn.pad",), 3, _dyn_same_rank),
    (("dyn.nn.upsampling",), 3, _dyn_resize),
    (("dyn.nn.upsampling3d",), 4, _dyn_resize),
    (("dyn.image.resize2d",), 3, _dyn_resize),
    (("dyn.squeeze",), 2, _dyn_squeeze),
    (("dyn.tile",), 2, _dyn_tile),
    (("dyn.one_hot",), 4, _dyn_one_hot),
    (("dyn.topk",), 2, _dyn_topk),
    (("nn.mirror_pad",), 1, _mirror_pad),
    (("nn.dilate",), 1, _dilate),
    (("reverse_sequence", "matrix_set_diag"), 2, _first_arg),
    (("fixed_point_multiply_per_axis",), 4, _first_arg),
    (("searchsorted",), 2, _searchsorted),
    (("slice_like",), 2, _slice_like),
    (("meshgrid",), 1, _meshgrid),
    (("gather_nd",), 2, _gather_nd),
    (("sparse_to_dense",), 3, _sparse_to_dense),
    (("nn.nll_loss",), 3, _nll_loss),
    (("random.threefry_generate",), 1, _threefry_generate),
    (("random.uniform", "random.normal"), 3, _random_tensor),
    (("vision.yolo_reorg",), 1, _yolo_reorg),
    (("nn.contrib_conv2d_NCHWc", "nn.contrib_depthwise_conv2d_NCHWc"), 2, _conv(2, transpose=False)),
    (("qnn.quantize", "qnn.dequantize"), 3, _quantize),
    (("qnn.requantize",), 5, _quantize),
    (("qnn.simulated_quantize", "qnn.simulated_dequantize"), 4, _first_arg),
    (("qnn.add", "qnn.subtract", "qnn.mul"), 8, _on_first(_broadcast, 2)),
    (("qnn.conv2d",), 6, _on_first(_conv(2, transpose=False), 2)),
    (("qnn.conv2d_transpose",), 6, _on_first(_conv(2, transpose=True), 2)),
    (("qnn.dense",), 6, _on_first(_dense, 2)),
    (("qnn.batch_matmul",), 6, _on_first(_batch_matmul, 2)),
    (("qnn.concatenate",), 5, _on_first(_concatenate, 1)),
    (("qnn.softmax", "qnn.leaky_relu"), 5, _on_first(_unary, 1)),
    (("qnn.avg_pool2d",), 5, _on_first(_pool(2), 1)),
    (("random.multinomial",), 2, _multinomial),
    (("image.affine_grid",), 1, _affine_grid),
    (("image.crop_and_resize",), 3, _crop_and_resize),
    (("nn.max_pool2d_grad", "nn.avg_pool2d_grad"), 2, _pool_grad),
    (("einsum",), 1, _einsum),
    (("nn.space_to_batch_nd", "nn.batch_to_space_nd"), 1, _space_batch),
    (("sliding_window",), 1, _sliding_window),
    (("nn.fifo_buffer",), 2, _fifo_buffer),
    (("nn.contrib_dense_pack",), 2, _dense_pack),
    (("qnn.contrib_dense_pack",), 6, _on_first(_dense_pack, 2)),
    (("nn.conv2d_backward_weight",), 2, _conv2d_backward_weight),
    (("cumsum", "cumprod"), 1, _scan),
    (("scatter_elements", "scatter_nd"), 3, _first_arg),
    (("argwhere",), 1, _argwhere),
    (("nn.cross_entropy", "nn.cross_entropy_with_logits"), 2, _cross_entropy),
    (("unravel_index",), 2, _unravel_index),
    (("dyn.reshape",), 2, _dyn_reshape),
    (("image.dilation2d",), 2, _dilation2d),
    (("vision.multibox_prior",), 1, _multibox_prior),
)


def _relation(name: str, arity: int, impl: _Impl) -> Relation:
    """Wrap `impl` for one operator: check the argument count, and turn an
    undetermined input into UNKNOWN."""

    def relation(types: tuple[Type, ...], attrs: Mapping[str, Any]) -> Type:
        if len(types) != arity:
            _arity(name, types, arity)
        try:
            return impl(name, types, attrs)
        except _Undetermined:
            return UNKNOWN
        except (TypeError, ValueError) as exc:  # malformed attribute values
            raise RelationError(f"{name}: invalid attributes ({exc})") from None

    relation.__name__ = relation.__qualname__ = f"relation[{name}]"
    relation.__doc__ = impl.__doc__
    return relation


RELATIONS: Final[dict[str, Relation]] = {
    name: _relation(name, arity, impl) for names, arity, impl in _RULES for name in names
}
