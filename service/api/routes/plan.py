"""POST /plan: plan the devices of a Relay or Relax module; POST /plan/diff."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from service import problems
from service.api.deps import MetricsDep, PoolDep, SettingsDep
from service.api.offloop import OffLoopJSONRoute
from service.errors import kind_of
from service.examples import PLAIN, PLAN_EXAMPLES
from service.logs import current_request_id
from service.metrics import Metrics
from service.models import PlanRequest, PlanResponse, check_nesting, to_plan_job
from service.planning import KIND_CONFLICT, KIND_TIMEOUT, PlanFailure, deadline_s
from service.pool import Job, PlanPool, PoolBusy
from service.problems import OVERLOADED, ProblemError, failure_to_problem, problem_responses

router = APIRouter(tags=["plan"], route_class=OffLoopJSONRoute)  # big bodies decode in a thread
log = logging.getLogger("devplan.service")

# The problems of every route that plans a module (POST /plan, /plan/picture), in
# the order the OpenAPI document lists them.
PLAN_PROBLEMS = (
    problems.MALFORMED_MODULE,
    problems.REQUEST_TOO_LARGE,
    problems.PLANNING_CONFLICT,
    problems.INVALID_CONFIG,
    problems.VALIDATION_ERROR,
    problems.INTERNAL_ERROR,
    problems.OVERLOADED,
    problems.SOLVER_TIMEOUT,
)


async def submit_plan(job: Job, pool: PlanPool, metrics: Metrics, *, count_busy: bool) -> dict[str, Any]:
    """Run `job` in the worker pool under its deadline, counted as in flight;
    a pool that stays busy is a 503 `overloaded` problem (also counted as a
    plan outcome where `count_busy`)."""
    metrics.in_flight.inc()
    try:
        return await pool.submit(job, deadline_s(job.timeout_ms))
    except PoolBusy:
        if count_busy:
            metrics.plans.labels("overloaded").inc()
        raise ProblemError(OVERLOADED, f"all {pool.size} planning slots stayed busy; retry later") from None
    finally:
        metrics.in_flight.dec()


@router.post(
    "/plan",
    operation_id="plan",
    summary="Plan the devices of a Relay or Relax module",
    description="Reads the module (Relay text, Relax TVMScript, or TVM JSON of either), decides a virtual "
    "device for every sub-expression, and returns the module with `on_device` / `device_copy` made explicit "
    "(Relax: a vdevice on every tensor and `R.to_vdevice` at each copy). "
    '`mode: "tvm"` (default) gives exactly TVM <= 0.19 PlanDevices\' answer; `mode: "optimize"` chooses '
    "the devices that minimise the predicted run time under operator support and memory "
    "budgets, and adds `cost` to the response. Conflicts come back as a 422 problem listing the "
    "conflicting constraints (pins, support rules, budgets) with their source locations.",
    response_model=PlanResponse,
    response_model_exclude_none=True,
    responses=problem_responses(*PLAN_PROBLEMS),
)
async def plan(
    request: Annotated[PlanRequest, Body(openapi_examples=PLAN_EXAMPLES)],
    settings: SettingsDep,
    pool: PoolDep,
    metrics: MetricsDep,
) -> JSONResponse:
    job = to_plan_job(request, settings, request_id=current_request_id())
    result = await submit_plan(job, pool, metrics, count_busy=True)
    timings = result.get("timings_ms") or {}
    if timings:
        metrics.plan_seconds.observe(sum(timings.values()) / 1000)
    if "error" in result:
        failure = PlanFailure.from_dict(result["error"])
        metrics.plans.labels(kind_of(failure.kind).outcome or "internal").inc()
        if failure.kind == KIND_CONFLICT:
            metrics.conflicts.inc()
        elif failure.kind == KIND_TIMEOUT:
            metrics.timeouts.inc()
        raise failure_to_problem(failure)
    metrics.plans.labels("ok").inc()
    metrics.solver_seconds.observe(timings.get("plan", 0.0) / 1000)
    # Off the event loop: checking and writing out a big module's answer (its placements, the
    # report fields) takes CPU time in proportion to it.
    outcome = result["ok"]
    return await asyncio.to_thread(lambda: plan_response(PlanResponse.model_validate(outcome)))


def plan_response(response: PlanResponse) -> JSONResponse:
    """The response body without absent optional fields, except inside `cost`,
    whose nulls carry meaning (`tvm_mode_predicted_ms: null` with its reason)."""
    content = response.model_dump(mode="json", exclude_none=True)
    if response.cost is not None:
        content["cost"] = response.cost.model_dump(mode="json")
    return JSONResponse(content)


# --------------------------------------------------------------------------
# POST /plan/diff


MAX_REPORT_PLACEMENTS = 100_000
"""Placements (and copies) one report of POST /plan/diff may hold; more is a 422 at that list."""
MAX_REPORT_DEPTH = 16
"""How deeply a report's objects and arrays may nest (its own fields nest 4 levels)."""


class PlacementIn(BaseModel):
    """One placement of a report (schemas/report.schema.json, `$defs.placement`)."""

    model_config = ConfigDict(extra="allow", strict=True)

    node: int = Field(..., ge=0)
    kind: Literal["operator", "call", "parameter"]
    name: str = Field(..., max_length=4096)
    function: str = Field(..., max_length=4096)
    index: int | None = Field(None, ge=0)
    binding: str | None = Field(None, max_length=4096)
    line: int | None = None
    column: int | None = None
    device: str = Field(..., max_length=1024)
    decided_by: str | None = Field(None, max_length=256)
    inputs: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)


class CopyIn(BaseModel):
    """One copy of a report (`$defs.copy`)."""

    model_config = ConfigDict(extra="allow", strict=True)

    src: str = Field(..., max_length=1024)
    dst: str = Field(..., max_length=1024)
    bytes: int | None = Field(None, ge=0)
    line: int | None = None
    column: int | None = None
    from_: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, alias="from")
    to: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    into_result: str | None = Field(None, max_length=4096)


class PredictionIn(BaseModel):
    """The prediction of a report."""

    model_config = ConfigDict(extra="allow", strict=True)

    predicted_ms: float | None = Field(None, ge=0)


class ReportIn(BaseModel):
    """A placement report (`devplan plan --report`; schemas/report.schema.json)."""

    model_config = ConfigDict(extra="allow", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _not_too_deep(cls, value: Any) -> Any:
        """Extra fields are kept as they are: refuse ones nested past MAX_REPORT_DEPTH (422
        invalid-config) before anything walks or serializes them."""
        return check_nesting(value, MAX_REPORT_DEPTH, "a report")

    report_version: Literal[1, 2] = Field(..., description="The report format (1 or 2: 2 names modules with dots).")
    placements: list[PlacementIn] = Field(
        ..., max_length=MAX_REPORT_PLACEMENTS, description="Every placement of the plan (at most 100,000)."
    )
    copies: list[CopyIn] = Field(
        default_factory=list,
        max_length=MAX_REPORT_PLACEMENTS,
        description="Every device_copy of the plan (at most 100,000).",
    )
    prediction: PredictionIn = Field(default_factory=PredictionIn, description="The predicted run time.")


class PlanDiffRequest(BaseModel):
    """Two plans to compare: each a /plan request (planned here) or a report."""

    model_config = ConfigDict(extra="forbid", strict=True)

    before: PlanRequest | ReportIn = Field(..., description="The plan before the change.")
    after: PlanRequest | ReportIn = Field(..., description="The plan after the change.")
    fail_on: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Rules to check: copies-added, moved-to:DEVICE, predicted-regression:PERCENT%, any-change "
        "(the answer's `rules` and `failed` say which were hit).",
        examples=[["copies-added", "moved-to:cpu", "predicted-regression:5%"]],
    )


DIFF_EXAMPLES: dict[str, Any] = {
    "pin": {
        "summary": "What a pin moves (and whether it adds a copy)",
        "value": {
            "before": {"module": PLAIN},
            "after": {"module": PLAIN, "constraints": [{"select": {"op": "add"}, "device": "cpu"}]},
            "fail_on": ["copies-added", "moved-to:cpu", "predicted-regression:5%"],
        },
    }
}


def _read_diff_request(body: bytes) -> tuple[PlanDiffRequest, dict[str, Any] | None, dict[str, Any] | None]:
    """The request, and each side's report where it is one (None: a request to plan). Runs in a
    thread: reading and checking a report of many placements takes seconds of CPU."""
    try:
        request = PlanDiffRequest.model_validate_json(body)
    except ValidationError as err:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in err.errors(include_url=False)]
        raise RequestValidationError(errors) from None

    def report(side: PlanRequest | ReportIn) -> dict[str, Any] | None:
        return side.model_dump(by_alias=True) if isinstance(side, ReportIn) else None

    return request, report(request.before), report(request.after)


async def _side_report(
    side: PlanRequest | ReportIn,
    report: dict[str, Any] | None,
    settings: Any,
    pool: PlanPool,
    metrics: Metrics,
) -> dict[str, Any]:
    """A report as it is, or the report of a request planned in the pool."""
    from service.report import report_from_response

    if report is not None:
        return report
    assert isinstance(side, PlanRequest)
    job = to_plan_job(side, settings, request_id=current_request_id())
    job = dataclasses.replace(job, include=("placements",))
    result = await submit_plan(job, pool, metrics, count_busy=False)
    if "error" in result:
        raise failure_to_problem(PlanFailure.from_dict(result["error"]))
    return await asyncio.to_thread(report_from_response, result["ok"], job.options.mode)  # linear in the plan


DIFF_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/PlanDiffRequest"},
                "examples": DIFF_EXAMPLES,
            }
        },
    }
}
"""The body is read and checked off the event loop, so the schema is declared here (and
PlanDiffRequest added to the components by service.main)."""


@router.post(
    "/plan/diff",
    operation_id="plan_diff",
    summary="Compare two plans",
    description="Each side is a /plan request (planned here, like `POST /plan`) or a placement report "
    "(`devplan plan --report`). The answer lists the operators whose device changed, operators added and "
    "removed, copies added and removed with their bytes, and the change of predicted time and of operator "
    "calls per device. Nodes are matched by function, operator and position in the data flow, never by "
    "node ids or line numbers (docs/ci.md). With `fail_on`, `rules` says which rules were hit. "
    f"A report holds at most {MAX_REPORT_PLACEMENTS} placements; matching runs in a planning worker "
    "under the plan time limit (DEVPLAN_DEFAULT_TIMEOUT_MS; 504 `solver-timeout` past it).",
    responses=problem_responses(*PLAN_PROBLEMS),
    openapi_extra=DIFF_REQUEST_BODY,
)
async def plan_diff(http: Request, settings: SettingsDep, pool: PoolDep, metrics: MetricsDep) -> Response:
    from service import diff

    request, before_report, after_report = await asyncio.to_thread(_read_diff_request, await http.body())
    try:
        diff.parse_rules(request.fail_on)
    except diff.RuleError as err:
        raise ProblemError(problems.INVALID_CONFIG, f"fail_on[{err.index}]: {err}") from None
    before = await _side_report(request.before, before_report, settings, pool, metrics)
    after = await _side_report(request.after, after_report, settings, pool, metrics)
    job = diff.DiffJob(
        before,
        after,
        tuple(request.fail_on),
        timeout_ms=settings.default_timeout_ms,
        request_id=current_request_id(),
    )
    result = await submit_plan(job, pool, metrics, count_busy=False)
    if "error" in result:
        raise failure_to_problem(PlanFailure.from_dict(result["error"]))
    return Response(result["ok"], media_type="application/json")
