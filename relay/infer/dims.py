"""Shape arithmetic for the operator relations: dimensions, broadcasting and
data layouts (`NCHW`, `NHWC`, `NCHW16c`, `OIHW`, ...).

A dimension is an `int` (index dtype int32), a `relay.IntImm` (another index
dtype, kept through arithmetic as TVM does), `relay.ANY` (`?`) or a `str`
(a symbolic variable). The module only knows constants: arithmetic on a
symbolic or `?` operand gives `?`, except the identities TVM's simplifier
folds (`d + 0`, `d * 1`, `d / 1`). Mismatches raise `RelationError`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..ast import ANY, AnyDim, Dim, IntImm
from ..span import RelayError
from ..typetext import dim_text, shape_text


class RelationError(RelayError):
    """A type relation rejects its argument types (`"<op>: <what disagrees>"`);
    the inference engine adds the span and the types."""


def const(d: Dim) -> int | None:
    """The value of a constant dimension, None for `?` or a symbolic one."""
    if type(d) is int:
        return d
    if isinstance(d, IntImm):
        return d.value
    return None


def is_any(d: Dim) -> bool:
    return isinstance(d, AnyDim)


def _index_dtype(*dims: Dim) -> str:
    for d in dims:
        if isinstance(d, IntImm) and d.dtype != "int32":
            return d.dtype
    return "int32"


def make(value: int, *like: Dim) -> Dim:
    """`value` as a dimension of the widest index dtype among `like`."""
    if all(type(d) is int for d in like):
        return value
    dtype = _index_dtype(*like)
    return value if dtype == "int32" else IntImm(value, dtype)


def _fold(a: Dim, b: Dim, op: Callable[[int, int], int], unit: int, commutes: bool) -> Dim:
    """`a op b` beyond two plain ints: folded where both are constants; `a op
    unit` is `a` (and `unit op b` is `b` where `op` commutes); otherwise `?`."""
    x, y = const(a), const(b)
    if x is not None and y is not None:
        return make(op(x, y), a, b)
    if y == unit:
        return a
    if commutes and x == unit:
        return b
    return ANY


# Two plain ints (the common case) are computed in place, without the call.
def add(a: Dim, b: Dim) -> Dim:
    return a + b if type(a) is int and type(b) is int else _fold(a, b, operator.add, 0, True)


def sub(a: Dim, b: Dim) -> Dim:
    return a - b if type(a) is int and type(b) is int else _fold(a, b, operator.sub, 0, False)


def mul(a: Dim, b: Dim) -> Dim:
    return a * b if type(a) is int and type(b) is int else _fold(a, b, operator.mul, 1, True)


def floordiv(a: Dim, b: Dim) -> Dim:
    if type(a) is int and type(b) is int and b:
        return a // b
    x, y = const(a), const(b)
    if x is not None and y is not None and y != 0:
        return make(x // y, a, b)
    if y == 1:
        return a
    return ANY


def ceildiv(a: Dim, b: Dim) -> Dim:
    x, y = const(a), const(b)
    if x is not None and y is not None and y != 0:
        return make(-(-x // y), a, b)
    if y == 1:
        return a
    return ANY


def product(dims: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


def same(a: Dim, b: Dim) -> bool | None:
    """True or False when decidable (two constants, or the same variable),
    None when one side is `?` or the two are different variables."""
    if type(a) is int and type(b) is int:
        return a == b
    x, y = const(a), const(b)
    if x is not None and y is not None:
        return x == y
    if isinstance(a, str) and isinstance(b, str) and a == b:
        return True
    return None


def compatible(a: Dim, b: Dim) -> bool:
    """Not provably different: what a relation may assume when it unifies."""
    return same(a, b) is not False


def broadcast(op: str, a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...]:
    """numpy broadcasting as TVM's `ConcreteBroadcast` does it: 1 stretches,
    `?` against n gives n (`?` must be 1 or n at run time), equal dims stay;
    anything else is an error."""
    if a == b and len(a) > 0 and all(type(d) is int for d in a):
        return tuple(a)
    na, nb = len(a), len(b)
    out: list[Dim] = []
    for i in range(1, min(na, nb) + 1):
        x, y = a[na - i], b[nb - i]
        if const(x) == 1:
            out.append(y)
        elif const(y) == 1:
            out.append(x)
        elif is_any(x):
            out.append(y)
        elif is_any(y) or same(x, y):
            out.append(x)
        else:
            raise RelationError(f"{op}: shapes {shape_text(a)} and {shape_text(b)} do not broadcast")
    longer = a if na > nb else b
    out.extend(reversed(longer[: abs(na - nb)]))
    out.reverse()
    return tuple(out)


def normalize_axis(op: str, axis: int, ndim: int, *, what: str = "axis") -> int:
    """A possibly negative axis as an index in [0, ndim)."""
    index = axis + ndim if axis < 0 else axis
    if not 0 <= index < ndim:
        raise RelationError(f"{op}: {what} {axis} is out of range for {ndim} dimensions")
    return index


# ---------------------------------------------------------------- layouts


@dataclass(frozen=True, slots=True)
class Layout:
    """A data layout such as `NCHW16c`: upper-case primal axes in order, and
    lower-case sub-axes with their factor (`c` of 16 splits `C`)."""

    name: str
    axes: tuple[tuple[str, int], ...]  # (letter, factor); factor 0 for a primal axis
    primal: frozenset[str]
    splits: Mapping[str, int]  # primal axis -> factor of its sub-axis, for split axes only

    def factor_of(self, primal: str) -> int:
        """The factor of the sub-axis splitting `primal`, 0 when not split."""
        return self.splits.get(primal, 0)

    def index(self, letter: str) -> int:
        for i, (name, _) in enumerate(self.axes):
            if name == letter:
                return i
        return -1

    def to_primal(self, op: str, shape: Sequence[Dim], what: str = "data") -> dict[str, Dim]:
        """The size of every primal axis (a split axis is outer * factor)."""
        if len(shape) != len(self.axes):
            raise RelationError(
                f"{op}: {what} has {len(shape)} dimensions {shape_text(shape)}, layout {self.name} needs "
                f"{len(self.axes)}"
            )
        if not self.splits:
            return dict(zip(self.name, shape))
        out: dict[str, Dim] = {}
        for (letter, factor), d in zip(self.axes, shape):
            if factor:
                if same(d, factor) is False:
                    raise RelationError(
                        f"{op}: {what} dimension {letter} is {dim_text(d)}, layout {self.name} says {factor}"
                    )
                continue
            split = self.factor_of(letter)
            out[letter] = mul(d, split) if split else d
        return out

    def from_primal(self, sizes: Mapping[str, Dim]) -> tuple[Dim, ...]:
        """The shape in this layout of primal axis sizes (split axes rounded up)."""
        if not self.splits:
            return tuple(sizes[letter] for letter in self.name)
        out: list[Dim] = []
        for letter, factor in self.axes:
            if factor:
                out.append(factor)
                continue
            split = self.factor_of(letter)
            d = sizes[letter]
            out.append(ceildiv(d, split) if split else d)
        return tuple(out)


@lru_cache(maxsize=256)
def _parse_layout(name: str) -> Layout | None:
    axes: list[tuple[str, int]] = []
    factor = 0
    seen: set[str] = set()
    for ch in name:
        if ch.isdigit():
            factor = factor * 10 + int(ch)
        elif ch.isalpha():
            if ch.isupper():
                if factor:
                    return None
                axes.append((ch, 0))
            else:
                if factor <= 0:
                    return None
                axes.append((ch, factor))
                factor = 0
            if ch in seen:
                return None
            seen.add(ch)
        else:
            return None
    if factor or not axes:
        return None
    primal = {letter for letter, f in axes if f == 0}
    if any(letter.upper() not in primal for letter, f in axes if f):
        return None
    splits = {letter.upper(): f for letter, f in axes if f}
    return Layout(name, tuple(axes), frozenset(primal), splits)


def layout(op: str, name: object, *, what: str = "layout") -> Layout:
    """Parse a layout attribute; an invalid one is a RelationError."""
    parsed = _parse_layout(name) if isinstance(name, str) else None
    if parsed is None:
        raise RelationError(f"{op}: {what} {name!r} is not a valid layout")
    return parsed


def convertible(op: str, a: Layout, canonical: str) -> None:
    """Check that `a` has exactly the primal axes of `canonical` (TVM's
    BijectiveLayout is defined only then)."""
    if a.primal != frozenset(canonical):
        raise RelationError(f"{op}: layout {a.name} is not convertible to {canonical}")
