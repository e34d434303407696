"""The job API of the build farm: POST /jobs/compile, GET /jobs/{id}, GET /jobs, DELETE /jobs/{id}.

Needs `DEVPLAN_QUEUE_URL` (without it every route answers 503 queue-unavailable);
the queue and its semantics are in `service.jobs.queue`, the worker in
`service.worker`. A request whose cache key is already built is a cache hit:
nothing is enqueued and the answer is a finished job whose id is the cache key.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response

from service.api.deps import SettingsDep
from service.api.offloop import OffLoopJSONRoute
from service.artifact_store import ArtifactStoreUnavailable
from service.artifacts import cache_key
from service.errors import (
    ARTIFACT_STORE_UNAVAILABLE,
    INTERNAL_ERROR,
    NOT_FOUND,
    QUEUE_UNAVAILABLE,
    VALIDATION_ERROR,
)
from service.jobs.http import (
    artifact_backend,
    job_out,
    job_payload,
    job_queue,
    new_waiter,
    queue_down,
    store_down,
)
from service.jobs.models import CancelOut, JobList, JobOut, JobStatus
from service.jobs.queue import JobView, QueueUnavailable
from service.models import CompileRequest
from service.problems import ProblemError, problem_responses

jobs_router = APIRouter(tags=["jobs"], route_class=OffLoopJSONRoute)  # big bodies decode in a thread

JOB_ID = re.compile(r"^[0-9a-f]{32}$")
CACHE_KEY = re.compile(r"^[0-9a-f]{64}$")
NO_QUEUE = "no compile queue is configured on this server (DEVPLAN_QUEUE_URL)"


def _hit_view(key: str, cached: dict[str, Any]) -> JobView:
    return JobView(
        id=key,
        status="finished",
        position=None,
        enqueued_at=None,
        started_at=None,
        ended_at=None,
        worker=None,
        attempts=0,
        result=dict(cached, cache_hit=True),
        problem=None,
    )


@jobs_router.post(
    "/jobs/compile",
    operation_id="submit_compile_job",
    summary="Queue a compile (the body of POST /compile); 202 with the job",
    description="Enqueues the compile on the build farm's queue and answers at once: 202 with "
    "`Location: /jobs/{id}`. Identical requests (same cache key) share one job while it is in flight "
    "(`waiters` counts them). A cache key already built answers 200 with a finished job whose id is "
    "the key, and enqueues nothing.",
    status_code=202,
    response_model=JobOut,
    response_model_exclude_none=True,
    responses={
        200: {"model": JobOut, "description": "A cache hit: the finished job."},
        **problem_responses(VALIDATION_ERROR, QUEUE_UNAVAILABLE, ARTIFACT_STORE_UNAVAILABLE, INTERNAL_ERROR),
    },
)
async def submit_compile_job(
    request: Request, response: Response, body: Annotated[CompileRequest, Body()], settings: SettingsDep
) -> Any:
    path = request.url.path
    if not settings.queue_url:
        return queue_down(NO_QUEUE, path)
    key = cache_key(body)
    try:
        cached = await asyncio.to_thread(artifact_backend(request).lookup, key)
    except ArtifactStoreUnavailable as err:
        return store_down(str(err), path)
    if cached is not None:
        response.status_code = 200
        return job_out(_hit_view(key, cached), path)
    queue = job_queue(request)
    waiter = new_waiter()
    try:
        job_id, _shared = await asyncio.to_thread(queue.submit, key, job_payload(body, settings), waiter)
        view = await asyncio.to_thread(queue.view, job_id)
    except QueueUnavailable as err:
        return queue_down(str(err), path)
    if view is None:  # ended and expired at once: only with a tiny result TTL
        raise ProblemError(NOT_FOUND, f"job {job_id} ended and expired already")
    response.headers["Location"] = f"/jobs/{job_id}"
    return job_out(view, f"/jobs/{job_id}", waiter=waiter)


@jobs_router.get(
    "/jobs/{job_id}",
    operation_id="get_job",
    summary="A compile job: status, position, times, worker, attempts, result or problem",
    response_model=JobOut,
    response_model_exclude_none=True,
    responses=problem_responses(NOT_FOUND, QUEUE_UNAVAILABLE, ARTIFACT_STORE_UNAVAILABLE),
)
async def get_job(request: Request, job_id: str, settings: SettingsDep) -> Any:
    path = request.url.path
    if not settings.queue_url:
        return queue_down(NO_QUEUE, path)
    if CACHE_KEY.fullmatch(job_id):  # the id of a cache hit
        try:
            cached = await asyncio.to_thread(artifact_backend(request).lookup, job_id)
        except ArtifactStoreUnavailable as err:
            return store_down(str(err), path)
        if cached is None:
            raise ProblemError(NOT_FOUND, f"no job or stored artifact {job_id}")
        return job_out(_hit_view(job_id, cached), path)
    if not JOB_ID.fullmatch(job_id):
        raise ProblemError(NOT_FOUND, "job ids are 32 lowercase hex digits (64 for a cache hit)")
    try:
        view = await asyncio.to_thread(job_queue(request).view, job_id)
    except QueueUnavailable as err:
        return queue_down(str(err), path)
    if view is None:
        raise ProblemError(NOT_FOUND, f"no job {job_id} (it may have expired: DEVPLAN_JOB_RESULT_TTL_S)")
    return job_out(view, path)


@jobs_router.get(
    "/jobs",
    operation_id="list_jobs",
    summary="Recent compile jobs, newest first",
    response_model=JobList,
    response_model_exclude_none=True,
    responses=problem_responses(QUEUE_UNAVAILABLE),
)
async def list_jobs(
    request: Request,
    settings: SettingsDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs with this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> Any:
    path = request.url.path
    if not settings.queue_url:
        return queue_down(NO_QUEUE, path)
    try:
        views = await asyncio.to_thread(job_queue(request).list, status, limit)
    except QueueUnavailable as err:
        return queue_down(str(err), path)
    return JobList(jobs=[job_out(v, f"/jobs/{v.id}") for v in views])


@jobs_router.delete(
    "/jobs/{job_id}",
    operation_id="cancel_job",
    summary="Cancel a compile job (when no other request still waits on it)",
    description="With `waiter` (the token POST /jobs/compile answered), withdraws that request; "
    "without it, stands for one request. The job is cancelled when no request waits on it any more: "
    "a queued job never starts; a running one has its compile process killed and its scratch "
    "library removed.",
    response_model=CancelOut,
    response_model_exclude_none=True,
    responses=problem_responses(NOT_FOUND, QUEUE_UNAVAILABLE),
)
async def cancel_job(
    request: Request,
    job_id: str,
    settings: SettingsDep,
    waiter: Annotated[str | None, Query(description="Your waiter token from POST /jobs/compile.")] = None,
) -> Any:
    path = request.url.path
    if not settings.queue_url:
        return queue_down(NO_QUEUE, path)
    if not JOB_ID.fullmatch(job_id):
        raise ProblemError(NOT_FOUND, "job ids are 32 lowercase hex digits")
    queue = job_queue(request)
    try:
        if await asyncio.to_thread(queue.view, job_id) is None:
            raise ProblemError(NOT_FOUND, f"no job {job_id}")
        canceled = await asyncio.to_thread(queue.release, job_id, waiter)
        view = await asyncio.to_thread(queue.view, job_id)
    except QueueUnavailable as err:
        return queue_down(str(err), path)
    return CancelOut(canceled=canceled, job=job_out(view, path) if view is not None else None)

