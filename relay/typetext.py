"""Types and dimensions in the Relay text syntax: the one spelling the printer
writes, error messages quote and the cost model keys by (the parser reads it back)."""

from __future__ import annotations

from collections.abc import Sequence

from . import ast as A

_DIM_SUFFIX = {"int64": "i64", "int32": "", "int16": "i16", "int8": "i8"}


def dim_text(d: A.Dim) -> str:
    """One dimension: `4`, `4i64` (a typed IntImm), `?`, or a symbolic name."""
    if type(d) is int:
        return str(d)
    if isinstance(d, bool):
        return str(int(d))
    if isinstance(d, int):
        return str(int(d))
    if isinstance(d, A.IntImm):
        return f"{d.value}{_DIM_SUFFIX.get(d.dtype, '')}"
    if isinstance(d, A.AnyDim):
        return "?"
    return str(d)


def shape_text(shape: Sequence[A.Dim]) -> str:
    """`(1, 3, 224, 224)`, and `(4)` for one dimension, as TVM's text writes a shape."""
    return "(" + ", ".join(dim_text(d) for d in shape) + ")"


def type_text(t: A.Type) -> str:
    """`t` as the text format writes it; an incomplete type is `_`, an unknown
    one (type inference's UNKNOWN, never printed into a module) `unknown`."""
    match t:
        case A.TensorType(shape=shape, dtype=dtype):
            return f"Tensor[{shape_text(shape)}, {dtype}]" if shape else dtype
        case A.TupleType(fields=fields):
            if len(fields) == 1:
                return f"({type_text(fields[0])},)"
            return "(" + ", ".join(type_text(f) for f in fields) + ")"
        case A.FuncType(arg_types=args, ret_type=ret, type_params=tps):
            head = "fn " + ("[" + ", ".join(tv.name for tv in tps) + "]" if tps else "")
            return f"{head}({', '.join(type_text(a) for a in args)}) -> {type_text(ret)}"
        case A.TypeVar(name=name) | A.GlobalTypeVar(name=name):
            return name
        case A.TypeCall(func=func, args=args):
            return f"{type_text(func)}[{', '.join(type_text(a) for a in args)}]"
        case A.RefType(value=value):
            return f"ref({type_text(value)})"
        case A.IncompleteType():
            return "_"
        case A.UnknownType():
            return "unknown"
    raise TypeError(f"no text for the type {type(t).__name__}")
