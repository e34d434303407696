"""Request and response models of the HTTP API (they are the Swagger docs)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

import solver

# --------------------------------------------------------------------------
# Device specs and request-level constraints (device-planning.md, section 1)


class DeviceObject(BaseModel):
    """A partially specified virtual device; every field may be left out (unconstrained)."""

    model_config = ConfigDict(extra="forbid", strict=True, title="DeviceObject")

    device_type: Annotated[str, Field(min_length=1, max_length=64)] | StrictInt | None = Field(
        None, description='Device type name ("cpu", "cuda", ...) or DLPack code (1 = cpu, 2 = cuda).'
    )
    virtual_device_id: int | None = Field(None, ge=0, le=1 << 20, description="Which device of that type.")
    target: Annotated[str, Field(min_length=1, max_length=4096)] | dict[str, Any] | None = Field(
        None, description='TVM target string ("llvm", "cuda -arch=sm_90") or a JSON target dict.'
    )
    memory_scope: str | None = Field(None, max_length=256, description='Storage scope, e.g. "global".')


DeviceSpec = Annotated[
    Annotated[str, Field(min_length=1, max_length=256)] | DeviceObject,
    Field(
        description='Shorthand "TYPE" or "TYPE:ID" ("cpu", "cuda", "cuda:1"), or a device object.',
        examples=["cpu", "cuda:1", {"device_type": "cuda", "target": "cuda -arch=sm_90"}],
    ),
]


class ParamSelector(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    param: str = Field(..., max_length=1024, description='A global function\'s parameter: "@main:%data".')


class FunctionSelector(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    function: str = Field(..., max_length=1024, description='A global function\'s result: "@f".')


class OpSelector(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    op: str = Field(..., max_length=256, description='Every call of an operator: "nn.conv2d".')
    index: int | None = Field(
        None, ge=0, description="Only the index-th call of that operator, in evaluation order."
    )


class DeviceConstraint(BaseModel):
    """A request-level pin: acts like the matching annotation in the module would."""

    model_config = ConfigDict(extra="forbid", strict=True)
    select: ParamSelector | FunctionSelector | OpSelector = Field(..., description="What to pin.")
    device: DeviceSpec


def spec_to_plain(spec: str | DeviceObject) -> solver.DeviceSpec:
    """A device spec as the planner takes it (str, or dict without unset fields)."""
    if isinstance(spec, DeviceObject):
        return spec.model_dump(exclude_none=True)
    return spec


def constraint_to_plain(c: DeviceConstraint) -> dict[str, Any]:
    return {"select": c.select.model_dump(exclude_none=True), "device": spec_to_plain(c.device)}


# --------------------------------------------------------------------------
# POST /plan


class PlanRequest(BaseModel):
    """A Relay module (text or TVM JSON) and the planning configuration."""

    model_config = ConfigDict(extra="forbid", strict=True)

    module: str = Field(
        ...,
        description="The Relay module: text as printed by TVM <= 0.19 (`mod.astext()`), "
        "or TVM's JSON (`tvm.ir.save_json(mod)`).",
    )
    format: Literal["text", "json"] | None = Field(
        None, description="Input format; detected from the content when absent (JSON starts with `{`)."
    )
    virtual_devices: list[DeviceSpec] = Field(
        default_factory=list,
        max_length=1024,
        description="The `meta[VirtualDevice][i]` table when the text has no metadata section; "
        "appended after the section's entries when it has one.",
    )
    default_device: DeviceSpec = Field("cuda", description="Device for everything left free.")
    host_device: DeviceSpec = Field("cpu", description="Where shape values live (a cpu).")
    constraints: list[DeviceConstraint] = Field(
        default_factory=list,
        max_length=4096,
        description="Request-level pins, named `constraint #k` in conflicts.",
    )
    timeout_ms: int | None = Field(
        None,
        ge=1,
        le=600_000,
        description="Time limit in ms for the whole plan (parse, plan, print); past it the answer is a 504 "
        "solver-timeout problem. The server's default (DEVPLAN_DEFAULT_TIMEOUT_MS) when absent; capped at "
        "DEVPLAN_MAX_TIMEOUT_MS.",
    )
    explain: bool = Field(False, description="Also return a human explanation of the plan.")
    output_format: Literal["text", "json"] = Field("text", description="Format of the planned module.")
    z3_check: bool = Field(
        False,
        description="TVM mode: also check the plan with Z3. It cannot change the answer (TVM's rules fix "
        "it) and is most of a small plan's latency, so it is off by default; `solver.z3_checked` says "
        "whether it ran.",
    )


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


class ParamDeviceOut(BaseModel):
    name: str
    device: str


class FunctionDevicesOut(BaseModel):
    """Where a global function's parameters and result live."""

    params: list[ParamDeviceOut]
    result: str


class PlanSummary(BaseModel):
    device_copies: list[DeviceCopyOut] = Field(..., description="Copies inserted by the planner.")
    expressions_by_device: dict[str, int] = Field(
        ..., description="How many expressions landed on each device."
    )
    functions: dict[str, FunctionDevicesOut] = Field(..., description="Global function name -> devices.")


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


class PlanResponse(BaseModel):
    """The planned module and what the planner did."""

    module: str = Field(..., description="The planned module, with on_device/device_copy made explicit.")
    format: Literal["text", "json"] = Field(..., description="Format of `module`.")
    virtual_devices: list[VirtualDeviceOut] = Field(
        ..., description="The table the output's `meta[VirtualDevice][i]` indices refer to."
    )
    summary: PlanSummary
    solver: SolverStats
    explanation: list[str] | None = Field(None, description="Present when the request set explain=true.")


# --------------------------------------------------------------------------
# Problems (RFC 9457)


class ProblemLocation(BaseModel):
    line: int | None = Field(None, description="1-based line in the submitted module.")
    column: int | None = Field(None, description="1-based column.")
    message: str


class ConflictConstraintOut(BaseModel):
    kind: str = Field(..., description="annotation, copy, call site, parameter attribute, constraint #k, ...")
    description: str
    expression: str = Field("", description="The expression, printed short.")
    line: int | None = None
    column: int | None = None
    devices: list[str] = Field(default_factory=list, description="Devices this constraint involves.")


class Problem(BaseModel):
    """An error, as application/problem+json (RFC 9457)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(..., description="Stable URI naming the kind of problem.")
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    request_id: str | None = None
    locations: list[ProblemLocation] | None = None
    constraints: list[ConflictConstraintOut] | None = None
    errors: list[dict[str, Any]] | None = Field(None, description="Schema violations (422 validation-error).")


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


class ReadyResponse(BaseModel):
    status: Literal["ready"] = "ready"
    probe_ms: float = Field(..., description="Time the Z3 probe took (a tiny problem in a fresh context).")
    pool: str = Field(..., description="Planning pool kind and size.")
    workers: ReadyWorkers


class VersionResponse(BaseModel):
    devplan: str
    python: str
    z3: str
    tvm: str | None = Field(None, description="apache-tvm version, when installed.")
