"""The Relay IR: immutable nodes for types, expressions, patterns and modules.

Nodes are frozen dataclasses compared by identity (`eq=False`): a Relay program
is a graph, and `%0 = ...` in the text is one node with many uses. Structural
equality lives in `relay.equal`. Types are small values and compare by value.
Edit by building new nodes (`dataclasses.replace`); passes return the same
object when nothing changed so unchanged subgraphs stay shared.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .device import VirtualDevice
from .span import SourceText, Span

# --------------------------------------------------------------------------
# Meta references and tensor values


@dataclass(frozen=True, slots=True)
class MetaRef:
    """A `meta[kind][index]` reference whose table entry is not known.

    Text pasted without its `#[metadata]` section keeps these symbolic
    placeholders; they print back unchanged.
    """

    kind: str
    index: int


_SCALAR_FORMATS: dict[str, str] = {
    "float16": "<e",
    "float32": "<f",
    "float64": "<d",
    "int8": "<b",
    "int16": "<h",
    "int32": "<i",
    "int64": "<q",
    "uint8": "<B",
    "uint16": "<H",
    "uint32": "<I",
    "uint64": "<Q",
    "bool": "<?",
}


@dataclass(frozen=True, slots=True)
class NDArray:
    """A constant tensor: TVM dtype string, shape and raw little-endian bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @classmethod
    def scalar(cls, value: Any, dtype: str) -> NDArray:
        fmt = _SCALAR_FORMATS.get(dtype)
        if fmt is None:
            raise ValueError(f"no scalar constants of dtype {dtype}")
        return cls(dtype, (), struct.pack(fmt, value))

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def scalar_value(self) -> Any:
        """The Python value of a 0-d tensor of a plain dtype."""
        fmt = _SCALAR_FORMATS[self.dtype]
        return struct.unpack(fmt, self.data)[0]

    def to_numpy(self) -> Any:
        import numpy as np

        return np.frombuffer(self.data, dtype=np.dtype(self.dtype)).reshape(self.shape)


# --------------------------------------------------------------------------
# Types (values: compared by value, span ignored)


@dataclass(frozen=True, slots=True)
class Type:
    span: Span | None = field(default=None, kw_only=True, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class IntImm:
    """A shape dimension whose index dtype is not the default int32."""

    value: int
    dtype: str


@dataclass(frozen=True, slots=True)
class AnyDim:
    """A dimension written `?`."""


ANY = AnyDim()
Dim = int | IntImm | AnyDim | str  # str: a symbolic dimension variable


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """`Tensor[(d1, ...), dtype]`; a scalar type such as `float32` has shape ()."""

    shape: tuple[Dim, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    fields: tuple[Type, ...]


@dataclass(frozen=True, slots=True)
class TypeVar(Type):
    """A type parameter; `kind` is TVM's TypeKind (0 type, 5 ADT handle...)."""

    name: str
    kind: int = 0


@dataclass(frozen=True, slots=True)
class GlobalTypeVar(Type):
    """The name of an algebraic data type (`List`, `Storage`)."""

    name: str
    kind: int = 5


@dataclass(frozen=True, slots=True)
class TypeCall(Type):
    """An ADT applied to type arguments: `List[float32]`, `Storage[]`."""

    func: Type
    args: tuple[Type, ...]


@dataclass(frozen=True, slots=True)
class FuncType(Type):
    arg_types: tuple[Type, ...]
    ret_type: Type
    type_params: tuple[TypeVar, ...] = ()
    type_constraints: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class RefType(Type):
    value: Type


@dataclass(frozen=True, slots=True)
class IncompleteType(Type):
    kind: int = 0


@dataclass(frozen=True, slots=True)
class UnknownType(Type):
    """The type of an expression that type inference cannot give: an operator
    with no type relation, or anything that depends on one. `UNKNOWN` is the
    one instance consumers compare against."""


UNKNOWN = UnknownType()


# --------------------------------------------------------------------------
# Attributes

AttrValue = Any  # int | float | bool | str | None | tuple[AttrValue, ...] | VirtualDevice | MetaRef | object


@dataclass(frozen=True, slots=True, eq=False)
class Attrs:
    """Operator call attributes, in the order they were given.

    `type_key` is TVM's attribute node type (`relay.attrs.Conv2DAttrs`) when
    known. Text gives only the fields that differ from their defaults, JSON
    gives all of them; `relay.op_attrs` knows the defaults.
    """

    fields: tuple[tuple[str, AttrValue], ...] = ()
    type_key: str | None = None

    def get(self, name: str, default: AttrValue = None) -> AttrValue:
        for key, value in self.fields:
            if key == name:
                return value
        return default

    def __contains__(self, name: str) -> bool:
        return any(key == name for key, _ in self.fields)

    def as_dict(self) -> dict[str, AttrValue]:
        return dict(self.fields)


# --------------------------------------------------------------------------
# Expressions (graph nodes: compared by identity)


@dataclass(frozen=True, slots=True, eq=False)
class Expr:
    span: Span | None = field(default=None, kw_only=True, repr=False)
    # The type TVM inferred, when the module came from JSON; not compared.
    checked_type: Type | None = field(default=None, kw_only=True, repr=False)


@dataclass(frozen=True, slots=True, eq=False)
class Var(Expr):
    """A local variable: function parameter, let binder or pattern variable.

    Identity is the binding: two `Var`s with the same name are different
    variables. `virtual_device` is the `{virtual_device=...}` attribute.
    """

    name: str
    type_annotation: Type | None = None
    virtual_device: VirtualDevice | MetaRef | None = None


@dataclass(frozen=True, slots=True, eq=False)
class GlobalVar(Expr):
    name: str


@dataclass(frozen=True, slots=True, eq=False)
class Constant(Expr):
    """A constant tensor. `data` is None for a `meta[relay.Constant][i]`
    placeholder whose value is unknown (then `meta_index` is that i)."""

    data: NDArray | None
    meta_index: int | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Op(Expr):
    """A primitive operator, by name (`add`, `nn.conv2d`, `on_device`)."""

    name: str


@dataclass(frozen=True, slots=True, eq=False)
class Constructor(Expr):
    """An ADT constructor; `tag` is its position in the type definition."""

    name: str
    inputs: tuple[Type, ...]
    belong_to: GlobalTypeVar
    tag: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class Call(Expr):
    op: Expr
    args: tuple[Expr, ...]
    attrs: Attrs | None = None
    type_args: tuple[Type, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Function(Expr):
    """`fn (params, attrs) -> ret_type { body }`.

    `attrs` holds the function attributes other than `virtual_device`, in
    order (`Primitive`, `Composite`, ...). `virtual_device` is the result
    device written `virtual_device=...` after the parameters.
    """

    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    type_params: tuple[TypeVar, ...] = ()
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    virtual_device: VirtualDevice | MetaRef | None = None

    def attr(self, name: str, default: AttrValue = None) -> AttrValue:
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    @property
    def is_primitive(self) -> bool:
        value = self.attr("Primitive")
        return value is not None and bool(value)


@dataclass(frozen=True, slots=True, eq=False)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr


@dataclass(frozen=True, slots=True, eq=False)
class If(Expr):
    cond: Expr
    true_branch: Expr
    false_branch: Expr


@dataclass(frozen=True, slots=True, eq=False)
class Tuple(Expr):
    fields: tuple[Expr, ...]


@dataclass(frozen=True, slots=True, eq=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int


@dataclass(frozen=True, slots=True, eq=False)
class RefCreate(Expr):
    value: Expr


@dataclass(frozen=True, slots=True, eq=False)
class RefRead(Expr):
    ref: Expr


@dataclass(frozen=True, slots=True, eq=False)
class RefWrite(Expr):
    ref: Expr
    value: Expr


# Patterns and match


@dataclass(frozen=True, slots=True, eq=False)
class Pattern:
    span: Span | None = field(default=None, kw_only=True, repr=False)


@dataclass(frozen=True, slots=True, eq=False)
class PatternWildcard(Pattern):
    pass


@dataclass(frozen=True, slots=True, eq=False)
class PatternVar(Pattern):
    var: Var


@dataclass(frozen=True, slots=True, eq=False)
class PatternConstructor(Pattern):
    constructor: Constructor
    patterns: tuple[Pattern, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class PatternTuple(Pattern):
    patterns: tuple[Pattern, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Clause:
    lhs: Pattern
    rhs: Expr
    span: Span | None = field(default=None, kw_only=True, repr=False)


@dataclass(frozen=True, slots=True, eq=False)
class Match(Expr):
    """`match (data) {...}`; `complete` is False for `match?`."""

    data: Expr
    clauses: tuple[Clause, ...]
    complete: bool = True


def pattern_vars(pattern: Pattern) -> Iterator[Var]:
    """The variables a pattern binds, left to right."""
    stack = [pattern]
    while stack:
        p = stack.pop()
        match p:
            case PatternVar(var=var):
                yield var
            case PatternConstructor(patterns=ps) | PatternTuple(patterns=ps):
                stack.extend(reversed(ps))


# --------------------------------------------------------------------------
# Type definitions and modules


@dataclass(frozen=True, slots=True, eq=False)
class TypeData:
    """`type Name[A, ...] { Ctor(T, ...), ... }`."""

    header: GlobalTypeVar
    type_vars: tuple[TypeVar, ...]
    constructors: tuple[Constructor, ...]
    span: Span | None = field(default=None, kw_only=True, repr=False)


MetaTables = dict[str, list[Any]]


@dataclass(frozen=True, slots=True, eq=False)
class Module:
    """A Relay module: global functions in definition order, ADT definitions,
    and the meta tables (`meta[kind][i]` is `meta[kind][i]`).

    Table entries are the objects the AST refers to: `VirtualDevice` values,
    `Constant` nodes, or opaque TVM objects kept verbatim. `expr` is set for
    a text that is a single expression with `free_var` lines rather than
    definitions. Tables are treated as immutable once the module is built.
    """

    functions: tuple[tuple[GlobalVar, Function], ...] = ()
    type_definitions: tuple[TypeData, ...] = ()
    meta: MetaTables = field(default_factory=dict)
    expr: Expr | None = None
    source: SourceText | None = field(default=None, repr=False)
    # The TVM JSON object graph this module was read from, for verbatim output.
    raw: Any = field(default=None, repr=False)

    def __getitem__(self, name: str) -> Function:
        for gv, func in self.functions:
            if gv.name == name:
                return func
        raise KeyError(name)

    def global_var(self, name: str) -> GlobalVar:
        for gv, _ in self.functions:
            if gv.name == name:
                return gv
        raise KeyError(name)

    @property
    def function_map(self) -> dict[GlobalVar, Function]:
        return dict(self.functions)


# --------------------------------------------------------------------------
# on_device / device_copy helpers

ON_DEVICE = "on_device"
DEVICE_COPY = "device_copy"


@dataclass(frozen=True, slots=True)
class OnDeviceProps:
    body: Expr
    virtual_device: VirtualDevice | MetaRef
    constrain_body: bool
    constrain_result: bool


@dataclass(frozen=True, slots=True)
class DeviceCopyProps:
    body: Expr
    src: VirtualDevice | MetaRef
    dst: VirtualDevice | MetaRef


def is_op(expr: Expr, name: str) -> bool:
    return isinstance(expr, Op) and expr.name == name


def on_device_props(expr: Expr) -> OnDeviceProps | None:
    """The parts of an `on_device(e, ...)` call, or None for anything else."""
    if not (isinstance(expr, Call) and is_op(expr.op, ON_DEVICE) and len(expr.args) == 1):
        return None
    attrs = expr.attrs or Attrs()
    device = attrs.get("virtual_device", None)
    return OnDeviceProps(
        expr.args[0],
        device if device is not None else VirtualDevice.unconstrained(),
        bool(attrs.get("constrain_body", True)),
        bool(attrs.get("constrain_result", False)),
    )


def device_copy_props(expr: Expr) -> DeviceCopyProps | None:
    """The parts of a `device_copy(e, ...)` call, or None for anything else."""
    if not (isinstance(expr, Call) and is_op(expr.op, DEVICE_COPY) and len(expr.args) == 1):
        return None
    attrs = expr.attrs or Attrs()
    unconstrained = VirtualDevice.unconstrained()
    return DeviceCopyProps(
        expr.args[0],
        attrs.get("src_virtual_device", unconstrained) or unconstrained,
        attrs.get("dst_virtual_device", unconstrained) or unconstrained,
    )


_OPS: dict[str, Op] = {}
_MAX_SHARED_OPS = 2048  # TVM registers about 900 operators; made-up names beyond this are not kept


def op(name: str) -> Op:
    """The `Op` node for an operator name, shared per name (nothing relies on
    the sharing: ops compare by name). The table is bounded so that a stream of
    requests with made-up operator names cannot grow a long-lived worker."""
    found = _OPS.get(name)
    if found is None:
        found = Op(name)
        if len(_OPS) < _MAX_SHARED_OPS:
            _OPS[name] = found
    return found


def on_device(
    body: Expr,
    virtual_device: VirtualDevice | MetaRef,
    *,
    constrain_body: bool = True,
    constrain_result: bool = False,
    span: Span | None = None,
) -> Call:
    """Build `on_device(body, virtual_device=..., ...)` as TVM writes it: only
    non-default flags appear in the attributes' text form."""
    fields: list[tuple[str, AttrValue]] = [("virtual_device", virtual_device)]
    fields.append(("constrain_body", constrain_body))
    fields.append(("constrain_result", constrain_result))
    return Call(op(ON_DEVICE), (body,), Attrs(tuple(fields), "relay.attrs.OnDeviceAttrs"), span=span)


def device_copy(
    body: Expr,
    src: VirtualDevice | MetaRef,
    dst: VirtualDevice | MetaRef,
    *,
    span: Span | None = None,
) -> Call:
    """Build `device_copy(body, src_virtual_device=src, dst_virtual_device=dst)`."""
    attrs = Attrs((("src_virtual_device", src), ("dst_virtual_device", dst)), "relay.attrs.DeviceCopyAttrs")
    return Call(op(DEVICE_COPY), (body,), attrs, span=span)
