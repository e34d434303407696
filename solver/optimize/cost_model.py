"""The optimize mode's cost model (docs/optimize.md): integer nanoseconds per
kernel and per copy, the cost table and its keys, FLOPs per operator.

A kernel on a device costs `max(FLOPs / peak, bytes moved / bandwidth) +
launch overhead`; a copy costs `bytes / link bandwidth + link latency`. A
measured cost table (`devplan profile`) replaces the roofline wherever it has
an entry for the kernel's `cost_key` and device. FLOPs come from one table,
`FLOP_RULES`, from operator name to a formula over the call's types.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relay.ast import Attrs, IntImm, TensorType, TupleType, Type
from relay.device import VirtualDevice
from relay.infer.types import type_text as relay_type_text
from relay.op_attrs import non_default_fields

from ..errors import PlanConfigError
from .sizes import dim_value, elements

PROFILE_FIELDS = ("peak_gflops", "mem_gbps", "launch_us", "memory_bytes")
LINK_FIELDS = ("gbps", "latency_us")


@dataclass(frozen=True)
class DeviceProfile:
    """Roofline parameters of one device; `memory_bytes` None means no budget."""

    peak_gflops: float
    mem_gbps: float
    launch_us: float
    memory_bytes: int | None = None


@dataclass(frozen=True)
class LinkProfile:
    """A copy between two devices: bandwidth and fixed latency."""

    gbps: float
    latency_us: float


# Built-in profiles by target kind. The CPU numbers are those of TVM's default
# llvm schedules on a server core pair rather than the hardware's peak; the GPU
# numbers are a data-centre part's (H100/H200 class) sustained rates. Both are
# meant to be overridden per request or replaced by a measured cost table.
BUILTIN_PROFILES: dict[str, DeviceProfile] = {
    "llvm": DeviceProfile(peak_gflops=50.0, mem_gbps=20.0, launch_us=2.0),
    "cuda": DeviceProfile(peak_gflops=20_000.0, mem_gbps=2_000.0, launch_us=5.0),
}
# A device of any other kind is costed as the fallback.
FALLBACK_PROFILE = BUILTIN_PROFILES["llvm"]
# One default for every pair: PCIe-like between kinds, memory-speed within one.
DEFAULT_LINK_ACROSS = LinkProfile(gbps=12.0, latency_us=10.0)
DEFAULT_LINK_WITHIN = LinkProfile(gbps=20.0, latency_us=1.0)


def _number(value: Any, what: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise PlanConfigError(f"{what} must be a non-negative number, got {value!r}")
    return float(value)


def device_profile(name: str, vd: VirtualDevice, overrides: Mapping[str, Mapping[str, Any]]) -> DeviceProfile:
    """The built-in profile of `vd`'s target kind with the request's overrides for `name`."""
    kind = vd.target.kind if vd.target is not None else ("cuda" if vd.device_type == 2 else "llvm")
    base = BUILTIN_PROFILES.get(kind, FALLBACK_PROFILE)
    given = overrides.get(name) or {}
    unknown = set(given) - set(PROFILE_FIELDS)
    if unknown:
        raise PlanConfigError(f"device_profiles.{name}: unknown field(s) {sorted(unknown)}")
    values: dict[str, Any] = {
        "peak_gflops": base.peak_gflops,
        "mem_gbps": base.mem_gbps,
        "launch_us": base.launch_us,
        "memory_bytes": base.memory_bytes,
    }
    for key, value in given.items():
        values[key] = _number(value, f"device_profiles.{name}.{key}")
    if values["peak_gflops"] <= 0 or values["mem_gbps"] <= 0:
        raise PlanConfigError(f"device_profiles.{name}: peak_gflops and mem_gbps must be positive")
    if values["memory_bytes"] is not None:
        values["memory_bytes"] = int(values["memory_bytes"])
    return DeviceProfile(**values)


def link_profile(
    src: str, dst: str, src_vd: VirtualDevice, dst_vd: VirtualDevice, links: Mapping[str, Mapping[str, Any]]
) -> LinkProfile:
    """The link `SRC->DST` from the request, else the default for the pair."""
    same_kind = src_vd.device_type == dst_vd.device_type
    base = DEFAULT_LINK_WITHIN if same_kind else DEFAULT_LINK_ACROSS
    given = links.get(f"{src}->{dst}") or {}
    unknown = set(given) - set(LINK_FIELDS)
    if unknown:
        raise PlanConfigError(f"links.{src}->{dst}: unknown field(s) {sorted(unknown)}")
    gbps = _number(given.get("gbps", base.gbps), f"links.{src}->{dst}.gbps")
    if gbps <= 0:
        raise PlanConfigError(f"links.{src}->{dst}.gbps must be positive")
    return LinkProfile(
        gbps, _number(given.get("latency_us", base.latency_us), f"links.{src}->{dst}.latency_us")
    )


def check_link_names(links: Mapping[str, Any], names: Iterable[str]) -> None:
    """Every link key names two known devices as `SRC->DST`."""
    known = set(names)
    for key in links:
        src, sep, dst = str(key).partition("->")
        if not sep or src not in known or dst not in known:
            raise PlanConfigError(f"links: {key!r} is not 'SRC->DST' over the devices {sorted(known)}")


def kernel_ns(flops: float, bytes_moved: float, profile: DeviceProfile) -> int:
    """The roofline time of one kernel in integer nanoseconds (at least 1)."""
    compute = flops / profile.peak_gflops  # GFLOP/s = FLOP/ns
    memory = bytes_moved / profile.mem_gbps  # GB/s = B/ns
    return max(1, math.ceil(max(compute, memory) + profile.launch_us * 1000.0))


def copy_ns(nbytes: int, link: LinkProfile) -> int:
    """The time of one copy in integer nanoseconds (at least 1)."""
    return max(1, math.ceil(nbytes / link.gbps + link.latency_us * 1000.0))


def ns_to_ms(ns: float) -> float:
    """Nanoseconds as milliseconds, rounded for reports."""
    return round(ns / 1e6, 6)


# ---------------------------------------------------------------------------
# Cost keys and the cost table


def type_text(ty: Type | None) -> str:
    """A tensor or tuple type as the text format prints it (relay's own
    writer); `?` for anything else (unknown, functions, ADTs)."""
    if isinstance(ty, (TensorType, TupleType)):
        return relay_type_text(ty)
    return "?"


def _attr_text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_attr_text(v) for v in value) + "]"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, IntImm):
        return str(value.value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value + '"'
    return str(value)


def cost_key(op_name: str, arg_types: Sequence[Type | None], attrs: Attrs | None) -> str:
    """The stable key of one kernel: operator, printed argument types and
    non-default attributes, e.g. `nn.relu(Tensor[(1, 64), float32])`. The
    optimizer and `devplan profile` both use it, so a table made by one is read
    by the other."""
    args = ", ".join(type_text(t) for t in arg_types)
    extra = non_default_fields(op_name, attrs)
    tail = ""
    if extra:
        tail = " {" + ", ".join(f"{k}={_attr_text(v)}" for k, v in extra) + "}"
    return f"{op_name}({args}){tail}"


@dataclass(frozen=True)
class CostTable:
    """Measured kernel times: (cost key, device name) -> nanoseconds."""

    entries: Mapping[tuple[str, str], int] = field(default_factory=dict)

    @staticmethod
    def from_document(doc: Mapping[str, Any] | None) -> CostTable:
        """Read `{"version": 1, "entries": [{"key", "device", "ns"}, ...]}`."""
        if doc is None:
            return CostTable()
        if not isinstance(doc, Mapping) or doc.get("version") != 1:
            raise PlanConfigError("cost_table: expected {'version': 1, 'entries': [...]}")
        raw = doc.get("entries")
        if not isinstance(raw, list):
            raise PlanConfigError("cost_table.entries must be a list")
        out: dict[tuple[str, str], int] = {}
        for i, entry in enumerate(raw):
            if not isinstance(entry, Mapping):
                raise PlanConfigError(f"cost_table.entries[{i}] must be an object")
            key, device, ns = entry.get("key"), entry.get("device"), entry.get("ns")
            if not isinstance(key, str) or not isinstance(device, str):
                raise PlanConfigError(f"cost_table.entries[{i}]: key and device must be strings")
            out[(key, device)] = max(1, math.ceil(_number(ns, f"cost_table.entries[{i}].ns")))
        return CostTable(out)

    def lookup(self, key: str, device: str) -> int | None:
        return self.entries.get((key, device))


# ---------------------------------------------------------------------------
# FLOPs per operator


@dataclass(frozen=True)
class FlopInputs:
    """What a FLOPs formula reads: argument and result types, complete
    attributes and the extent assumed for a symbolic dimension."""

    args: Sequence[Type | None]
    out: Type | None
    attrs: Mapping[str, Any]
    assume_dim: int

    @property
    def first(self) -> Type | None:
        return self.args[0] if self.args else None

    def n(self, ty: Type | None) -> int:
        """Elements of a tensor (summed over a tuple's fields); 0 when unknown."""
        if isinstance(ty, TensorType):
            return elements(ty, self.assume_dim)[0]
        if isinstance(ty, TupleType):
            return sum(self.n(f) for f in ty.fields)
        return 0

    def extent(self, ty: Type | None, layout_attr: str, letter: str) -> int | None:
        """The extent of layout axis `letter` of `ty` (e.g. `O` of `kernel_layout`)."""
        layout = self.attrs.get(layout_attr)
        if not isinstance(ty, TensorType) or not isinstance(layout, str) or letter not in layout:
            return None
        index = layout.index(letter)
        if index >= len(ty.shape):
            return None
        return dim_value(ty.shape[index], self.assume_dim)[0]


FlopRule = Callable[[FlopInputs], int | None]


def _conv(f: FlopInputs) -> int | None:
    weight = f.args[1] if len(f.args) > 1 else None
    if not isinstance(weight, TensorType) or not isinstance(f.out, TensorType):
        return None
    o = f.extent(weight, "kernel_layout", "O") or 1
    return 2 * f.n(f.out) * (f.n(weight) // max(o, 1))


def _conv_transpose(f: FlopInputs) -> int | None:
    weight = f.args[1] if len(f.args) > 1 else None
    if not isinstance(weight, TensorType) or not isinstance(f.first, TensorType):
        return None
    c = f.extent(f.first, "data_layout", "C") or 1
    return 2 * f.n(f.first) * (f.n(weight) // max(c, 1))


def _contraction(f: FlopInputs, axis: int) -> int | None:
    first = f.first
    if not isinstance(first, TensorType) or not first.shape or not isinstance(f.out, TensorType):
        return None
    if len(first.shape) < -axis:
        return None
    return 2 * f.n(f.out) * dim_value(first.shape[axis], f.assume_dim)[0]


def _dense(f: FlopInputs) -> int | None:
    return _contraction(f, -1)


def _batch_matmul(f: FlopInputs) -> int | None:
    return _contraction(f, -2 if bool(f.attrs.get("transpose_a", False)) else -1)


def _pool(f: FlopInputs) -> int | None:
    pool = f.attrs.get("pool_size") or ()
    window = 1
    for p in pool if isinstance(pool, (tuple, list)) else (pool,):
        window *= int(p.value if isinstance(p, IntImm) else p)
    return f.n(f.out) * window


def _per_input(scale: int) -> FlopRule:
    def rule(f: FlopInputs) -> int | None:
        return scale * f.n(f.first)

    return rule


def _per_output(scale: int) -> FlopRule:
    def rule(f: FlopInputs) -> int | None:
        return scale * f.n(f.out)

    return rule


def _movement(f: FlopInputs) -> int | None:
    return 0


_REDUCTIONS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "variance")
# Data movement only: no arithmetic, bytes in and out.
_MOVEMENT = (
    "reshape",
    "reshape_like",
    "expand_dims",
    "squeeze",
    "nn.batch_flatten",
    "concatenate",
    "split",
    "transpose",
    "layout_transform",
    "strided_slice",
    "take",
    "copy",
    "cast",
    "zeros",
    "ones",
    "zeros_like",
    "ones_like",
    "full",
    "full_like",
    "shape_of",
    "nn.dropout",
)
_TRANSCENDENTAL = ("exp", "sigmoid", "tanh", "log", "sqrt", "rsqrt", "erf", "nn.gelu")
_POOLS = tuple(f"nn.{kind}_pool{n}d" for kind in ("max", "avg") for n in (1, 2, 3))

# Operator name -> FLOPs formula. An operator not listed (and not matched by
# `FLOP_PREFIX_RULES`) is elementwise: one FLOP per output element.
FLOP_RULES: dict[str, FlopRule] = {
    **{name: _conv for name in ("nn.conv1d", "nn.conv2d", "nn.conv3d")},
    **{
        name: _conv_transpose
        for name in ("nn.conv1d_transpose", "nn.conv2d_transpose", "nn.conv3d_transpose")
    },
    "nn.dense": _dense,
    "nn.matmul": _dense,
    "nn.batch_matmul": _batch_matmul,
    **{name: _pool for name in _POOLS},
    **{name: _per_input(1) for name in _REDUCTIONS},
    "nn.batch_norm": _per_input(4),
    "nn.softmax": _per_input(5),
    "nn.log_softmax": _per_input(5),
    **{name: _movement for name in _MOVEMENT},
    **{name: _per_output(4) for name in _TRANSCENDENTAL},
}
# Families by name prefix (global and adaptive pools read their whole input once).
FLOP_PREFIX_RULES: tuple[tuple[str, FlopRule], ...] = (
    ("nn.global_", _per_input(1)),
    ("nn.adaptive_", _per_input(1)),
)
_ELEMENTWISE = _per_output(1)


def flop_rule(name: str) -> FlopRule:
    """The FLOPs formula of operator `name` (elementwise when none is listed)."""
    rule = FLOP_RULES.get(name)
    if rule is not None:
        return rule
    for prefix, by_prefix in FLOP_PREFIX_RULES:
        if name.startswith(prefix):
            return by_prefix
    return _ELEMENTWISE


def op_flops(
    name: str, args: Sequence[Type | None], out: Type | None, attrs: Mapping[str, Any], assume_dim: int
) -> int | None:
    """FLOPs of one call from its argument and result types and complete
    attributes; None when the formula's inputs are unknown."""
    return flop_rule(name)(FlopInputs(args, out, attrs, assume_dim))
