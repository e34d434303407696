"""TVM's JSON object graph (`tvm.ir.save_json`, TVM <= 0.19) <-> the Relay IR.

The format is a flat list of nodes, `{"type_key", "attrs", "keys", "data",
"repr_str" | "repr_b64"}`, whose attribute values are all strings: object
fields hold node indices, plain fields their value. `NODE_FIELDS` says, per
type key, which fields are objects and in what order TVM visits them (the
order decides node numbering when writing).

Reading checks the graph (indices in range, no cycles, known type keys) and
decodes it children-first with an explicit stack, so depth is unbounded.
Every decoded object remembers the node it came from (`Module.raw`); writing
copies an unchanged object's original subgraph verbatim and encodes new ones
the way TVM's `SaveJSON` would: a pre-order walk numbering each object once,
operator attributes completed from `relay.op_attrs`, and dmlc's JSON layout.

Public entry points: `load_json`, `dump_json`, `decode_meta_section`,
`encode_meta_section`, and `TVMObject` for objects the IR does not model.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import gc
import json
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, ParamSpec, TypeVar

from .. import ast as A
from .. import op_attrs
from ..device import Target, VirtualDevice
from ..ndarray_codec import NDArrayFormatError, ndarray_from_b64, ndarray_to_b64
from ..span import ParseError, RelayError, SourceText, Span

logger = logging.getLogger(__name__)

TVM_VERSION = "0.19.0"

# --------------------------------------------------------------------------
# Which fields of each TVM object type are object references ("ref") and
# which are plain values (int, bool, float, str, dtype, ndarray), in the
# order TVM's VisitAttrs lists them.

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
_LET_INDEX_ORDER = ("var", "value", "span", "_checked_type_", "body", "virtual_device_")


@functools.cache
def _ref_order(type_key: str) -> tuple[str, ...]:
    """Object fields in the order TVM's indexer visits them."""
    if type_key == "relay.Let":
        return _LET_INDEX_ORDER
    return tuple(n for n, k in node_fields(type_key) or () if k == REF)


@functools.cache
def _plain_fields(type_key: str) -> tuple[tuple[str, str], ...]:
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
    return (
        type_key == ""
        or type_key in REPR_TYPES
        or type_key in CONTAINER_TYPES
        or node_fields(type_key) is not None
    )


# --------------------------------------------------------------------------
# Raw documents and opaque objects


class RawDoc:
    """A parsed TVM JSON document: its nodes and base64 tensors, checked."""

    __slots__ = ("_children", "_fields", "attrs", "b64ndarrays", "nodes", "root", "source")

    def __init__(
        self,
        nodes: list[dict[str, Any]],
        b64: list[str],
        attrs: dict[str, str],
        root: int,
        source: SourceText,
    ):
        self.nodes = nodes
        self.b64ndarrays = b64
        self.attrs = attrs
        self.root = root
        self.source = source
        self._children: list[tuple[int, ...] | None] = [None] * len(nodes)
        self._fields: list[dict[str, int] | None] = [None] * len(nodes)

    def error(self, index: int | None, message: str) -> ParseError:
        """A ParseError about node `index`, located at that node in the text."""
        if index is None:
            return ParseError(message, Span(self.source, 1, 1, 1, 2))
        type_key = self.nodes[index].get("type_key", "?") if 0 <= index < len(self.nodes) else "?"
        return ParseError(f"node {index} ({type_key or 'null'}): {message}", self.node_span(index))

    def node_span(self, index: int) -> Span:
        """Where node `index` starts in the text: its `"type_key"` entry (one
        per node, in order, in everything TVM writes); line 1 if not found."""
        text = self.source.text
        pos = -1
        for _ in range(index + 1):
            pos = text.find('"type_key"', pos + 1)
            if pos < 0:
                return Span(self.source, 1, 1, 1, 2)
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        return Span(self.source, line, column, line, column + len('"type_key"'))

    def ref(self, index: int, name: str) -> int:
        """The node index held by object field `name` of node `index`."""
        fields = self._fields[index]
        if fields is not None:
            found = fields.get(name)
            if found is not None:
                return found
        return self._parse_ref(index, name)

    def _parse_ref(self, index: int, name: str) -> int:
        node = self.nodes[index]
        attrs = node.get("attrs")
        if attrs is None or name not in attrs:
            raise self.error(index, f"missing field '{name}'")
        text = attrs[name]
        try:
            target = int(text)
        except ValueError:
            raise self.error(index, f"field '{name}' should be a node index, got {text!r}") from None
        if not 0 <= target < len(self.nodes):
            raise self.error(
                index, f"field '{name}' refers to node {target}, but there are {len(self.nodes)} nodes"
            )
        return target

    def plain(self, index: int, name: str) -> str:
        attrs = self.nodes[index].get("attrs")
        if attrs is None or name not in attrs:
            raise self.error(index, f"missing field '{name}'")
        return str(attrs[name])

    def children(self, index: int) -> tuple[int, ...]:
        """Referenced node indices in TVM's visit order (validated, cached)."""
        found = self._children[index]
        if found is not None:
            return found
        node = self.nodes[index]
        type_key = node["type_key"]
        out: list[int] = []
        if type_key in CONTAINER_TYPES:
            size = len(self.nodes)
            for j in node.get("data", ()):
                if not 0 <= j < size:
                    raise self.error(index, f"refers to node {j}, but there are {size} nodes")
                out.append(j)
        elif type_key and type_key not in REPR_TYPES:
            fields = node_fields(type_key)
            if fields is None:
                raise self.error(index, f"unknown type_key '{type_key}'")
            fieldmap: dict[str, int] = {}
            for name in _ref_order(type_key):
                target = fieldmap[name] = self._parse_ref(index, name)
                out.append(target)
            self._fields[index] = fieldmap
        result = tuple(out)
        self._children[index] = result
        return result

    def repr_text(self, index: int) -> str:
        node = self.nodes[index]
        if "repr_str" in node:
            return str(node["repr_str"])
        if "repr_b64" in node:
            try:
                raw = base64.b64decode(node["repr_b64"].encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError, ValueError):
                raise self.error(index, "bad base64 in repr_b64") from None
            return raw.decode("utf-8", errors="surrogateescape")
        return ""


class RawRef(NamedTuple):
    """Node number `node` of a raw document."""

    doc: RawDoc
    node: int

    @property
    def type_key(self) -> str:
        return str(self.doc.nodes[self.node]["type_key"])


@dataclass(frozen=True, slots=True, eq=False)
class TVMObject:
    """A TVM object the IR does not model (a boxed int used as
    `meta[runtime.BoxInt][i]`, a source map, ...), kept as its JSON subgraph
    and written back verbatim. Equal when the subgraphs are equal."""

    type_key: str
    raw: RawRef

    def boxed_value(self) -> int | float | bool | None:
        """The Python value of a `runtime.Box*` object, else None."""
        text = self.raw.doc.repr_text(self.raw.node)
        try:
            if self.type_key == "runtime.BoxInt":
                return int(text)
            if self.type_key == "runtime.BoxFloat":
                return float(text)
            if self.type_key == "runtime.BoxBool":
                return text == "true"
        except ValueError:
            return None
        return None

    def canonical(self) -> str:
        """The subgraph as TVM JSON text (deterministic), for comparisons."""
        writer = _Writer(None)
        root = writer.add(("raw", self.raw))
        return writer.to_json(root)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TVMObject):
            return NotImplemented
        return self is other or (self.type_key == other.type_key and self.canonical() == other.canonical())

    def __hash__(self) -> int:
        return hash(self.type_key)

    def __repr__(self) -> str:
        boxed = self.boxed_value()
        return f"TVMObject({self.type_key}{'' if boxed is None else ', ' + repr(boxed)})"


# --------------------------------------------------------------------------
# Reading documents


def parse_document(text: str | bytes, name: str = "<json>") -> RawDoc:
    """Parse and check the outer structure of a TVM JSON document."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            source = SourceText(name, "")
            raise ParseError(
                f"TVM JSON is not UTF-8 text: {exc.reason} at byte {exc.start}", Span(source, 1, 1, 1, 2)
            ) from None
    if not isinstance(text, str):
        raise ParseError(f"TVM JSON must be text, not {type(text).__name__}")
    source = SourceText(name, text)
    try:
        data = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"malformed JSON: {exc.msg}", Span(source, exc.lineno, exc.colno, exc.lineno, exc.colno + 1)
        ) from None
    except RecursionError:
        raise ParseError("malformed TVM JSON: nesting too deep", Span(source, 1, 1, 1, 2)) from None
    top = Span(source, 1, 1, 1, 2)
    if not isinstance(data, dict):
        raise ParseError(
            f"TVM JSON must be an object with 'root' and 'nodes', got {type(data).__name__}", top
        )
    if "nodes" not in data or "root" not in data:
        missing = "nodes" if "nodes" not in data else "root"
        raise ParseError(f"TVM JSON lacks '{missing}'", top)
    nodes = data["nodes"]
    root = data["root"]
    b64 = data.get("b64ndarrays", [])
    attrs = data.get("attrs", {})
    if not isinstance(nodes, list) or not nodes:
        raise ParseError("TVM JSON 'nodes' must be a non-empty list", top)
    if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < len(nodes):
        raise ParseError(f"TVM JSON root {root!r} is not a node index (there are {len(nodes)} nodes)", top)
    if not isinstance(b64, list) or not all(isinstance(s, str) for s in b64):
        raise ParseError("TVM JSON 'b64ndarrays' must be a list of strings", top)
    if not isinstance(attrs, dict):
        raise ParseError("TVM JSON 'attrs' must be an object", top)
    doc = RawDoc(nodes, b64, attrs, root, source)
    for i, node in enumerate(nodes):
        _check_node(doc, i, node)
    return doc


def _check_node(doc: RawDoc, i: int, node: Any) -> None:
    if not isinstance(node, dict):
        raise doc.error(None, f"node {i} is not an object")
    type_key = node.get("type_key", "")
    if not isinstance(type_key, str):
        raise doc.error(None, f"node {i}: type_key must be a string")
    if "type_key" not in node:
        node["type_key"] = ""
    if not is_known_type_key(type_key):
        raise doc.error(i, f"unknown type_key '{type_key}'")
    attrs = node.get("attrs")
    if attrs is not None and (
        not isinstance(attrs, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items())
    ):
        raise doc.error(i, "'attrs' must map names to strings")
    data = node.get("data")
    if data is not None and (
        not isinstance(data, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in data)
    ):
        raise doc.error(i, "'data' must be a list of node indices")
    keys = node.get("keys")
    if keys is not None and (not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)):
        raise doc.error(i, "'keys' must be a list of strings")
    for key in ("repr_str", "repr_b64"):
        if key in node and not isinstance(node[key], str):
            raise doc.error(i, f"'{key}' must be a string")
    if type_key == "Map":
        if keys and len(keys) != len(data or ()):
            raise doc.error(i, f"map has {len(keys)} keys but {len(data or ())} values")
        if not keys and len(data or ()) % 2:
            raise doc.error(i, "map with object keys needs an even number of entries")


# --------------------------------------------------------------------------
# Decoding nodes to IR values


@dataclass(frozen=True, slots=True)
class _MapValue:
    """A decoded Map: (key, value) pairs in stored order; keys str when `str_keys`."""

    items: tuple[tuple[Any, Any], ...]
    str_keys: bool


@dataclass(frozen=True, slots=True)
class _DictAttrsValue:
    items: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class _ModuleValue:
    fields: dict[str, Any]


_UNSET = object()
_UNCONSTRAINED = VirtualDevice()
_UNCONSTRAINED_KEY = ("vd", _UNCONSTRAINED)


class Origins:
    """Which raw node each decoded object came from.

    Holds the objects themselves, so `id()` keys stay valid. Virtual devices
    are values, so they are also found by value (first node wins).
    """

    __slots__ = ("by_id", "doc", "vd_by_value")

    def __init__(self, doc: RawDoc) -> None:
        self.doc = doc
        self.by_id: dict[int, tuple[Any, int]] = {}
        self.vd_by_value: dict[VirtualDevice, int] = {}

    def note(self, obj: Any, index: int) -> None:
        self.by_id.setdefault(id(obj), (obj, index))

    def find(self, obj: Any) -> RawRef | None:
        found = self.by_id.get(id(obj))
        if found is not None and found[0] is obj:
            return RawRef(self.doc, found[1])
        return None


_TRACKED = (A.Expr, A.Type, A.Attrs, A.TypeData, A.Clause, A.Pattern)


class _Decoder:
    """Decodes a checked document children-first (explicit stack)."""

    def __init__(self, doc: RawDoc) -> None:
        self.doc = doc
        self.values: list[Any] = [_UNSET] * len(doc.nodes)
        self.origins = Origins(doc)
        self.tensors: dict[int, A.NDArray] = {}

    def decode(self, root: int) -> Any:
        doc = self.doc
        values = self.values
        state = bytearray(len(doc.nodes))  # 0 new, 1 open, 2 done
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            index, expanded = stack.pop()
            if expanded:
                values[index] = self._decode_node(index)
                state[index] = 2
                continue
            mark = state[index]
            if mark == 2:
                continue
            if mark == 1:
                raise doc.error(index, "cyclic reference")
            state[index] = 1
            stack.append((index, True))
            for child in reversed(doc.children(index)):
                child_mark = state[child]
                if child_mark == 1:
                    raise doc.error(child, f"cyclic reference (through node {index})")
                if child_mark == 0:
                    stack.append((child, False))
        return values[root]

    # -- helpers

    def get(self, index: int, name: str) -> Any:
        return self.values[self.doc.ref(index, name)]

    def get_as(self, index: int, name: str, cls: Any, what: str, *, optional: bool = True) -> Any:
        value = self.get(index, name)
        if value is None and optional:
            return None
        if not isinstance(value, cls):
            raise self.doc.error(index, f"field '{name}' should be {what}, got {_describe(value)}")
        return value

    def seq(self, index: int, name: str, cls: Any, what: str) -> tuple[Any, ...]:
        value = self.get(index, name)
        if value is None:
            return ()
        if not isinstance(value, tuple):
            raise self.doc.error(
                index, f"field '{name}' should be an array of {what}, got {_describe(value)}"
            )
        for item in value:
            if not isinstance(item, cls):
                raise self.doc.error(index, f"field '{name}' should hold {what}, got {_describe(item)}")
        return value

    def int_field(self, index: int, name: str) -> int:
        text = self.doc.plain(index, name)
        try:
            return int(text)
        except ValueError:
            raise self.doc.error(index, f"field '{name}' should be an integer, got {text!r}") from None

    def float_field(self, index: int, name: str) -> float:
        text = self.doc.plain(index, name)
        try:
            return float(text)
        except ValueError:
            raise self.doc.error(index, f"field '{name}' should be a number, got {text!r}") from None

    def string(self, index: int, name: str) -> str:
        value = self.get(index, name)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.doc.error(index, f"field '{name}' should be a string, got {_describe(value)}")
        return value

    def span(self, index: int) -> Span | None:
        value = self.get_as(index, "span", (Span, TVMObject), "a span")
        return value if isinstance(value, Span) else None

    def expr_tail(self, index: int) -> dict[str, Any]:
        # Spans and inferred types the IR cannot hold (SequentialSpan,
        # PrimType) are dropped; the raw graph still writes them back.
        span = self.get_as(index, "span", (Span, TVMObject), "a span")
        checked = self.get_as(index, "_checked_type_", (A.Type, TVMObject), "a type")
        return {
            "span": span if isinstance(span, Span) else None,
            "checked_type": checked if isinstance(checked, A.Type) else None,
        }

    def device(self, index: int, name: str) -> VirtualDevice | None:
        """An expression's virtual_device_: None when null or fully unconstrained."""
        value = self.get_as(index, name, VirtualDevice, "a virtual device")
        if not isinstance(value, VirtualDevice) or value.is_fully_unconstrained:
            return None
        return value

    def expr(self, index: int, name: str, *, optional: bool = False) -> Any:
        return self.get_as(index, name, A.Expr, "an expression", optional=optional)

    # -- per node

    def _decode_node(self, index: int) -> Any:
        node = self.doc.nodes[index]
        type_key = node["type_key"]
        if type_key == "":
            return None
        decoder = _DECODERS.get(type_key)
        if decoder is not None:
            value = decoder(self, index, node)
        elif type_key in op_attrs.SCHEMAS:
            value = self._attrs(index, op_attrs.SCHEMAS[type_key])
        else:
            value = TVMObject(type_key, RawRef(self.doc, index))
        if isinstance(value, _TRACKED):
            self.origins.note(value, index)
        elif isinstance(value, VirtualDevice):
            self.origins.vd_by_value.setdefault(value, index)
        return value

    def _attrs(self, index: int, schema: op_attrs.AttrsSchema) -> A.Attrs:
        fields: list[tuple[str, Any]] = []
        for f in schema.fields:
            if f.is_ref:
                value = self.get(index, f.name)
                value = _attr_from_object(self, index, f, value)
            else:
                value = _plain_value(self, index, f.name, f.kind)
            fields.append((f.name, value))
        return A.Attrs(tuple(fields), schema.type_key)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, TVMObject):
        return value.type_key
    return type(value).__name__


def _plain_value(dec: _Decoder, index: int, name: str, kind: str) -> Any:
    if kind == "int":
        return dec.int_field(index, name)
    if kind == "bool":
        return dec.int_field(index, name) != 0
    if kind == "float":
        return dec.float_field(index, name)
    return dec.doc.plain(index, name)


def _attr_from_object(dec: _Decoder, index: int, f: op_attrs.AttrField, value: Any) -> Any:
    """An attribute field's decoded object in the team's value conventions."""
    if value is None:
        return None
    kind = f.kind
    if kind == "VirtualDevice":
        if not isinstance(value, VirtualDevice):
            raise dec.doc.error(index, f"field '{f.name}' should be a virtual device, got {_describe(value)}")
        return value
    if kind == "Expr":
        if not isinstance(value, A.Expr):
            raise dec.doc.error(index, f"field '{f.name}' should be an expression, got {_describe(value)}")
        return value
    if kind == "String":
        if not isinstance(value, str):
            raise dec.doc.error(index, f"field '{f.name}' should be a string, got {_describe(value)}")
        return value
    if kind == "Bool" and isinstance(value, A.IntImm) and value.dtype == "bool":
        return bool(value.value)
    return value


def _dec_string(dec: _Decoder, index: int, node: dict[str, Any]) -> str:
    return dec.doc.repr_text(index)


def _dec_op(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Op:
    name = dec.doc.repr_text(index)
    if not name:
        raise dec.doc.error(index, "operator without a name")
    return A.op(name)


def _dec_array(dec: _Decoder, index: int, node: dict[str, Any]) -> tuple[Any, ...]:
    values = dec.values
    return tuple(values[j] for j in node.get("data", ()))


def _dec_map(dec: _Decoder, index: int, node: dict[str, Any]) -> _MapValue:
    values = dec.values
    data = node.get("data", [])
    keys = node.get("keys")
    if keys:
        return _MapValue(tuple((k, values[j]) for k, j in zip(keys, data)), True)
    return _MapValue(tuple((values[data[i]], values[data[i + 1]]) for i in range(0, len(data), 2)), not data)


def _dec_intimm(dec: _Decoder, index: int, node: dict[str, Any]) -> int | A.IntImm:
    value = dec.int_field(index, "value")
    dtype = dec.doc.plain(index, "dtype")
    return value if dtype == "int32" else A.IntImm(value, dtype)


def _dec_floatimm(dec: _Decoder, index: int, node: dict[str, Any]) -> float:
    return dec.float_field(index, "value")


def _dec_tir_var(dec: _Decoder, index: int, node: dict[str, Any]) -> str:
    return dec.string(index, "name")


def _dec_id(dec: _Decoder, index: int, node: dict[str, Any]) -> str:
    return dec.string(index, "name_hint")


def _dec_var(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Var:
    vid = dec.get(index, "vid")
    if not isinstance(vid, str):
        raise dec.doc.error(index, f"field 'vid' should be a relay.Id, got {_describe(vid)}")
    return A.Var(
        vid,
        dec.get_as(index, "type_annotation", A.Type, "a type"),
        dec.device(index, "virtual_device_"),
        **dec.expr_tail(index),
    )


def _dec_global_var(dec: _Decoder, index: int, node: dict[str, Any]) -> A.GlobalVar:
    return A.GlobalVar(dec.string(index, "name_hint"), **dec.expr_tail(index))


def _dec_function(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Function:
    attrs = dec.get(index, "attrs")
    pairs: tuple[tuple[str, Any], ...] = ()
    if isinstance(attrs, _DictAttrsValue):
        pairs = attrs.items
    elif attrs is not None:
        raise dec.doc.error(index, f"field 'attrs' should be DictAttrs, got {_describe(attrs)}")
    return A.Function(
        dec.seq(index, "params", A.Var, "variables"),
        dec.expr(index, "body"),
        dec.get_as(index, "ret_type", A.Type, "a type"),
        dec.seq(index, "type_params", A.TypeVar, "type variables"),
        pairs,
        dec.device(index, "virtual_device_"),
        **dec.expr_tail(index),
    )


def _dec_call(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Call:
    attrs = dec.get(index, "attrs")
    if isinstance(attrs, _DictAttrsValue):
        attrs = A.Attrs(attrs.items, "DictAttrs")
    elif attrs is not None and not isinstance(attrs, A.Attrs):
        raise dec.doc.error(index, f"field 'attrs' should be attributes, got {_describe(attrs)}")
    return A.Call(
        dec.expr(index, "op"),
        dec.seq(index, "args", A.Expr, "expressions"),
        attrs,
        dec.seq(index, "type_args", A.Type, "types"),
        **dec.expr_tail(index),
    )


def _dec_let(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Let:
    var = dec.get_as(index, "var", A.Var, "a variable", optional=False)
    return A.Let(var, dec.expr(index, "value"), dec.expr(index, "body"), **dec.expr_tail(index))


def _dec_if(dec: _Decoder, index: int, node: dict[str, Any]) -> A.If:
    return A.If(
        dec.expr(index, "cond"),
        dec.expr(index, "true_branch"),
        dec.expr(index, "false_branch"),
        **dec.expr_tail(index),
    )


def _dec_tuple(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Tuple:
    return A.Tuple(dec.seq(index, "fields", A.Expr, "expressions"), **dec.expr_tail(index))


def _dec_tgi(dec: _Decoder, index: int, node: dict[str, Any]) -> A.TupleGetItem:
    return A.TupleGetItem(
        dec.expr(index, "tuple_value"), dec.int_field(index, "index"), **dec.expr_tail(index)
    )


def _dec_constant(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Constant:
    tensor = dec.int_field(index, "data")
    b64 = dec.doc.b64ndarrays
    if not 0 <= tensor < len(b64):
        raise dec.doc.error(index, f"refers to tensor {tensor}, but there are {len(b64)} b64ndarrays")
    data = dec.tensors.get(tensor)
    if data is None:
        try:
            data = ndarray_from_b64(b64[tensor])
        except NDArrayFormatError as exc:
            raise dec.doc.error(index, f"tensor {tensor}: {exc}") from None
        dec.tensors[tensor] = data
    return A.Constant(data, **dec.expr_tail(index))


def _dec_ref_create(dec: _Decoder, index: int, node: dict[str, Any]) -> A.RefCreate:
    return A.RefCreate(dec.expr(index, "value"), **dec.expr_tail(index))


def _dec_ref_read(dec: _Decoder, index: int, node: dict[str, Any]) -> A.RefRead:
    return A.RefRead(dec.expr(index, "ref"), **dec.expr_tail(index))


def _dec_ref_write(dec: _Decoder, index: int, node: dict[str, Any]) -> A.RefWrite:
    return A.RefWrite(dec.expr(index, "ref"), dec.expr(index, "value"), **dec.expr_tail(index))


def _dec_match(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Match:
    return A.Match(
        dec.expr(index, "data"),
        dec.seq(index, "clauses", A.Clause, "clauses"),
        dec.int_field(index, "complete") != 0,
        **dec.expr_tail(index),
    )


def _dec_clause(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Clause:
    lhs = dec.get_as(index, "lhs", A.Pattern, "a pattern", optional=False)
    return A.Clause(lhs, dec.expr(index, "rhs"))


def _dec_pwild(dec: _Decoder, index: int, node: dict[str, Any]) -> A.PatternWildcard:
    return A.PatternWildcard(span=dec.span(index))


def _dec_pvar(dec: _Decoder, index: int, node: dict[str, Any]) -> A.PatternVar:
    var = dec.get_as(index, "var", A.Var, "a variable", optional=False)
    return A.PatternVar(var, span=dec.span(index))


def _dec_pctor(dec: _Decoder, index: int, node: dict[str, Any]) -> A.PatternConstructor:
    ctor = dec.get_as(index, "constructor", A.Constructor, "a constructor", optional=False)
    return A.PatternConstructor(ctor, dec.seq(index, "patterns", A.Pattern, "patterns"), span=dec.span(index))


def _dec_ptuple(dec: _Decoder, index: int, node: dict[str, Any]) -> A.PatternTuple:
    return A.PatternTuple(dec.seq(index, "patterns", A.Pattern, "patterns"), span=dec.span(index))


def _dec_constructor(dec: _Decoder, index: int, node: dict[str, Any]) -> A.Constructor:
    belong = dec.get_as(index, "belong_to", A.GlobalTypeVar, "a global type variable", optional=False)
    return A.Constructor(
        dec.string(index, "name_hint"),
        dec.seq(index, "inputs", A.Type, "types"),
        belong,
        dec.int_field(index, "tag"),
        **dec.expr_tail(index),
    )


def _dec_type_data(dec: _Decoder, index: int, node: dict[str, Any]) -> A.TypeData:
    header = dec.get_as(index, "header", A.GlobalTypeVar, "a global type variable", optional=False)
    return A.TypeData(
        header,
        dec.seq(index, "type_vars", A.TypeVar, "type variables"),
        dec.seq(index, "constructors", A.Constructor, "constructors"),
        span=dec.span(index),
    )


def _dec_tensor_type(dec: _Decoder, index: int, node: dict[str, Any]) -> A.TensorType:
    shape = dec.get(index, "shape")
    if shape is None:
        shape = ()
    if not isinstance(shape, tuple):
        raise dec.doc.error(index, f"field 'shape' should be an array, got {_describe(shape)}")
    for dim in shape:
        if not isinstance(dim, (int, A.IntImm, A.AnyDim, str)) or isinstance(dim, bool):
            raise dec.doc.error(
                index, f"shape dimension should be an integer, ? or a variable, got {_describe(dim)}"
            )
    return A.TensorType(shape, dec.doc.plain(index, "dtype"), span=dec.span(index))


def _type_span(dec: _Decoder, index: int) -> Any:
    return dec.span(index)


def _dec_tuple_type(dec: _Decoder, index: int, node: dict[str, Any]) -> A.TupleType:
    return A.TupleType(dec.seq(index, "fields", A.Type, "types"), span=_type_span(dec, index))


def _dec_func_type(dec: _Decoder, index: int, node: dict[str, Any]) -> A.FuncType:
    ret = dec.get_as(index, "ret_type", A.Type, "a type", optional=False)
    constraints = dec.get(index, "type_constraints")
    return A.FuncType(
        dec.seq(index, "arg_types", A.Type, "types"),
        ret,
        dec.seq(index, "type_params", A.TypeVar, "type variables"),
        constraints if isinstance(constraints, tuple) else (),
        span=_type_span(dec, index),
    )


def _dec_type_var(dec: _Decoder, index: int, node: dict[str, Any]) -> A.TypeVar:
    return A.TypeVar(
        dec.string(index, "name_hint"), dec.int_field(index, "kind"), span=_type_span(dec, index)
    )


def _dec_global_type_var(dec: _Decoder, index: int, node: dict[str, Any]) -> A.GlobalTypeVar:
    return A.GlobalTypeVar(dec.string(index, "name_hint"), dec.int_field(index, "kind"))


def _dec_type_call(dec: _Decoder, index: int, node: dict[str, Any]) -> A.TypeCall:
    func = dec.get_as(index, "func", A.Type, "a type", optional=False)
    return A.TypeCall(func, dec.seq(index, "args", A.Type, "types"), span=_type_span(dec, index))


def _dec_ref_type(dec: _Decoder, index: int, node: dict[str, Any]) -> A.RefType:
    value = dec.get_as(index, "value", A.Type, "a type", optional=False)
    return A.RefType(value, span=_type_span(dec, index))


def _dec_incomplete(dec: _Decoder, index: int, node: dict[str, Any]) -> A.IncompleteType:
    return A.IncompleteType(dec.int_field(index, "kind"), span=_type_span(dec, index))


def _dec_dict_attrs(dec: _Decoder, index: int, node: dict[str, Any]) -> _DictAttrsValue:
    value = dec.get(index, "__dict__")
    if value is None:
        return _DictAttrsValue(())
    if not isinstance(value, _MapValue) or not value.str_keys:
        raise dec.doc.error(index, "field '__dict__' should be a map with string keys")
    return _DictAttrsValue(value.items)


def _dec_virtual_device(dec: _Decoder, index: int, node: dict[str, Any]) -> VirtualDevice:
    device_type = dec.int_field(index, "device_type_int")
    device_id = dec.int_field(index, "virtual_device_id")
    target = dec.get_as(index, "target", Target, "a target")
    if isinstance(target, TVMObject):
        raise dec.doc.error(index, f"field 'target' should be a Target, got {target.type_key}")
    scope = dec.string(index, "memory_scope")
    return VirtualDevice(
        device_type if device_type != -1 else None,
        device_id if device_id != -1 else None,
        target,
        scope if scope else None,
    )


def _unbox(value: Any) -> Any:
    if isinstance(value, TVMObject):
        boxed = value.boxed_value()
        return value if boxed is None else boxed
    if isinstance(value, tuple):
        return tuple(_unbox(v) for v in value)
    if isinstance(value, A.IntImm) and value.dtype == "bool":
        return bool(value.value)
    return value


def _dec_target(dec: _Decoder, index: int, node: dict[str, Any]) -> Target:
    kind = dec.get(index, "kind")
    if not isinstance(kind, str) or not kind:
        raise dec.doc.error(index, "target without a kind")
    keys = dec.seq(index, "keys", str, "strings")
    attrs = dec.get(index, "attrs")
    host = dec.get_as(index, "host", Target, "a target")
    pairs: tuple[tuple[str, Any], ...] = ()
    if isinstance(attrs, _MapValue) and attrs.str_keys:
        pairs = tuple((str(k), _unbox(v)) for k, v in attrs.items)
    elif attrs is not None:
        raise dec.doc.error(index, f"field 'attrs' should be a map with string keys, got {_describe(attrs)}")
    return Target(
        kind,
        keys,
        pairs,
        host,
        dec.string(index, "tag"),
        raw=RawRef(dec.doc, index),
    )


def _dec_span(dec: _Decoder, index: int, node: dict[str, Any]) -> Span:
    name = dec.get(index, "source_name")
    source = SourceText(name, "") if isinstance(name, str) else None
    return Span(
        source,
        dec.int_field(index, "line"),
        dec.int_field(index, "column"),
        dec.int_field(index, "end_line"),
        dec.int_field(index, "end_column"),
    )


def _dec_module(dec: _Decoder, index: int, node: dict[str, Any]) -> _ModuleValue:
    return _ModuleValue({name: dec.get(index, name) for name, _ in NODE_FIELDS["IRModule"]})


_DECODERS: dict[str, Callable[[_Decoder, int, dict[str, Any]], Any]] = {
    "runtime.String": _dec_string,
    "SourceName": _dec_string,
    "TargetKind": _dec_string,
    "Op": _dec_op,
    "Array": _dec_array,
    "Map": _dec_map,
    "IntImm": _dec_intimm,
    "FloatImm": _dec_floatimm,
    "tir.Any": lambda dec, index, node: A.ANY,
    "tir.Var": _dec_tir_var,
    "tir.SizeVar": _dec_tir_var,
    "relay.Id": _dec_id,
    "relay.Var": _dec_var,
    "GlobalVar": _dec_global_var,
    "relay.Function": _dec_function,
    "relay.Call": _dec_call,
    "relay.Let": _dec_let,
    "relay.If": _dec_if,
    "relay.Tuple": _dec_tuple,
    "relay.TupleGetItem": _dec_tgi,
    "relay.Constant": _dec_constant,
    "relay.RefCreate": _dec_ref_create,
    "relay.RefRead": _dec_ref_read,
    "relay.RefWrite": _dec_ref_write,
    "relay.Match": _dec_match,
    "relay.Clause": _dec_clause,
    "relay.PatternWildcard": _dec_pwild,
    "relay.PatternVar": _dec_pvar,
    "relay.PatternConstructor": _dec_pctor,
    "relay.PatternTuple": _dec_ptuple,
    "relay.Constructor": _dec_constructor,
    "relay.TypeData": _dec_type_data,
    "relay.TensorType": _dec_tensor_type,
    "TensorType": _dec_tensor_type,
    "TupleType": _dec_tuple_type,
    "FuncType": _dec_func_type,
    "TypeVar": _dec_type_var,
    "GlobalTypeVar": _dec_global_type_var,
    "TypeCall": _dec_type_call,
    "relay.RefType": _dec_ref_type,
    "IncompleteType": _dec_incomplete,
    "DictAttrs": _dec_dict_attrs,
    "VirtualDevice": _dec_virtual_device,
    "Target": _dec_target,
    "Span": _dec_span,
    "IRModule": _dec_module,
}


# --------------------------------------------------------------------------
# Writing: a pre-order numbering like TVM's NodeIndexer, then dmlc layout

_Item = tuple[str, Any]  # (slot, value): how to encode `value`


class _Spec:
    """One output node before indices are known: children are identity keys."""

    __slots__ = ("data", "keys", "plain", "refs", "repr", "type_key")

    def __init__(self, type_key: str) -> None:
        self.type_key = type_key
        self.repr: str | None = None
        self.plain: dict[str, str] = {}
        self.refs: list[tuple[str, Any]] = []  # (field, child key or None)
        self.data: list[Any] | None = None  # child keys
        self.keys: list[str] | None = None


class _Writer:
    """Numbers objects in TVM's order and lays out the JSON like dmlc."""

    def __init__(self, origins: Origins | None) -> None:
        self.origins = origins
        self.specs: list[_Spec | None] = [None]  # index 0: null
        self.index: dict[Any, int] = {}
        self.tensors: list[str] = []
        self.tensor_index: dict[Any, int] = {}
        self.keep: list[Any] = []
        self._fresh = 0
        # TVM's printer shares one IntImm per dimension value across the
        # types in a metadata section; modules keep the sharing they had.
        self.share_dims = False
        self._raw_targets: dict[tuple[int, int], Any] = {}

    # -- identity

    def key(self, item: _Item) -> Any:
        """The identity of the object `item` encodes, or None for null."""
        slot, value = item
        if value is None and slot not in ("vd_expr",):
            return None
        if slot == "raw":
            doc, index = value
            if doc.nodes[index]["type_key"] == "":
                return None
            return ("raw", id(doc), index)
        if isinstance(value, TVMObject):
            return ("raw", id(value.raw.doc), value.raw.node)
        origins = self.origins
        if slot in ("vd", "vd_expr"):
            vd = value if value is not None else _UNCONSTRAINED
            if isinstance(vd, A.MetaRef):
                raise RelayError(f"cannot write meta[{vd.kind}][{vd.index}]: its virtual device is unknown")
            if origins is not None:
                found = origins.vd_by_value.get(vd)
                if found is not None:
                    return ("raw", id(origins.doc), found)
            return _UNCONSTRAINED_KEY if vd is _UNCONSTRAINED else ("vd", vd)
        if slot == "target":
            if isinstance(value.raw, RawRef) and self._raw_target_matches(value):
                return ("raw", id(value.raw.doc), value.raw.node)
            return ("target", value)
        if slot == "op":
            return ("op", value.name)
        if slot == "sourcename":
            return ("sourcename", value)
        if slot == "dim" and self.share_dims and type(value) is int:
            return ("dim", value)
        if isinstance(value, (*_TRACKED, Span)):
            if origins is not None:
                origin = origins.find(value)
                if origin is not None:
                    return ("raw", id(origins.doc), origin.node)
            if isinstance(value, A.TensorType):
                remembered = _remembered_type(value)
                if remembered is not None:
                    return ("raw", id(remembered.doc), remembered.node)
            if isinstance(value, A.GlobalTypeVar):
                return ("gtv", value.name, value.kind)
            return ("obj", id(value))
        self._fresh += 1
        return ("fresh", self._fresh)

    def _raw_target_matches(self, target: Target) -> bool:
        """Whether `target` still equals the node its `raw` names (a target
        edited with `dataclasses.replace` keeps the old `raw`)."""
        raw: RawRef = target.raw
        cache_key = (id(raw.doc), raw.node)
        original = self._raw_targets.get(cache_key)
        if original is None:
            original = self._raw_targets[cache_key] = _Decoder(raw.doc).decode(raw.node)
        return bool(original == target)

    # -- numbering

    def add(self, root: _Item) -> int:
        """Number `root` and everything it references; returns its index."""
        root_key = self.key(root)
        stack: list[tuple[_Item, Any]] = [(root, root_key)]
        keep = self.keep
        while stack:
            item, key = stack.pop()
            if key is None or key in self.index:
                continue
            if key[0] == "obj":  # identified by id(): keep the object alive while numbering
                keep.append(item)
            spec, children = self._spec(item, key)
            self.index[key] = len(self.specs)
            self.specs.append(spec)
            stack.extend(reversed(children))
        return 0 if root_key is None else self.index[root_key]

    def _child(
        self, spec_refs: list[tuple[str, Any]], children: list[tuple[_Item, Any]], name: str, item: _Item
    ) -> None:
        key = self.key(item)
        spec_refs.append((name, key))
        children.append((item, key))

    def _spec(self, item: _Item, key: Any) -> tuple[_Spec, list[tuple[_Item, Any]]]:
        slot, value = item
        if key[0] == "raw":
            return self._raw_spec(value if slot == "raw" else _raw_of(value, self.origins))
        children: list[tuple[_Item, Any]] = []
        spec = _encode_fresh(self, slot, value, children)
        return spec, children

    def _raw_spec(self, ref: tuple[RawDoc, int]) -> tuple[_Spec, list[tuple[_Item, Any]]]:
        doc, index = ref
        nodes = doc.nodes
        node = nodes[index]
        type_key = node["type_key"]
        spec = _Spec(type_key)
        children: list[tuple[_Item, Any]] = []
        if "repr_str" in node or "repr_b64" in node:
            spec.repr = doc.repr_text(index)
            return spec, children
        doc_id = id(doc)
        targets = doc.children(index)
        keys: list[Any] = []
        for j in targets:
            k = None if nodes[j]["type_key"] == "" else ("raw", doc_id, j)
            keys.append(k)
            children.append((("raw", (doc, j)), k))
        if type_key in CONTAINER_TYPES:
            spec.data = keys
            if node.get("keys"):
                spec.keys = list(node["keys"])
            return spec, children
        attrs = node.get("attrs", {})
        for name, kind in _plain_fields(type_key):
            if kind == "ndarray":
                tensor = int(attrs[name])
                spec.plain[name] = str(
                    self._tensor(
                        ("raw", doc_id, tensor), functools.partial(doc.b64ndarrays.__getitem__, tensor)
                    )
                )
            else:
                spec.plain[name] = attrs[name]
        spec.refs = list(zip(_ref_order(type_key), keys))
        return spec, children

    def _tensor(self, key: Any, make: Callable[[], str]) -> int:
        found = self.tensor_index.get(key)
        if found is None:
            found = self.tensor_index[key] = len(self.tensors)
            self.tensors.append(make())
        return found

    # -- output

    def to_json(self, root: int) -> str:
        """The document in dmlc's layout (as TVM writes it, byte for byte)."""
        out: list[str] = ['{\n  "root": ', str(root), ', \n  "nodes": [\n    {\n      "type_key": ""\n    }']
        append = out.append
        index = self.index
        quote = _json_string
        for spec in self.specs[1:]:
            assert spec is not None
            append(', \n    {\n      "type_key": ' + quote(spec.type_key))
            if spec.repr:
                if _PRINTABLE.fullmatch(spec.repr):
                    append(', \n      "repr_str": ' + quote(spec.repr))
                else:
                    raw = spec.repr.encode("utf-8", errors="surrogateescape")
                    append(', \n      "repr_b64": "' + base64.b64encode(raw).decode("ascii") + '"')
            # Field names are identifiers and node indices digits: only plain values need escaping.
            fields = [(k, quote(v)) for k, v in spec.plain.items()]
            fields.extend((k, '"0"' if c is None else '"' + str(index[c]) + '"') for k, c in spec.refs)
            if fields:
                fields.sort()
                if len(fields) == 1:
                    append(', \n      "attrs": {"' + fields[0][0] + '": ' + fields[0][1] + "}")
                else:
                    append(', \n      "attrs": {')
                    append(", ".join(['\n        "' + k + '": ' + v for k, v in fields]))
                    append("\n      }")
            if spec.keys:
                append(', \n      "keys": [')
                append(", ".join(["\n        " + quote(k) for k in spec.keys]))
                append("\n      ]")
            if spec.data:
                numbers = ["0" if k is None else str(index[k]) for k in spec.data]
                if len(numbers) > 10:  # dmlc writes arrays of more than 10 numbers one per line
                    append(', \n      "data": [\n        ' + ", \n        ".join(numbers) + "\n      ]")
                else:
                    append(', \n      "data": [' + ", ".join(numbers) + "]")
            append("\n    }")
        append('\n  ], \n  "b64ndarrays": [')
        if self.tensors:
            append(", ".join(["\n    " + quote(t) for t in self.tensors]))
            append("\n  ]")
        else:
            append("]")
        append(', \n  "attrs": {"tvm_version": "' + TVM_VERSION + '"}\n}')
        return "".join(out)


# TVM writes repr bytes as a string when every byte is printable ASCII (isprint).
_PRINTABLE = re.compile(r"[ -~]*")
_ESCAPES = {"\r": "\\r", "\n": "\\n", "\\": "\\\\", "\t": "\\t", '"': '\\"'}


def _json_string(text: str) -> str:
    """A JSON string as dmlc writes it: only \\r \\n \\t \\\\ \\" escaped."""
    if '"' in text or "\\" in text or "\n" in text or "\r" in text or "\t" in text:
        text = "".join(_ESCAPES.get(ch, ch) for ch in text)
    return '"' + text + '"'


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _without_gc(func: Callable[_P, _R]) -> Callable[_P, _R]:
    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _gc_paused():
            return func(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Building or walking a big graph allocates millions of small objects
    and no cycles; the cyclic collector would rescan the heap many times."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _raw_of(value: Any, origins: Origins | None) -> RawRef:
    if isinstance(value, TVMObject):
        return value.raw
    if isinstance(value, Target) and isinstance(value.raw, RawRef):
        return value.raw
    if isinstance(value, A.TensorType) and (origins is None or origins.find(value) is None):
        remembered = _remembered_type(value)
        assert remembered is not None
        return remembered
    assert origins is not None
    if isinstance(value, VirtualDevice) or value is None:
        vd = value if value is not None else _UNCONSTRAINED
        return RawRef(origins.doc, origins.vd_by_value[vd])
    found = origins.find(value)
    assert found is not None
    return found


def _format_double(value: float) -> str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if math.isnan(value):
        return "nan"
    return f"{value:.17g}"


def _plain_text(kind: str, value: Any) -> str:
    if value is None:
        value = op_attrs.zero_value(kind)
    if kind == "bool":
        return "1" if value else "0"
    if kind == "int":
        return str(int(value))
    if kind == "float":
        return _format_double(float(value))
    return str(value)


def _expr_tail(
    w: _Writer, spec: _Spec, children: list[tuple[_Item, Any]], expr: A.Expr, *, vd: Any = None
) -> None:
    w._child(spec.refs, children, "virtual_device_", ("vd_expr", vd))
    w._child(spec.refs, children, "span", ("span", expr.span))
    w._child(spec.refs, children, "_checked_type_", ("type", expr.checked_type))


_REPR_SLOTS = {"string": "runtime.String", "sourcename": "SourceName", "targetkind": "TargetKind"}


def _encode_fresh(w: _Writer, slot: str, value: Any, children: list[tuple[_Item, Any]]) -> _Spec:
    """A node for `value` encoded from the IR (no raw origin). `slot` says
    what `value` is where TVM's node types are not implied by Python types
    (an int may be an IntImm, a boxed int or a plain field)."""
    add = w._child
    match slot:
        case "expr":
            return _encode_expr(w, value, children)
        case "type":
            return _encode_type(w, value, children)
        case "attrs":
            return _encode_attrs(w, value, children)
        case "pattern":
            return _encode_pattern(w, value, children)
        case "dim":
            return _encode_dim(w, value, children)
        case "span":
            return _encode_span(w, value, children)
        case "target":
            return _encode_target(w, value, children)
        case "module":
            return _encode_module(w, value, children)
        case "generic":
            return _encode_generic(w, value, children)
        case "meta_entry":
            if isinstance(value, VirtualDevice):
                return _encode_fresh(w, "vd", value, children)
            return _encode_generic(w, value, children)
        case "vd" | "vd_expr":
            vd = value if value is not None else _UNCONSTRAINED
            spec = _Spec("VirtualDevice")
            spec.plain["device_type_int"] = str(vd.device_type if vd.device_type is not None else -1)
            spec.plain["virtual_device_id"] = str(
                vd.virtual_device_id if vd.virtual_device_id is not None else -1
            )
            add(spec.refs, children, "target", ("target", vd.target))
            add(spec.refs, children, "memory_scope", ("string", vd.memory_scope or ""))
            return spec
        case "string" | "sourcename" | "targetkind":
            spec = _Spec(_REPR_SLOTS[slot])
            spec.repr = value
            return spec
        case "op":
            spec = _Spec("Op")
            spec.repr = value.name
            return spec
        case "boxint":
            spec = _Spec("runtime.BoxInt")
            spec.repr = str(int(value))
            return spec
        case "id":
            spec = _Spec("relay.Id")
            add(spec.refs, children, "name_hint", ("string", value))
            return spec
        case "primtype":
            spec = _Spec("PrimType")
            spec.plain["dtype"] = value
            return spec
        case "array":  # value: (element slot, elements)
            elem_slot, elems = value
            spec = _Spec("Array")
            spec.data = _add_all(w, children, [(elem_slot, e) for e in elems])
            return spec
        case "strmap" | "objmap_str":  # value: (str key, value) pairs; strmap values are generic
            spec = _Spec("Map")
            spec.keys = [str(k) for k, _ in value]
            items = [("generic", v) if slot == "strmap" else v for _, v in value]
            spec.data = _add_all(w, children, items)
            return spec
        case "objmap":  # value: (key item, value item) pairs
            spec = _Spec("Map")
            spec.data = _add_all(w, children, [item for pair in value for item in pair])
            return spec
        case "dictattrs":
            spec = _Spec("DictAttrs")
            add(spec.refs, children, "__dict__", ("strmap", tuple(value)))
            return spec
        case "sourcemap":
            spec = _Spec("SourceMap")
            add(spec.refs, children, "source_map", ("strmap", ()))
            return spec
        case "clause":
            spec = _Spec("relay.Clause")
            add(spec.refs, children, "lhs", ("pattern", value.lhs))
            add(spec.refs, children, "rhs", ("expr", value.rhs))
            return spec
        case "typedata":
            spec = _Spec("relay.TypeData")
            add(spec.refs, children, "header", ("type", value.header))
            add(spec.refs, children, "type_vars", ("array", ("type", value.type_vars)))
            add(spec.refs, children, "constructors", ("array", ("expr", value.constructors)))
            add(spec.refs, children, "span", ("span", value.span))
            return spec
    raise RelayError(f"cannot write a {type(value).__name__} as TVM JSON ({slot})")


def _add_all(w: _Writer, children: list[tuple[_Item, Any]], items: list[_Item]) -> list[Any]:
    keys = []
    for item in items:
        key = w.key(item)
        keys.append(key)
        children.append((item, key))
    return keys


def _encode_generic(w: _Writer, value: Any, children: list[tuple[_Item, Any]]) -> _Spec:
    """A value of no declared kind (function attributes, map values)."""
    if isinstance(value, bool):
        spec = _Spec("IntImm")
        spec.plain.update(dtype="bool", value="1" if value else "0")
        spec.refs.append(("span", None))
        return spec
    if isinstance(value, (int, A.IntImm, A.AnyDim)):
        return _encode_dim(w, value, children)
    if isinstance(value, float):
        spec = _Spec("FloatImm")
        spec.plain.update(dtype="float32", value=_format_double(value))
        spec.refs.append(("span", None))
        return spec
    if isinstance(value, str):
        return _encode_fresh(w, "string", value, children)
    if isinstance(value, (tuple, list)):
        return _encode_fresh(w, "array", ("generic", tuple(value)), children)
    if isinstance(value, VirtualDevice):
        return _encode_fresh(w, "vd", value, children)
    if isinstance(value, Target):
        return _encode_target(w, value, children)
    if isinstance(value, A.Op):
        return _encode_fresh(w, "op", value, children)
    if isinstance(value, A.Expr):
        return _encode_expr(w, value, children)
    if isinstance(value, A.Type):
        return _encode_type(w, value, children)
    if isinstance(value, A.Attrs):
        return _encode_attrs(w, value, children)
    if isinstance(value, _MapValue):
        if value.str_keys:
            return _encode_fresh(w, "strmap", value.items, children)
        return _encode_fresh(
            w, "objmap", tuple((("generic", k), ("generic", v)) for k, v in value.items), children
        )
    if isinstance(value, _DictAttrsValue):
        return _encode_fresh(w, "dictattrs", value.items, children)
    if isinstance(value, A.MetaRef):
        raise RelayError(f"cannot write meta[{value.kind}][{value.index}]: its value is unknown")
    raise RelayError(f"cannot write a {type(value).__name__} as TVM JSON")


def _encode_target(w: _Writer, target: Target, children: list[tuple[_Item, Any]]) -> _Spec:
    """A Target in TVM's complete form (kind, tag, keys, attrs, features, host)."""
    spec = _Spec("Target")
    add = w._child
    add(spec.refs, children, "kind", ("targetkind", target.kind))
    add(spec.refs, children, "tag", ("string", target.tag))
    add(spec.refs, children, "keys", ("array", ("string", tuple(target.keys))))
    attrs = tuple((k, _target_attr_item(v)) for k, v in target.attrs)
    add(spec.refs, children, "attrs", ("objmap_str", attrs))
    add(spec.refs, children, "features", ("strmap", ()))
    add(spec.refs, children, "host", ("target", target.host))
    return spec


def _target_attr_item(value: Any) -> _Item:
    if isinstance(value, bool):
        return ("generic", value)
    if isinstance(value, int):
        return ("boxint", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, (list, tuple)):
        return ("array", ("string", tuple(str(v) for v in value)))
    return ("generic", value)


def _encode_span(w: _Writer, span: Span, children: list[tuple[_Item, Any]]) -> _Spec:
    spec = _Spec("Span")
    name = span.source.name if span.source is not None else None
    w._child(spec.refs, children, "source_name", ("sourcename", name))
    spec.plain.update(
        line=str(span.line),
        column=str(span.column),
        end_line=str(span.end_line),
        end_column=str(span.end_column),
    )
    return spec


def _encode_dim(w: _Writer, dim: Any, children: list[tuple[_Item, Any]]) -> _Spec:
    if isinstance(dim, A.AnyDim):
        spec = _Spec("tir.Any")
        spec.plain["dtype"] = "int32"
        spec.refs.append(("span", None))
        return spec
    if isinstance(dim, str):
        spec = _Spec("tir.Var")
        spec.plain["dtype"] = "int32"
        w._child(spec.refs, children, "name", ("string", dim))
        w._child(spec.refs, children, "type_annotation", ("primtype", "int32"))
        spec.refs.append(("span", None))
        return spec
    if isinstance(dim, TVMObject):
        raise RelayError("internal: raw objects are copied, not encoded")
    if isinstance(dim, float):  # vision attributes keep FloatImm in Array<IndexExpr>
        spec = _Spec("FloatImm")
        spec.plain.update(dtype="float32", value=_format_double(dim))
        spec.refs.append(("span", None))
        return spec
    spec = _Spec("IntImm")
    if isinstance(dim, A.IntImm):
        spec.plain.update(dtype=dim.dtype, value=str(int(dim.value)))
    elif isinstance(dim, (int, float)):
        spec.plain.update(dtype="int32", value=str(int(dim)))
    else:
        raise RelayError(f"cannot write {dim!r} as an integer")
    spec.refs.append(("span", None))
    return spec


def _encode_type(w: _Writer, ty: A.Type, children: list[tuple[_Item, Any]]) -> _Spec:
    add = w._child
    span_item = ("span", ty.span)
    match ty:
        case A.TensorType(shape=shape, dtype=dtype):
            spec = _Spec("relay.TensorType")
            add(spec.refs, children, "shape", ("array", ("dim", tuple(shape))))
            spec.plain["dtype"] = dtype
            add(spec.refs, children, "span", span_item)
        case A.TupleType(fields=fields):
            spec = _Spec("TupleType")
            add(spec.refs, children, "fields", ("array", ("type", fields)))
            add(spec.refs, children, "span", span_item)
        case A.FuncType():
            spec = _Spec("FuncType")
            add(spec.refs, children, "arg_types", ("array", ("type", ty.arg_types)))
            add(spec.refs, children, "ret_type", ("type", ty.ret_type))
            add(spec.refs, children, "type_params", ("array", ("type", ty.type_params)))
            add(spec.refs, children, "type_constraints", ("array", ("generic", ty.type_constraints)))
            add(spec.refs, children, "span", span_item)
        case A.TypeVar(name=name, kind=kind):
            spec = _Spec("TypeVar")
            add(spec.refs, children, "name_hint", ("string", name))
            spec.plain["kind"] = str(kind)
            add(spec.refs, children, "span", span_item)
        case A.GlobalTypeVar(name=name, kind=kind):
            spec = _Spec("GlobalTypeVar")
            add(spec.refs, children, "name_hint", ("string", name))
            spec.plain["kind"] = str(kind)
        case A.TypeCall(func=func, args=args):
            spec = _Spec("TypeCall")
            add(spec.refs, children, "func", ("type", func))
            add(spec.refs, children, "args", ("array", ("type", args)))
            add(spec.refs, children, "span", span_item)
        case A.RefType(value=value):
            spec = _Spec("relay.RefType")
            add(spec.refs, children, "value", ("type", value))
            add(spec.refs, children, "span", span_item)
        case A.IncompleteType(kind=kind):
            spec = _Spec("IncompleteType")
            spec.plain["kind"] = str(kind)
            add(spec.refs, children, "span", span_item)
        case _:
            raise RelayError(f"cannot write type {type(ty).__name__} as TVM JSON")
    return spec


def _encode_pattern(w: _Writer, pattern: A.Pattern, children: list[tuple[_Item, Any]]) -> _Spec:
    add = w._child
    match pattern:
        case A.PatternWildcard():
            spec = _Spec("relay.PatternWildcard")
        case A.PatternVar(var=var):
            spec = _Spec("relay.PatternVar")
            add(spec.refs, children, "var", ("expr", var))
        case A.PatternConstructor(constructor=ctor, patterns=patterns):
            spec = _Spec("relay.PatternConstructor")
            add(spec.refs, children, "constructor", ("expr", ctor))
            add(spec.refs, children, "patterns", ("array", ("pattern", patterns)))
        case A.PatternTuple(patterns=patterns):
            spec = _Spec("relay.PatternTuple")
            add(spec.refs, children, "patterns", ("array", ("pattern", patterns)))
        case _:
            raise RelayError(f"cannot write pattern {type(pattern).__name__} as TVM JSON")
    add(spec.refs, children, "span", ("span", pattern.span))
    return spec


def _attr_item(f: op_attrs.AttrField, value: Any) -> _Item:
    """How to encode attribute field `f` holding `value`."""
    kind = f.kind
    if value is None or isinstance(value, TVMObject):
        return ("generic", value)
    if kind == "String":
        return ("string", str(value))
    if kind in ("IndexExpr", "Integer"):
        return ("dim", value)
    if kind in ("IndexExprs", "Integers"):
        return ("array", ("dim", tuple(value)))
    if kind == "IntegersList":
        return ("array", ("array", tuple(("dim", tuple(v)) for v in value)))
    if kind == "FloatImms":
        return ("array", ("generic", tuple(float(v) for v in value)))
    if kind == "VirtualDevice":
        return ("vd", value)
    if kind == "IntOrInts":
        if isinstance(value, (tuple, list)):
            return ("array", ("boxint", tuple(value)))
        return ("boxint", value)
    if kind == "Bool":
        return ("generic", bool(value))
    if kind == "Expr":
        return ("expr", value)
    return ("generic", value)


def _encode_attrs(w: _Writer, attrs: A.Attrs, children: list[tuple[_Item, Any]]) -> _Spec:
    schema = op_attrs.SCHEMAS.get(attrs.type_key or "")
    if schema is None:
        spec = _Spec("DictAttrs")
        w._child(spec.refs, children, "__dict__", ("strmap", attrs.fields))
        return spec
    spec = _Spec(schema.type_key)
    given = attrs.as_dict()
    for f in schema.fields:
        value = given.get(f.name)
        if f.is_ref:
            w._child(spec.refs, children, f.name, _attr_item(f, value))
        else:
            spec.plain[f.name] = _plain_text(f.kind, value)
    return spec


def _encode_expr(w: _Writer, expr: A.Expr, children: list[tuple[_Item, Any]]) -> _Spec:
    add = w._child
    match expr:
        case A.Var():
            spec = _Spec("relay.Var")
            add(spec.refs, children, "vid", ("id", expr.name))
            add(spec.refs, children, "type_annotation", ("type", expr.type_annotation))
            _expr_tail(w, spec, children, expr, vd=expr.virtual_device)
        case A.GlobalVar(name=name):
            spec = _Spec("GlobalVar")
            add(spec.refs, children, "name_hint", ("string", name))
            spec.refs.append(("virtual_device_", None))
            add(spec.refs, children, "span", ("span", expr.span))
            add(spec.refs, children, "_checked_type_", ("type", expr.checked_type))
            spec.refs.append(("struct_info_", None))
        case A.Constant(data=data):
            if data is None:
                raise RelayError(
                    f"cannot write meta[relay.Constant][{expr.meta_index}]: its value is unknown", expr.span
                )
            spec = _Spec("relay.Constant")
            tensor_data: A.NDArray = data
            spec.plain["data"] = str(w._tensor(("obj", id(data)), lambda: ndarray_to_b64(tensor_data)))
            w.keep.append(data)
            _expr_tail(w, spec, children, expr)
        case A.Op():
            spec = _Spec("Op")
            spec.repr = expr.name
        case A.Constructor():
            spec = _Spec("relay.Constructor")
            add(spec.refs, children, "name_hint", ("string", expr.name))
            add(spec.refs, children, "inputs", ("array", ("type", expr.inputs)))
            add(spec.refs, children, "belong_to", ("type", expr.belong_to))
            spec.plain["tag"] = str(expr.tag)
            add(spec.refs, children, "span", ("span", expr.span))
            add(spec.refs, children, "_checked_type_", ("type", expr.checked_type))
        case A.Call(op=callee, args=args, attrs=attrs, type_args=type_args):
            spec = _Spec("relay.Call")
            add(spec.refs, children, "op", ("expr", callee))
            add(spec.refs, children, "args", ("array", ("expr", args)))
            if isinstance(callee, A.Op) and op_attrs.schema_for(
                callee.name, attrs.type_key if attrs else None
            ):
                # TVM's reader needs every field, and its type relations need the node.
                attrs = op_attrs.complete_attrs(callee.name, attrs)
            elif attrs is not None and not attrs.fields and attrs.type_key is None:
                attrs = None  # TVM writes no attributes node for add(...) and friends
            add(spec.refs, children, "attrs", ("attrs", attrs))
            add(spec.refs, children, "type_args", ("array", ("type", type_args)))
            _expr_tail(w, spec, children, expr)
        case A.Function():
            spec = _Spec("relay.Function")
            add(spec.refs, children, "params", ("array", ("expr", expr.params)))
            add(spec.refs, children, "body", ("expr", expr.body))
            add(spec.refs, children, "ret_type", ("type", expr.ret_type))
            add(spec.refs, children, "type_params", ("array", ("type", expr.type_params)))
            add(spec.refs, children, "attrs", ("dictattrs", expr.attrs))
            _expr_tail(w, spec, children, expr, vd=expr.virtual_device)
        case A.Let(var=var, value=value, body=body):
            spec = _Spec("relay.Let")
            add(spec.refs, children, "var", ("expr", var))
            add(spec.refs, children, "value", ("expr", value))
            add(spec.refs, children, "span", ("span", expr.span))
            add(spec.refs, children, "_checked_type_", ("type", expr.checked_type))
            add(spec.refs, children, "body", ("expr", body))
            add(spec.refs, children, "virtual_device_", ("vd_expr", None))
        case A.If(cond=cond, true_branch=t, false_branch=f):
            spec = _Spec("relay.If")
            add(spec.refs, children, "cond", ("expr", cond))
            add(spec.refs, children, "true_branch", ("expr", t))
            add(spec.refs, children, "false_branch", ("expr", f))
            _expr_tail(w, spec, children, expr)
        case A.Tuple(fields=fields):
            spec = _Spec("relay.Tuple")
            add(spec.refs, children, "fields", ("array", ("expr", fields)))
            _expr_tail(w, spec, children, expr)
        case A.TupleGetItem(tuple_value=t, index=i):
            spec = _Spec("relay.TupleGetItem")
            add(spec.refs, children, "tuple_value", ("expr", t))
            spec.plain["index"] = str(i)
            _expr_tail(w, spec, children, expr)
        case A.RefCreate(value=v):
            spec = _Spec("relay.RefCreate")
            add(spec.refs, children, "value", ("expr", v))
            _expr_tail(w, spec, children, expr)
        case A.RefRead(ref=r):
            spec = _Spec("relay.RefRead")
            add(spec.refs, children, "ref", ("expr", r))
            _expr_tail(w, spec, children, expr)
        case A.RefWrite(ref=r, value=v):
            spec = _Spec("relay.RefWrite")
            add(spec.refs, children, "ref", ("expr", r))
            add(spec.refs, children, "value", ("expr", v))
            _expr_tail(w, spec, children, expr)
        case A.Match(data=data, clauses=clauses, complete=complete):
            spec = _Spec("relay.Match")
            add(spec.refs, children, "data", ("expr", data))
            add(spec.refs, children, "clauses", ("array", ("clause", clauses)))
            spec.plain["complete"] = "1" if complete else "0"
            _expr_tail(w, spec, children, expr)
        case _:
            raise RelayError(f"cannot write expression {type(expr).__name__} as TVM JSON")
    return spec


# --------------------------------------------------------------------------
# Modules


@dataclass(frozen=True, slots=True, eq=False)
class ModuleRaw:
    """What `Module.raw` holds for a module read from TVM JSON."""

    origins: Origins
    module_index: int | None
    fields: dict[str, Any] = field(default_factory=dict)  # IRModule field -> node index
    gv_order: tuple[str, ...] = ()
    gtv_order: tuple[str, ...] = ()


@_without_gc
def load_json(text: str | bytes, name: str = "<json>") -> A.Module:
    """Read a module (or a bare expression) saved by TVM <= 0.19's
    `tvm.ir.save_json`. Raises ParseError for anything malformed."""
    doc = parse_document(text, name)
    decoder = _Decoder(doc)
    root_value = decoder.decode(doc.root)
    origins = decoder.origins
    if isinstance(root_value, A.Expr):
        meta = _collect_meta((), root_value)
        return A.Module(expr=root_value, meta=meta, raw=ModuleRaw(origins, None))
    if not isinstance(root_value, _ModuleValue):
        raise doc.error(doc.root, "the root is neither an IRModule nor a Relay expression")
    mod_index = doc.root
    fields = root_value.fields
    functions: list[tuple[A.GlobalVar, A.Function]] = []
    fmap = fields["functions"]
    if fmap is not None:
        if not isinstance(fmap, _MapValue):
            raise doc.error(mod_index, "field 'functions' should be a map")
        for gv, fn in fmap.items:
            if not isinstance(gv, A.GlobalVar):
                raise doc.error(mod_index, f"function map key should be a GlobalVar, got {_describe(gv)}")
            if not isinstance(fn, A.Function):
                raise doc.error(mod_index, f"@{gv.name} is a {_describe(fn)}, not a Relay function")
            functions.append((gv, fn))
    typedefs: list[A.TypeData] = []
    tmap = fields["type_definitions"]
    if isinstance(tmap, _MapValue):
        for _, td in tmap.items:
            if not isinstance(td, A.TypeData):
                raise doc.error(mod_index, f"type definition should be a TypeData, got {_describe(td)}")
            typedefs.append(td)
    gv_map = fields["global_var_map_"]
    gtv_map = fields["global_type_var_map_"]
    raw = ModuleRaw(
        origins,
        mod_index,
        {n: doc.ref(mod_index, n) for n, _ in NODE_FIELDS["IRModule"]},
        tuple(k for k, _ in gv_map.items) if isinstance(gv_map, _MapValue) and gv_map.str_keys else (),
        tuple(k for k, _ in gtv_map.items) if isinstance(gtv_map, _MapValue) and gtv_map.str_keys else (),
    )
    logger.debug("loaded %s: %d nodes, %d functions", name, len(doc.nodes), len(functions))
    constrained = any(not vd.is_fully_unconstrained for vd in origins.vd_by_value)
    meta = _collect_meta(tuple(functions), None) if constrained else {}
    return A.Module(tuple(functions), tuple(typedefs), meta, raw=raw)


def _collect_meta(
    functions: tuple[tuple[A.GlobalVar, A.Function], ...], expr: A.Expr | None
) -> dict[str, list[Any]]:
    """The distinct virtual devices the module uses, in the order a printer
    meets them: a function's parameters, its result device, then its body
    (operands before their users)."""
    seen: set[VirtualDevice] = set()
    found: list[VirtualDevice] = []

    def note(value: Any) -> None:
        if isinstance(value, VirtualDevice) and value not in seen:
            seen.add(value)
            found.append(value)

    roots: list[A.Expr] = [fn for _, fn in functions]
    if expr is not None:
        roots.append(expr)
    for root in roots:
        for node in _print_order(root):
            if isinstance(node, A.Function):
                for p in node.params:
                    note(p.virtual_device)
                note(node.virtual_device)
            elif isinstance(node, A.Let):
                note(node.var.virtual_device)
            elif isinstance(node, A.Call) and node.attrs is not None:
                for _, value in node.attrs.fields:
                    note(value)
    return {"VirtualDevice": found} if found else {}


def _print_order(root: A.Expr) -> Iterator[A.Expr]:
    """Functions before their bodies, other nodes after their operands."""
    from ..traverse import children

    seen: set[int] = set()
    stack: list[tuple[A.Expr, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            if not isinstance(node, A.Function):
                yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, A.Function):
            yield node
        stack.append((node, True))
        for kid in reversed(children(node)):
            if id(kid) not in seen:
                stack.append((kid, False))


@_without_gc
def dump_json(module: A.Module) -> str:
    """Write `module` as TVM 0.19's `tvm.ir.save_json` would.

    Nodes read from JSON and not changed since are written back verbatim;
    operator attributes are completed with their defaults. Raises RelayError
    for values that cannot be written (unresolved meta placeholders).
    """
    raw = module.raw if isinstance(module.raw, ModuleRaw) else None
    writer = _Writer(raw.origins if raw is not None else None)
    if not module.functions and not module.type_definitions and module.expr is not None:
        root = writer.add(("expr", module.expr))
        return writer.to_json(root)
    root = writer.add(("module", module))
    return writer.to_json(root)


def _encode_module(w: _Writer, module: A.Module, children: list[tuple[_Item, Any]]) -> _Spec:
    raw = module.raw if isinstance(module.raw, ModuleRaw) and module.raw.module_index is not None else None
    spec = _Spec("IRModule")
    add = w._child
    functions = list(module.functions)
    if module.expr is not None and not any(gv.name == "main" for gv, _ in functions):
        main = module.expr if isinstance(module.expr, A.Function) else A.Function((), module.expr)
        functions.append((A.GlobalVar("main"), main))
    add(
        spec.refs,
        children,
        "functions",
        ("objmap", tuple((("expr", gv), ("expr", fn)) for gv, fn in functions)),
    )
    add(
        spec.refs,
        children,
        "type_definitions",
        ("objmap", tuple((("type", td.header), ("typedata", td)) for td in module.type_definitions)),
    )
    gvs = {gv.name: gv for gv, _ in functions}
    add(spec.refs, children, "global_var_map_", ("objmap_str", _ordered(gvs, raw.gv_order if raw else ())))
    gtvs = {td.header.name: td.header for td in module.type_definitions}
    add(
        spec.refs,
        children,
        "global_type_var_map_",
        ("objmap_str", _ordered(gtvs, raw.gtv_order if raw else ())),
    )
    for name in ("source_map", "attrs", "global_infos"):
        if raw is not None:
            add(spec.refs, children, name, ("raw", RawRef(raw.origins.doc, raw.fields[name])))
        elif name == "source_map":
            add(spec.refs, children, name, ("sourcemap", ()))
        elif name == "attrs":
            add(spec.refs, children, name, ("dictattrs", ()))
        else:
            add(spec.refs, children, name, ("strmap", ()))
    return spec


def _ordered(values: dict[str, Any], order: tuple[str, ...]) -> tuple[tuple[str, _Item], ...]:
    names = [n for n in order if n in values] + [n for n in values if n not in set(order)]
    return tuple(
        (n, ("type" if isinstance(values[n], A.GlobalTypeVar) else "expr", values[n])) for n in names
    )


# Tensor types of metadata constants, remembered with the nodes they came
# from: TVM shares dimension nodes between those types in ways the IR does
# not record, and a section re-encoded after a text round trip (which keeps
# the constants but not our tables) should come out byte for byte the same.
# Bounded; entries hold the type (so its id stays unique) and the section's
# node list without its tensors.
_TYPE_MEMORY: OrderedDict[int, tuple[A.TensorType, RawRef]] = OrderedDict()
_TYPE_MEMORY_LIMIT = 65536


_TYPE_MEMORY_LOCK = threading.Lock()


def _remember_type(ty: A.TensorType, ref: RawRef) -> None:
    with _TYPE_MEMORY_LOCK:
        _TYPE_MEMORY[id(ty)] = (ty, ref)
        _TYPE_MEMORY.move_to_end(id(ty))
        while len(_TYPE_MEMORY) > _TYPE_MEMORY_LIMIT:
            _TYPE_MEMORY.popitem(last=False)


def _remembered_type(ty: A.TensorType) -> RawRef | None:
    with _TYPE_MEMORY_LOCK:
        found = _TYPE_MEMORY.get(id(ty))
    if found is not None and found[0] is ty:
        return found[1]
    return None


@_without_gc
def decode_meta_section(json_text: str, name: str = "<metadata>") -> dict[str, list[Any]]:
    """Decode the JSON after `#[metadata]`: a map from kind to an array.

    `VirtualDevice` entries become `VirtualDevice` values, `relay.Constant`
    entries `Constant` nodes (with `meta_index` set to their position), and
    anything else a `TVMObject` kept verbatim. Raises ParseError.
    """
    doc = parse_document(json_text, name)
    decoder = _Decoder(doc)
    root = decoder.decode(doc.root)
    if not isinstance(root, _MapValue) or not (root.str_keys or not root.items):
        raise doc.error(doc.root, "the metadata root should be a map from kind to array")
    root_node = doc.nodes[doc.root]
    tensorless = RawDoc(doc.nodes, [], {}, doc.root, SourceText(doc.source.name, ""))
    tables: dict[str, list[Any]] = {}
    for kind, array_index in zip(root_node.get("keys", []), root_node.get("data", [])):
        array_node = doc.nodes[array_index]
        if array_node["type_key"] != "Array":
            raise doc.error(array_index, f"meta[{kind}] should be an array")
        entries: list[Any] = []
        for position, entry_index in enumerate(array_node.get("data", [])):
            value = decoder.values[entry_index]
            if kind == "VirtualDevice":
                if not isinstance(value, VirtualDevice):
                    raise doc.error(entry_index, f"meta[VirtualDevice][{position}] is not a virtual device")
            elif kind == "relay.Constant":
                if not isinstance(value, A.Constant):
                    raise doc.error(entry_index, f"meta[relay.Constant][{position}] is not a constant")
                checked = value.checked_type
                if isinstance(checked, A.TensorType):
                    origin = decoder.origins.find(checked)
                    if origin is not None:
                        _remember_type(checked, RawRef(tensorless, origin.node))
                value = A.Constant(value.data, position, span=value.span, checked_type=checked)
            elif not isinstance(value, TVMObject):
                value = TVMObject(doc.nodes[entry_index]["type_key"], RawRef(doc, entry_index))
            entries.append(value)
        tables[kind] = entries
    return tables


@_without_gc
def encode_meta_section(tables: dict[str, list[Any]]) -> str:
    """The JSON TVM prints after `#[metadata]` for these meta tables.

    Targets read from JSON are written back verbatim; virtual devices and
    targets created here are written in TVM's complete form.
    """
    writer = _Writer(None)
    writer.share_dims = True
    items = []
    for kind, entries in tables.items():
        items.append((kind, ("array", ("meta_entry", tuple(entries)))))
    root = writer.add(("objmap_str", tuple(items)))
    return writer.to_json(root)
