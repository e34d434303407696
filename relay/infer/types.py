"""Type values for inference: the error, a text rendering, unification and
substitution of type parameters.

Types are compared by value (`relay.ast` types are frozen dataclasses whose
span is not compared). Unification here is the small part of TVM's type
solver the corpus needs: `?` dimensions, unknown and incomplete (`_`) types
match anything, and the type parameters of a polymorphic callee are bound
by the first argument that fixes them.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import ast
from ..ast import AnyDim, Dim, FuncType, IncompleteType, IntImm, RefType, TupleType, Type, TypeCall, TypeVar
from ..span import RelayError, Span
from ..typetext import type_text

__all__ = ["TypeInferenceError", "is_known", "substitute", "type_text", "unify"]


class TypeInferenceError(RelayError):
    """A module is not well typed: an operator rejects its arguments, a call
    has the wrong arity, `if` branches disagree, or an annotation disagrees
    with the inferred type. `expected` and `actual` are the two types (None
    where the error is not about two types)."""

    def __init__(
        self,
        message: str,
        span: Span | None = None,
        *,
        expected: Type | None = None,
        actual: Type | None = None,
    ) -> None:
        super().__init__(message, span)
        self.expected = expected
        self.actual = actual


def is_known(t: Type) -> bool:
    """False when `t` is or contains an unknown or incomplete type."""
    stack = [t]
    while stack:
        match stack.pop():
            case ast.UnknownType() | IncompleteType():
                return False
            case TupleType(fields=fields):
                stack.extend(fields)
            case FuncType(arg_types=args, ret_type=ret):
                stack.extend(args)
                stack.append(ret)
            case TypeCall(args=args):
                stack.extend(args)
            case RefType(value=value):
                stack.append(value)
    return True


def _dim_value(d: Dim) -> int | str | None:
    if type(d) is int:
        return d
    if isinstance(d, IntImm):
        return d.value
    if isinstance(d, AnyDim):
        return None
    return d  # a symbolic dimension name


def _unify_dim(a: Dim, b: Dim) -> Dim | None:
    if a == b:
        return a
    if isinstance(a, AnyDim):
        return b
    if isinstance(b, AnyDim):
        return a
    va, vb = _dim_value(a), _dim_value(b)
    if va is not None and va == vb:
        return a
    return None


def unify(
    a: Type, b: Type, params: frozenset[TypeVar] = frozenset(), subst: dict[TypeVar, Type] | None = None
) -> Type | None:
    """The most specific type that is both `a` and `b`, or None when they
    disagree. Unknown, incomplete and `?` parts match anything. Type
    variables in `params` (the callee's type parameters) are bound in
    `subst` by their first match; other type variables match only
    themselves."""
    if not params and (a is b or a == b):
        return a
    if params and isinstance(a, TypeVar) and a in params:
        assert subst is not None
        bound = subst.get(a)
        if bound is None:
            subst[a] = b
            return b
        merged = unify(bound, b, params, subst)
        if merged is not None:
            subst[a] = merged
        return merged
    if isinstance(a, (ast.UnknownType, IncompleteType)):
        return b
    if isinstance(b, (ast.UnknownType, IncompleteType)):
        return a
    match a, b:
        case ast.TensorType(), ast.TensorType():
            if a.dtype != b.dtype or len(a.shape) != len(b.shape):
                return None
            dims: list[Dim] = []
            for x, y in zip(a.shape, b.shape):
                d = _unify_dim(x, y)
                if d is None:
                    return None
                dims.append(d)
            return ast.TensorType(tuple(dims), a.dtype)
        case TupleType(), TupleType():
            fields = _unify_all(a.fields, b.fields, params, subst)
            return None if fields is None else TupleType(fields)
        case FuncType(), FuncType():
            if len(a.arg_types) != len(b.arg_types):
                return None
            args = _unify_all(a.arg_types, b.arg_types, params, subst)
            ret = unify(a.ret_type, b.ret_type, params, subst)
            if args is None or ret is None:
                return None
            return FuncType(args, ret, a.type_params, a.type_constraints)
        case RefType(), RefType():
            value = unify(a.value, b.value, params, subst)
            return None if value is None else RefType(value)
        case TypeCall(), TypeCall():
            if a.func != b.func:
                return None
            type_args = _unify_all(a.args, b.args, params, subst)
            return None if type_args is None else TypeCall(a.func, type_args)
    return a if a == b else None


def _unify_all(
    xs: tuple[Type, ...], ys: tuple[Type, ...], params: frozenset[TypeVar], subst: dict[TypeVar, Type] | None
) -> tuple[Type, ...] | None:
    if len(xs) != len(ys):
        return None
    out: list[Type] = []
    for x, y in zip(xs, ys):
        u = unify(x, y, params, subst)
        if u is None:
            return None
        out.append(u)
    return tuple(out)


def substitute(t: Type, subst: Mapping[TypeVar, Type]) -> Type:
    """`t` with the type variables in `subst` replaced."""
    if not subst:
        return t
    match t:
        case TypeVar():
            return subst.get(t, t)
        case TupleType(fields=fields):
            return TupleType(tuple(substitute(f, subst) for f in fields))
        case FuncType(arg_types=args, ret_type=ret, type_params=tps, type_constraints=tcs):
            inner = {k: v for k, v in subst.items() if k not in tps} if tps else subst
            return FuncType(tuple(substitute(x, inner) for x in args), substitute(ret, inner), tps, tcs)
        case TypeCall(func=func, args=args):
            return TypeCall(func, tuple(substitute(x, subst) for x in args))
        case RefType(value=value):
            return RefType(substitute(value, subst))
    return t
