"""GET /healthz (the process answers) and GET /readyz (a tiny real plan succeeds)."""

from __future__ import annotations

import time

from fastapi import APIRouter

from service.api.deps import PoolDep
from service.models import HealthResponse, ReadyResponse
from service.planning import TINY_MODULE, PlanJob
from service.pool import PoolBusy
from service.problems import NOT_READY, ProblemError, problem_responses

router = APIRouter(tags=["health"])

READINESS_DEADLINE_S = 10.0


@router.get(
    "/healthz",
    operation_id="healthz",
    summary="Liveness: the process answers",
    response_model=HealthResponse,
)
async def healthz() -> HealthResponse:
    return HealthResponse()


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="Readiness: Z3 is usable and a tiny plan succeeds",
    response_model=ReadyResponse,
    responses=problem_responses(NOT_READY),
)
async def readyz(pool: PoolDep) -> ReadyResponse:
    start = time.perf_counter()
    try:
        result = await pool.submit(PlanJob(module=TINY_MODULE, timeout_ms=5000, z3_check=True), READINESS_DEADLINE_S)
    except PoolBusy:
        raise ProblemError(NOT_READY, "no planning slot became free") from None
    if "error" in result:
        raise ProblemError(NOT_READY, f"the readiness plan failed: {result['error']['message']}")
    return ReadyResponse(plan_ms=round((time.perf_counter() - start) * 1000, 3), pool=pool.describe())
