"""Sizes of tensors for the optimize mode: bytes of a dtype, of a type and of
every data expression of a module, with the guesses the cost model makes
(unknown types, symbolic dimensions) recorded as `Estimate`s.

This is the one place that turns a dtype into bytes: the cost model, the
problem builder and the picture all call `dtype_bytes` / `type_bytes`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import relay
from relay.ast import (
    AnyDim,
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    IntImm,
    Let,
    Module,
    Op,
    TensorType,
    TupleGetItem,
    TupleType,
    Type,
    Var,
    device_copy_props,
    on_device_props,
)
from relay.span import RelayError, Span
from relay.traverse import not_primitive, post_order

from ..explain.text import short_text

TypeOf = Callable[[Expr], Type | None]

# `<kind><bits>[_<variant>][x<lanes>]`, e.g. float32, int8, float8_e4m3fn, float32x4.
_DTYPE_RE = re.compile(r"^[a-z]+?(\d+)(?:_[a-z0-9]+)?(?:x(\d+))?$")
_UNKNOWN_DTYPE_BITS = 32


@dataclass(frozen=True)
class Estimate:
    """A guess the cost model had to make, with where it was made."""

    kind: str  # "unknown type" | "symbolic dimension" | "no flops formula"
    message: str
    span: Span | None

    def to_json(self) -> dict[str, Any]:
        line, column = (None, None) if self.span is None else (self.span.line, self.span.column)
        return {"kind": self.kind, "message": self.message, "line": line, "column": column}


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of `dtype`: bits times vector lanes, rounded up to
    whole bytes (`bool` and sub-byte types take one byte, `float32x4` 16).
    A dtype this cannot read (`handle`, custom types) counts as 4 bytes."""
    if dtype == "bool":
        return 1
    m = _DTYPE_RE.match(dtype)
    if m is None:
        return _UNKNOWN_DTYPE_BITS // 8
    bits = int(m.group(1))
    lanes = int(m.group(2)) if m.group(2) else 1
    return max(1, (bits * lanes + 7) // 8)


def dim_value(d: Any, assume_dim: int) -> tuple[int, bool]:
    """A dimension's extent and whether it was assumed (`?` or symbolic)."""
    if isinstance(d, bool):
        return int(d), False
    if isinstance(d, int):
        return d, False
    if isinstance(d, IntImm):
        return d.value, False
    if isinstance(d, (AnyDim, str)):
        return assume_dim, True
    return assume_dim, True


def elements(ty: TensorType, assume_dim: int) -> tuple[int, bool]:
    """Elements of a tensor type and whether a dimension was assumed."""
    n = 1
    guessed = False
    for d in ty.shape:
        v, g = dim_value(d, assume_dim)
        n *= max(v, 0)
        guessed = guessed or g
    return n, guessed


def type_bytes(ty: Type | None, assume_dim: int) -> tuple[int | None, bool]:
    """Bytes of a tensor or tuple of tensors; None when the type is not known
    (or not data); the flag says a symbolic dimension was assumed."""
    if isinstance(ty, TensorType):
        n, guessed = elements(ty, assume_dim)
        return n * dtype_bytes(ty.dtype), guessed
    if isinstance(ty, TupleType):
        total = 0
        guessed = False
        for f in ty.fields:
            b, g = type_bytes(f, assume_dim)
            if b is None:
                return None, g
            total += b
            guessed = guessed or g
        return total, guessed
    return None, False


def static_type_bytes(ty: Type | None) -> int | None:
    """Bytes of a type whose dimensions are all known; None otherwise (for
    displays that must not guess)."""
    nbytes, guessed = type_bytes(ty, 1)
    return None if guessed else nbytes


def stated_type(expr: Expr) -> Type | None:
    """The type a node states: a variable's annotation, a constant's data, a
    call's `checked_type` (None when it states none). An `on_device` or
    `device_copy` that states none has its body's type, as Relay's type
    rules give it: the planner's own wrappers (request pins, copies) carry
    no stated type, and the value they wrap must keep its type (and so its
    bytes and its readers' kernel costs) through them."""
    while True:
        if isinstance(expr, Var):
            return expr.type_annotation
        if isinstance(expr, Constant) and expr.data is not None:
            return TensorType(tuple(expr.data.shape), expr.data.dtype)
        if expr.checked_type is not None:
            return expr.checked_type
        wrapped = on_device_props(expr) or device_copy_props(expr)
        if wrapped is None:
            return None
        expr = wrapped.body


def module_types(module: Module, *, stated: bool = False) -> tuple[TypeOf, list[Estimate]]:
    """The type of each expression from `relay.infer_types`; where inference
    rejects the module (a type error), what the module states (parameter
    annotations, constant data, checked types), with a note saying so.
    Unknown types come back as None.

    `stated`: the module states every node's type (a Relax module translated
    by the bridge carries TVM's struct info): those are the types, and Relay
    inference, which knows neither Relax's operators nor its broadcasting of
    `matmul`, does not run."""
    if stated:
        return stated_type, []

    try:
        types = relay.infer_types(module, check_annotations=False)
    except RelayError as err:
        return stated_type, [Estimate("unknown type", f"type inference failed: {err}", err.span)]

    def inferred(expr: Expr) -> Type | None:
        try:
            ty = types.of(expr)
        except KeyError:  # a node made after inference (normalisation, copies)
            return stated_type(expr)
        return None if ty is relay.UNKNOWN else ty

    return inferred, []


class Sizes:
    """Bytes of every data expression, with the cost model's fallbacks: an
    unknown operator result is as big as its largest known input, a `?`
    dimension counts as `assume_dim`; each guess is an `Estimate`."""

    def __init__(self, type_of: TypeOf, assume_dim: int) -> None:
        self.type_of = type_of
        self.assume_dim = assume_dim
        self.bytes: dict[int, int] = {}
        self.estimates: list[Estimate] = []
        self._keep: list[Expr] = []

    def run(self, roots: Sequence[Expr]) -> None:
        nodes = post_order(list(roots), enter=not_primitive)
        # A let-bound variable of unknown type is as big as its value; values
        # come before the bodies that use the variable in post-order.
        binder = {id(n.value): n.var for n in nodes if isinstance(n, Let)}
        for node in nodes:
            size = self.bytes[id(node)] = self.bytes.get(id(node)) or self._size(node)
            var = binder.get(id(node))
            if var is not None and self.type_of(var) is None:
                self.bytes[id(var)] = size
            self._keep.append(node)

    def of(self, expr: Expr) -> int:
        found = self.bytes.get(id(expr))
        if found is None:
            found = self._size(expr)
        return found

    def _size(self, node: Expr) -> int:
        ty = self.type_of(node)
        nbytes, guessed = type_bytes(ty, self.assume_dim)
        if nbytes is not None:
            if guessed:
                self.estimates.append(
                    Estimate(
                        "symbolic dimension",
                        f"{short_text(node)}: a symbolic dimension counted as {self.assume_dim}",
                        node.span,
                    )
                )
            return nbytes
        if isinstance(node, TupleGetItem):
            # Unknown projection: the whole tuple (an over-estimate, listed).
            return self.bytes.get(id(node.tuple_value), 0)
        if isinstance(node, relay.Tuple):
            return sum(self.bytes.get(id(f), 0) for f in node.fields)
        if isinstance(node, Call):
            if isinstance(node.op, Op) and node.op.name == "on_device" and node.args:
                return self.of(node.args[0])
            if isinstance(node.op, Op) and node.op.name == "device_copy" and node.args:
                return self.of(node.args[0])
            known = [self.bytes.get(id(a), 0) for a in node.args]
            largest = max(known, default=0)
            if isinstance(node.op, Op):
                self.estimates.append(
                    Estimate(
                        "unknown type",
                        f"{node.op.name}: result type unknown, costed as elementwise over its "
                        f"largest input ({largest} bytes)",
                        node.span,
                    )
                )
            return largest
        return 0

    def type(self, expr: Expr) -> Type | None:
        return self.type_of(expr)

    def is_tensor(self, expr: Expr) -> bool:
        """Whether an operator argument is a tensor (its edge is cuttable): a
        known tensor type, or an unknown type on an expression that is not a tuple."""
        ty = self.type(expr)
        if isinstance(ty, TensorType):
            return True
        if isinstance(ty, TupleType) or isinstance(expr, relay.Tuple):
            return False
        return ty is None and not isinstance(expr, (Function, GlobalVar))
