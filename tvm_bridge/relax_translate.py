"""Relax IRModule -> the planner's Relay AST, with a map back to each binding.

The planner knows Relay: this module rewrites a Relax program into a Relay
module in graph form (every Relax binding is one shared Relay node; aliases
`b = a` are the same node), so the planner runs unchanged in both modes:

- high-level `relax.*` operators become the Relay operators the planner's
  tables and cost model know (`relax.nn.conv2d` -> `nn.conv2d`, a
  `relax.matmul` of a single-use 2-D `relax.permute_dims` -> `nn.dense`),
  their non-tensor arguments (shapes, prim values) become attributes;
- `R.hint_on_device(a, d)` becomes `on_device(a, d)`: the result is pinned,
  and so is `a` unless `a` is already known to live elsewhere (TVM's own
  `RealizeVDevice` gives explicit devices priority over hinted inputs); a
  tensor whose type names a vdevice is pinned the same way;
- `R.to_vdevice(a, d)` becomes `on_device(a, d)` constraining only its
  result: `a` stays wherever it is computed and the copy is the boundary;
- `call_tir`, packed calls and operators without a Relay counterpart keep
  their Relax name: the planner treats them as device-polymorphic operators
  (they stay with their inputs), and the cost model lists them as estimates.

Every Relay node made for a binding carries the binding's TVMScript span
(line:column), so conflicts and cost estimates point at the Relax source.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm import relax

from relay import ast
from relay.device import Target, VirtualDevice, parse_target
from relay.span import RelayError, SourceText, Span

from .targets import native_output_to_log, target_dict

log = logging.getLogger(__name__)

HINT = "relax.hint_on_device"
# The target a hint's device gets when the vdevice list has none of its type.
_TARGET_KINDS: dict[int, str] = {1: "llvm", 2: "cuda", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm"}
TO_VDEVICE = "relax.to_vdevice"


class RelaxTranslationError(RelayError):
    """A Relax construct the planner cannot take (with its TVMScript span)."""


# ---------------------------------------------------------------------------
# Devices


@functools.cache
def _default_attrs(kind: str) -> dict[str, Any]:
    """What TVM fills in for a target given by its kind alone (keys, the host's
    mtriple, cuda's arch and thread limits), as plain values."""
    try:
        with native_output_to_log(log):  # TVM's CUDA-version warning on a machine without a GPU
            exported = dict(tvm.target.Target({"kind": kind}).export())
    except Exception:  # noqa: BLE001 - a kind TVM cannot make alone
        return {}
    exported.pop("kind", None)
    return {str(k): plain(v) for k, v in exported.items()}


@functools.cache
def _written_attrs(kind: str) -> dict[str, Any]:
    """What the bridge itself writes for a target of this kind alone
    (`targets.target_dict`: cuda's default arch and its llvm host), as TVM
    exports it: a planned module read again names its devices as the first
    plan did (`cuda`, not `cuda (target cuda -arch=sm_75 ...)`)."""
    try:
        with native_output_to_log(log):
            exported = dict(tvm.target.Target(target_dict({"kind": kind})).export())
    except Exception:  # noqa: BLE001 - a kind the bridge cannot write alone
        return {}
    exported.pop("kind", None)
    return {str(k): plain(v) for k, v in exported.items()}


_SIMPLE = (str, int, float)
_MISSING = object()


def relay_target(target: Any) -> Target:
    """A TVM `Target` as the planner's plain `relay.device.Target` value. What
    TVM filled in by default is left out, so `I.vdevice("llvm", 0)` is the
    request's `cpu` (`parse_target("llvm")`), and a device differs from a
    request's only where the module says something of its own (an arch).
    What the bridge writes for a bare kind (cuda's default arch, its llvm
    host) is left out too, so names are stable across re-planning."""
    exported = dict(target.export())
    kind = str(exported["kind"])
    written = _written_attrs(kind)
    if exported.get("host") is not None and plain(exported["host"]) == written.get("host", _MISSING):
        exported.pop("host")  # the host the bridge writes for this kind
    if exported.get("host") is None:
        defaults = _default_attrs(kind)
        own = {
            str(k): plain(v)
            for k, v in exported.items()
            if k not in ("kind", "host")
            and plain(v) != defaults.get(str(k), _MISSING)
            and plain(v) != written.get(str(k), _MISSING)
        }
        if "keys" not in own and not own.get("tag") and all(
            isinstance(v, _SIMPLE) and not isinstance(v, bool) for v in own.values()
        ):
            own.pop("tag", None)
            try:
                return parse_target(" ".join([kind, *(f"-{k}={v}" for k, v in sorted(own.items()))]))
            except (RelayError, ValueError):
                log.debug("target %s kept with every attribute", kind)
    return _full_target(target)


def _full_target(target: Any) -> Target:
    """A TVM `Target` with every attribute it has."""
    exported = dict(target.export())
    host = exported.pop("host", None)
    kind = str(exported.pop("kind"))
    keys = tuple(str(k) for k in exported.pop("keys", ()))
    tag = str(exported.pop("tag", "") or "")
    attrs = tuple(sorted((str(k), plain(v)) for k, v in exported.items()))
    host_target = relay_target(target.host) if host is not None and target.host is not None else None
    return Target(kind, keys, attrs, host_target, tag)


def relay_device(vdevice: Any) -> VirtualDevice:
    """A Relax `VDevice` as a Relay `VirtualDevice`: its type, index and
    target, and its memory scope unless it is Relax's default `global` (None,
    as the request's devices and Relay's metadata reader say the default
    scope, so that one device has one value)."""
    scope = str(vdevice.memory_scope)
    return VirtualDevice(
        int(vdevice.target.get_target_device_type()),
        int(vdevice.vdevice_id),
        relay_target(vdevice.target),
        None if scope in ("global", "") else scope,
    )


def plain(value: Any) -> Any:
    """A TVM attribute value as int/float/str/bool/None/tuple."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tvm.tirx.IntImm):
        return int(value.value)
    if isinstance(value, tvm.tirx.FloatImm):
        return float(value.value)
    if isinstance(value, relax.ShapeExpr):
        return tuple(plain(v) for v in value.values)
    if isinstance(value, tvm.ir.expr.StringImm):
        return str(value.value)
    if isinstance(value, relax.Tuple):
        return tuple(plain(f) for f in value.fields)
    if isinstance(value, (list, tuple)) or _is_array(value):
        return tuple(plain(v) for v in value)
    return str(value)  # a symbolic expression or an object we only name


def _is_array(value: Any) -> bool:
    return type(value).__name__ in ("Array", "List") and hasattr(value, "__iter__")


# ---------------------------------------------------------------------------
# Types


# Exact classes, compared with `type(x) is`: `isinstance` on TVM's classes goes
# through ABC checks, a fifth of the translation's time on resnet50.
_TENSOR_TYPE = relax.TensorType
_TUPLE_TYPE = relax.TupleType
_INT_IMM = tvm.tirx.IntImm


def relay_type(ty: Any) -> ast.Type | None:
    """The Relay type of a Relax type (None for what Relay cannot say)."""
    if type(ty) is _TENSOR_TYPE:
        shape = ty.shape
        if shape is None or type(shape) is not relax.ShapeExpr:
            return None
        dims = tuple(int(d.value) if type(d) is _INT_IMM else ast.ANY for d in shape.values)
        return ast.TensorType(dims, str(ty.dtype))
    if type(ty) is _TUPLE_TYPE:
        fields = [relay_type(f) for f in ty.fields]
        if any(f is None for f in fields):
            return None
        return ast.TupleType(tuple(f for f in fields if f is not None))
    return None


def tensor_vdevice(ty: Any) -> Any:
    """The vdevice a tensor type names, or None."""
    if type(ty) is _TENSOR_TYPE:
        return ty.vdevice
    return None


def is_data(ty: Any) -> bool:
    """Tensors and tuples of them: the values that live on a device."""
    if type(ty) is _TENSOR_TYPE:
        return True
    if type(ty) is _TUPLE_TYPE:
        return all(is_data(f) for f in ty.fields)
    return False


# ---------------------------------------------------------------------------
# The operator table: Relax operator -> Relay operator and attributes


@dataclass(frozen=True)
class OpCall:
    """What `_translate_call` hands a table entry."""

    call: Any  # relax.Call
    attrs: dict[str, Any]  # the Relax attributes, plain values
    extra: tuple[Any, ...]  # the non-tensor arguments, plain values
    arg_types: tuple[Any, ...]  # Relax types of the tensor arguments
    costed: bool = True  # optimize mode: attributes the cost model reads (channels, kernel_size)


Mapper = Callable[[OpCall], tuple[str, tuple[tuple[str, Any], ...]]]


def _same(name: str, *keep: str, **rename: str) -> Mapper:
    def mapper(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
        fields = [(k, c.attrs[k]) for k in keep if k in c.attrs]
        fields += [(new, c.attrs[old]) for new, old in rename.items() if old in c.attrs]
        return name, tuple(fields)

    return mapper


def _out_dtype(value: Any) -> str:
    return "" if value in (None, "void") else str(value)


def _conv(name: str) -> Mapper:
    def mapper(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
        a = c.attrs
        fields: list[tuple[str, Any]] = [
            (k, a[k]) for k in ("strides", "padding", "dilation", "groups") if k in a
        ]
        w = c.arg_types[1] if len(c.arg_types) > 1 else None
        wshape = relay_type(w) if c.costed else None
        if isinstance(wshape, ast.TensorType) and all(isinstance(d, int) for d in wshape.shape):
            kernel_layout = str(a.get("kernel_layout", "OIHW"))
            dims = dict(zip(kernel_layout, wshape.shape))
            if "O" in dims:
                fields.append(("channels", dims["O"]))
            spatial = [dims[ch] for ch in kernel_layout if ch not in "OI" and ch in dims]
            fields.append(("kernel_size", tuple(spatial)))
        for k in ("data_layout", "kernel_layout", "out_layout"):
            if k in a:
                fields.append((k, a[k]))
        fields.append(("out_dtype", _out_dtype(a.get("out_dtype"))))
        return name, tuple(fields)

    return mapper


def _pool(name: str, with_count: bool) -> Mapper:
    def mapper(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
        keys = ["pool_size", "strides", "dilation", "padding", "layout", "out_layout", "ceil_mode"]
        if with_count:
            keys.append("count_include_pad")
        return name, tuple((k, c.attrs[k]) for k in keys if k in c.attrs)

    return mapper


def _reduce(name: str) -> Mapper:
    def mapper(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
        axis = c.attrs.get("axis")
        return name, (("axis", axis), ("keepdims", bool(c.attrs.get("keepdims", False))), ("exclude", False))

    return mapper


def _reshape(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    shape = c.extra[0] if c.extra else ()
    return "reshape", (("newshape", tuple(shape) if isinstance(shape, tuple) else shape),)


def _transpose(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return "transpose", (("axes", c.attrs.get("axes")),)


def _matmul(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    ranks = [len(t.shape.values) if isinstance(t, relax.TensorType) and t.shape is not None else 0
             for t in c.arg_types]
    out = ("out_dtype", _out_dtype(c.attrs.get("out_dtype")))
    if ranks == [2, 2]:
        return "nn.matmul", (("units", None), out, ("transpose_a", False), ("transpose_b", False))
    if len(ranks) == 2 and ranks[0] == ranks[1] == 3:
        return "nn.batch_matmul", (out, ("transpose_a", False), ("transpose_b", False))
    return "relax.matmul", ()


def _astype(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return "cast", (("dtype", c.attrs.get("dtype")),)


def _softmax(name: str) -> Mapper:
    def mapper(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
        return name, (("axis", c.attrs.get("axis", -1)),)

    return mapper


def _expand_dims(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    axis = c.attrs.get("axis")
    if isinstance(axis, tuple) and len(axis) == 1:
        return "expand_dims", (("axis", axis[0]), ("num_newaxis", 1))
    return "relax.expand_dims", ()


def _clip(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    lo, hi = (c.extra + (None, None))[:2]
    return "clip", (("a_min", lo), ("a_max", hi))


def _concat(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return "concatenate", (("axis", c.attrs.get("axis", 0)),)


def _split(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return "split", (
        ("indices_or_sections", c.attrs.get("indices_or_sections")),
        ("axis", c.attrs.get("axis", 0)),
    )


def _strided_slice(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    axes, begin, end, strides = (c.extra + (None, None, None, None))[:4]
    return "strided_slice", (("begin", begin), ("end", end), ("strides", strides), ("axes", axes))


def _broadcast_to(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return "broadcast_to", (("shape", c.extra[0] if c.extra else None),)


def _full(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return "full", (("shape", c.extra[0] if c.extra else None), ("dtype", c.attrs.get("dtype")))


def _layer_norm(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    axes = c.attrs.get("axes")
    keep = tuple((k, c.attrs[k]) for k in ("epsilon", "center", "scale") if k in c.attrs)
    if isinstance(axes, tuple) and len(axes) == 1:
        return "nn.layer_norm", (("axis", axes[0]), *keep)
    return "relax.nn.layer_norm", ()


def _pad(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    width = c.attrs.get("pad_width")
    pairs = tuple(zip(width[0::2], width[1::2])) if isinstance(width, tuple) else width
    return "nn.pad", (("pad_width", pairs), ("pad_mode", c.attrs.get("pad_mode", "constant")))


def _batch_norm(c: OpCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    a = c.attrs
    return "nn.batch_norm", tuple((k, a[k]) for k in ("axis", "epsilon", "center", "scale") if k in a)


_BINARY = [
    "add", "subtract", "multiply", "divide", "floor_divide", "mod", "floor_mod", "power", "maximum", "minimum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
    "bitwise_and", "bitwise_or", "bitwise_xor",
]
_UNARY = [
    "negative", "exp", "log", "sqrt", "rsqrt", "abs", "sigmoid", "tanh", "erf", "logical_not", "cos", "sin",
    "floor", "ceil", "round", "sign", "zeros_like", "ones_like",
]

OP_TABLE: dict[str, Mapper] = {
    **{f"relax.{n}": _same(n) for n in _BINARY + _UNARY},
    "relax.nn.relu": _same("nn.relu"),
    "relax.nn.leakyrelu": _same("nn.leaky_relu", "alpha"),
    "relax.nn.conv2d": _conv("nn.conv2d"),
    "relax.nn.conv3d": _conv("nn.conv3d"),
    "relax.nn.max_pool2d": _pool("nn.max_pool2d", with_count=False),
    "relax.nn.avg_pool2d": _pool("nn.avg_pool2d", with_count=True),
    "relax.nn.adaptive_avg_pool2d": _same("nn.adaptive_avg_pool2d", "output_size", "layout", "out_layout"),
    "relax.nn.batch_norm": _batch_norm,
    "relax.nn.softmax": _softmax("nn.softmax"),
    "relax.nn.log_softmax": _softmax("nn.log_softmax"),
    "relax.nn.dropout": _same("nn.dropout", "rate"),
    "relax.matmul": _matmul,
    "relax.permute_dims": _transpose,
    "relax.reshape": _reshape,
    "relax.astype": _astype,
    "relax.expand_dims": _expand_dims,
    "relax.squeeze": _same("squeeze", "axis"),
    "relax.clip": _clip,
    "relax.concat": _concat,
    "relax.split": _split,
    "relax.where": _same("where"),
    "relax.take": _same("take", "axis", "mode"),
    "relax.gather_elements": _same("gather", "axis"),
    "relax.strided_slice": _strided_slice,
    "relax.broadcast_to": _broadcast_to,
    "relax.full": _full,
    "relax.full_like": _same("full_like", "dtype"),
    "relax.nn.layer_norm": _layer_norm,
    "relax.nn.pad": _pad,
    "relax.cumsum": _same("cumsum", "axis", "dtype", "exclusive"),
    "relax.sum": _reduce("sum"),
    "relax.mean": _reduce("mean"),
    "relax.max": _reduce("max"),
    "relax.min": _reduce("min"),
}


_ATTR_FIELDS: dict[type, tuple[str, ...]] = {}  # attribute node class -> its field names
_NOT_FIELDS = frozenset(("id_", "is_", "same_as", "get_int", "get_int_tuple", "get_str"))


def attrs_of(attrs: Any) -> dict[str, Any]:
    """The fields of a Relax attribute node as plain values."""
    if attrs is None:
        return {}
    names = _ATTR_FIELDS.get(type(attrs))
    if names is None:
        found = []
        for name in dir(attrs):
            if name.startswith("_") or name in _NOT_FIELDS:
                continue
            try:
                value = getattr(attrs, name)
            except Exception:  # noqa: BLE001 - a field TVM cannot read back
                log.debug("attribute %s of %s is not readable", name, type(attrs).__name__)
                continue
            if not callable(value):
                found.append(name)
        names = _ATTR_FIELDS[type(attrs)] = tuple(found)
    return {name: plain(getattr(attrs, name)) for name in names}


# ---------------------------------------------------------------------------
# The translation


@dataclass(frozen=True)
class Binding:
    """One Relax binding as the planner sees it."""

    function: str
    var: Any  # relax.Var
    value: Any  # relax.Expr
    node: ast.Expr | None  # the Relay node of the value (None: not data)
    kind: str  # op | call | hint | copy | alias | tuple | item | const | if | other
    span: Span | None


@dataclass
class Translation:
    """A Relax module as a Relay module, and the way back."""

    relax_module: Any
    module: ast.Module
    vdevices: list[Any]  # the module's `global_infos["vdevice"]`, in order
    table: list[VirtualDevice]  # the same as Relay devices
    bindings: dict[int, Binding] = field(default_factory=dict)  # id(relax var) -> binding
    params: dict[str, list[tuple[Any, ast.Var]]] = field(default_factory=dict)  # function -> params
    functions: dict[str, ast.Function] = field(default_factory=dict)
    folded: dict[int, int] = field(default_factory=dict)  # permute_dims var -> the matmul var using it
    source: SourceText | None = None

    def node_of(self, var: Any) -> ast.Expr | None:
        b = self.bindings.get(_key(var))
        return b.node if b is not None else None


def real_node(node: ast.Expr) -> ast.Expr:
    """`node` without the `on_device` / `device_copy` wrappers around it (the
    pins the translation wrapped, the copies the planner added)."""
    while isinstance(node, ast.Call) and isinstance(node.op, ast.Op) and node.op.name in (
        ast.ON_DEVICE,
        ast.DEVICE_COPY,
    ):
        node = node.args[0]
    return node


@dataclass(frozen=True)
class BindingName:
    """How a report names a translated node: its Relax binding."""

    function: str  # "main"
    var: str  # the binding's variable, "lv41"
    op: str | None  # TVMScript's spelling of its operator, "R.matmul" (None: not an operator call)
    span: Span | None  # the binding's line:column in the TVMScript (None for JSON input)


def binding_names(translation: Translation) -> dict[int, BindingName]:
    """id(translated node, wrappers looked through) -> its binding, for every
    binding that made a node (an alias names the node of the first binding
    that made it). Placement records name Relax nodes with this."""
    out: dict[int, BindingName] = {}
    for b in translation.bindings.values():
        if b.node is None:
            continue
        value = b.value
        op = None
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            name = str(value.op.name)
            op = "R." + name[len("relax."):] if name.startswith("relax.") else name
        out.setdefault(id(real_node(b.node)), BindingName(b.function, str(b.var.name), op, b.span))
    return out


def _key(var: Any) -> int:
    """A stable identity for a Relax variable (Python wrappers are not unique)."""
    return hash(var)  # the address of the underlying node: equal for every wrapper of one var


class _Translator:
    def __init__(self, mod: Any, source: SourceText | None, mode: str) -> None:
        self.mod = mod
        self.source = source
        self.mode = mode
        self.costed = mode == "optimize"
        infos = mod.global_infos
        self.vdevices = list(infos["vdevice"]) if infos is not None and "vdevice" in infos else []
        self.table = [relay_device(v) for v in self.vdevices]
        self.t = Translation(mod, ast.Module(), self.vdevices, self.table, source=source)
        self.env: dict[int, ast.Expr | None] = {}
        self.values: dict[int, Any] = {}  # var -> bound Relax value (for folding, non-data args)
        self._uses: dict[int, int] | None = None  # var -> number of uses, on first need
        self._known: dict[int, VirtualDevice] | None = None  # RealizeVDevice's first round, on first need
        self.relax_funcs: list[tuple[Any, Any]] = []

    def stated(self, ty: Any) -> ast.Type | None:
        """A node's type from its Relax type, for the cost model (optimize mode).
        The TVM mode needs none (its rules do not look at shapes), and reading a
        shape costs one FFI call per dimension: most of a translation's time."""
        return relay_type(ty) if self.costed else None

    # ---- spans and devices

    def span(self, node: Any) -> Span | None:
        s = getattr(node, "span", None)
        if s is None:
            return None
        try:
            line, column = int(s.line), int(s.column)
            end_line, end_column = int(s.end_line), int(s.end_column)
        except Exception:  # noqa: BLE001 - a span without positions
            return None
        if line <= 0:
            return None
        return Span(self.source, line, column, end_line, end_column)

    def device_of_vdevice(self, vdevice: Any) -> VirtualDevice:
        vd = relay_device(vdevice)
        for entry in self.table:
            if entry == vd:
                return entry
        return vd

    def hint_device(self, attrs: Any, span: Span | None) -> VirtualDevice:
        """The vdevice a hint names: the listed one of that type, index and
        scope (as RealizeVDevice looks it up), else an unlisted device the
        planner completes from the request's devices."""
        device_type = int(attrs.device_type)
        index = int(attrs.index)
        scope = str(attrs.memory_scope)
        rscope = None if scope in ("global", "") else scope
        for entry in self.table:
            if (
                entry.device_type == device_type
                and entry.virtual_device_id == index
                and entry.memory_scope == rscope
            ):
                return entry
        log.info("hint at %s names device (%d, %d, %s), not in the vdevice list", span, device_type, index, scope)
        kind = _TARGET_KINDS.get(device_type)
        target = parse_target(kind) if kind is not None else None
        return VirtualDevice(device_type, index, target, rscope)

    # ---- module

    def run(self) -> Translation:
        functions: list[tuple[ast.GlobalVar, ast.Function]] = []
        gvars = sorted(self.mod.get_global_vars(), key=lambda g: str(g.name_hint))
        relax_funcs = [(g, self.mod[g]) for g in gvars if isinstance(self.mod[g], relax.Function)]
        self.globals = {str(g.name_hint): ast.GlobalVar(str(g.name_hint)) for g, _ in relax_funcs}
        self.relax_funcs = relax_funcs
        for gv, func in relax_funcs:
            name = str(gv.name_hint)
            rf = self.function(name, func)
            functions.append((self.globals[name], rf))
            self.t.functions[name] = rf
        self.t.module = ast.Module(functions=tuple(functions), meta={"VirtualDevice": list(self.table)})
        return self.t

    @property
    def uses(self) -> dict[int, int]:
        """How often each variable is used (for folding `nn.dense`)."""
        if self._uses is None:
            uses: dict[int, int] = {}
            for _, func in self.relax_funcs:
                for node in _exprs(func):
                    for arg in _operands(node):
                        if isinstance(arg, relax.Var):
                            uses[_key(arg)] = uses.get(_key(arg), 0) + 1
            self._uses = uses
        return self._uses

    @property
    def known(self) -> dict[int, VirtualDevice]:
        """RealizeVDevice's first round: devices known from types and hint
        results, spread over the variables each binding uses together (only
        hints read it, so modules without hints never compute it)."""
        if self._known is None:
            self._known = self.round_one(self.relax_funcs)
        return self._known

    def round_one(self, funcs: list[tuple[Any, Any]]) -> dict[int, VirtualDevice]:
        neighbours: dict[int, list[int]] = {}
        known: dict[int, VirtualDevice] = {}
        for _, func in funcs:
            for p in func.params:
                vd = tensor_vdevice(p.ty)
                if vd is not None:
                    known[_key(p)] = self.device_of_vdevice(vd)
            for b in _bindings(func):
                var, value = b.var, b.value
                vd = tensor_vdevice(var.ty)
                if vd is not None:
                    known[_key(var)] = self.device_of_vdevice(vd)
                if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                    if value.op.name == HINT:
                        known.setdefault(_key(var), self.hint_device(value.attrs, None))
                        continue
                    if value.op.name == TO_VDEVICE:
                        continue
                for used in _vars_in(value):
                    if is_data(used.ty) and is_data(var.ty):
                        neighbours.setdefault(_key(var), []).append(_key(used))
                        neighbours.setdefault(_key(used), []).append(_key(var))
        stack = list(known)
        while stack:
            k = stack.pop()
            for n in neighbours.get(k, ()):
                if n not in known:
                    known[n] = known[k]
                    stack.append(n)
        return known

    # ---- functions

    def function(self, name: str, func: Any) -> ast.Function:
        params: list[ast.Var] = []
        pairs: list[tuple[Any, ast.Var]] = []
        for p in func.params:
            vd = tensor_vdevice(p.ty)
            rv = ast.Var(
                str(p.name),
                relay_type(p.ty),
                self.device_of_vdevice(vd) if vd is not None else None,
                span=self.span(p),
            )
            self.env[_key(p)] = rv if is_data(p.ty) else None
            params.append(rv)
            pairs.append((p, rv))
        self.t.params[name] = pairs
        self.fname = name
        body = self.seq(func.body)
        if body is None:
            raise RelaxTranslationError(f"@{name} returns no tensor", self.span(func))
        ret_vd = _ret_vdevice(func)
        return ast.Function(
            tuple(params),
            body,
            relay_type(func.ret_ty),
            attrs=_kept_attrs(func),
            virtual_device=self.device_of_vdevice(ret_vd) if ret_vd is not None else None,
            span=self.span(func),
        )

    def seq(self, seq: Any) -> ast.Expr | None:
        for block in seq.blocks:
            for b in block.bindings:
                self.binding(b)
        return self.expr(seq.body)

    def binding(self, b: Any) -> None:
        var, value = b.var, b.value
        span = self.span(value) or self.span(b) or self.span(var)
        if isinstance(b, relax.MatchCast):
            node, kind = self.expr(value), "alias"
        else:
            node, kind = self.value(var, value, span)
        self.values[_key(var)] = value
        if node is not None and is_data(var.ty):
            vd = tensor_vdevice(var.ty)
            if vd is not None and kind != "copy":
                dev = self.device_of_vdevice(vd)
                node = ast.on_device(node, dev, constrain_body=True, constrain_result=True, span=span)
            if node.checked_type is None and kind not in ("alias",):
                node = _with_type(node, self.stated(var.ty))
        else:
            node = None if not is_data(var.ty) else node
        self.env[_key(var)] = node
        self.t.bindings[_key(var)] = Binding(self.fname, var, value, node, kind, span)

    def expr(self, e: Any) -> ast.Expr | None:
        """A Relax leaf expression (variable, constant, tuple of them)."""
        if isinstance(e, relax.Var):
            key = _key(e)
            if key not in self.env:
                raise RelaxTranslationError(f"variable {e.name} is not bound", self.span(e))
            return self.env[key]
        if isinstance(e, tvm.ir.expr.Constant):
            return self.constant(e)
        if isinstance(e, relax.Tuple):
            fields = [self.expr(f) for f in e.fields]
            if any(f is None for f in fields):
                return None
            return ast.Tuple(tuple(f for f in fields if f is not None), span=self.span(e))
        if isinstance(e, relax.TupleGetItem):
            t = self.expr(e.tuple_value)
            if t is None:
                return None
            return ast.TupleGetItem(t, int(e.index), span=self.span(e))
        if isinstance(e, relax.SeqExpr):
            return self.seq(e)
        return None

    def constant(self, c: Any) -> ast.Expr:
        arr = np.ascontiguousarray(c.value.numpy())
        data = ast.NDArray(str(arr.dtype), tuple(int(d) for d in arr.shape), arr.tobytes())
        return ast.Constant(data, span=self.span(c), checked_type=self.stated(c.ty))

    def value(self, var: Any, value: Any, span: Span | None) -> tuple[ast.Expr | None, str]:
        if isinstance(value, relax.Var):
            return self.expr(value), "alias"
        if isinstance(value, tvm.ir.expr.Constant):
            return self.constant(value), "const"
        if isinstance(value, relax.Tuple):
            return self.expr(value), "tuple"
        if isinstance(value, relax.TupleGetItem):
            return self.expr(value), "item"
        if isinstance(value, relax.If):
            cond = self.expr(value.cond)
            then = self.seq(value.true_branch)
            other = self.seq(value.false_branch)
            if cond is None or then is None or other is None:
                return None, "other"
            return ast.If(cond, then, other, span=span), "if"
        if isinstance(value, relax.Call):
            return self.call(var, value, span)
        return None, "other"

    def call(self, var: Any, call: Any, span: Span | None) -> tuple[ast.Expr | None, str]:
        op = call.op
        if isinstance(op, tvm.ir.Op):
            name = str(op.name)
            if name == HINT:
                arg = self.expr(call.args[0])
                if arg is None:
                    return None, "other"
                dev = self.hint_device(call.attrs, span)
                known = self.known.get(_key(call.args[0])) if isinstance(call.args[0], relax.Var) else None
                body = known is None or known == dev
                return ast.on_device(arg, dev, constrain_body=body, constrain_result=True, span=span), "hint"
            if name == TO_VDEVICE:
                arg = self.expr(call.args[0])
                if arg is None:
                    return None, "other"
                dst = self.device_of_vdevice(call.attrs.dst_vdevice)
                # The result on `dst`, the input wherever it is: the planner
                # copies across the boundary when they differ.
                return ast.on_device(arg, dst, constrain_body=False, constrain_result=True, span=span), "copy"
            if name in ("relax.call_tir", "relax.call_dps_packed", "relax.call_tir_with_grad",
                        "relax.call_tir_inplace"):
                inputs = call.args[1] if len(call.args) > 1 else relax.Tuple([])
                fields = list(inputs.fields) if isinstance(inputs, relax.Tuple) else [inputs]
                return self.opaque(name, fields, span, var), "op"
            return self.operator(var, call, name, span), "op"
        if isinstance(op, relax.GlobalVar):
            gname = str(op.name_hint)
            if gname in self.globals:
                args = [self.expr(a) for a in call.args]
                if any(a is None for a in args):
                    raise RelaxTranslationError(f"call of @{gname} with a non-tensor argument", span)
                return ast.Call(self.globals[gname], tuple(a for a in args if a is not None), span=span), "call"
            # a call of a PrimFunc or an external function: stays with its inputs
            return self.opaque(f"relax.call:{gname}", list(call.args), span, var), "op"
        if isinstance(op, relax.ExternFunc):
            return self.opaque(f"relax.call_packed:{op.global_symbol}", list(call.args), span, var), "op"
        return self.opaque("relax.call", list(call.args), span, var), "op"

    def opaque(self, name: str, args: list[Any], span: Span | None, var: Any) -> ast.Expr | None:
        data = [self.expr(a) for a in args if is_data(getattr(a, "ty", None))]
        nodes = tuple(a for a in data if a is not None)
        return ast.Call(ast.op(name), nodes, span=span, checked_type=self.stated(var.ty))

    def operator(self, var: Any, call: Any, name: str, span: Span | None) -> ast.Expr | None:
        if name not in relax_operators():
            raise RelaxTranslationError(
                f"operator `{name}` not found (TVM {tvm.__version__} registers no Relax operator of that name)",
                span,
            )
        tensor_args = [a for a in call.args if is_data(getattr(a, "ty", None))]
        extra = tuple(plain(self._bound(a)) for a in call.args if not is_data(getattr(a, "ty", None)))
        arg_types = tuple(a.ty for a in tensor_args)
        mapper = OP_TABLE.get(name)
        fold = self._fold_dense(call) if name == "relax.matmul" else None
        if fold is not None:
            x, w, permute = fold
            nodes = (self.expr(x), self.expr(w))
            if nodes[0] is None or nodes[1] is None:
                return None
            self.t.folded[_key(permute)] = _key(var)
            attrs = ast.Attrs((("units", None), ("out_dtype", _out_dtype(attrs_of(call.attrs).get("out_dtype")))),
                              "relay.attrs.DenseAttrs")
            return ast.Call(ast.op("nn.dense"), (nodes[0], nodes[1]), attrs, span=span,
                            checked_type=self.stated(var.ty))
        fields: tuple[tuple[str, Any], ...] = ()
        if mapper is None:
            relay_name = name
        else:
            relay_name, fields = mapper(OpCall(call, attrs_of(call.attrs), extra, arg_types, self.costed))
        args = [self.expr(a) for a in tensor_args]
        if any(a is None for a in args):
            return None
        return ast.Call(
            ast.op(relay_name),
            tuple(a for a in args if a is not None),
            ast.Attrs(fields) if fields else None,
            span=span,
            checked_type=self.stated(var.ty),
        )

    def _bound(self, e: Any) -> Any:
        if isinstance(e, relax.Var) and _key(e) in self.values:
            return self.values[_key(e)]
        return e

    def _fold_dense(self, call: Any) -> tuple[Any, Any, Any] | None:
        """`matmul(x, permute_dims(w))` of a 2-D `w` and an `x` of rank 2 or
        more (a linear layer of a torch export: `(..., K) x (K, N)`), the
        transpose used only here and not pinned: Relay's `nn.dense(x, w)`,
        one kernel; the transpose is then neither a kernel nor a second copy
        of the weight."""
        if len(call.args) != 2:
            return None
        x, t = call.args
        if not isinstance(t, relax.Var) or self.uses.get(_key(t), 0) != 1:
            return None
        value = self.values.get(_key(t))
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
                and value.op.name == "relax.permute_dims"):
            return None
        if tensor_vdevice(t.ty) is not None:
            return None
        w = value.args[0]
        axes = attrs_of(value.attrs).get("axes")
        rank = _rank(x.ty)
        if _rank(w.ty) != 2 or rank is None or rank < 2 or axes not in (None, (1, 0)):
            return None
        return x, w, t


@functools.cache
def relax_operators() -> frozenset[str]:
    """The operator names the installed TVM registers for Relax (`relax.*`):
    what a Relax module may call (Relay 0.19's list is for Relay)."""
    return frozenset(str(n) for n in tvm.ir.Op.list_op_names() if str(n).startswith("relax."))


def _rank(ty: Any) -> int | None:
    if isinstance(ty, relax.TensorType):
        return int(ty.ndim) if int(ty.ndim) >= 0 else None
    return None


def _with_type(node: ast.Expr, ty: ast.Type | None) -> ast.Expr:
    """`node` stating the type TVM gave its binding (the cost model's fallback)."""
    if ty is None or isinstance(node, (ast.Var, ast.GlobalVar, ast.Op)):
        return node
    return dataclasses.replace(node, checked_type=ty)


def _kept_attrs(func: Any) -> tuple[tuple[str, Any], ...]:
    """The function attributes the planner's views read: `num_input`, how
    many leading parameters are data inputs (the rest are weights; the
    device-map view groups only weights)."""
    attrs = func.attrs
    if attrs is not None and "num_input" in attrs:
        return (("num_input", int(attrs["num_input"])),)
    return ()


def _ret_vdevice(func: Any) -> Any:
    """The vdevice a function's return type names (a tuple's fields must
    agree: a Relay tuple lives on one device)."""
    found: list[Any] = []
    stack = [func.ret_ty]
    while stack:
        ty = stack.pop()
        if isinstance(ty, relax.TupleType):
            stack.extend(ty.fields)
        elif tensor_vdevice(ty) is not None:
            found.append(tensor_vdevice(ty))
    if not found:
        return None
    first = relay_device(found[0])
    if any(relay_device(v) != first for v in found[1:]):
        raise RelaxTranslationError(
            "a tuple result with fields on different vdevices is not supported", None
        )
    return found[0]


def _bindings(func: Any) -> Iterator[Any]:
    """Every binding of a function, branches of `If` included (iterative)."""
    stack = [func.body]
    while stack:
        seq = stack.pop()
        for block in seq.blocks:
            for b in block.bindings:
                yield b
                if isinstance(b.value, relax.If):
                    stack.append(b.value.false_branch)
                    stack.append(b.value.true_branch)


def _exprs(func: Any) -> Iterator[Any]:
    for b in _bindings(func):
        yield b.value
    stack = [func.body]
    while stack:
        seq = stack.pop()
        yield seq.body
        for block in seq.blocks:
            for b in block.bindings:
                if isinstance(b.value, relax.If):
                    stack.append(b.value.true_branch)
                    stack.append(b.value.false_branch)


def _operands(e: Any) -> list[Any]:
    if isinstance(e, relax.Call):
        out = list(e.args)
        for a in e.args:
            if isinstance(a, relax.Tuple):
                out.extend(a.fields)
        return out
    if isinstance(e, relax.Tuple):
        return list(e.fields)
    if isinstance(e, relax.TupleGetItem):
        return [e.tuple_value]
    if isinstance(e, relax.If):
        return [e.cond]
    if isinstance(e, relax.Var):
        return [e]
    return []


def _vars_in(e: Any) -> list[Any]:
    return [a for a in _operands(e) if isinstance(a, relax.Var)]


def translate(mod: Any, source: SourceText | None = None, mode: str = "tvm") -> Translation:
    """Translate a Relax IRModule for the planner (see the module docstring)."""
    return _Translator(mod, source, mode).run()
