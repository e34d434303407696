"""TVM JSON checked before `tvm.ir.load_json` reads it.

TVM 0.27's loader (tvm-ffi's `ObjectGraphDeserializer`, C++) trusts the
graph: a node that refers to itself recurses until the stack overflows (the
process dies), and a reference of the wrong type is stored as it is, to fail
later inside TVM. `check_json_graph` reads the graph in Python first, node by
node in one forward pass (no recursion), against TVM's own reflection (the
installed TVM's type registry and field schemas):

- the document is `{"root_index": int, "nodes": [...], "metadata"?: {...}}`
  and the root is a node;
- every node's `type` is a type key TVM registers and may be loaded from
  JSON (never `ffi.Module`, `ffi.Function`, `ir.EnvFunc`: loading those
  would load code or call registered functions by name);
- a node's `data` has the shape its kind needs: containers list node indices,
  objects give each field of the type's field list (inherited ones too),
  plain fields (`"ndim": 2`) as JSON values of the field's type, reference
  fields (`"span": 0`) as the index of an earlier node whose type the field's
  schema accepts (containers checked element by element, `None` only where
  the schema says Optional or TVM itself writes null: spans, call attrs);
- tensors (`ffi.Tensor`) are well-formed CPU tensor blobs whose byte count
  matches their shape and dtype;
- objects TVM loads by name are names TVM already registers: operators
  (`ir.Op`), target kinds (`target.TargetKind`) and TIR's layout axes
  (`tirx.Axis`), looked up without registering anything (TVM's loader would
  register an unknown axis name for good); source names (`ir.SourceName`,
  interned by TVM for good) are kept only when TVMScript's parser's own
  (`<str>`), else written as `<json>`;
- no reference chain is deeper than `MAX_DEPTH`.

The checked graph is written out again (`json.dumps` of what was read), so
TVM's JSON parser reads exactly what was checked. `load_checked_json` then
loads it and verifies an IRModule with Relax's well-formed check. Every
refusal is a ParseError naming the node.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeGuard

import tvm
import tvm_ffi
from tvm import relax
from tvm.ir import json_compact
from tvm_ffi import core as ffi_core
from tvm_ffi.serialization import from_json_graph_str

from relay.span import ParseError

from .op_attrs_table import OP_ATTRS

__all__ = ["MAX_DEPTH", "check_json_graph", "load_checked_json", "registered_axes", "verify_module"]

log = logging.getLogger(__name__)

# The deepest reference chain accepted: TVM's loader recurses once per level
# (modules TVM saves stay under 25; legalized TIR under 100).
MAX_DEPTH = 1000
# Type keys refused whatever the registry says: code (`ffi.Module`,
# `ffi.Function`), global functions looked up by name (`ir.EnvFunc`), Python
# objects, and test types.
REFUSED_TYPES = frozenset({"ffi.Module", "ffi.Function", "ffi.OpaquePyObject", "ir.EnvFunc", "ffi.Error",
                           "ffi.BigInt"})
REFUSED_PREFIXES = ("testing.",)
# Non-Optional reference fields that TVM's own saves leave null (every `span`;
# `attrs` of a call to an operator without attributes): by field schema.
NULLABLE_SCHEMAS = frozenset({"ir.Span", "ir.Attrs"})
# Loader-level kinds of the static (non-object) type keys, and the plain JSON
# value a field of that static type index holds inline.
_PLAIN_KEYS = {"None", "bool", "int", "float", "DataType", "Device", "ffi.String", "ffi.Bytes", "ffi.Shape"}
_SEQUENCES = {"ffi.Array", "ffi.List"}
_MAPS = {"ffi.Map", "ffi.Dict"}
# The most Relax expression nodes a walk of one expression may visit, shared ones counted
# each time they are reached (every module TVM prints or saves counts each node once).
MAX_EXPANDED = 1_000_000
# Relax expression (and tuple type) nodes a walk enters (leaves and variables end a walk).
# Arrays between them (a call's arguments, a tuple's fields) pass the count on.
_EXPRESSIONS = frozenset({"ir.Call", "ir.Tuple", "ir.TupleGetItem", "relax.expr.If", "relax.expr.SeqExpr", "ir.TupleType"}) | _SEQUENCES
_INT64 = (-(2**63), 2**63 - 1)
_MISSING = object()
# Static type indices of fields TVM writes inline (tvm-ffi's TypeIndex).
_INLINE = {0: "None", 1: "int", 2: "bool", 3: "float", 5: "dtype"}
# Objects whose JSON data TVM decodes with a custom function: what each takes.
_CUSTOM_DATA = {
    "ffi.Tensor": "tensor",
    "ir.Op": "op",
    "ir.SourceName": "source",
    "target.TargetKind": "target-kind",
    "tirx.Axis": "axis",
}
# TVM interns every source name it loads (a process-wide table, never freed), so a
# caller's names would pile up in a long-lived planning worker: only the name
# TVMScript's parser itself gives (`tvm.script.from_source`) is kept, the rest read
# as JSON_SOURCE_NAME (both are interned once).
KEPT_SOURCE_NAMES = frozenset({"<str>"})
JSON_SOURCE_NAME = "<json>"
# Schema origins naming a static key, and the node type keys they accept.
_SCHEMA_KEYS = {
    "int": {"int"},
    "bool": {"bool"},
    "float": {"float"},
    "str": {"ffi.String"},
    "bytes": {"ffi.Bytes"},
    "dtype": {"DataType"},
    "Device": {"Device"},
    "None": {"None"},
    "ffi.Shape": {"ffi.Shape"},
    "Shape": {"ffi.Shape"},
}
_TENSOR_MAGIC = 0xDD5E40F096B4A13F
_DTYPE_CODES = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}


# A field schema as (origin, args): ("Array", (("ir.Expr", ()),)) for `Array[ir.Expr]`.
Schema = tuple[str, tuple[Any, ...]]
_ANY: Schema = ("Any", ())


def _schema(obj: Any) -> Schema:
    """tvm-ffi's TypeSchema JSON (`{"type": ..., "args": [...]}`) as a hashable Schema."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        return ("?", ())
    return (obj["type"], tuple(_schema(a) for a in obj.get("args", ())))


@dataclass(frozen=True)
class _Field:
    name: str
    inline: str | None  # the kind of a value TVM writes inline (by tvm-ffi's static type index), else None
    schema: Schema  # for a reference: what the referenced node must be
    has_default: bool


@dataclass(frozen=True)
class _Type:
    """A registered object type as the loader sees it."""

    key: str
    index: int
    lineage: frozenset[int]  # its own type index and its ancestors'
    fields: tuple[_Field, ...]  # inherited fields first, as the loader visits them
    names: frozenset[str]
    custom: str | None  # how its data is decoded when not by fields (_CUSTOM_DATA)


class _Bad(Exception):
    def __init__(self, node: int | None, message: str) -> None:
        super().__init__(message)
        self.node = node
        self.message = message


@cache
def _type(key: str) -> _Type | None:
    """The loader's view of type `key`, None when TVM does not register it."""
    index = ffi_core._object_type_key_to_index(key)
    if index is None:
        return None
    info: Any = ffi_core._lookup_or_register_type_info_from_type_key(key)
    chain: list[Any] = []
    t = info
    while t is not None:
        chain.append(t)
        t = t.parent_type_info
    fields: list[_Field] = []
    for t in reversed(chain):
        for f in t.fields:
            schema = _schema(f.ty.to_json()) if f.ty is not None else _ANY
            inline = _INLINE.get(int(f.field_static_type_index))
            fields.append(_Field(str(f.name), inline, schema, bool(f.c_has_default)))
    custom = _CUSTOM_DATA.get(key)
    if custom is None and ffi_core._lookup_type_attr(info.type_index, "__data_from_json__") is not None:
        custom = "refused"
    return _Type(key, int(info.type_index), frozenset({int(info.type_index), *map(int, info.type_ancestors)}),
                 tuple(fields), frozenset(f.name for f in fields), custom)


@cache
def registered_axes() -> frozenset[str]:
    """The layout axes TVM registers when it starts (C++ `TVM_REGISTER_AXIS`: `m`,
    `tx`, `laneid`, ...), found without registering any other name.

    `tirx.Axis` is a by-name registry entry like `ir.Op`, but TVM 0.27's lookup
    (`Axis::Get`, which its JSON loader calls) registers an unknown name on the
    fly, for the rest of the process, and such an axis has none of the
    attributes TVM's passes read (`IsThreadAxis` fails on it). TVM exposes no
    lookup that leaves the registry alone, so the candidates are the names its
    Python layer lists (`tvm.tirx.layout._AXIS_NAMES`, TVM's own constant) and
    each is confirmed in the registry: an axis TVM registered carries the
    `thread` attribute, one made on the fly does not (looking up a registered
    name registers nothing)."""
    from tvm.tirx import layout

    names = getattr(layout, "_AXIS_NAMES", ())
    lookup = tvm_ffi.get_global_func("tirx.AxisGet")
    is_thread = tvm_ffi.get_global_func("tirx.AxisIsThreadAxis")
    found: set[str] = set()
    for name in names:
        if not isinstance(name, str):
            continue
        try:
            is_thread(lookup(name))
        except Exception:  # noqa: BLE001 - not a registered axis: left out
            log.warning("layout axis %r is listed by TVM but not registered with its attributes", name)
            continue
        found.add(name)
    return frozenset(found)


@cache
def _index(key: str) -> int | None:
    found = _type(key)
    return found.index if found is not None else None


@cache
def _lineage(key: str) -> frozenset[int]:
    """The type indices a node of type `key` counts as (an `ffi.Array` is an
    `ffi.Object`; `int` and the other plain keys count as none)."""
    found = _type(key) if key not in _PLAIN_KEYS or key in ("ffi.String", "ffi.Bytes", "ffi.Shape") else None
    return found.lineage if found is not None else frozenset()


@cache
def _plain_object(schema: Schema) -> tuple[int, bool] | None:
    """(type index, null allowed) when `schema` is one registered object type,
    optionally Optional, such as `ir.Expr` or `Optional[relax.VDevice]`; None
    for containers, plain values and the rest (checked the general way)."""
    origin, args = schema
    nullable = origin in NULLABLE_SCHEMAS
    if origin == "Optional" and len(args) == 1:
        origin, args = args[0]
        nullable = True
    if args or origin in _SCHEMA_KEYS or origin in ("Any", "Object", "Union", "Variant", "?", "Callable", "ffi.Function"):
        return None
    if origin in ("Array", "List", "Map", "Dict") or origin in _SEQUENCES or origin in _MAPS:
        return None
    index = _index(origin)
    return (index, nullable) if index is not None else None


def check_json_graph(text: str) -> str:
    """`text` checked (module docstring); returns the JSON to hand to TVM.
    Raises ParseError naming the first bad node."""
    return _check(text)[0]


def _check(text: str) -> tuple[str, bool]:
    """`check_json_graph`'s JSON, and whether TVM's upgrade of older graphs
    would leave it as it is (`_current`)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"not JSON: {exc}") from None
    try:
        graph = _Graph(doc)
        return graph.checked(), _current(graph.nodes)
    except _Bad as bad:
        where = f"node {bad.node}: " if bad.node is not None else ""
        raise ParseError(f"TVM JSON refused, {where}{bad.message}") from None


def load_checked_json(text: str) -> Any:
    """The object TVM loads from `text` once `check_json_graph` accepted it;
    an IRModule must also pass Relax's well-formed check."""
    checked, current = _check(text)
    try:
        # `tvm.ir.load_json` first rewrites graphs of older TVMs (renamed node types),
        # reading and re-writing the whole text; a graph with nothing to rewrite goes
        # straight to the loader (a second or so less on an 80-layer decoder).
        obj = from_json_graph_str(checked) if current else tvm.ir.load_json(checked)
    except Exception as exc:  # noqa: BLE001 - TVM's loader errors
        raise ParseError(f"TVM cannot load the JSON: {_first_line(exc)}") from None
    if isinstance(obj, tvm.IRModule):
        verify_module(obj)
    return obj


def _current(nodes: list[Any]) -> bool:
    """Whether TVM's upgrade of older graphs would leave `nodes` as they are: no
    node of a type it renames, no Var that still says `name_hint`. False when
    TVM's table of renames is not where this TVM keeps it."""
    renames = getattr(json_compact, "_PRIM_TYPE_KEY_RENAMES", None)
    if not isinstance(renames, dict):
        return False
    old = {*renames, "relax.expr.Var", "tirx.Var", "tirx.BufferRegion"}
    for node in nodes:
        kind = node.get("type") if isinstance(node, dict) else None
        if kind in old:
            return False
        if kind in ("ir.Var", "relax.expr.DataflowVar"):
            data = node.get("data")
            if isinstance(data, dict) and "name_hint" in data and "name" not in data:
                return False
    return True


def verify_module(mod: Any) -> None:
    """TVM's well-formed checks of a loaded module, the ones its TVMScript
    parser runs: Relax's, then TIR's (the s_tir check for the module, the
    tirx check for each PrimFunc not marked `s_tir`). A ParseError if one fails."""
    try:
        relax.analysis.well_formed(mod)
        tvm.s_tir.analysis.verify_well_formed(mod)
        for func in mod.functions.values():
            if isinstance(func, tvm.tirx.PrimFunc) and not func.attrs.get("s_tir", False):
                tvm.tirx.analysis.verify_tirx_well_formed(func)
    except Exception as exc:  # noqa: BLE001 - TVM's checkers raise on the first violation
        raise ParseError(f"the JSON module fails TVM's well-formed check: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


class _Graph:
    """One check of one JSON graph document."""

    def __init__(self, doc: Any) -> None:
        if not isinstance(doc, dict):
            raise _Bad(None, "the document is not a JSON object")
        unknown = set(doc) - {"root_index", "nodes", "metadata"}
        if unknown:
            raise _Bad(None, f"unknown top-level keys {sorted(unknown)} (a TVM JSON graph has root_index, nodes, metadata)")
        root = doc.get("root_index")
        nodes = doc.get("nodes")
        if not _is_int(root):
            raise _Bad(None, "`root_index` must be an integer")
        if not isinstance(nodes, list):
            raise _Bad(None, "`nodes` must be an array")
        if not 0 <= root < len(nodes):
            raise _Bad(None, f"`root_index` {root} is not a node (there are {len(nodes)})")
        metadata = doc.get("metadata", {})
        if not isinstance(metadata, dict) or not all(
            isinstance(v, str | int | float | bool) or v is None for v in metadata.values()
        ):
            raise _Bad(None, "`metadata` must be an object of plain values")
        self.doc = doc
        self.root: int = root
        self.nodes: list[Any] = nodes
        self.types: list[str] = []
        self.lineages: list[frozenset[int]] = []  # per node: the type indices it counts as
        self.depth: list[int] = []
        self.paths: list[int] = []  # per node: how many nodes a walk that does not remember visits
        self.accepted: set[tuple[int, Schema]] = set()
        self.registered: dict[str, frozenset[str]] = {}  # by _NAMED kind, read once per check

    def checked(self) -> str:
        for i, node in enumerate(self.nodes):
            self._node(i, node)
        return json.dumps(self.doc)

    # ---------------------------------------------------------------- nodes

    def _node(self, i: int, node: Any) -> None:
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise _Bad(i, "a node is an object with a string `type`")
        key: str = node["type"]
        if set(node) - {"type", "data"}:
            raise _Bad(i, f"unknown keys {sorted(set(node) - {'type', 'data'})} in a `{key}` node")
        data = node.get("data")
        refs: list[int] = []
        if key in _PLAIN_KEYS:
            self._plain(i, key, data)
        elif key in _SEQUENCES:
            refs = self._indices(i, key, data)
        elif key in _MAPS:
            refs = self._indices(i, key, data)
            if len(refs) % 2:
                raise _Bad(i, f"`{key}` data alternates keys and values: an even count of indices")
        else:
            refs = self._object(i, key, data)
            if key == "ir.Call" and isinstance(data, dict):
                self._call(i, data)
        self.types.append(key)
        self.lineages.append(_lineage(key))
        depth = 1
        for r in refs:
            if self.depth[r] >= depth:
                depth = self.depth[r] + 1
        if depth > MAX_DEPTH:
            raise _Bad(i, f"references nest deeper than {MAX_DEPTH} levels")
        self.depth.append(depth)
        # Relax expressions are trees in every module TVM builds (a value used twice is a
        # variable), but the graph can share one: a tuple listing the one below twice, 40
        # levels deep, is 2**40 nodes to TVM's visitors, which do not remember where they were.
        paths = 1
        if key in _EXPRESSIONS:
            for r in refs:
                if self.types[r] in _EXPRESSIONS:
                    paths += self.paths[r]
            if paths > MAX_EXPANDED:
                raise _Bad(
                    i,
                    f"expressions share sub-expressions so that walking them visits more than {MAX_EXPANDED} "
                    "nodes (bind a value used twice to a variable)",
                )
        self.paths.append(paths)

    def _call(self, i: int, data: dict[str, Any]) -> None:
        """A call as TVM's constructors make it (TVM's C++ casts without checking, so
        anything else crashes the reader): its operator an `ir.Op`, a global function,
        an extern function or a variable of function type; a Relax operator's
        attributes of the type its constructor gives (`OP_ATTRS`)."""
        op, attrs = data["op"], data.get("attrs", 0)  # both checked references by now
        assert _is_int(op) and _is_int(attrs)
        op_type = self.types[op]
        if op_type in ("ir.Var", "relax.expr.DataflowVar", "ir.GlobalVar"):
            ty = self.nodes[op].get("data", {}).get("ty")
            ty_type = self.types[ty] if _is_int(ty) and 0 <= ty < i else "None"
            if ty_type not in _FUNCTION_TYPES and not (op_type == "ir.GlobalVar" and ty_type == "None"):
                raise _Bad(i, f"a call's operator is node {op}, a `{op_type}` of type `{ty_type}`, not a function")
            return
        if op_type == "relax.expr.ExternFunc":
            return
        if op_type != "ir.Op":
            raise _Bad(
                i,
                f"a call's operator is node {op}, a `{op_type}`: an operator, a global function, "
                "an extern function or a variable of function type is expected",
            )
        name = self.nodes[op].get("data")
        attrs_type = self.types[attrs] if _is_int(attrs) else "None"
        expected = _expected_attrs(name) if isinstance(name, str) else _UNCHECKED
        if expected is _UNCHECKED:
            return
        if expected is None:
            if attrs_type not in ("None", "ir.DictAttrs"):
                raise _Bad(i, f"a call of `{name}` takes no attributes, not a `{attrs_type}` (node {attrs})")
        elif attrs_type != expected:
            raise _Bad(i, f"a call of `{name}` needs attributes of type `{expected}`, not `{attrs_type}` (node {attrs})")

    def _plain(self, i: int, key: str, data: Any) -> None:
        if not _PLAIN_CHECKS[key](data):
            raise _Bad(i, f"`{key}` data is not a {key} value: {_short(data)}")

    def _indices(self, i: int, key: str, data: Any) -> list[int]:
        if not isinstance(data, list):
            raise _Bad(i, f"`{key}` data must be an array of node indices")
        for ref in data:
            self._earlier(i, ref, key)
        return data

    def _earlier(self, i: int, ref: Any, what: str) -> None:
        if type(ref) is int and 0 <= ref < i:
            return
        if not _is_int(ref):
            raise _Bad(i, f"{what}: a node reference must be an integer, not {_short(ref)}")
        if not 0 <= ref < i:
            raise _Bad(i, f"{what} refers to node {ref}, which is not an earlier node")

    def _object(self, i: int, key: str, data: Any) -> list[int]:
        if key in REFUSED_TYPES or key.startswith(REFUSED_PREFIXES):
            raise _Bad(i, f"type `{key}` is not accepted in a module")
        info = _type(key)
        if info is None:
            raise _Bad(i, f"type `{key}` is not a type TVM registers")
        if info.custom is not None:
            self._custom(i, info, data)
            return []
        if not isinstance(data, dict):
            raise _Bad(i, f"`{key}` data must be an object of its fields")
        if not data.keys() <= info.names:
            raise _Bad(i, f"`{key}` has no field {min(set(data) - info.names)!r}")
        refs: list[int] = []
        for f in info.fields:
            value = data.get(f.name, _MISSING)
            if value is _MISSING:
                if not f.has_default:
                    raise _Bad(i, f"`{key}` needs its field `{f.name}`")
                continue
            if f.inline is not None:
                if not _INLINE_CHECKS[f.inline](value):
                    raise _Bad(i, f"field `{f.name}` of `{key}` must be a {f.inline} value, not {_short(value)}")
                continue
            self._earlier(i, value, f"field `{f.name}` of `{key}`")
            wanted = _plain_object(f.schema)
            if wanted is not None and (wanted[0] in self.lineages[value] or (wanted[1] and self.types[value] == "None")):
                refs.append(value)  # the common case, decided without the general walk
                continue
            self._accepts(i, value, f.schema, f"field `{f.name}` of `{key}`")
            refs.append(value)
        return refs

    def _custom(self, i: int, info: _Type, data: Any) -> None:
        if info.custom == "tensor":
            _check_tensor(i, data)
            return
        if info.custom != "source" and info.custom not in _NAMED:
            raise _Bad(i, f"type `{info.key}` is not accepted in a module")
        if not isinstance(data, str):
            raise _Bad(i, f"`{info.key}` data must be a string")
        if info.custom == "source":
            if data not in KEPT_SOURCE_NAMES:
                self.nodes[i]["data"] = JSON_SOURCE_NAME
            return
        what, registered = _NAMED[info.custom]
        known = self.registered.get(info.custom)
        if known is None:
            known = self.registered[info.custom] = registered()
        if data not in known:
            raise _Bad(i, f"{what} {_short(data)} is not one TVM registers")

    # ------------------------------------------------------------- schemas

    def _accepts(self, i: int, ref: int, schema: Schema, where: str) -> None:
        """Node `ref` is a value of `schema` (containers element by element,
        with an explicit stack; each (node, schema) pair checked once)."""
        work = [(ref, schema)]
        while work:
            item = work.pop()
            if item in self.accepted:
                continue
            work.extend(self._accept_one(i, item[0], item[1], where))
            self.accepted.add(item)

    def _accept_one(self, i: int, node: int, sch: Schema, where: str) -> list[tuple[int, Schema]]:
        origin, args = sch
        key = self.types[node]
        if origin == "Any":
            return []
        if origin == "Optional":
            return [] if key == "None" else [(node, args[0])] if args else []
        if origin in ("Union", "Variant"):
            for option in args:
                try:
                    self._accepts(i, node, option, where)
                    return []
                except _Bad:
                    continue
            raise _Bad(i, f"{where} refers to node {node} (`{key}`), which is none of its types")
        if origin == "?":
            raise _Bad(i, f"{where} has a field schema this check does not know")
        if origin in _SCHEMA_KEYS:
            if key not in _SCHEMA_KEYS[origin]:
                raise _Bad(i, f"{where} refers to node {node} (`{key}`), not a {origin}")
            return []
        if origin in ("Array", "List", "ffi.Array", "ffi.List"):
            want = "ffi.List" if origin.endswith("List") else "ffi.Array"
            if key != want:
                raise _Bad(i, f"{where} refers to node {node} (`{key}`), not an {origin}")
            items: list[int] = self.nodes[node]["data"]
            return [(item, args[0]) for item in items] if args else []
        if origin in ("Map", "Dict", "ffi.Map", "ffi.Dict"):
            want = "ffi.Dict" if origin.endswith("Dict") else "ffi.Map"
            if key != want:
                raise _Bad(i, f"{where} refers to node {node} (`{key}`), not a {origin}")
            flat: list[int] = self.nodes[node]["data"]
            if len(args) < 2:
                return []
            return [(flat[j], args[j % 2]) for j in range(len(flat))]
        if origin in ("Callable", "ffi.Function"):
            raise _Bad(i, f"{where} holds a function, which is not accepted in a module")
        if key == "None":
            if origin in NULLABLE_SCHEMAS:
                return []
            raise _Bad(i, f"{where} must not be null (node {node} is None)")
        want_index = _index("ffi.Object" if origin == "Object" else origin)
        if want_index is None:
            raise _Bad(i, f"{where} has a field type TVM does not register: {origin}")
        if want_index not in self.lineages[node]:
            raise _Bad(i, f"{where} refers to node {node} (`{key}`), which is not a {origin}")
        return []



# The node types of a function's type (what a called variable must have).
_FUNCTION_TYPES = frozenset({"relax.FuncType", "ir.FuncType"})
_UNCHECKED = "unchecked"


@cache
def _expected_attrs(name: str) -> str | None:
    """The attributes type a call of operator `name` must carry (None: no attributes,
    or a `DictAttrs`), from the operator's declaration and OP_ATTRS; `_UNCHECKED`
    for operators outside Relax (TIR's intrinsics carry none)."""
    if not name.startswith("relax."):
        return _UNCHECKED
    try:
        declared = str(tvm.ir.Op.get(name).attrs_type_key)
    except Exception:  # noqa: BLE001 - not registered: the loader's own check refuses it
        return _UNCHECKED
    if declared:
        return declared
    return OP_ATTRS.get(name)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]


def _is_float(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_dtype(text: str) -> bool:
    """A dtype string TVM parses (`float32`, `int64x4`, `bool`, `handle`, ...)."""
    try:
        tvm_ffi.dtype(text)
    except Exception:  # noqa: BLE001 - tvm-ffi's parse errors
        return False
    return True


def _is_base64(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _check_tensor(i: int, data: Any) -> None:
    """An `ffi.Tensor` blob (tvm-ffi's tensor save format): magic, reserved
    word, CPU device, ndim, dtype, shape, byte count, then exactly that many bytes."""
    if not isinstance(data, str):
        raise _Bad(i, "`ffi.Tensor` data must be a base64 string")
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(i, "`ffi.Tensor` data is not base64") from None
    head = struct.Struct("<QQiiiBBH")
    if len(blob) < head.size:
        raise _Bad(i, "`ffi.Tensor` data is too short for a tensor header")
    magic, _reserved, dev_type, dev_id, ndim, code, bits, lanes = head.unpack_from(blob)
    if magic != _TENSOR_MAGIC:
        raise _Bad(i, "`ffi.Tensor` data does not start with the tensor magic number")
    if (dev_type, dev_id) != (1, 0):
        raise _Bad(i, f"`ffi.Tensor` must be saved from the cpu (device {dev_type}:{dev_id})")
    if not 0 <= ndim <= 32 or code not in _DTYPE_CODES or bits == 0 or lanes == 0:
        raise _Bad(i, f"`ffi.Tensor` header is not a tensor's (ndim {ndim}, dtype code {code}, bits {bits}, lanes {lanes})")
    at = head.size
    if len(blob) < at + 8 * ndim + 8:
        raise _Bad(i, "`ffi.Tensor` data is too short for its shape")
    shape = struct.unpack_from(f"<{ndim}q", blob, at)
    at += 8 * ndim
    (nbytes,) = struct.unpack_from("<q", blob, at)
    at += 8
    if any(d < 0 for d in shape):
        raise _Bad(i, f"`ffi.Tensor` shape {list(shape)} has a negative dimension")
    want = (math.prod(shape) * bits * lanes + 7) // 8
    if nbytes != want or len(blob) - at != nbytes:
        raise _Bad(i, f"`ffi.Tensor` of shape {list(shape)} holds {len(blob) - at} bytes, not {want}")


# Objects TVM loads by name: what the name is, and the names TVM registers now
# (operators and target kinds read from their registries at each check; neither
# lookup registers anything).
_NAMED: dict[str, tuple[str, Callable[[], frozenset[str]]]] = {
    "op": ("operator", lambda: frozenset(map(str, tvm.ir.Op.list_op_names()))),
    "target-kind": ("target kind", lambda: frozenset(map(str, tvm.target.Target.list_kinds()))),
    "axis": ("layout axis", registered_axes),
}

# What the data of a plain node, and an inline field, may be.
_PLAIN_CHECKS: dict[str, Callable[[Any], bool]] = {
    "None": lambda d: d is None,
    "bool": lambda d: isinstance(d, bool),
    "int": _is_int,
    "float": _is_float,
    "DataType": lambda d: isinstance(d, str) and _is_dtype(d),
    "Device": lambda d: isinstance(d, list) and len(d) == 2 and all(_is_int(x) for x in d),
    "ffi.String": lambda d: isinstance(d, str),
    "ffi.Bytes": _is_base64,
    "ffi.Shape": lambda d: isinstance(d, list) and all(_is_int(x) and x >= 0 for x in d),
}
_INLINE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "None": lambda v: v is None,
    "int": _is_int,
    "bool": lambda v: isinstance(v, bool),
    "float": _is_float,
    "dtype": lambda v: isinstance(v, str) and _is_dtype(v),
}


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
