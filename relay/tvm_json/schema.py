"""Which fields of each TVM object type are object references and which are
plain values, in the order TVM's `VisitAttrs` lists them.

The order decides node numbering when writing, and the ref/plain split says
how each `attrs` string is read. Operator attribute types come from
`relay.op_attrs.SCHEMAS`; everything else the IR meets is listed here.
"""

from __future__ import annotations

import functools

from .. import op_attrs

TVM_VERSION = "0.19.0"

REF = "ref"
_EXPR_TAIL = (("virtual_device_", REF), ("span", REF), ("_checked_type_", REF))


def _refs(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple((n, REF) for n in names)


NODE_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "IRModule": _refs(
        "functions",
        "type_definitions",
        "global_var_map_",
        "global_type_var_map_",
        "source_map",
        "attrs",
        "global_infos",
    ),
    "GlobalVar": _refs("name_hint", "virtual_device_", "span", "_checked_type_", "struct_info_"),
    "relay.Id": _refs("name_hint"),
    "relay.Var": _refs("vid", "type_annotation") + _EXPR_TAIL,
    "relay.Function": _refs("params", "body", "ret_type", "type_params", "attrs") + _EXPR_TAIL,
    "relay.Call": _refs("op", "args", "attrs", "type_args") + _EXPR_TAIL,
    "relay.Let": _refs("var", "value", "body") + _EXPR_TAIL,
    "relay.If": _refs("cond", "true_branch", "false_branch") + _EXPR_TAIL,
    "relay.Tuple": _refs("fields") + _EXPR_TAIL,
    "relay.TupleGetItem": (("tuple_value", REF), ("index", "int")) + _EXPR_TAIL,
    "relay.Constant": (("data", "ndarray"),) + _EXPR_TAIL,
    "relay.RefCreate": _refs("value") + _EXPR_TAIL,
    "relay.RefRead": _refs("ref") + _EXPR_TAIL,
    "relay.RefWrite": _refs("ref", "value") + _EXPR_TAIL,
    "relay.Match": (("data", REF), ("clauses", REF), ("complete", "bool")) + _EXPR_TAIL,
    "relay.Clause": _refs("lhs", "rhs"),
    "relay.PatternWildcard": _refs("span"),
    "relay.PatternVar": _refs("var", "span"),
    "relay.PatternConstructor": _refs("constructor", "patterns", "span"),
    "relay.PatternTuple": _refs("patterns", "span"),
    "relay.Constructor": (
        ("name_hint", REF),
        ("inputs", REF),
        ("belong_to", REF),
        ("tag", "int"),
        ("span", REF),
        ("_checked_type_", REF),
    ),
    "relay.TypeData": _refs("header", "type_vars", "constructors", "span"),
    "relay.TensorType": (("shape", REF), ("dtype", "dtype"), ("span", REF)),
    "TensorType": (("shape", REF), ("dtype", "dtype"), ("span", REF)),
    "TupleType": _refs("fields", "span"),
    "FuncType": _refs("arg_types", "ret_type", "type_params", "type_constraints", "span"),
    "TypeVar": (("name_hint", REF), ("kind", "int"), ("span", REF)),
    "GlobalTypeVar": (("name_hint", REF), ("kind", "int")),
    "TypeCall": _refs("func", "args", "span"),
    "relay.RefType": _refs("value", "span"),
    "IncompleteType": (("kind", "int"), ("span", REF)),
    "PrimType": (("dtype", "dtype"),),
    "PointerType": (("element_type", REF), ("storage_scope", REF)),
    "TypeRelation": (("func", REF), ("args", REF), ("num_inputs", "int"), ("attrs", REF), ("span", REF)),
    "IntImm": (("dtype", "dtype"), ("value", "int"), ("span", REF)),
    "FloatImm": (("dtype", "dtype"), ("value", "float"), ("span", REF)),
    "tir.Any": (("dtype", "dtype"), ("span", REF)),
    "tir.Var": (("dtype", "dtype"), ("name", REF), ("type_annotation", REF), ("span", REF)),
    "tir.SizeVar": (("dtype", "dtype"), ("name", REF), ("type_annotation", REF), ("span", REF)),
    "Range": _refs("min", "extent", "span"),
    "DictAttrs": _refs("__dict__"),
    "VirtualDevice": (
        ("device_type_int", "int"),
        ("virtual_device_id", "int"),
        ("target", REF),
        ("memory_scope", REF),
    ),
    "Target": _refs("kind", "tag", "keys", "attrs", "features", "host"),
    "Span": (
        ("source_name", REF),
        ("line", "int"),
        ("column", "int"),
        ("end_line", "int"),
        ("end_column", "int"),
    ),
    "SequentialSpan": (
        ("source_name", REF),
        ("line", "int"),
        ("column", "int"),
        ("end_line", "int"),
        ("end_column", "int"),
        ("spans", REF),
    ),
    "SourceMap": _refs("source_map"),
    "Source": _refs("source_name", "source"),
    "VDevice": (("target", REF), ("vdevice_id", "int"), ("memory_scope", REF)),
    "DummyGlobalInfo": (),
}
# Objects TVM writes as their repr bytes alone (no attrs).
REPR_TYPES = frozenset(
    {
        "runtime.String",
        "Op",
        "TargetKind",
        "SourceName",
        "runtime.BoxInt",
        "runtime.BoxFloat",
        "runtime.BoxBool",
        "EnvFunc",
    }
)
CONTAINER_TYPES = frozenset({"Array", "Map"})
# TVM's indexer visits a Let's fields in this order (and never its virtual_device_).
LET_INDEX_ORDER = ("var", "value", "span", "_checked_type_", "body", "virtual_device_")


@functools.cache
def ref_order(type_key: str) -> tuple[str, ...]:
    """Object fields in the order TVM's indexer visits them."""
    if type_key == "relay.Let":
        return LET_INDEX_ORDER
    return tuple(n for n, k in node_fields(type_key) or () if k == REF)


@functools.cache
def plain_fields(type_key: str) -> tuple[tuple[str, str], ...]:
    """The (field, kind) pairs of an object type that hold plain values."""
    return tuple((n, k) for n, k in node_fields(type_key) or () if k != REF)


def node_fields(type_key: str) -> tuple[tuple[str, str], ...] | None:
    """The (field, kind) list of an object type, or None when unknown."""
    found = NODE_FIELDS.get(type_key)
    if found is not None:
        return found
    schema = op_attrs.SCHEMAS.get(type_key)
    if schema is not None:
        return tuple((f.name, REF if f.is_ref else f.kind) for f in schema.fields)
    return None


def is_known_type_key(type_key: str) -> bool:
    """Whether a node of this type can be read (the null node has type "")."""
    return (
        type_key == ""
        or type_key in REPR_TYPES
        or type_key in CONTAINER_TYPES
        or node_fields(type_key) is not None
    )
