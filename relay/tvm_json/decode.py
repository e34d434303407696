"""Decoding a checked TVM JSON document into the Relay IR (`load_json`).

Nodes are decoded children-first with an explicit stack, so depth is
unbounded; every decoded object is noted in `Origins` with its node, so the
writer can copy what did not change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from .. import ast as A
from .. import op_attrs
from ..device import Target, VirtualDevice
from ..ndarray_codec import NDArrayFormatError, ndarray_from_b64
from ..span import SourceText, Span
from ..traverse import walk
from .document import RawDoc, RawRef, parse_document, without_gc
from .schema import NODE_FIELDS
from .values import (
    TRACKED,
    UNSET,
    DictAttrsValue,
    MapValue,
    ModuleRaw,
    ModuleValue,
    Origins,
    TVMObject,
    describe,
)

logger = logging.getLogger("relay.tvm_json")

_N = TypeVar("_N", int, float)


class Decoder:
    """Decodes a checked document children-first (explicit stack)."""

    def __init__(self, doc: RawDoc) -> None:
        self.doc = doc
        self.values: list[Any] = [UNSET] * len(doc.nodes)
        self.origins = Origins(doc)
        self.tensors: dict[int, A.NDArray] = {}

    def decode(self, root: int) -> Any:
        """The value of node `root`, decoding what it references first;
        raises ParseError on a cycle."""
        # A hand-written walk over node indices (not Relay expressions), kept
        # on purpose: the same walk through relay.traverse.walk (pre/post
        # hooks, `kids` = the document's references) loads corpus JSON 55-75%
        # slower (resnet50 22.8 -> 14.2 MB/s, densenet121 22.0 -> 12.6 MB/s,
        # median of 7, alternating), far past the 10% the style allows.
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
            raise self.doc.error(index, f"field '{name}' should be {what}, got {describe(value)}")
        return value

    def seq(self, index: int, name: str, cls: Any, what: str) -> tuple[Any, ...]:
        value = self.get(index, name)
        if value is None:
            return ()
        if not isinstance(value, tuple):
            raise self.doc.error(index, f"field '{name}' should be an array of {what}, got {describe(value)}")
        for item in value:
            if not isinstance(item, cls):
                raise self.doc.error(index, f"field '{name}' should hold {what}, got {describe(item)}")
        return value

    def int_field(self, index: int, name: str) -> int:
        return self._number(index, name, int, "an integer")

    def float_field(self, index: int, name: str) -> float:
        return self._number(index, name, float, "a number")

    def _number(self, index: int, name: str, parse: Callable[[str], _N], what: str) -> _N:
        text = self.doc.plain(index, name)
        try:
            return parse(text)
        except ValueError:
            raise self.doc.error(index, f"field '{name}' should be {what}, got {text!r}") from None

    def string(self, index: int, name: str) -> str:
        value = self.get(index, name)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.doc.error(index, f"field '{name}' should be a string, got {describe(value)}")
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
        if isinstance(value, TRACKED):
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


def _plain_value(dec: Decoder, index: int, name: str, kind: str) -> Any:
    if kind == "int":
        return dec.int_field(index, name)
    if kind == "bool":
        return dec.int_field(index, name) != 0
    if kind == "float":
        return dec.float_field(index, name)
    return dec.doc.plain(index, name)


def _attr_from_object(dec: Decoder, index: int, f: op_attrs.AttrField, value: Any) -> Any:
    """An attribute field's decoded object in the team's value conventions."""
    if value is None:
        return None
    kind = f.kind
    if kind == "VirtualDevice":
        if not isinstance(value, VirtualDevice):
            raise dec.doc.error(index, f"field '{f.name}' should be a virtual device, got {describe(value)}")
        return value
    if kind == "Expr":
        if not isinstance(value, A.Expr):
            raise dec.doc.error(index, f"field '{f.name}' should be an expression, got {describe(value)}")
        return value
    if kind == "String":
        if not isinstance(value, str):
            raise dec.doc.error(index, f"field '{f.name}' should be a string, got {describe(value)}")
        return value
    if kind == "Bool" and isinstance(value, A.IntImm) and value.dtype == "bool":
        return bool(value.value)
    return value


def _dec_string(dec: Decoder, index: int, node: dict[str, Any]) -> str:
    return dec.doc.repr_text(index)


def _dec_op(dec: Decoder, index: int, node: dict[str, Any]) -> A.Op:
    name = dec.doc.repr_text(index)
    if not name:
        raise dec.doc.error(index, "operator without a name")
    return A.op(name)


def _dec_array(dec: Decoder, index: int, node: dict[str, Any]) -> tuple[Any, ...]:
    values = dec.values
    return tuple(values[j] for j in node.get("data", ()))


def _dec_map(dec: Decoder, index: int, node: dict[str, Any]) -> MapValue:
    values = dec.values
    data = node.get("data", [])
    keys = node.get("keys")
    if keys:
        return MapValue(tuple((k, values[j]) for k, j in zip(keys, data)), True)
    return MapValue(tuple((values[data[i]], values[data[i + 1]]) for i in range(0, len(data), 2)), not data)


def _dec_intimm(dec: Decoder, index: int, node: dict[str, Any]) -> int | A.IntImm:
    value = dec.int_field(index, "value")
    dtype = dec.doc.plain(index, "dtype")
    return value if dtype == "int32" else A.IntImm(value, dtype)


def _dec_floatimm(dec: Decoder, index: int, node: dict[str, Any]) -> float:
    return dec.float_field(index, "value")


def _dec_tir_var(dec: Decoder, index: int, node: dict[str, Any]) -> str:
    return dec.string(index, "name")


def _dec_id(dec: Decoder, index: int, node: dict[str, Any]) -> str:
    return dec.string(index, "name_hint")


def _dec_var(dec: Decoder, index: int, node: dict[str, Any]) -> A.Var:
    vid = dec.get(index, "vid")
    if not isinstance(vid, str):
        raise dec.doc.error(index, f"field 'vid' should be a relay.Id, got {describe(vid)}")
    return A.Var(
        vid,
        dec.get_as(index, "type_annotation", A.Type, "a type"),
        dec.device(index, "virtual_device_"),
        **dec.expr_tail(index),
    )


def _dec_global_var(dec: Decoder, index: int, node: dict[str, Any]) -> A.GlobalVar:
    return A.GlobalVar(dec.string(index, "name_hint"), **dec.expr_tail(index))


def _dec_function(dec: Decoder, index: int, node: dict[str, Any]) -> A.Function:
    attrs = dec.get(index, "attrs")
    pairs: tuple[tuple[str, Any], ...] = ()
    if isinstance(attrs, DictAttrsValue):
        pairs = attrs.items
    elif attrs is not None:
        raise dec.doc.error(index, f"field 'attrs' should be DictAttrs, got {describe(attrs)}")
    return A.Function(
        dec.seq(index, "params", A.Var, "variables"),
        dec.expr(index, "body"),
        dec.get_as(index, "ret_type", A.Type, "a type"),
        dec.seq(index, "type_params", A.TypeVar, "type variables"),
        pairs,
        dec.device(index, "virtual_device_"),
        **dec.expr_tail(index),
    )


def _dec_call(dec: Decoder, index: int, node: dict[str, Any]) -> A.Call:
    attrs = dec.get(index, "attrs")
    if isinstance(attrs, DictAttrsValue):
        attrs = A.Attrs(attrs.items, "DictAttrs")
    elif attrs is not None and not isinstance(attrs, A.Attrs):
        raise dec.doc.error(index, f"field 'attrs' should be attributes, got {describe(attrs)}")
    return A.Call(
        dec.expr(index, "op"),
        dec.seq(index, "args", A.Expr, "expressions"),
        attrs,
        dec.seq(index, "type_args", A.Type, "types"),
        **dec.expr_tail(index),
    )


def _dec_let(dec: Decoder, index: int, node: dict[str, Any]) -> A.Let:
    var = dec.get_as(index, "var", A.Var, "a variable", optional=False)
    return A.Let(var, dec.expr(index, "value"), dec.expr(index, "body"), **dec.expr_tail(index))


def _dec_if(dec: Decoder, index: int, node: dict[str, Any]) -> A.If:
    return A.If(
        dec.expr(index, "cond"),
        dec.expr(index, "true_branch"),
        dec.expr(index, "false_branch"),
        **dec.expr_tail(index),
    )


def _dec_tuple(dec: Decoder, index: int, node: dict[str, Any]) -> A.Tuple:
    return A.Tuple(dec.seq(index, "fields", A.Expr, "expressions"), **dec.expr_tail(index))


def _dec_tgi(dec: Decoder, index: int, node: dict[str, Any]) -> A.TupleGetItem:
    return A.TupleGetItem(
        dec.expr(index, "tuple_value"), dec.int_field(index, "index"), **dec.expr_tail(index)
    )


def _dec_constant(dec: Decoder, index: int, node: dict[str, Any]) -> A.Constant:
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


def _dec_ref_create(dec: Decoder, index: int, node: dict[str, Any]) -> A.RefCreate:
    return A.RefCreate(dec.expr(index, "value"), **dec.expr_tail(index))


def _dec_ref_read(dec: Decoder, index: int, node: dict[str, Any]) -> A.RefRead:
    return A.RefRead(dec.expr(index, "ref"), **dec.expr_tail(index))


def _dec_ref_write(dec: Decoder, index: int, node: dict[str, Any]) -> A.RefWrite:
    return A.RefWrite(dec.expr(index, "ref"), dec.expr(index, "value"), **dec.expr_tail(index))


def _dec_match(dec: Decoder, index: int, node: dict[str, Any]) -> A.Match:
    return A.Match(
        dec.expr(index, "data"),
        dec.seq(index, "clauses", A.Clause, "clauses"),
        dec.int_field(index, "complete") != 0,
        **dec.expr_tail(index),
    )


def _dec_clause(dec: Decoder, index: int, node: dict[str, Any]) -> A.Clause:
    lhs = dec.get_as(index, "lhs", A.Pattern, "a pattern", optional=False)
    return A.Clause(lhs, dec.expr(index, "rhs"))


def _dec_pwild(dec: Decoder, index: int, node: dict[str, Any]) -> A.PatternWildcard:
    return A.PatternWildcard(span=dec.span(index))


def _dec_pvar(dec: Decoder, index: int, node: dict[str, Any]) -> A.PatternVar:
    var = dec.get_as(index, "var", A.Var, "a variable", optional=False)
    return A.PatternVar(var, span=dec.span(index))


def _dec_pctor(dec: Decoder, index: int, node: dict[str, Any]) -> A.PatternConstructor:
    ctor = dec.get_as(index, "constructor", A.Constructor, "a constructor", optional=False)
    return A.PatternConstructor(ctor, dec.seq(index, "patterns", A.Pattern, "patterns"), span=dec.span(index))


def _dec_ptuple(dec: Decoder, index: int, node: dict[str, Any]) -> A.PatternTuple:
    return A.PatternTuple(dec.seq(index, "patterns", A.Pattern, "patterns"), span=dec.span(index))


def _dec_constructor(dec: Decoder, index: int, node: dict[str, Any]) -> A.Constructor:
    belong = dec.get_as(index, "belong_to", A.GlobalTypeVar, "a global type variable", optional=False)
    return A.Constructor(
        dec.string(index, "name_hint"),
        dec.seq(index, "inputs", A.Type, "types"),
        belong,
        dec.int_field(index, "tag"),
        **dec.expr_tail(index),
    )


def _dec_type_data(dec: Decoder, index: int, node: dict[str, Any]) -> A.TypeData:
    header = dec.get_as(index, "header", A.GlobalTypeVar, "a global type variable", optional=False)
    return A.TypeData(
        header,
        dec.seq(index, "type_vars", A.TypeVar, "type variables"),
        dec.seq(index, "constructors", A.Constructor, "constructors"),
        span=dec.span(index),
    )


def _dec_tensor_type(dec: Decoder, index: int, node: dict[str, Any]) -> A.TensorType:
    shape = dec.get(index, "shape")
    if shape is None:
        shape = ()
    if not isinstance(shape, tuple):
        raise dec.doc.error(index, f"field 'shape' should be an array, got {describe(shape)}")
    for dim in shape:
        if not isinstance(dim, (int, A.IntImm, A.AnyDim, str)) or isinstance(dim, bool):
            raise dec.doc.error(
                index, f"shape dimension should be an integer, ? or a variable, got {describe(dim)}"
            )
    return A.TensorType(shape, dec.doc.plain(index, "dtype"), span=dec.span(index))


def _type_span(dec: Decoder, index: int) -> Any:
    return dec.span(index)


def _dec_tuple_type(dec: Decoder, index: int, node: dict[str, Any]) -> A.TupleType:
    return A.TupleType(dec.seq(index, "fields", A.Type, "types"), span=_type_span(dec, index))


def _dec_func_type(dec: Decoder, index: int, node: dict[str, Any]) -> A.FuncType:
    ret = dec.get_as(index, "ret_type", A.Type, "a type", optional=False)
    constraints = dec.get(index, "type_constraints")
    return A.FuncType(
        dec.seq(index, "arg_types", A.Type, "types"),
        ret,
        dec.seq(index, "type_params", A.TypeVar, "type variables"),
        constraints if isinstance(constraints, tuple) else (),
        span=_type_span(dec, index),
    )


def _dec_type_var(dec: Decoder, index: int, node: dict[str, Any]) -> A.TypeVar:
    return A.TypeVar(
        dec.string(index, "name_hint"), dec.int_field(index, "kind"), span=_type_span(dec, index)
    )


def _dec_global_type_var(dec: Decoder, index: int, node: dict[str, Any]) -> A.GlobalTypeVar:
    return A.GlobalTypeVar(dec.string(index, "name_hint"), dec.int_field(index, "kind"))


def _dec_type_call(dec: Decoder, index: int, node: dict[str, Any]) -> A.TypeCall:
    func = dec.get_as(index, "func", A.Type, "a type", optional=False)
    return A.TypeCall(func, dec.seq(index, "args", A.Type, "types"), span=_type_span(dec, index))


def _dec_ref_type(dec: Decoder, index: int, node: dict[str, Any]) -> A.RefType:
    value = dec.get_as(index, "value", A.Type, "a type", optional=False)
    return A.RefType(value, span=_type_span(dec, index))


def _dec_incomplete(dec: Decoder, index: int, node: dict[str, Any]) -> A.IncompleteType:
    return A.IncompleteType(dec.int_field(index, "kind"), span=_type_span(dec, index))


def _dec_dict_attrs(dec: Decoder, index: int, node: dict[str, Any]) -> DictAttrsValue:
    value = dec.get(index, "__dict__")
    if value is None:
        return DictAttrsValue(())
    if not isinstance(value, MapValue) or not value.str_keys:
        raise dec.doc.error(index, "field '__dict__' should be a map with string keys")
    return DictAttrsValue(value.items)


def _dec_virtual_device(dec: Decoder, index: int, node: dict[str, Any]) -> VirtualDevice:
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


def _dec_target(dec: Decoder, index: int, node: dict[str, Any]) -> Target:
    kind = dec.get(index, "kind")
    if not isinstance(kind, str) or not kind:
        raise dec.doc.error(index, "target without a kind")
    keys = dec.seq(index, "keys", str, "strings")
    attrs = dec.get(index, "attrs")
    host = dec.get_as(index, "host", Target, "a target")
    pairs: tuple[tuple[str, Any], ...] = ()
    if isinstance(attrs, MapValue) and attrs.str_keys:
        pairs = tuple((str(k), _unbox(v)) for k, v in attrs.items)
    elif attrs is not None:
        raise dec.doc.error(index, f"field 'attrs' should be a map with string keys, got {describe(attrs)}")
    return Target(
        kind,
        keys,
        pairs,
        host,
        dec.string(index, "tag"),
        raw=RawRef(dec.doc, index),
    )


def _dec_span(dec: Decoder, index: int, node: dict[str, Any]) -> Span:
    name = dec.get(index, "source_name")
    source = SourceText(name, "") if isinstance(name, str) else None
    return Span(
        source,
        dec.int_field(index, "line"),
        dec.int_field(index, "column"),
        dec.int_field(index, "end_line"),
        dec.int_field(index, "end_column"),
    )


def _dec_module(dec: Decoder, index: int, node: dict[str, Any]) -> ModuleValue:
    return ModuleValue({name: dec.get(index, name) for name, _ in NODE_FIELDS["IRModule"]})


_DECODERS: dict[str, Callable[[Decoder, int, dict[str, Any]], Any]] = {
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


@without_gc
def load_json(text: str | bytes, name: str = "<json>") -> A.Module:
    """Read a module (or a bare expression) saved by TVM <= 0.19's
    `tvm.ir.save_json`. Raises ParseError for anything malformed."""
    doc = parse_document(text, name)
    decoder = Decoder(doc)
    root_value = decoder.decode(doc.root)
    origins = decoder.origins
    if isinstance(root_value, A.Expr):
        meta = _collect_meta((), root_value)
        return A.Module(expr=root_value, meta=meta, raw=ModuleRaw(origins, None))
    if not isinstance(root_value, ModuleValue):
        raise doc.error(doc.root, "the root is neither an IRModule nor a Relay expression")
    mod_index = doc.root
    fields = root_value.fields
    functions: list[tuple[A.GlobalVar, A.Function]] = []
    fmap = fields["functions"]
    if fmap is not None:
        if not isinstance(fmap, MapValue):
            raise doc.error(mod_index, "field 'functions' should be a map")
        for gv, fn in fmap.items:
            if not isinstance(gv, A.GlobalVar):
                raise doc.error(mod_index, f"function map key should be a GlobalVar, got {describe(gv)}")
            if not isinstance(fn, A.Function):
                raise doc.error(mod_index, f"@{gv.name} is a {describe(fn)}, not a Relay function")
            functions.append((gv, fn))
    typedefs: list[A.TypeData] = []
    tmap = fields["type_definitions"]
    if isinstance(tmap, MapValue):
        for _, td in tmap.items:
            if not isinstance(td, A.TypeData):
                raise doc.error(mod_index, f"type definition should be a TypeData, got {describe(td)}")
            typedefs.append(td)
    gv_map = fields["global_var_map_"]
    gtv_map = fields["global_type_var_map_"]
    raw = ModuleRaw(
        origins,
        mod_index,
        {n: doc.ref(mod_index, n) for n, _ in NODE_FIELDS["IRModule"]},
        tuple(k for k, _ in gv_map.items) if isinstance(gv_map, MapValue) and gv_map.str_keys else (),
        tuple(k for k, _ in gtv_map.items) if isinstance(gtv_map, MapValue) and gtv_map.str_keys else (),
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

    def function_devices(node: A.Expr) -> None:  # before the function's body
        if isinstance(node, A.Function):
            for p in node.params:
                note(p.virtual_device)
            note(node.virtual_device)

    def other_devices(node: A.Expr) -> None:  # after the node's operands
        if isinstance(node, A.Let):
            note(node.var.virtual_device)
        elif isinstance(node, A.Call) and node.attrs is not None:
            for _, value in node.attrs.fields:
                note(value)

    roots: list[A.Expr] = [fn for _, fn in functions]
    if expr is not None:
        roots.append(expr)
    for root in roots:
        walk(root, pre=function_devices, post=other_devices)
    return {"VirtualDevice": found} if found else {}
