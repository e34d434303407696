"""Encoding the Relay IR as TVM JSON (`dump_json`).

`Encoder` extends the raw-copying `Writer`: objects read from JSON and not
changed since keep their raw nodes (found through `Origins`, the metadata
type memory, or a target's `raw`); everything else is encoded the way TVM's
`SaveJSON` would, with operator attributes completed from `relay.op_attrs`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import ast as A
from .. import op_attrs
from ..device import Target, VirtualDevice
from ..ndarray_codec import ndarray_to_b64
from ..span import RelayError, Span
from .decode import Decoder
from .document import RawDoc, RawRef, without_gc
from .layout import Item, Spec, Writer, raw_key
from .memory import TYPE_MEMORY
from .values import (
    TRACKED,
    UNCONSTRAINED,
    UNCONSTRAINED_KEY,
    DictAttrsValue,
    MapValue,
    ModuleRaw,
    Origins,
    TVMObject,
)


class Encoder(Writer):
    """A `Writer` that also encodes IR values (`item` slots say how)."""

    def __init__(self, origins: Origins | None) -> None:
        super().__init__()
        self.origins = origins
        self._fresh = 0
        # TVM's printer shares one IntImm per dimension value across the
        # types in a metadata section; modules keep the sharing they had.
        self.share_dims = False
        self._raw_targets: dict[tuple[int, int], Any] = {}
        # Raw nodes found in the metadata type memory, by id of the type (the
        # memory may evict them between `key` and `raw_of`).
        self._remembered: dict[int, RawRef] = {}

    def key(self, item: Item) -> Any:
        """The identity of the object `item` encodes, or None for null."""
        slot, value = item
        if value is None and slot not in ("vd_expr",):
            return None
        if slot == "raw":
            return raw_key(value)
        if isinstance(value, TVMObject):
            return ("raw", id(value.raw.doc), value.raw.node)
        origins = self.origins
        if slot in ("vd", "vd_expr"):
            vd = value if value is not None else UNCONSTRAINED
            if isinstance(vd, A.MetaRef):
                raise RelayError(f"cannot write meta[{vd.kind}][{vd.index}]: its virtual device is unknown")
            if origins is not None:
                found = origins.vd_by_value.get(vd)
                if found is not None:
                    return ("raw", id(origins.doc), found)
            return UNCONSTRAINED_KEY if vd is UNCONSTRAINED else ("vd", vd)
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
        if isinstance(value, (*TRACKED, Span)):
            if origins is not None:
                origin = origins.find(value)
                if origin is not None:
                    return ("raw", id(origins.doc), origin.node)
            if isinstance(value, A.TensorType):
                remembered = TYPE_MEMORY.find(value)
                if remembered is not None:
                    self._remembered[id(value)] = remembered
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
            original = self._raw_targets[cache_key] = Decoder(raw.doc).decode(raw.node)
        return bool(original == target)

    def raw_of(self, value: Any) -> tuple[RawDoc, int]:
        """The raw node of a value `key` gave a raw key."""
        origins = self.origins
        if isinstance(value, TVMObject):
            return value.raw
        if isinstance(value, Target) and isinstance(value.raw, RawRef):
            return value.raw
        if isinstance(value, A.TensorType) and (origins is None or origins.find(value) is None):
            return self._remembered[id(value)]
        assert origins is not None
        if isinstance(value, VirtualDevice) or value is None:
            vd = value if value is not None else UNCONSTRAINED
            return RawRef(origins.doc, origins.vd_by_value[vd])
        found = origins.find(value)
        assert found is not None
        return found

    def encode_fresh(self, slot: str, value: Any, children: list[tuple[Item, Any]]) -> Spec:
        """A node for `value` encoded from the IR (no raw origin)."""
        return _encode_fresh(self, slot, value, children)


@without_gc
def dump_json(module: A.Module) -> str:
    """Write `module` as TVM 0.19's `tvm.ir.save_json` would.

    Nodes read from JSON and not changed since are written back verbatim;
    operator attributes are completed with their defaults. Raises RelayError
    for values that cannot be written (unresolved meta placeholders).
    """
    raw = module.raw if isinstance(module.raw, ModuleRaw) else None
    writer = Encoder(raw.origins if raw is not None else None)
    if not module.functions and not module.type_definitions and module.expr is not None:
        root = writer.add(("expr", module.expr))
        return writer.to_json(root)
    root = writer.add(("module", module))
    return writer.to_json(root)


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
    w: Encoder, spec: Spec, children: list[tuple[Item, Any]], expr: A.Expr, *, vd: Any = None
) -> None:
    w.child(spec.refs, children, "virtual_device_", ("vd_expr", vd))
    w.child(spec.refs, children, "span", ("span", expr.span))
    w.child(spec.refs, children, "_checked_type_", ("type", expr.checked_type))


_REPR_SLOTS = {"string": "runtime.String", "sourcename": "SourceName", "targetkind": "TargetKind"}


def _encode_fresh(w: Encoder, slot: str, value: Any, children: list[tuple[Item, Any]]) -> Spec:
    """A node for `value` encoded from the IR (no raw origin). `slot` says
    what `value` is where TVM's node types are not implied by Python types
    (an int may be an IntImm, a boxed int or a plain field)."""
    encoder = _SLOT_ENCODERS.get(slot)
    if encoder is not None:
        return encoder(w, value, children)
    add = w.child
    match slot:
        case "meta_entry":
            if isinstance(value, VirtualDevice):
                return _encode_fresh(w, "vd", value, children)
            return _encode_generic(w, value, children)
        case "vd" | "vd_expr":
            vd = value if value is not None else UNCONSTRAINED
            spec = Spec("VirtualDevice")
            spec.plain["device_type_int"] = str(vd.device_type if vd.device_type is not None else -1)
            spec.plain["virtual_device_id"] = str(
                vd.virtual_device_id if vd.virtual_device_id is not None else -1
            )
            add(spec.refs, children, "target", ("target", vd.target))
            add(spec.refs, children, "memory_scope", ("string", vd.memory_scope or ""))
            return spec
        case "string" | "sourcename" | "targetkind":
            spec = Spec(_REPR_SLOTS[slot])
            spec.repr = value
            return spec
        case "op":
            spec = Spec("Op")
            spec.repr = value.name
            return spec
        case "boxint":
            spec = Spec("runtime.BoxInt")
            spec.repr = str(int(value))
            return spec
        case "id":
            spec = Spec("relay.Id")
            add(spec.refs, children, "name_hint", ("string", value))
            return spec
        case "primtype":
            spec = Spec("PrimType")
            spec.plain["dtype"] = value
            return spec
        case "array":  # value: (element slot, elements)
            elem_slot, elems = value
            spec = Spec("Array")
            spec.data = _add_all(w, children, [(elem_slot, e) for e in elems])
            return spec
        case "strmap" | "objmap_str":  # value: (str key, value) pairs; strmap values are generic
            spec = Spec("Map")
            spec.keys = [str(k) for k, _ in value]
            items = [("generic", v) if slot == "strmap" else v for _, v in value]
            spec.data = _add_all(w, children, items)
            return spec
        case "objmap":  # value: (key item, value item) pairs
            spec = Spec("Map")
            spec.data = _add_all(w, children, [item for pair in value for item in pair])
            return spec
        case "dictattrs":
            spec = Spec("DictAttrs")
            add(spec.refs, children, "__dict__", ("strmap", tuple(value)))
            return spec
        case "sourcemap":
            spec = Spec("SourceMap")
            add(spec.refs, children, "source_map", ("strmap", ()))
            return spec
        case "clause":
            spec = Spec("relay.Clause")
            add(spec.refs, children, "lhs", ("pattern", value.lhs))
            add(spec.refs, children, "rhs", ("expr", value.rhs))
            return spec
        case "typedata":
            spec = Spec("relay.TypeData")
            add(spec.refs, children, "header", ("type", value.header))
            add(spec.refs, children, "type_vars", ("array", ("type", value.type_vars)))
            add(spec.refs, children, "constructors", ("array", ("expr", value.constructors)))
            add(spec.refs, children, "span", ("span", value.span))
            return spec
    raise RelayError(f"cannot write a {type(value).__name__} as TVM JSON ({slot})")


def _add_all(w: Encoder, children: list[tuple[Item, Any]], items: list[Item]) -> list[Any]:
    keys = []
    for item in items:
        key = w.key(item)
        keys.append(key)
        children.append((item, key))
    return keys


def _encode_generic(w: Encoder, value: Any, children: list[tuple[Item, Any]]) -> Spec:
    """A value of no declared kind (function attributes, map values)."""
    if isinstance(value, bool):
        spec = Spec("IntImm")
        spec.plain.update(dtype="bool", value="1" if value else "0")
        spec.refs.append(("span", None))
        return spec
    if isinstance(value, (int, A.IntImm, A.AnyDim)):
        return _encode_dim(w, value, children)
    if isinstance(value, float):
        spec = Spec("FloatImm")
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
    if isinstance(value, MapValue):
        if value.str_keys:
            return _encode_fresh(w, "strmap", value.items, children)
        return _encode_fresh(
            w, "objmap", tuple((("generic", k), ("generic", v)) for k, v in value.items), children
        )
    if isinstance(value, DictAttrsValue):
        return _encode_fresh(w, "dictattrs", value.items, children)
    if isinstance(value, A.MetaRef):
        raise RelayError(f"cannot write meta[{value.kind}][{value.index}]: its value is unknown")
    raise RelayError(f"cannot write a {type(value).__name__} as TVM JSON")


def _encode_target(w: Encoder, target: Target, children: list[tuple[Item, Any]]) -> Spec:
    """A Target in TVM's complete form (kind, tag, keys, attrs, features, host)."""
    spec = Spec("Target")
    add = w.child
    add(spec.refs, children, "kind", ("targetkind", target.kind))
    add(spec.refs, children, "tag", ("string", target.tag))
    add(spec.refs, children, "keys", ("array", ("string", tuple(target.keys))))
    attrs = tuple((k, _target_attr_item(v)) for k, v in target.attrs)
    add(spec.refs, children, "attrs", ("objmap_str", attrs))
    add(spec.refs, children, "features", ("strmap", ()))
    add(spec.refs, children, "host", ("target", target.host))
    return spec


def _target_attr_item(value: Any) -> Item:
    if isinstance(value, bool):
        return ("generic", value)
    if isinstance(value, int):
        return ("boxint", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, (list, tuple)):
        return ("array", ("string", tuple(str(v) for v in value)))
    return ("generic", value)


def _encode_span(w: Encoder, span: Span, children: list[tuple[Item, Any]]) -> Spec:
    spec = Spec("Span")
    name = span.source.name if span.source is not None else None
    w.child(spec.refs, children, "source_name", ("sourcename", name))
    spec.plain.update(
        line=str(span.line),
        column=str(span.column),
        end_line=str(span.end_line),
        end_column=str(span.end_column),
    )
    return spec


def _encode_dim(w: Encoder, dim: Any, children: list[tuple[Item, Any]]) -> Spec:
    if isinstance(dim, A.AnyDim):
        spec = Spec("tir.Any")
        spec.plain["dtype"] = "int32"
        spec.refs.append(("span", None))
        return spec
    if isinstance(dim, str):
        spec = Spec("tir.Var")
        spec.plain["dtype"] = "int32"
        w.child(spec.refs, children, "name", ("string", dim))
        w.child(spec.refs, children, "type_annotation", ("primtype", "int32"))
        spec.refs.append(("span", None))
        return spec
    if isinstance(dim, TVMObject):
        raise RelayError("internal: raw objects are copied, not encoded")
    if isinstance(dim, float):  # vision attributes keep FloatImm in Array<IndexExpr>
        spec = Spec("FloatImm")
        spec.plain.update(dtype="float32", value=_format_double(dim))
        spec.refs.append(("span", None))
        return spec
    spec = Spec("IntImm")
    if isinstance(dim, A.IntImm):
        spec.plain.update(dtype=dim.dtype, value=str(int(dim.value)))
    elif isinstance(dim, (int, float)):
        spec.plain.update(dtype="int32", value=str(int(dim)))
    else:
        raise RelayError(f"cannot write {dim!r} as an integer")
    spec.refs.append(("span", None))
    return spec


def _encode_type(w: Encoder, ty: A.Type, children: list[tuple[Item, Any]]) -> Spec:
    add = w.child
    span_item = ("span", ty.span)
    match ty:
        case A.TensorType(shape=shape, dtype=dtype):
            spec = Spec("relay.TensorType")
            add(spec.refs, children, "shape", ("array", ("dim", tuple(shape))))
            spec.plain["dtype"] = dtype
            add(spec.refs, children, "span", span_item)
        case A.TupleType(fields=fields):
            spec = Spec("TupleType")
            add(spec.refs, children, "fields", ("array", ("type", fields)))
            add(spec.refs, children, "span", span_item)
        case A.FuncType():
            spec = Spec("FuncType")
            add(spec.refs, children, "arg_types", ("array", ("type", ty.arg_types)))
            add(spec.refs, children, "ret_type", ("type", ty.ret_type))
            add(spec.refs, children, "type_params", ("array", ("type", ty.type_params)))
            add(spec.refs, children, "type_constraints", ("array", ("generic", ty.type_constraints)))
            add(spec.refs, children, "span", span_item)
        case A.TypeVar(name=name, kind=kind):
            spec = Spec("TypeVar")
            add(spec.refs, children, "name_hint", ("string", name))
            spec.plain["kind"] = str(kind)
            add(spec.refs, children, "span", span_item)
        case A.GlobalTypeVar(name=name, kind=kind):
            spec = Spec("GlobalTypeVar")
            add(spec.refs, children, "name_hint", ("string", name))
            spec.plain["kind"] = str(kind)
        case A.TypeCall(func=func, args=args):
            spec = Spec("TypeCall")
            add(spec.refs, children, "func", ("type", func))
            add(spec.refs, children, "args", ("array", ("type", args)))
            add(spec.refs, children, "span", span_item)
        case A.RefType(value=value):
            spec = Spec("relay.RefType")
            add(spec.refs, children, "value", ("type", value))
            add(spec.refs, children, "span", span_item)
        case A.IncompleteType(kind=kind):
            spec = Spec("IncompleteType")
            spec.plain["kind"] = str(kind)
            add(spec.refs, children, "span", span_item)
        case _:
            raise RelayError(f"cannot write type {type(ty).__name__} as TVM JSON")
    return spec


def _encode_pattern(w: Encoder, pattern: A.Pattern, children: list[tuple[Item, Any]]) -> Spec:
    add = w.child
    match pattern:
        case A.PatternWildcard():
            spec = Spec("relay.PatternWildcard")
        case A.PatternVar(var=var):
            spec = Spec("relay.PatternVar")
            add(spec.refs, children, "var", ("expr", var))
        case A.PatternConstructor(constructor=ctor, patterns=patterns):
            spec = Spec("relay.PatternConstructor")
            add(spec.refs, children, "constructor", ("expr", ctor))
            add(spec.refs, children, "patterns", ("array", ("pattern", patterns)))
        case A.PatternTuple(patterns=patterns):
            spec = Spec("relay.PatternTuple")
            add(spec.refs, children, "patterns", ("array", ("pattern", patterns)))
        case _:
            raise RelayError(f"cannot write pattern {type(pattern).__name__} as TVM JSON")
    add(spec.refs, children, "span", ("span", pattern.span))
    return spec


def _attr_item(f: op_attrs.AttrField, value: Any) -> Item:
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


def _encode_attrs(w: Encoder, attrs: A.Attrs, children: list[tuple[Item, Any]]) -> Spec:
    schema = op_attrs.SCHEMAS.get(attrs.type_key or "")
    if schema is None:
        spec = Spec("DictAttrs")
        w.child(spec.refs, children, "__dict__", ("strmap", attrs.fields))
        return spec
    spec = Spec(schema.type_key)
    given = attrs.as_dict()
    for f in schema.fields:
        value = given.get(f.name)
        if f.is_ref:
            w.child(spec.refs, children, f.name, _attr_item(f, value))
        else:
            spec.plain[f.name] = _plain_text(f.kind, value)
    return spec


def _encode_expr(w: Encoder, expr: A.Expr, children: list[tuple[Item, Any]]) -> Spec:
    add = w.child
    match expr:
        case A.Var():
            spec = Spec("relay.Var")
            add(spec.refs, children, "vid", ("id", expr.name))
            add(spec.refs, children, "type_annotation", ("type", expr.type_annotation))
            _expr_tail(w, spec, children, expr, vd=expr.virtual_device)
        case A.GlobalVar(name=name):
            spec = Spec("GlobalVar")
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
            spec = Spec("relay.Constant")
            tensor_data: A.NDArray = data
            spec.plain["data"] = str(w.tensor(("obj", id(data)), lambda: ndarray_to_b64(tensor_data)))
            w.keep.append(data)
            _expr_tail(w, spec, children, expr)
        case A.Op():
            spec = Spec("Op")
            spec.repr = expr.name
        case A.Constructor():
            spec = Spec("relay.Constructor")
            add(spec.refs, children, "name_hint", ("string", expr.name))
            add(spec.refs, children, "inputs", ("array", ("type", expr.inputs)))
            add(spec.refs, children, "belong_to", ("type", expr.belong_to))
            spec.plain["tag"] = str(expr.tag)
            add(spec.refs, children, "span", ("span", expr.span))
            add(spec.refs, children, "_checked_type_", ("type", expr.checked_type))
        case A.Call(op=callee, args=args, attrs=attrs, type_args=type_args):
            spec = Spec("relay.Call")
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
            spec = Spec("relay.Function")
            add(spec.refs, children, "params", ("array", ("expr", expr.params)))
            add(spec.refs, children, "body", ("expr", expr.body))
            add(spec.refs, children, "ret_type", ("type", expr.ret_type))
            add(spec.refs, children, "type_params", ("array", ("type", expr.type_params)))
            add(spec.refs, children, "attrs", ("dictattrs", expr.attrs))
            _expr_tail(w, spec, children, expr, vd=expr.virtual_device)
        case A.Let(var=var, value=value, body=body):
            spec = Spec("relay.Let")
            add(spec.refs, children, "var", ("expr", var))
            add(spec.refs, children, "value", ("expr", value))
            add(spec.refs, children, "span", ("span", expr.span))
            add(spec.refs, children, "_checked_type_", ("type", expr.checked_type))
            add(spec.refs, children, "body", ("expr", body))
            add(spec.refs, children, "virtual_device_", ("vd_expr", None))
        case A.If(cond=cond, true_branch=t, false_branch=f):
            spec = Spec("relay.If")
            add(spec.refs, children, "cond", ("expr", cond))
            add(spec.refs, children, "true_branch", ("expr", t))
            add(spec.refs, children, "false_branch", ("expr", f))
            _expr_tail(w, spec, children, expr)
        case A.Tuple(fields=fields):
            spec = Spec("relay.Tuple")
            add(spec.refs, children, "fields", ("array", ("expr", fields)))
            _expr_tail(w, spec, children, expr)
        case A.TupleGetItem(tuple_value=t, index=i):
            spec = Spec("relay.TupleGetItem")
            add(spec.refs, children, "tuple_value", ("expr", t))
            spec.plain["index"] = str(i)
            _expr_tail(w, spec, children, expr)
        case A.RefCreate(value=v):
            spec = Spec("relay.RefCreate")
            add(spec.refs, children, "value", ("expr", v))
            _expr_tail(w, spec, children, expr)
        case A.RefRead(ref=r):
            spec = Spec("relay.RefRead")
            add(spec.refs, children, "ref", ("expr", r))
            _expr_tail(w, spec, children, expr)
        case A.RefWrite(ref=r, value=v):
            spec = Spec("relay.RefWrite")
            add(spec.refs, children, "ref", ("expr", r))
            add(spec.refs, children, "value", ("expr", v))
            _expr_tail(w, spec, children, expr)
        case A.Match(data=data, clauses=clauses, complete=complete):
            spec = Spec("relay.Match")
            add(spec.refs, children, "data", ("expr", data))
            add(spec.refs, children, "clauses", ("array", ("clause", clauses)))
            spec.plain["complete"] = "1" if complete else "0"
            _expr_tail(w, spec, children, expr)
        case _:
            raise RelayError(f"cannot write expression {type(expr).__name__} as TVM JSON")
    return spec


def _encode_module(w: Encoder, module: A.Module, children: list[tuple[Item, Any]]) -> Spec:
    raw = module.raw if isinstance(module.raw, ModuleRaw) and module.raw.module_index is not None else None
    spec = Spec("IRModule")
    add = w.child
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


def _ordered(values: dict[str, Any], order: tuple[str, ...]) -> tuple[tuple[str, Item], ...]:
    names = [n for n in order if n in values] + [n for n in values if n not in set(order)]
    return tuple(
        (n, ("type" if isinstance(values[n], A.GlobalTypeVar) else "expr", values[n])) for n in names
    )


# Slots whose value is encoded by one function of its own.
_SLOT_ENCODERS: dict[str, Callable[[Encoder, Any, list[tuple[Item, Any]]], Spec]] = {
    "expr": _encode_expr,
    "type": _encode_type,
    "attrs": _encode_attrs,
    "pattern": _encode_pattern,
    "dim": _encode_dim,
    "span": _encode_span,
    "target": _encode_target,
    "module": _encode_module,
    "generic": _encode_generic,
}
