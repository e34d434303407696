"""What the HTTP routes of the farm share: the app's JobQueue, the job payload, 503 answers,
and a job as its response model."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from service.artifact_store import ArtifactBackend, ArtifactStoreUnavailable, open_store
from service.config import Settings
from service.errors import ARTIFACT_STORE_UNAVAILABLE, QUEUE_UNAVAILABLE, ErrorKind
from service.jobs.models import JobOut
from service.jobs.queue import JobQueue, JobView, QueueUnavailable
from service.logs import current_request_id
from service.models import CompileRequest, CompileResponse, to_plan_job
from service.planning import PlanFailure
from service.problems import failure_to_problem, problem_body, problem_response

log = logging.getLogger("devplan.jobs")

RETRY_AFTER_S = 5
POLL_S = 0.1


def job_queue(request: Request) -> JobQueue:
    """The app's queue client (one Redis connection pool per app, made on first use)."""
    queue: JobQueue | None = getattr(request.app.state, "job_queue", None)
    if queue is None:
        queue = JobQueue(request.app.state.settings)
        request.app.state.job_queue = queue
    return queue


def artifact_backend(request: Request) -> ArtifactBackend:
    """The app's artifact backend (made on first use; boto3 clients are thread-safe)."""
    store: ArtifactBackend | None = getattr(request.app.state, "artifact_backend", None)
    if store is None:
        store = open_store(request.app.state.settings)
        request.app.state.artifact_backend = store
    return store


def unavailable(kind: ErrorKind, detail: str, path: str) -> JSONResponse:
    """503 queue-unavailable / artifact-store-unavailable with Retry-After."""
    log.warning("%s: %s", kind.slug, detail)
    return problem_response(kind, detail, path, headers={"Retry-After": str(RETRY_AFTER_S)})


def queue_down(detail: str, path: str) -> JSONResponse:
    return unavailable(QUEUE_UNAVAILABLE, detail, path)


def store_down(detail: str, path: str) -> JSONResponse:
    return unavailable(ARTIFACT_STORE_UNAVAILABLE, detail, path)


def job_payload(body: CompileRequest, settings: Settings) -> dict[str, Any]:
    """What a job carries, as JSON: the module, the planning options (`solver.PlanOptions`,
    with this API's clamped time limit), the compile fields and the compile's time limit, so a
    worker enforces the API's limits. The worker rebuilds the PlanJob (`service.jobs.task`)."""
    plan = to_plan_job(body, settings, request_id=current_request_id())
    return {
        "module": body.module,
        "format": body.format,
        "options": dataclasses.asdict(plan.options),
        "targets": body.model_dump(mode="json")["targets"],
        "cuda_arch": body.cuda_arch,
        "run_check": body.run_check,
        "compile_timeout_s": settings.compile_timeout_s,
        "request_id": plan.request_id,
    }


def new_waiter() -> str:
    return uuid.uuid4().hex


def problem_of(view: JobView, path: str) -> dict[str, Any] | None:
    """The job's failure as the problem+json object an HTTP answer would carry."""
    if view.problem is None:
        return None
    error = failure_to_problem(PlanFailure.from_dict(view.problem))
    return problem_body(error.kind, error.detail, path, **error.extra)


def job_out(view: JobView, path: str, waiter: str | None = None) -> JobOut:
    result = CompileResponse.model_validate(view.result) if view.result is not None else None
    return JobOut(
        id=view.id,
        status=view.status,
        position=view.position,
        enqueued_at=view.enqueued_at,
        started_at=view.started_at,
        ended_at=view.ended_at,
        worker=view.worker,
        attempts=view.attempts,
        result=result,
        problem=problem_of(view, path),
        waiters=view.waiters,
        waiter=waiter,
    )


async def wait_for(queue: JobQueue, job_id: str, timeout_s: float) -> tuple[JobView | None, bool]:
    """Poll the job until it ends: (its view, False); (None, True) when `timeout_s` passed
    first; (None, False) when Redis no longer has it (its TTL passed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        view = await asyncio.to_thread(queue.view, job_id)
        if view is None or view.done:
            return view, False
        if loop.time() >= deadline:
            return None, True
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - loop.time())))


async def farm_dependency_down(request: Request) -> tuple[str, str] | None:
    """For /readyz: ("redis" | "artifact-store", why) when a farm dependency does not answer,
    None when both do (or no queue is configured). Each check blocks up to a few seconds, so
    they run in a thread."""
    settings: Settings = request.app.state.settings
    if not settings.queue_url:
        return None
    try:
        await asyncio.to_thread(job_queue(request).ping)
    except QueueUnavailable as err:
        return "redis", str(err)
    try:
        await asyncio.to_thread(artifact_backend(request).ping)
    except ArtifactStoreUnavailable as err:
        return "artifact-store", str(err)
    return None
