"""Request and response models of the HTTP API (they are the Swagger docs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, TypeAdapter
from pydantic_core import PydanticCustomError

import solver
from relay.detect import detect_encoding, detect_language
from service.planning import PlanJob
from service.problems import VALIDATION_ERROR, ProblemError
from service.units import ByteSize

if TYPE_CHECKING:
    from service.config import Settings

# --------------------------------------------------------------------------
# Nesting of the free-form JSON a caller sends (targets, report extras)

MAX_TARGET_DEPTH = 8
"""How deeply a JSON target's objects and arrays may nest (a `host` inside a `host` ...). TVM's own
targets nest two levels; deeper ones are refused (422 invalid-config) before anything walks or
serializes them."""
NESTING_ERROR = "nesting_too_deep"
"""The pydantic error type of a too-deep value; the problem handler answers it 422 invalid-config."""


def check_nesting(value: Any, bound: int, what: str) -> Any:
    """`value`, unless its dicts and lists nest deeper than `bound` (walked iteratively, so any
    depth the JSON parser accepted is measured without recursion): then a pydantic error of type
    NESTING_ERROR naming `what` and the bound."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > bound:
            raise PydanticCustomError(
                NESTING_ERROR,
                "{what} nests deeper than {bound} levels of objects and arrays, the bound",
                {"what": what, "bound": bound},
            )
        stack.extend((child, depth + 1) for child in children)
    return value


TargetDict = Annotated[
    dict[str, Any], BeforeValidator(lambda value: check_nesting(value, MAX_TARGET_DEPTH, "a target"))
]

# --------------------------------------------------------------------------
# Device specs and request-level constraints (docs/planning.md, section 1)


class DeviceObject(BaseModel):
    """A partially specified virtual device; every field may be left out (unconstrained)."""

    model_config = ConfigDict(extra="forbid", strict=True, title="DeviceObject")

    device_type: Annotated[str, Field(min_length=1, max_length=64)] | StrictInt | None = Field(
        None, description='Device type name ("cpu", "cuda", ...) or DLPack code (1 = cpu, 2 = cuda).'
    )
    virtual_device_id: int | None = Field(None, ge=0, le=1 << 20, description="Which device of that type.")
    target: Annotated[str, Field(min_length=1, max_length=4096)] | TargetDict | None = Field(
        None, description='TVM target string ("llvm", "cuda -arch=sm_90") or a JSON target dict.'
    )
    memory_scope: str | None = Field(None, max_length=256, description='Storage scope, e.g. "global".')


# The wire schema of `solver.DeviceSpec` (the one spec type), validated by pydantic.
DeviceSpecField = Annotated[
    Annotated[str, Field(min_length=1, max_length=256)] | DeviceObject,
    Field(
        description='Shorthand "TYPE" or "TYPE:ID" ("cpu", "cuda", "cuda:1"), or a device object.',
        examples=["cpu", "cuda:1", {"device_type": "cuda", "target": "cuda -arch=sm_90"}],
    ),
]


class ParamSelector(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    param: str = Field(
        ...,
        max_length=1024,
        description=(
            'A global function\'s parameter: "@main:%data"; or a name pattern (shell-style * and ?), '
            '"@main:p_model_layers_3_*", which pins every matching parameter and the operators that read them.'
        ),
    )


class FunctionSelector(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    function: str = Field(..., max_length=1024, description='A global function\'s result: "@f".')


class OpSelector(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    op: str = Field(..., max_length=256, description='Every call of an operator: "nn.conv2d".')
    index: int | None = Field(
        None, ge=0, description="Only the index-th call of that operator, in evaluation order."
    )


class AtSelector(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    at: str = Field(
        ...,
        pattern=r"^\d+:\d+$",
        max_length=32,
        description='The outermost expression starting at "LINE:COL" of the input text (text input only).',
    )


class NodeSelector(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    node: int = Field(
        ...,
        ge=0,
        description="A node id: the input module's expressions numbered in post-order over the global "
        "functions in definition order (the same for text and JSON; shown in the picture).",
    )


Selector = ParamSelector | FunctionSelector | OpSelector | AtSelector | NodeSelector


class DeviceConstraint(BaseModel):
    """A request-level pin: acts like the matching annotation in the module would."""

    model_config = ConfigDict(extra="forbid", strict=True)
    select: Selector = Field(..., description="What to pin.")
    device: DeviceSpecField


def spec_to_plain(spec: str | DeviceObject) -> solver.DeviceSpec:
    """A device spec as the planner takes it (str, or dict without unset fields)."""
    if isinstance(spec, DeviceObject):
        return spec.model_dump(exclude_none=True)
    return spec


def constraint_to_plain(c: DeviceConstraint) -> dict[str, Any]:
    return {"select": c.select.model_dump(exclude_none=True), "device": spec_to_plain(c.device)}


# --------------------------------------------------------------------------
# Optimize mode: operator support, device profiles, links, cost table

# Device names in requests are the short names the responses use: "cpu", "cuda", "cuda:1".
DeviceName = Annotated[str, Field(min_length=1, max_length=256)]


class OpSupport(BaseModel):
    """What one device cannot run: its operators are never placed there."""

    model_config = ConfigDict(extra="forbid", strict=True)

    unsupported: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        ..., max_length=4096, description='Operator names, e.g. ["nn.conv2d_transpose"].'
    )


# Rates and overheads a request may set: every time the cost model derives from them (bytes and
# FLOPs within int64 over the slowest rate, plus the largest overhead) stays a finite number.
MIN_RATE = 1e-6
MAX_OVERHEAD_US = 1e9


class DeviceProfileIn(BaseModel):
    """Overrides of one device's built-in roofline profile (any subset)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    peak_gflops: float | None = Field(None, ge=MIN_RATE, description="Peak compute rate, GFLOP/s.")
    mem_gbps: float | None = Field(None, ge=MIN_RATE, description="Memory bandwidth, GB/s.")
    launch_us: float | None = Field(
        None, ge=0, le=MAX_OVERHEAD_US, description="Per-kernel launch overhead, microseconds."
    )
    memory_bytes: ByteSize | None = Field(
        None,
        description="Memory budget in bytes (an integer, or `8GiB`, `60MB`, ... as `--memory-budget` "
        "takes): weights placed on the device plus its largest intermediate must fit.",
    )
    disk_read_gbps: float | None = Field(
        None,
        ge=MIN_RATE,
        description="The host's read bandwidth for weights an accelerate map stores on `\"disk\"`, GB/s "
        "(default 2.0): each such weight is read once per forward pass, before its copy to the GPU.",
    )


class LinkIn(BaseModel):
    """A copy between two devices: `bytes / gbps + latency_us`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    gbps: float | None = Field(None, ge=MIN_RATE, description="Bandwidth, GB/s.")
    latency_us: float | None = Field(
        None, ge=0, le=MAX_OVERHEAD_US, description="Fixed latency per copy, microseconds."
    )


class CostTableEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    key: str = Field(
        ..., max_length=65536, description="`solver.cost_key`: operator, argument types, attributes."
    )
    device: DeviceName
    ns: float = Field(..., gt=0, description="Measured kernel time in nanoseconds.")


class CostTableIn(BaseModel):
    """Measured kernel times (`devplan profile`); they replace the roofline where present."""

    model_config = ConfigDict(extra="forbid", strict=True)

    version: Literal[1] = Field(..., description="Format version (1).")
    entries: list[CostTableEntry] = Field(..., max_length=1_000_000)


def _plain_op_support(value: dict[str, OpSupport]) -> dict[str, list[str]]:
    return {name: list(s.unsupported) for name, s in value.items()}


def _plain_profiles(value: dict[str, DeviceProfileIn]) -> dict[str, dict[str, float]]:
    return {name: p.model_dump(exclude_none=True) for name, p in value.items()}


def _plain_links(value: dict[str, LinkIn]) -> dict[str, dict[str, float]]:
    return {pair: link.model_dump(exclude_none=True) for pair, link in value.items()}


def _plain_cost_table(value: CostTableIn | None) -> dict[str, Any] | None:
    return value.model_dump() if value is not None else None


# The optimize-mode fields of a request as `solver.PlanOptions` holds them (plain
# data, unset overrides dropped): one conversion for /plan and the CLI's files.
_PLAIN_OPTIONS: dict[str, Any] = {
    "op_support": _plain_op_support,
    "device_profiles": _plain_profiles,
    "links": _plain_links,
    "cost_table": _plain_cost_table,
}


def plain_option(name: str, raw: Any) -> Any:
    """One optimize-mode field of a request (`op_support`, `device_profiles`,
    `links`, `cost_table`) in its wire form, validated by `PlanRequest`'s own
    rules and returned as `solver.PlanOptions` holds it. The CLI reads its
    files through this, so it accepts exactly what /plan accepts. Raises
    pydantic's ValidationError."""
    info = PlanRequest.model_fields[name]
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[annotation, *info.metadata]
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    return _PLAIN_OPTIONS[name](adapter.validate_python(raw, strict=True))


# --------------------------------------------------------------------------
# POST /plan


# accelerate's devices as its `device_map` writes them.
AccelerateDevice = Annotated[
    Annotated[int, Field(ge=0, le=1 << 16)] | Annotated[str, Field(pattern=r"^(cpu|disk|cuda(:\d{1,5})?)$")],
    Field(description='A GPU index (`0`), `"cuda:N"`, `"cpu"` or `"disk"`.'),
]

# The schema states the server's default limit; the server checks its own (to_plan_job).
_DEFAULT_MAX_TIMEOUT_MS = 120_000


class PlanRequest(BaseModel):
    """A Relay or Relax module (text or TVM JSON) and the planning configuration."""

    model_config = ConfigDict(extra="forbid", strict=True)

    module: str = Field(
        ...,
        description="The Relay or Relax module: Relay text as printed by TVM <= 0.19 (`mod.astext()`), "
        "a Relax IRModule's TVMScript (`mod.script()`), or TVM's JSON of either (`tvm.ir.save_json(mod)`).",
    )
    format: Literal["text", "json"] | None = Field(
        None, description="Input format; detected from the content when absent (JSON starts with `{`)."
    )
    language: Literal["relay", "relax"] | None = Field(
        None,
        description="The module's language: a Relay module (TVM <= 0.19) or a Relax IRModule (TVMScript "
        "as `mod.script()` prints it, or `tvm.ir.save_json` JSON; needs the `tvm` extra, else 503 "
        "`tvm-unavailable`). Detected from the content when absent, without TVM.",
    )
    virtual_devices: list[DeviceSpecField] = Field(
        default_factory=list,
        max_length=1024,
        description="The `meta[VirtualDevice][i]` table when the text has no metadata section; "
        "appended after the section's entries when it has one.",
    )
    default_device: DeviceSpecField = Field("cuda", description="Device for everything left free.")
    host_device: DeviceSpecField = Field("cpu", description="Where shape values live (a cpu).")
    constraints: list[DeviceConstraint] = Field(
        default_factory=list,
        max_length=4096,
        description="Request-level pins, named `constraint #k` in conflicts.",
    )
    timeout_ms: int | None = Field(
        None,
        ge=1,
        json_schema_extra={"maximum": _DEFAULT_MAX_TIMEOUT_MS},
        description="Time limit in ms for the whole plan (parse, plan, print); past it the answer is a 504 "
        "solver-timeout problem. The server's default (DEVPLAN_DEFAULT_TIMEOUT_MS) when absent; at most "
        f"DEVPLAN_MAX_TIMEOUT_MS ({_DEFAULT_MAX_TIMEOUT_MS} unless the server sets another), above it a 422.",
    )
    on_timeout: Literal["fail", "best"] = Field(
        "fail",
        description='Optimize mode, when the time limit passes before the search has finished: "fail" '
        '(default) answers 504 solver-timeout; "best" returns the best plan found by then, with '
        "`cost.time_limit_reached: true` and the method marked \"stopped at the time limit\" (such an "
        "answer can differ from run to run). The search itself stops on counted work, never on the "
        "clock, so an answer that finished is the same on an idle or a busy machine (docs/optimize.md).",
    )
    explain: bool = Field(False, description="Also return a human explanation of the plan.")
    output_format: Literal["text", "json"] = Field("text", description="Format of the planned module.")
    why: list[Selector] = Field(
        default_factory=list,
        max_length=64,
        description="Why-queries: for each selector, the device of every expression it matches (up to "
        "50) and the shortest chain of constraints that decided it, ending in an annotation, a request "
        "pin, a host rule, a parameter/function attribute or the default device.",
    )
    include: list[Literal["placements"]] = Field(
        default_factory=list,
        max_length=1,
        description='`["placements"]`: the response adds `placements` (every operator call and function '
        "parameter with its node id, line:column, device and `decided_by`), `copies` (every device_copy with "
        "its ends and bytes) and `prediction` (the predicted time, in TVM mode the cost model's price of the "
        "TVM plan): the fields of the placement report (schemas/report.schema.json). Costs a why-answer per "
        "placement.",
    )

    mode: Literal["tvm", "optimize"] = Field(
        "tvm",
        description='"tvm" (default): exactly TVM PlanDevices\' answer. "optimize": the devices '
        "that minimise the predicted run time (kernels plus copies); pins fix an expression's own "
        "computation, not its producers, and copies are inserted where arguments live elsewhere.",
    )
    z3_check: bool = Field(
        False,
        description="TVM mode: also check the plan with Z3. It cannot change the answer (TVM's rules fix "
        "it) and is most of a small plan's latency, so it is off by default; `solver.z3_checked` says "
        "whether it ran. Optimize mode: Z3 also confirms a plan the min-cut found.",
    )
    check_types: bool = Field(
        True,
        description="Type-check the module before planning, as TVM does (an ill-typed module is a 400 "
        "`type-error`); false skips it. Operator names TVM does not register are refused either way.",
    )
    op_support: dict[DeviceName, OpSupport] = Field(
        default_factory=dict,
        max_length=256,
        description="Per device name, the operators it cannot run. Optimize mode places operators where "
        "they can run; a TVM-mode plan that breaks it is a 422 planning-conflict.",
        examples=[{"cuda": {"unsupported": ["nn.lrn"]}}],
    )
    device_profiles: dict[DeviceName, DeviceProfileIn] = Field(
        default_factory=dict,
        max_length=256,
        description="Optimize mode: per device name, overrides of the built-in llvm/cuda profile, "
        "and memory budgets (`memory_bytes`).",
        examples=[{"cuda": {"peak_gflops": 20000, "mem_gbps": 2000, "memory_bytes": 8589934592}}],
    )
    links: dict[Annotated[str, Field(pattern=r"^[^>]+->[^>]+$", max_length=520)], LinkIn] = Field(
        default_factory=dict,
        max_length=4096,
        description='Optimize mode: copy costs per "SRC->DST" device pair (one default for every pair).',
        examples=[{"cpu->cuda": {"gbps": 12, "latency_us": 10}}],
    )
    cost_table: CostTableIn | None = Field(
        None, description="Optimize mode: measured kernel times from `devplan profile`."
    )
    assume_dim: int = Field(
        1, ge=1, le=1 << 30, description="Optimize mode: what a symbolic dimension (`?`) counts as."
    )
    overlap: bool = Field(
        True,
        description="Optimize mode: copies of weights run on a copy stream per link beside each device's compute, "
        "prefetched as far ahead as the memory budget leaves room (the predicted time is that schedule's "
        "length); false prices every copy synchronously, as accelerate executes a device map.",
    )
    accelerate_device_map: dict[Annotated[str, Field(max_length=1024)], AccelerateDevice] | None = Field(
        None,
        max_length=100_000,
        description="Relax modules: Hugging Face accelerate's `device_map` (module name -> `0`, `\"cuda:1\"`, "
        '`"cpu"` or `"disk"`), as `infer_auto_device_map` returns it and `model.hf_device_map` holds it. Priced as '
        "`dispatch_model` executes it (docs/optimize.md, accelerate's device maps): a module mapped to a GPU runs "
        "there; every other module runs on the main device (the map's GPU of the lowest index; the cpu when it "
        "names none), its weights copied in synchronously on each forward pass. The answer's `accelerate_input` "
        "has its price, peak memory per device and `fits`. A module the model does not have, a weight no entry "
        "covers or a device the request does not have is a 422 naming it.",
        examples=[{"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", "lm_head": "cpu"}],
    )
    accelerate_device_map_as: Literal["as-is", "storage"] = Field(
        "as-is",
        description='"as-is": the plan is the map as `dispatch_model` runs it, priced with synchronous copies '
        "(budgets are not enforced: `accelerate_input.fits` says whether it fits them). \"storage\" (optimize "
        "mode): the best plan that stores each weight where the map does, operators placed freely.",
    )

    def to_options(self, timeout_ms: int) -> solver.PlanOptions:
        """The request's planning options (plain data) with the time limit `timeout_ms`."""
        return solver.PlanOptions(
            virtual_devices=tuple(spec_to_plain(s) for s in self.virtual_devices),
            default_device=spec_to_plain(self.default_device),
            host_device=spec_to_plain(self.host_device),
            constraints=tuple(constraint_to_plain(c) for c in self.constraints),
            timeout_ms=timeout_ms,
            on_timeout=self.on_timeout,
            z3_check=self.z3_check,
            check_types=self.check_types,
            mode=self.mode,
            op_support=_plain_op_support(self.op_support),
            device_profiles=_plain_profiles(self.device_profiles),
            links=_plain_links(self.links),
            cost_table=_plain_cost_table(self.cost_table),
            assume_dim=self.assume_dim,
            overlap=self.overlap,
        )


def to_plan_job(request: PlanRequest, settings: Settings, *, request_id: str | None = None) -> PlanJob:
    """The planning job of a /plan or /compile request, its time limit the request's
    `timeout_ms`, else the server's default (never above `max_timeout_ms`). A request
    above the server's `max_timeout_ms` is a 422 validation-error stating the limit
    (not silently capped)."""
    if request.timeout_ms is not None and request.timeout_ms > settings.max_timeout_ms:
        msg = f"Input should be less than or equal to {settings.max_timeout_ms} (this server's DEVPLAN_MAX_TIMEOUT_MS)"
        error = {"loc": ["body", "timeout_ms"], "msg": msg, "type": "less_than_equal"}
        raise ProblemError(VALIDATION_ERROR, f"body.timeout_ms: {msg}", errors=[error])
    timeout_ms = min(request.timeout_ms or settings.default_timeout_ms, settings.max_timeout_ms)
    return PlanJob(
        module=request.module,
        options=request.to_options(timeout_ms),
        input_format=request.format,
        language=request.language,
        output_format=_output_format(request),
        explain=request.explain,
        name="<request>",
        request_id=request_id,
        why=tuple(w.model_dump(exclude_none=True) for w in request.why),
        include=tuple(request.include),
        accelerate_device_map=request.accelerate_device_map,
        accelerate_device_map_as=request.accelerate_device_map_as,
    )


def _output_format(request: PlanRequest) -> Literal["text", "json"]:
    """The requested output encoding; when the request names none, text for
    Relay and, for a Relax module, the input's own encoding."""
    if "output_format" in request.model_fields_set:
        return request.output_format
    encoding = request.format or detect_encoding(request.module)
    language = request.language or detect_language(request.module, encoding)
    return encoding if language == "relax" else request.output_format


class VirtualDeviceOut(BaseModel):
    """One entry of the output's `meta[VirtualDevice]` table; null fields are unconstrained."""

    device_type: str | None = Field(None, description='"cpu", "cuda", ...')
    virtual_device_id: int | None = None
    target: str | None = Field(None, description="TVM target string.")
    memory_scope: str | None = None


class DeviceCopyOut(BaseModel):
    """A `device_copy` the planner inserted, located at the expression it copies."""

    line: int | None = Field(None, description="1-based line of the copied expression in the input.")
    column: int | None = Field(None, description="1-based column.")
    src: str = Field(..., description="Source device.")
    dst: str = Field(..., description="Destination device.")


class CopyConsumerOut(BaseModel):
    """A placement a copy feeds (the report's `copies[].to`, named)."""

    node: int = Field(..., description="Its node id (the report's `placements[].node`).")
    name: str = Field(..., description="As the module's language writes it (`nn.dense`, `R.matmul`).")
    binding: str | None = Field(None, description="Relax: the variable it is bound to (`lv41`).")
    line: int | None = Field(None, description="Its line in the input (null for JSON input).")
    column: int | None = None


class PlannedCopyOut(DeviceCopyOut):
    """A copy of the plan with the placements it feeds."""

    to: list[CopyConsumerOut] = Field(
        default_factory=list, description="The placements that read the copy, as the report's `copies[].to`."
    )
    into_result: str | None = Field(
        None, description="The function whose result the copy feeds, when no placement reads it."
    )


class DivergenceOut(DeviceCopyOut):
    """A copy the plan has where TVM 0.19's own answer omits it (nested
    annotations); it is also among `summary.device_copies`."""

    reason: str = Field(..., description="Why TVM 0.19's plan lacks this copy.")


class ParamDeviceOut(BaseModel):
    name: str
    device: str


class FunctionDevicesOut(BaseModel):
    """Where a global function's parameters and result live."""

    params: list[ParamDeviceOut]
    result: str


class PlanSummary(BaseModel):
    device_copies: list[PlannedCopyOut] = Field(
        ..., description="Copies inserted by the planner, located at the value copied, with their consumers."
    )
    expressions_by_device: dict[str, int] = Field(
        ..., description="How many expressions (every node, not only operator calls) landed on each device."
    )
    functions: dict[str, FunctionDevicesOut] = Field(..., description="Global function name -> devices.")
    compile_targets: dict[str, str] = Field(
        default_factory=dict,
        description="Per device the plan uses, the target POST /compile would build for it by default "
        "(the planned module keeps TVM's target text; /compile uses DEVPLAN_CUDA_ARCH, default sm_75, "
        "where that text names no arch or one nvcc cannot build). Pass it as /compile's `targets` to pin it.",
        examples=[{"cpu": "llvm", "cuda": "cuda -arch=sm_75 -thread_warp_size=32 -max_num_threads=1024"}],
    )


class SolverStats(BaseModel):
    classes: int = Field(..., description="Domain classes after union-find presolve.")
    z3_checked: bool = Field(
        ..., description="Whether Z3 checked this plan (TVM mode: only with `z3_check: true`)."
    )
    variables: int | None = Field(
        None, description="Z3 variables (at most classes x fields); absent when Z3 did not run."
    )
    hard_constraints: int
    soft_constraints: int
    time_ms: dict[str, float] = Field(
        ..., description="Milliseconds per phase (parse, infer, collect, ..., print)."
    )


class DeviceCostOut(BaseModel):
    operator_calls: int = Field(..., description="Operator calls placed on the device (not expressions).")
    predicted_ms: float = Field(
        ..., description="Predicted time on the device: its kernels plus the copies into it (`copy_ms`)."
    )
    copy_ms: float = Field(0.0, description="Predicted time of the copies into the device (part of `predicted_ms`).")
    kernel_ms: float = Field(0.0, description="Predicted time of the device's kernels: `predicted_ms` less `copy_ms`.")
    overlap_hidden_ms: float = Field(
        0.0,
        description="The part of `copy_ms` that runs beside compute (weights copied ahead on the link's copy "
        "stream); 0 with `overlap: false`. The plan's `predicted_ms` is the sum over devices of `predicted_ms` "
        "less `overlap_hidden_ms`.",
    )
    weight_bytes: int = Field(..., description="Weights (parameters and constants) resident there for the whole run.")
    peak_memory_bytes: int = Field(
        0,
        description="The most bytes the device holds at once: resident weights, live activations, weights "
        "streamed in for their readers and prefetched ones (memory by liveness).",
    )


class EstimateOut(BaseModel):
    """A guess the cost model made (unknown type, symbolic dimension), not a measurement."""

    kind: str
    message: str
    line: int | None = None
    column: int | None = None


class CostOut(BaseModel):
    """Optimize mode: the plan's predicted cost (integer-ns model, sum of kernels and copies)."""

    predicted_ms: float = Field(..., description="Predicted run time of the plan.")
    tvm_mode_predicted_ms: float | None = Field(
        None, description="The TVM mode's plan under the same model; null when it is infeasible."
    )
    tvm_mode_reason: str | None = Field(None, description="Why `tvm_mode_predicted_ms` is null.")
    copies: int = Field(..., description="device_copy calls in the plan.")
    bytes_copied: int
    per_device: dict[str, DeviceCostOut]
    optimal: bool = Field(..., description="Proven optimal (else the best plan found before the time limit).")
    bound_ms: float = Field(
        ...,
        description="A true lower bound of the predicted time over every plan within the constraints "
        "(equals predicted_ms when optimal).",
    )
    gap: float | None = Field(
        None,
        description="predicted_ms / bound_ms - 1 (0 when the bound meets the plan); absent when the bound is 0.",
    )
    method: str = Field(
        ...,
        description='How the plan was found and proven (docs/optimize.md section 7): "single choice", '
        '"min-cut", "min-cut + budget", "min-cut + budget (dual bound)", "highs (optimal)", '
        '"highs (run time optimal)", "search + highs", "search", "z3", "z3 (time-out)".',
    )
    peak_memory_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="Per device, the most bytes it holds at once under the plan (memory by liveness: resident "
        "weights, live activations, streamed and prefetched weights); memory budgets are checked against it.",
    )
    overlap: bool = Field(
        False,
        description="Whether `predicted_ms` is the overlapped schedule's length (copies of weights beside "
        "compute) rather than the sum of kernel and copy times.",
    )
    solver_ms: float = Field(..., description="Time spent choosing the devices.")
    estimates: list[EstimateOut] = Field(
        default_factory=list, description="Every estimate, with its location."
    )
    time_limit_reached: bool = Field(
        False,
        description='True when the time limit stopped the search (`on_timeout: "best"`): the best plan '
        "found by then, not necessarily the one the finished search gives.",
    )


class WhyStepOut(BaseModel):
    """One constraint of a why-chain."""

    kind: str = Field(..., description='"operator", "let", "call site", "annotation", "default", ...')
    message: str
    line: int | None = Field(None, description="Where the constraint is in the input text.")
    column: int | None = None
    node: int | None = Field(None, description="Node id of the constraint's expression.")


class WhyAnswerOut(BaseModel):
    """The device of one expression and the chain of constraints that decided it."""

    node: int | None = Field(None, description="Node id of the expression.")
    expression: str
    line: int | None = None
    column: int | None = None
    device: str
    reason: str = Field(
        ...,
        description='What fixed the device: "annotation", "request pin", "host rule", "parameter '
        'attribute", "function attribute", "default", "cost" (optimize mode) or "none" (not planned).',
    )
    message: str
    chain: list[WhyStepOut]
    also: list[int] = Field(default_factory=list, description="Node ids of other pins that agree.")
    cost: dict[str, Any] | None = Field(
        None, description="Optimize mode: predicted ms on each device, and what forbids the others."
    )


class WhyResultOut(BaseModel):
    """The answers for one selector of `why`."""

    selector: dict[str, Any]
    matches: int = Field(..., description="Expressions the selector matched.")
    truncated: bool = Field(..., description="True when more than 50 matched (the first 50 are answered).")
    answers: list[WhyAnswerOut]


class AcceleratefaultOut(BaseModel):
    """Operators of one module that accelerate's `dispatch_model` would run elsewhere than the plan does."""

    module: str = Field(..., description='The module (`""`: operators of no module, the model\'s own forward).')
    operators: int = Field(..., description="How many of its operators (0: its weights are the fault).")
    plan_device: str = Field(..., description="Where the plan runs them (or stores the weights).")
    accelerate_device: str = Field(..., description="Where `dispatch_model` would run them under this map.")
    reason: str


class OverBudgetOut(BaseModel):
    peak_bytes: int
    budget_bytes: int


class AccelerateInputOut(BaseModel):
    """The request's `accelerate_device_map`, priced."""

    as_: Literal["as-is", "storage"] = Field(..., alias="as", description="How the map was taken.")
    main_device: int | str = Field(..., description="accelerate's main device under the map (a GPU index or cpu).")
    predicted_ms: float | None = Field(
        None,
        description='"as-is": the map\'s predicted time as `dispatch_model` runs it (synchronous copies), disk '
        "reads included.",
    )
    disk_bytes: int = Field(..., description='Weights the map stores on `"disk"`, read on each forward pass.')
    disk_read_ms: float = Field(..., description="Their read time (the host profile's `disk_read_gbps`).")
    peak_memory_bytes: dict[str, int] | None = Field(None, description="Peak memory per device under the map.")
    memory_budgets: dict[str, int] = Field(..., description="The request's budgets it is checked against.")
    fits: bool | None = Field(None, description="Whether every peak is within its budget.")
    over_budget: dict[str, OverBudgetOut] | None = Field(None, description="The devices it does not fit.")


class PlanResponse(BaseModel):
    """The planned module and what the planner did."""

    module: str = Field(..., description="The planned module, with on_device/device_copy made explicit.")
    format: Literal["text", "json"] = Field(..., description="Format of `module`.")
    virtual_devices: list[VirtualDeviceOut] = Field(
        ..., description="The table the output's `meta[VirtualDevice][i]` indices refer to."
    )
    summary: PlanSummary
    solver: SolverStats
    divergences: list[DivergenceOut] = Field(
        default_factory=list,
        description="TVM mode: the copies TVM 0.19's PlanDevices omits (its output would use a value on "
        "another device without a copy, under nested annotations), which this plan has; each is also in "
        "`summary.device_copies`. Elsewhere the TVM mode's plan is exactly TVM 0.19's.",
    )
    unchecked_ops: list[str] = Field(
        default_factory=list,
        description="Operators TVM registers for which the type check has no type relation: their "
        "results were not type-checked.",
    )
    notices: list[str] = Field(
        default_factory=list,
        description="What to know about an accepted module (e.g. it has no @main).",
        examples=[["the module has no @main: each global function is planned on its own (@f)"]],
    )
    explanation: list[str] | None = Field(None, description="Present when the request set explain=true.")
    cost: CostOut | None = Field(None, description='Present in `mode: "optimize"`.')
    why: list[WhyResultOut] | None = Field(None, description="One entry per `why` selector of the request.")
    placements: list[dict[str, Any]] | None = Field(
        None,
        description='With `include: ["placements"]`: every operator call, call of a function and function '
        "parameter: node, kind, name, binding, function, index, line, column, device, decided_by (a why-answer's "
        "reason), inputs (node ids feeding it), predicted_ms (an operator's kernel time on its device under "
        "the cost model). Schema: schemas/report.schema.json.",
    )
    copies: list[dict[str, Any]] | None = Field(
        None,
        description='With `include: ["placements"]`: every device_copy: src, dst, bytes, line, column, '
        "from/to (node ids), into_result, predicted_ms (its time over the link under the cost model).",
    )
    prediction: dict[str, Any] | None = Field(
        None,
        description='With `include: ["placements"]`: predicted_ms (in TVM mode the cost model\'s price of the '
        "TVM plan), basis (tvm-plan | optimize), reason, copies, bytes_copied, per_device (operator_calls, "
        "kernel_ms: the placements' times summed).",
    )
    device_map: list[dict[str, Any]] | None = Field(
        None,
        description='Relax modules, with `include: ["placements"]`: the plan as a device map, one entry per '
        "module of the model read off its weight names (`model_layers_3`; swap `_` for `.` to line it up with "
        'accelerate\'s `device_map`): module, device ("cuda", "cpu" or "split" when its operators are on several '
        "devices), operators (count per device), parameter_bytes. Schema: schemas/report.schema.json.",
    )
    accelerate_device_map: dict[str, int | str] | None = Field(
        None,
        description='Relax modules, with `include: ["placements"]`: the plan as accelerate\'s `device_map` '
        "(module -> GPU index, \"cpu\" or \"disk\": where its weights are stored), which `dispatch_model` "
        "executes as priced when `accelerate_expressible` is true.",
        examples=[{"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", "lm_head": 0}],
    )
    accelerate_expressible: bool | None = Field(
        None,
        description="Whether `dispatch_model` runs every operator where the plan does; false when the plan "
        "computes something accelerate cannot (on the cpu while the weights live on a GPU, on the cpu with a GPU "
        "in the map, ...): `accelerate_at_fault` says which modules and why.",
    )
    accelerate_at_fault: list[AcceleratefaultOut] | None = Field(None, description="Modules the map cannot express.")
    accelerate_outside_modules: list[AcceleratefaultOut] | None = Field(
        None,
        description='Operators of no module (module `""`: the model\'s own forward, rotary tables, masks) the plan '
        "runs off the main device: accelerate runs them on the main device whatever the map says. They do not make "
        "the map inexpressible; the map's price as `dispatch_model` runs it differs by their time.",
    )
    accelerate_names: Literal["request", "parameters", "inferred"] | None = Field(
        None,
        description="Where the module names come from: the request's `accelerate_device_map`, the weights' dotted "
        "names (`relax.frontend.nn`), or inferred from torch-export names (docs/optimize.md).",
    )
    accelerate_main_device: int | str | None = Field(
        None, description="The map's main device as accelerate writes it (a GPU index, or \"cpu\")."
    )
    accelerate_input: AccelerateInputOut | None = Field(
        None, description="With `accelerate_device_map` in the request: its price, peak memory and fit."
    )


# --------------------------------------------------------------------------
# POST /compile

TargetValue = Annotated[str, Field(min_length=1, max_length=4096)] | TargetDict


class CompileRequest(PlanRequest):
    """A Relay module, the planning options of /plan, and the compilation targets."""

    model_config = ConfigDict(extra="forbid", strict=True)

    targets: dict[str, TargetValue] | None = Field(
        None,
        description='Target per device type for virtual devices without one: `{"cpu": "llvm", "cuda": '
        '"cuda -arch=sm_90"}`. Relay-era strings and TVM 0.27 JSON dicts are both accepted.',
        examples=[{"cpu": "llvm -mcpu=skylake", "cuda": {"kind": "cuda", "arch": "sm_90"}}],
    )
    cuda_arch: str | None = Field(
        None,
        pattern=r"^sm_\d+[a-z]?$",
        description="CUDA arch for cuda targets that name none (default: the server's, sm_75).",
    )
    run_check: bool = Field(
        False,
        description="Run the library on random inputs and compare with a single-CPU build of the "
        "unannotated module (only where every device of the plan exists on the server). Every "
        "parameter of @main must then be a tensor of static shape (else 422 invalid-check).",
    )


class CompileCheck(BaseModel):
    max_abs_error: float | None = Field(None, description="Largest difference from the single-CPU build.")
    skipped: str | None = Field(None, description="Why the check did not run (e.g. no GPU on the server).")
    sandbox: list[str] | None = Field(
        None,
        description="The sandbox layers the check ran under (docs/security.md); [] with "
        "DEVPLAN_COMPILE_SANDBOX=off.",
    )
    cpu_s: float | None = Field(
        None, description="CPU seconds the sandboxed check used (against DEVPLAN_RUN_CHECK_CPU_S)."
    )
    peak_bytes: int | None = Field(
        None,
        description="Peak resident memory of the sandboxed check, sampled every 20 ms "
        "(DEVPLAN_RUN_CHECK_MEMORY_BYTES bounds its data segment).",
    )
    peak_data_bytes: int | None = Field(
        None,
        description="Largest data segment of the sandboxed check, sampled every 20 ms: what "
        "DEVPLAN_RUN_CHECK_MEMORY_BYTES (RLIMIT_DATA) limits, often well above the resident peak.",
    )
    wall_s: float | None = Field(
        None, description="Seconds the sandboxed check took (against DEVPLAN_RUN_CHECK_WALL_S)."
    )


class CompileReport(BaseModel):
    planned: bool = Field(
        ..., description="True when the server planned the module (it was not yet planned)."
    )
    devices: list[str] = Field(
        ..., description='The plan\'s virtual devices as vdevices ("llvm:0", "cuda:0").'
    )
    functions_per_device: dict[str, int] = Field(
        ..., description="Operator calls (compiled kernels invoked) per virtual device."
    )
    device_copies: int = Field(
        ..., description="Copies between devices (R.to_vdevice) in the lowered module."
    )
    plan_ms: float = Field(..., description="Planning time (0 when the module came planned).")
    lower_ms: float = Field(..., description="tvm_bridge.to_relax time.")
    compile_ms: float = Field(..., description="Legalize, schedule and tvm.compile time.")
    check: CompileCheck | None = None


class CompileResponse(BaseModel):
    artifact_id: str = Field(
        ..., description="SHA-256 of the library; GET /artifacts/{artifact_id} returns it."
    )
    sha256: str
    size_bytes: int
    download: str = Field(..., description="Path of the library.")
    cache_hit: bool = Field(
        ...,
        description="True when an earlier request with the same cache key produced the artifact "
        "(the key leaves out timeout_ms, explain, output_format and z3_check).",
    )
    report: CompileReport


# --------------------------------------------------------------------------
# Small routes


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReadyWorkers(BaseModel):
    configured: int = Field(..., description="Planning slots configured (DEVPLAN_POOL_SIZE).")
    effective: int = Field(
        ..., description="Slots with a worker (or one starting): configured minus slots that cannot restart."
    )
    busy: int = Field(..., description="Slots running a plan now.")
    alive: int = Field(..., description="Planning worker processes alive now.")


class ReadySandbox(BaseModel):
    """The run check's sandbox as this process found it at start (queue workers
    log their own)."""

    mode: Literal["on", "off"] = Field(..., description="DEVPLAN_COMPILE_SANDBOX.")
    layers: list[Literal["rlimits", "wall-clock", "seccomp", "bubblewrap"]] = Field(
        ..., description="The layers every run check gets here (none when the sandbox is off)."
    )
    unavailable: dict[str, str] = Field(
        default_factory=dict, description="Optional layers that cannot start here, and why."
    )


class ReadyResponse(BaseModel):
    status: Literal["ready"] = "ready"
    probe_ms: float = Field(..., description="Time the Z3 probe took (a tiny problem in a fresh context).")
    pool: str = Field(..., description="Planning pool kind and size.")
    workers: ReadyWorkers
    sandbox: ReadySandbox | None = Field(
        None, description="The run check's sandbox (absent until the service has started)."
    )


class VersionResponse(BaseModel):
    devplan: str
    python: str
    z3: str
    tvm: str | None = Field(None, description="apache-tvm version, when installed.")
