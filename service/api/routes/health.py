"""GET /healthz (the process answers) and GET /readyz (workers alive, Z3 usable, no slot lost).

Readiness never takes a planning slot: it looks at the pool's workers and
solves a tiny problem with Z3 in this process, so it answers at once while
every slot is busy with long plans (busy is not unready), and says 503 only
when something is broken: a slot whose worker cannot be restarted, or Z3.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter, Request

from service.api.deps import PoolDep
from service.jobs.http import farm_dependency_down
from service.models import HealthResponse, ReadyResponse, ReadySandbox, ReadyWorkers
from service.problems import NOT_READY, ProblemError, problem_responses
from service.sandbox import SandboxConfig

router = APIRouter(tags=["health"])

Z3_PROBE_TIMEOUT_MS = 2000
_PROBE_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="devplan-readyz")


def z3_probe() -> None:
    """Solve a two-variable problem in a fresh Z3 context; raises RuntimeError unless it is sat."""
    import z3

    ctx = z3.Context()
    x, y = z3.Ints("x y", ctx)
    s = z3.Solver(ctx=ctx)
    s.set("timeout", Z3_PROBE_TIMEOUT_MS)
    s.add(x + y == 3, x > y, y >= 0)
    result = s.check()
    if result != z3.sat:
        raise RuntimeError(f"the Z3 probe answered {result} ({s.reason_unknown()})")
    model = s.model()
    if model.eval(x).as_long() + model.eval(y).as_long() != 3:
        raise RuntimeError("the Z3 probe's model does not satisfy its constraints")


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
    summary="Readiness: planning workers alive, no slot lost, Z3 usable; the sandbox's layers",
    description="Does not queue behind plans: checks the planning workers (replacing idle ones "
    "that died) and solves a tiny problem with Z3 in the web process. 503 `not-ready` when a "
    "slot's worker cannot be restarted (the body gives the configured and effective pool sizes) "
    "or Z3 fails.",
    response_model=ReadyResponse,
    responses=problem_responses(NOT_READY),
)
async def readyz(request: Request, pool: PoolDep) -> ReadyResponse:
    pool.check_idle()
    status = pool.status()
    workers = ReadyWorkers(
        configured=status.configured, effective=status.effective, busy=status.busy, alive=status.alive
    )
    if not status.healthy:
        raise ProblemError(
            NOT_READY,
            f"the planning pool runs {status.effective} of {status.configured} slots: "
            "a worker could not be restarted (see the log)",
            configured=status.configured,
            effective=status.effective,
        )
    down = await farm_dependency_down(request)
    if down is not None:
        dependency, why = down
        raise ProblemError(NOT_READY, f"{dependency} does not answer: {why}", dependency=dependency)
    start = time.perf_counter()
    try:
        # Its own thread, not the default executor: callers' work there (decoding and checking big
        # bodies, writing answers) must not make a health check wait.
        await asyncio.get_running_loop().run_in_executor(_PROBE_THREAD, z3_probe)
    except Exception as err:  # noqa: BLE001 - any failure of the probe means not ready
        raise ProblemError(NOT_READY, f"the Z3 probe failed: {type(err).__name__}: {err}") from None
    probe_ms = round((time.perf_counter() - start) * 1000, 3)
    return ReadyResponse(probe_ms=probe_ms, pool=pool.describe(), workers=workers, sandbox=_sandbox(request))


def _sandbox(request: Request) -> ReadySandbox | None:
    """The sandbox the service found at start."""
    config: SandboxConfig | None = getattr(request.app.state, "sandbox", None)
    if config is None:
        return None
    return ReadySandbox(
        mode="on" if config.enabled else "off",
        layers=list(config.layers),
        unavailable=dict(config.unavailable),
    )
