"""The optimize mode's cost model (docs/optimize.md): integer nanoseconds per
kernel and per copy, memory sizes for budgets, the cost table and its keys.

A kernel on a device costs `max(FLOPs / peak, bytes moved / bandwidth) +
launch overhead`; a copy costs `bytes / link bandwidth + link latency`. A
measured cost table (`devplan profile`) replaces the roofline wherever it has
an entry for the kernel's `cost_key` and device. Every guess (an unknown type,
a symbolic dimension) is recorded as an `Estimate` with its location.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relay.ast import AnyDim, Attrs, IntImm, TensorType, TupleType, Type
from relay.device import VirtualDevice
from relay.op_attrs import non_default_fields
from relay.span import Span

from .errors import PlanConfigError

PROFILE_FIELDS = ("peak_gflops", "mem_gbps", "launch_us", "memory_bytes")
LINK_FIELDS = ("gbps", "latency_us")

_DTYPE_BITS = {"bool": 8, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}


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


# ---------------------------------------------------------------------------
# Sizes


@dataclass(frozen=True)
class Estimate:
    """A guess the cost model had to make, with where it was made."""

    kind: str  # "unknown type" | "symbolic dimension" | "no flops formula"
    message: str
    span: Span | None

    def to_json(self) -> dict[str, Any]:
        line, column = (None, None) if self.span is None else (self.span.line, self.span.column)
        return {"kind": self.kind, "message": self.message, "line": line, "column": column}


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
    n = 1
    guessed = False
    for d in ty.shape:
        v, g = dim_value(d, assume_dim)
        n *= max(v, 0)
        guessed = guessed or g
    return n, guessed


def dtype_bytes(dtype: str) -> int:
    bits = _DTYPE_BITS.get(dtype)
    if bits is None:
        digits = "".join(ch for ch in dtype if ch.isdigit())
        bits = int(digits.split("x")[0]) if digits else 32
    return max(1, (bits + 7) // 8)


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


# ---------------------------------------------------------------------------
# Cost keys and the cost table


def type_text(ty: Type | None) -> str:
    """A type as the text format prints it (tensors and tuples; `?` otherwise)."""
    if isinstance(ty, TensorType):
        if not ty.shape:
            return ty.dtype
        dims = []
        for d in ty.shape:
            if isinstance(d, bool):
                dims.append(str(int(d)))
            elif isinstance(d, int):
                dims.append(str(d))
            elif isinstance(d, IntImm):
                dims.append(f"{d.value}{'i64' if d.dtype == 'int64' else ''}")
            elif isinstance(d, AnyDim):
                dims.append("?")
            else:
                dims.append(str(d))
        return f"Tensor[({', '.join(dims)}), {ty.dtype}]"
    if isinstance(ty, TupleType):
        inner = ", ".join(type_text(f) for f in ty.fields)
        return f"({inner},)" if len(ty.fields) == 1 else f"({inner})"
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

_TRANSCENDENTAL = frozenset({"exp", "sigmoid", "tanh", "log", "sqrt", "rsqrt", "erf", "nn.gelu"})
# Data movement only: no arithmetic, bytes in and out.
_MOVEMENT = frozenset(
    {
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
    }
)


def _n(ty: Type | None, assume_dim: int) -> int:
    if isinstance(ty, TensorType):
        return elements(ty, assume_dim)[0]
    if isinstance(ty, TupleType):
        return sum(_n(f, assume_dim) for f in ty.fields)
    return 0


def _layout_extent(ty: Type | None, layout: Any, letter: str, assume_dim: int) -> int | None:
    if not isinstance(ty, TensorType) or not isinstance(layout, str) or letter not in layout:
        return None
    index = layout.index(letter)
    if index >= len(ty.shape):
        return None
    return dim_value(ty.shape[index], assume_dim)[0]


def op_flops(
    name: str, args: Sequence[Type | None], out: Type | None, attrs: Mapping[str, Any], assume_dim: int
) -> int | None:
    """FLOPs of one call from its argument and result types and complete
    attributes; None when the formula's inputs are unknown."""
    out_n = _n(out, assume_dim)
    first = args[0] if args else None
    if name in ("nn.conv2d", "nn.conv3d", "nn.conv1d"):
        weight = args[1] if len(args) > 1 else None
        if not isinstance(weight, TensorType) or not isinstance(out, TensorType):
            return None
        o = _layout_extent(weight, attrs.get("kernel_layout"), "O", assume_dim) or 1
        return 2 * out_n * (_n(weight, assume_dim) // max(o, 1))
    if name in ("nn.conv2d_transpose", "nn.conv3d_transpose", "nn.conv1d_transpose"):
        weight = args[1] if len(args) > 1 else None
        if not isinstance(weight, TensorType) or not isinstance(first, TensorType):
            return None
        c = _layout_extent(first, attrs.get("data_layout"), "C", assume_dim) or 1
        return 2 * _n(first, assume_dim) * (_n(weight, assume_dim) // max(c, 1))
    if name in ("nn.dense", "nn.matmul"):
        if not isinstance(first, TensorType) or not first.shape or not isinstance(out, TensorType):
            return None
        k = dim_value(first.shape[-1], assume_dim)[0]
        return 2 * out_n * k
    if name == "nn.batch_matmul":
        if not isinstance(first, TensorType) or not first.shape or not isinstance(out, TensorType):
            return None
        transpose_a = bool(attrs.get("transpose_a", False))
        k = dim_value(first.shape[-2] if transpose_a else first.shape[-1], assume_dim)[0]
        return 2 * out_n * k
    if name in (
        "nn.max_pool2d",
        "nn.avg_pool2d",
        "nn.max_pool3d",
        "nn.avg_pool3d",
        "nn.max_pool1d",
        "nn.avg_pool1d",
    ):
        pool = attrs.get("pool_size") or ()
        window = 1
        for p in pool if isinstance(pool, (tuple, list)) else (pool,):
            window *= int(p.value if isinstance(p, IntImm) else p)
        return out_n * window
    if name.startswith(("nn.global_", "nn.adaptive_")) or name in (
        "sum",
        "mean",
        "max",
        "min",
        "prod",
        "argmax",
        "argmin",
        "variance",
    ):
        return _n(first, assume_dim)
    if name == "nn.batch_norm":
        return 4 * _n(first, assume_dim)
    if name in ("nn.softmax", "nn.log_softmax"):
        return 5 * _n(first, assume_dim)
    if name in _MOVEMENT:
        return 0
    if name in _TRANSCENDENTAL:
        return 4 * out_n
    return out_n  # elementwise by output size


# ---------------------------------------------------------------------------
# The report


@dataclass(frozen=True)
class DeviceCost:
    """One device's share of a plan."""

    operators: int
    predicted_ms: float
    weight_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "operators": self.operators,
            "predicted_ms": self.predicted_ms,
            "weight_bytes": self.weight_bytes,
        }


@dataclass(frozen=True)
class CostReport:
    """The cost of an optimize-mode plan (the response's `cost` object)."""

    predicted_ms: float
    tvm_mode_predicted_ms: float | None
    tvm_mode_reason: str | None
    copies: int
    bytes_copied: int
    per_device: Mapping[str, DeviceCost]
    optimal: bool
    bound_ms: float
    solver_ms: float
    estimates: tuple[Estimate, ...] = ()
    # how the optimum was found and proven: "z3", "min-cut", "min-cut + z3", "single choice"
    method: str = "z3"
    classes: int = 0
    z3_variables: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "predicted_ms": self.predicted_ms,
            "tvm_mode_predicted_ms": self.tvm_mode_predicted_ms,
            "tvm_mode_reason": self.tvm_mode_reason,
            "copies": self.copies,
            "bytes_copied": self.bytes_copied,
            "per_device": {name: dc.to_json() for name, dc in self.per_device.items()},
            "optimal": self.optimal,
            "bound_ms": self.bound_ms,
            "solver_ms": self.solver_ms,
            "estimates": [e.to_json() for e in self.estimates],
        }


def ns_to_ms(ns: float) -> float:
    return round(ns / 1e6, 6)
