"""The optimize mode's cost model (docs/optimize.md): integer nanoseconds per
kernel and per copy, the cost table and its keys, FLOPs per operator.

A kernel on a device costs `max(FLOPs / compute rate, bytes moved / memory
rate) + launch overhead`, where the rates are the profile's roofline scaled by
the efficiency of the operator's class (`OP_CLASSES`: TVM's default schedules
run a convolution far below the peak, an elementwise operator near the
bandwidth); the built-in efficiencies are fitted to measured builds
(docs/calibration.md, benchmarks/calibrate.py). A fused `Primitive` function is
one kernel: its body's FLOPs, its own inputs and output, one launch
(`KernelWork`). A copy costs `bytes / link bandwidth + link latency`. A
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
from relay.op_attrs import complete_attrs, non_default_fields
from relay.span import RelayError

from ..errors import PlanConfigError
from .sizes import dim_value, elements, type_bytes

PROFILE_FIELDS = ("peak_gflops", "mem_gbps", "launch_us", "memory_bytes", "disk_read_gbps")
# How fast a host reads weights kept on disk (accelerate's `"disk"` offload: safetensors
# files read on every forward pass), GB/s: a datacenter NVMe drive's sustained read.
DEFAULT_DISK_READ_GBPS = 2.0
LINK_FIELDS = ("gbps", "latency_us")


OP_CLASSES = ("conv", "depthwise conv", "dense", "elementwise", "pooling", "reduction", "data movement")
"""The operator classes a profile rates separately (`op_class`)."""


@dataclass(frozen=True)
class ClassRate:
    """How fast one operator class runs on a device, as fractions of the
    profile's roofline: `compute` of `peak_gflops`, `memory` of `mem_gbps`.
    `saturation` is the output size (elements) a kernel of the class needs to
    reach that rate; a smaller one runs proportionally slower (a GPU with too
    few threads busy). 0: every size runs at the full rate."""

    compute: float = 1.0
    memory: float = 1.0
    saturation: int = 0
    # A matmul whose streamed operand (its second argument, which TVM's
    # default llvm schedule re-reads once per output row, along its strides)
    # is larger than `spill_bytes` no longer runs from cache: it computes at
    # `spill_compute` of the peak instead. 0: off.
    spill_bytes: int = 0
    spill_compute: float = 0.0


FULL_RATE = ClassRate()
"""The plain roofline: a class the profile does not rate."""


@dataclass(frozen=True)
class DeviceProfile:
    """Roofline parameters of one device, per-class efficiencies (`classes`;
    a class not listed runs at the full roofline) and `memory_bytes` (None
    means no budget)."""

    peak_gflops: float
    mem_gbps: float
    launch_us: float
    memory_bytes: int | None = None
    classes: tuple[tuple[str, ClassRate], ...] = ()
    # Reads of weights stored on disk by this device (a host), GB/s.
    disk_read_gbps: float = DEFAULT_DISK_READ_GBPS

    def rate(self, op_class: str) -> ClassRate:
        """The efficiencies of `op_class` on this device."""
        for name, rate in self.classes:
            if name == op_class:
                return rate
        return FULL_RATE


@dataclass(frozen=True)
class LinkProfile:
    """A copy between two devices: bandwidth and fixed latency."""

    gbps: float
    latency_us: float


# Built-in profiles by target kind, fitted by benchmarks/calibrate.py
# (docs/calibration.md has the method and the measurements). llvm: TVM 0.27's
# default llvm schedules measured kernel by kernel on the 2-core AMD EPYC
# development box (2026-12-01); the launch is one Relax VM call of a trivial
# kernel. cuda: fitted to the H200 runs of the bridge's all-GPU builds (dlight
# default schedules): a convolution at 1.4% of the 20 TFLOP/s base
# once it has 55k outputs (proportionally slower below), a depthwise one no
# slower than on the CPU (the fit's floor); memory-bound classes at the 2 TB/s
# base. A compute or memory
# efficiency of 4.0 is the fit's ceiling: that side never limits the class.
BUILTIN_PROFILES: dict[str, DeviceProfile] = {
    "llvm": DeviceProfile(
        peak_gflops=50.0,
        mem_gbps=50.0,
        launch_us=1.3,
        classes=(
            ("conv", ClassRate(0.125, 4.0)),
            ("data movement", ClassRate(4.0, 2.0)),
            # spilled matmuls: fitted to the Relax record (benchmarks/calibration_relax.json)
            ("dense", ClassRate(0.0682, 0.0573, 0, 4 << 20, 0.00552)),
            ("depthwise conv", ClassRate(0.42, 0.25)),
            ("elementwise", ClassRate(0.273, 2.38)),
            ("pooling", ClassRate(0.21, 4.0)),
            ("reduction", ClassRate(0.0442, 4.0)),
        ),
    ),
    "cuda": DeviceProfile(
        peak_gflops=20_000.0,
        mem_gbps=2_000.0,
        launch_us=5.0,
        classes=(
            ("conv", ClassRate(0.0143, 1.0, 55_000)),
            ("data movement", ClassRate(1.0, 1.0)),
            ("dense", ClassRate(0.0143, 1.0)),
            ("depthwise conv", ClassRate(0.00105, 1.0)),
            ("elementwise", ClassRate(1.0, 1.0)),
            ("pooling", ClassRate(1.0, 1.0)),
            ("reduction", ClassRate(1.0, 1.0)),
        ),
    ),
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
        "disk_read_gbps": base.disk_read_gbps,
    }
    for key, value in given.items():
        values[key] = _number(value, f"device_profiles.{name}.{key}")
    if values["peak_gflops"] <= 0 or values["mem_gbps"] <= 0 or values["disk_read_gbps"] <= 0:
        raise PlanConfigError(f"device_profiles.{name}: peak_gflops, mem_gbps and disk_read_gbps must be positive")
    if values["memory_bytes"] is not None:
        values["memory_bytes"] = int(values["memory_bytes"])
    # The class efficiencies are fractions of the built-in rates: a request
    # that states its own rates states what its kernels get (a plain
    # roofline); a launch cost or a budget alone keeps them.
    rated = "peak_gflops" not in given and "mem_gbps" not in given
    return DeviceProfile(**values, classes=base.classes if rated else ())


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
    """The plain roofline time of one kernel in integer nanoseconds (at least
    1), ignoring class efficiencies (`work_ns` is the cost model's)."""
    compute = flops / profile.peak_gflops  # GFLOP/s = FLOP/ns
    memory = bytes_moved / profile.mem_gbps  # GB/s = B/ns
    return max(1, math.ceil(max(compute, memory) + profile.launch_us * 1000.0))


@dataclass(frozen=True)
class KernelPart:
    """One operator's arithmetic inside a kernel: class, FLOPs, output
    elements and, for a matmul, the bytes of its streamed operand (the
    second argument, `ClassRate.spill_bytes`)."""

    op_class: str
    flops: int
    outputs: int
    operand_bytes: int = 0


@dataclass(frozen=True)
class KernelWork:
    """What one kernel does: its operators' arithmetic (one part for an
    operator call, one per body operator for a `Primitive` function) and the
    bytes it reads and writes (its own inputs and output, not the fused
    body's intermediates)."""

    parts: tuple[KernelPart, ...]
    bytes_moved: int


def work_ns(work: KernelWork, profile: DeviceProfile) -> int:
    """The time of one kernel in integer nanoseconds (at least 1): each part's
    FLOPs at its class's compute rate (slower below the class's saturation),
    the bytes at the best memory rate among the parts' classes, the larger of
    the two, plus one launch. A fused kernel therefore never costs more than
    its operators one by one: the same arithmetic, fewer bytes, one launch."""
    compute = 0.0
    memory_eff = 0.0
    for part in work.parts:
        rate = profile.rate(part.op_class)
        gflops = profile.peak_gflops * rate.compute  # GFLOP/s = FLOP/ns
        if 0 < rate.spill_bytes < part.operand_bytes and rate.spill_compute > 0:
            gflops = profile.peak_gflops * rate.spill_compute
        if 0 < max(part.outputs, 1) < rate.saturation:
            gflops *= max(part.outputs, 1) / rate.saturation
        compute += part.flops / gflops
        memory_eff = max(memory_eff, rate.memory)
    if memory_eff <= 0:  # no parts: a kernel that only moves data
        memory_eff = profile.rate("data movement").memory
    memory = work.bytes_moved / (profile.mem_gbps * memory_eff)  # GB/s = B/ns
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


_REDUCTIONS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "variance", "cumsum", "cumprod")
# Data movement only: no arithmetic, bytes in and out (some read less: `BYTE_RULES`).
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
    "broadcast_to",
    "nn.pad",
    "tile",
    "repeat",
    "gather",
    "gather_nd",
    "scatter_elements",
    # Relax operators without a Relay counterpart (tvm_bridge/relax_translate.py keeps their names)
    "relax.index_tensor",
    "relax.slice_scatter",
    "relax.arange",
)
_TRANSCENDENTAL = (
    "exp",
    "sigmoid",
    "tanh",
    "log",
    "sqrt",
    "rsqrt",
    "erf",
    "cos",
    "sin",
    "power",
    "nn.gelu",
    "relax.nn.gelu",
    "relax.nn.gelu_tanh",
    "relax.nn.silu",
)
# One FLOP per output element. Any operator without a formula is costed so too;
# these are listed so that every operator of the Relax corpus has its formula
# on record (tests/relax/test_relax_costs.py).
_ELEMENTWISE_OPS = (
    "add",
    "subtract",
    "multiply",
    "divide",
    "floor_divide",
    "mod",
    "floor_mod",
    "maximum",
    "minimum",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "negative",
    "abs",
    "floor",
    "ceil",
    "round",
    "sign",
    "clip",
    "where",
    "nn.relu",
    "nn.leaky_relu",
    "nn.bias_add",
)
# Normalisations: mean, variance, normalise, scale and shift per element.
_NORMS = ("nn.layer_norm", "nn.group_norm", "nn.instance_norm", "relax.nn.layer_norm")
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
    # numpy's matmul: any ranks, batch dimensions broadcast; K is x's last axis
    "relax.matmul": _dense,
    **{name: _pool for name in _POOLS},
    **{name: _per_input(1) for name in _REDUCTIONS},
    "nn.batch_norm": _per_input(4),
    "nn.softmax": _per_input(5),
    "nn.log_softmax": _per_input(5),
    **{name: _movement for name in _MOVEMENT},
    **{name: _per_output(4) for name in _TRANSCENDENTAL},
    **{name: _per_output(1) for name in _ELEMENTWISE_OPS},
    **{name: _per_input(8) for name in _NORMS},
    "relax.nn.rms_norm": _per_input(4),
}
# Families by name prefix (global and adaptive pools read their whole input once).
FLOP_PREFIX_RULES: tuple[tuple[str, FlopRule], ...] = (
    ("nn.global_", _per_input(1)),
    ("nn.adaptive_", _per_input(1)),
)
_ELEMENTWISE = _per_output(1)


def has_flop_rule(name: str) -> bool:
    """Whether operator `name` has a FLOPs formula of its own (listed, or by
    prefix), rather than the default of one FLOP per output element."""
    return name in FLOP_RULES or any(name.startswith(prefix) for prefix, _ in FLOP_PREFIX_RULES)


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


# ---------------------------------------------------------------------------
# Bytes per operator

ByteRule = Callable[[Sequence[int], int], int]
"""Bytes one kernel moves from its arguments' and its result's bytes."""


def _rows_read(args: Sequence[int], out: int) -> int:
    """A gather reads the rows it returns, not the whole table (its first
    argument), plus its indices, and writes its result."""
    return 2 * out + sum(args[1:])


def _view(args: Sequence[int], out: int) -> int:
    """A reshape moves nothing: TVM 0.27's build (`RewriteDataflowReshape`,
    in the default pipeline and the bridge's) makes it a view of its input."""
    return 0


def _all_bytes(args: Sequence[int], out: int) -> int:
    return out + sum(args)


VIEWS = frozenset(("reshape", "expand_dims", "squeeze", "nn.batch_flatten", "reshape_like"))
"""Operators whose result is a view of their input in TVM's build: no bytes
moved, and no new intermediate in a memory budget."""

# Operators that read or write other than all their inputs and their output
# (docs/optimize.md section 5); any other kernel moves `out + sum(args)`.
BYTE_RULES: dict[str, ByteRule] = {
    **{name: _rows_read for name in ("take", "gather", "gather_nd", "relax.index_tensor", "strided_slice")},
    **{name: _view for name in VIEWS},
}


def op_bytes(name: str, args: Sequence[int], out: int) -> int:
    """Bytes one operator call moves, from its arguments' and result's bytes."""
    return BYTE_RULES.get(name, _all_bytes)(args, out)


# ---------------------------------------------------------------------------
# Operator classes

_CONVOLUTIONS = frozenset(
    (
        "nn.conv1d",
        "nn.conv2d",
        "nn.conv3d",
        "nn.conv1d_transpose",
        "nn.conv2d_transpose",
        "nn.conv3d_transpose",
    )
)
_MATMULS = frozenset(("nn.dense", "nn.matmul", "nn.batch_matmul", "relax.matmul"))
_CLASS_REDUCTIONS = frozenset(
    (*_REDUCTIONS, *_NORMS, "relax.nn.rms_norm", "std", "logsumexp", "all", "any", "nn.softmax", "nn.log_softmax")
)
_CLASS_POOLS = frozenset(_POOLS)
_CLASS_MOVEMENT = frozenset(_MOVEMENT)


def op_class(name: str, args: Sequence[Type | None], attrs: Mapping[str, Any], assume_dim: int = 1) -> str:
    """The class of one operator call (one of `OP_CLASSES`) from its name,
    argument types and complete attributes. A convolution is depthwise when
    it has more than one group and as many groups as input channels."""
    if name in _CONVOLUTIONS:
        groups = attrs.get("groups", 1)
        groups = groups.value if isinstance(groups, IntImm) else groups
        if isinstance(groups, int) and groups > 1:
            inputs = FlopInputs(args, None, attrs, assume_dim)
            if inputs.extent(inputs.first, "data_layout", "C") == groups:
                return "depthwise conv"
        return "conv"
    if name in _MATMULS:
        return "dense"
    if name in _CLASS_POOLS or name.startswith(("nn.global_", "nn.adaptive_")):
        return "pooling"
    if name in _CLASS_REDUCTIONS:
        return "reduction"
    if name in _CLASS_MOVEMENT:
        return "data movement"
    return "elementwise"


def op_part(
    name: str,
    args: Sequence[Type | None],
    out: Type | None,
    attrs: Attrs | None,
    assume_dim: int,
    unknown_flops: int = 0,
) -> KernelPart:
    """The class, FLOPs and output elements of one operator call, with
    `unknown_flops` where its formula's inputs are not known."""
    try:
        full = complete_attrs(name, attrs).as_dict()
    except (RelayError, ValueError, KeyError, TypeError):
        full = attrs.as_dict() if attrs is not None else {}
    flops = op_flops(name, args, out, full, assume_dim)
    outputs = FlopInputs(args, out, full, assume_dim).n(out)
    operand = 0
    if name in _MATMULS and len(args) > 1:
        operand = type_bytes(args[1], assume_dim)[0] or 0
    return KernelPart(
        op_class(name, args, full, assume_dim), unknown_flops if flops is None else flops, outputs, operand
    )
