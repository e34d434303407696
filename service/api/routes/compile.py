"""POST /compile and GET /artifacts/{id}: plan (if needed), lower to Relax, compile with TVM.

The routes only: the request and response models are in `service.models`, the
worker process in `service.compile_workers`, the artifact store (quota, LRU,
cache key) in `service.artifacts`. Compiles run at most `compile_workers` at a
time (a request waits up to `queue_timeout_ms` for a slot), each within
`compile_timeout_s`; a compile whose request is cancelled is killed before its
slot is released.

With `DEVPLAN_QUEUE_URL` set (the build farm, docs/farm.md) /compile submits a
job to the queue and waits for it (`_compile_on_queue`), and downloads come from
the configured artifact backend (S3 or the shared directory).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from service import sandbox
from service.api.deps import SettingsDep
from service.api.offloop import OffLoopJSONRoute
from service.api.routes.jobs import jobs_router
from service.artifact_store import ArtifactStoreUnavailable
from service.artifacts import ArtifactStore, cache_key
from service.compile_workers import CompileJob, CompileRun
from service.config import Settings
from service.errors import ARTIFACT_STORE_UNAVAILABLE, COMPILE_LOST, FARM_KINDS
from service.jobs.http import (
    RETRY_AFTER_S,
    artifact_backend,
    job_payload,
    job_queue,
    new_waiter,
    queue_down,
    store_down,
    wait_for,
)
from service.jobs.queue import JobQueue, QueueUnavailable
from service.logs import current_request_id
from service.models import CompileReport, CompileRequest, CompileResponse, to_plan_job
from service.planning import PlanFailure
from service.problems import (
    COMPILE_BUSY,
    COMPILE_KINDS,
    COMPILE_TIMEOUT,
    INTERNAL_ERROR,
    INVALID_CONFIG,
    MALFORMED_MODULE,
    NOT_FOUND,
    PLANNING_CONFLICT,
    SOLVER_TIMEOUT,
    TVM_UNAVAILABLE,
    VALIDATION_ERROR,
    ProblemError,
    failure_to_problem,
    problem_response,
    problem_responses,
)
from service.sandbox import SandboxConfig

compile_router = APIRouter(tags=["compile"], route_class=OffLoopJSONRoute)  # big bodies decode in a thread
log = logging.getLogger("devplan.service")

ARTIFACT_ID = re.compile(r"^[0-9a-f]{64}$")
CHUNK_BYTES = 1 << 20

COMPILE_EXAMPLE = {
    "summary": "Plan with two CPU devices, compile for llvm, check the result",
    "value": {
        "module": '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {\n"
        "  %0 = nn.relu(%x);\n"
        "  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0]);\n"
        "  nn.dense(%1, %w, units=4)\n"
        "}\n",
        "virtual_devices": ["cpu:0", "cpu:1"],
        "default_device": "cpu:1",
        "host_device": "cpu:0",
        "targets": {"cpu": "llvm"},
        "run_check": True,
    },
}


def artifact_store(settings: Settings) -> ArtifactStore:
    """The store under `artifact_dir`, bounded by the settings; a temporary file
    older than twice the compile time limit was left by a dead process."""
    return ArtifactStore(
        Path(settings.artifact_dir).resolve(),
        max_bytes=settings.artifact_max_bytes,
        max_age_s=settings.artifact_max_age_s,
        stale_tmp_s=2 * settings.compile_timeout_s + 60,
    )


def _semaphore(request: Request, size: int) -> asyncio.Semaphore:
    sem: asyncio.Semaphore | None = getattr(request.app.state, "compile_slots", None)
    if sem is None:
        sem = asyncio.Semaphore(size)
        request.app.state.compile_slots = sem
    return sem


def _sandbox(request: Request, settings: Settings) -> SandboxConfig:
    """The sandbox found when the service started (an app run without its start-up: found now)."""
    config: SandboxConfig | None = getattr(request.app.state, "sandbox", None)
    if config is None:
        config = sandbox.config_from(settings)
        request.app.state.sandbox = config
    return config


def _response(result: dict[str, object], cache_hit: bool) -> CompileResponse:
    sha = str(result["sha256"])
    return CompileResponse(
        artifact_id=sha,
        sha256=sha,
        size_bytes=int(str(result["size_bytes"])),
        download=f"/artifacts/{sha}",
        cache_hit=cache_hit,
        report=CompileReport.model_validate(result["report"]),
    )


@compile_router.post(
    "/compile",
    operation_id="compile",
    summary="Plan, lower to TVM Relax and compile a Relay module",
    description="Plans the module unless it is already planned (every parameter and function result "
    "has a device), lowers it to Relax with one vdevice per virtual device (`device_copy` -> "
    "`R.to_vdevice`), compiles it with TVM 0.27 for each device's target and stores the library. "
    "Requests with the same cache key reuse the stored artifact (`cache_hit`, no plan): the key covers "
    "the module, the planning options, targets, CUDA arch, run_check, the TVM version and the installed "
    "devplan code, not timeout_ms, explain, output_format or z3_check. Stored libraries are evicted "
    "least recently used first beyond DEVPLAN_ARTIFACT_MAX_BYTES or after DEVPLAN_ARTIFACT_MAX_AGE_S.",
    response_model=CompileResponse,
    response_model_exclude_none=True,
    responses=problem_responses(
        MALFORMED_MODULE,
        PLANNING_CONFLICT,
        INVALID_CONFIG,
        VALIDATION_ERROR,
        *COMPILE_KINDS,
        *FARM_KINDS,
        SOLVER_TIMEOUT,
        INTERNAL_ERROR,
    ),
)
async def compile_module(
    request: Request,
    body: Annotated[CompileRequest, Body(openapi_examples={"two-cpus": COMPILE_EXAMPLE})],
    settings: SettingsDep,
) -> Any:
    if settings.queue_url:
        return await _compile_on_queue(request, body, settings)
    if importlib.util.find_spec("tvm") is None:
        raise ProblemError(TVM_UNAVAILABLE, "apache-tvm is not installed; install the tvm extra")
    store = artifact_store(settings)
    key = cache_key(body)  # before planning: a hit costs no plan
    cached = await asyncio.to_thread(store.lookup, key)
    if cached is not None:
        return CompileResponse.model_validate(cached).model_copy(update={"cache_hit": True})
    slots = _semaphore(request, settings.compile_workers)
    try:
        await asyncio.wait_for(slots.acquire(), settings.queue_timeout_ms / 1000)
    except TimeoutError:
        raise ProblemError(COMPILE_BUSY, "all compile slots stayed busy; retry later") from None
    try:
        targets: dict[str | int, Any] | None = None
        if body.targets is not None:
            targets = {device: target for device, target in body.targets.items()}
        job = CompileJob(
            plan=to_plan_job(body, settings, request_id=current_request_id()),
            targets=targets,
            cuda_arch=body.cuda_arch,
            run_check=body.run_check,
            library=str(store.new_temp()),
            sandbox=_sandbox(request, settings),
            deadline=time.time() + settings.compile_timeout_s,
        )
        run = CompileRun(job)
        try:
            result = await _wait_unless_gone(request, run, settings.compile_timeout_s)
            if result is _GONE:
                # The client left: its compile is killed below (the run check's child dies with
                # it), its temporary files removed, its slot freed; nobody reads an answer.
                log.info("client left; compile process %s stopped", run.proc.pid)
                return Response(status_code=499)
            if result is not None and "ok" in result:
                response = _response(result["ok"], cache_hit=False)
                await asyncio.to_thread(
                    store.put, key, Path(job.library), response.artifact_id, response.model_dump(mode="json")
                )
        finally:
            run.stop()  # kills it if it still runs (time limit, cancelled request), removes the temporary
    finally:
        slots.release()
    if result is None:
        raise ProblemError(
            COMPILE_TIMEOUT, f"compiling did not finish within {settings.compile_timeout_s:g} s"
        )
    if "error" in result:
        raise failure_to_problem(PlanFailure.from_dict(result["error"]))
    return response


# `_wait_unless_gone`'s answer when the client disconnected first.
_GONE: dict[str, Any] = {"gone": True}
# How often a waiting compile asks whether its client is still connected.
_DISCONNECT_POLL_S = 0.25


async def _wait_unless_gone(request: Request, run: CompileRun, timeout_s: float) -> dict[str, Any] | None:
    """`run.wait(timeout_s)`, or `_GONE` as soon as the client has disconnected (the
    server notices within `_DISCONNECT_POLL_S`): a client that leaves stops its work."""
    waiting = asyncio.ensure_future(run.wait(timeout_s))
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=_DISCONNECT_POLL_S)
            if done:
                return waiting.result()
            if await request.is_disconnected():
                return _GONE
    finally:
        if not waiting.done():
            waiting.cancel()


def _release_later(queue: JobQueue, job_id: str, waiter: str) -> None:
    """Withdraw a waiter whose request ended early (cancelled): in a thread, never awaited."""
    loop = asyncio.get_running_loop()

    def release() -> None:
        try:
            queue.release(job_id, waiter)
        except QueueUnavailable as err:
            log.warning("could not withdraw from job %s: %s", job_id, err)

    loop.run_in_executor(None, release)


async def _compile_on_queue(request: Request, body: CompileRequest, settings: Settings) -> Any:
    """POST /compile on the farm: a cache hit, or a job (shared with identical requests in
    flight) waited for up to `compile_timeout_s`; past it our interest is withdrawn (the job
    is cancelled when nobody else waits on it) and the answer is 504 compile-timeout."""
    path = request.url.path
    key = cache_key(body)
    try:
        cached = await asyncio.to_thread(artifact_backend(request).lookup, key)
    except ArtifactStoreUnavailable as err:
        return store_down(str(err), path)
    if cached is not None:
        return CompileResponse.model_validate(cached).model_copy(update={"cache_hit": True})
    queue = job_queue(request)
    waiter = new_waiter()
    try:
        job_id, _shared = await asyncio.to_thread(queue.submit, key, job_payload(body, settings), waiter)
    except QueueUnavailable as err:
        return queue_down(str(err), path)
    settled = False
    try:
        view, timed_out = await wait_for(queue, job_id, settings.compile_timeout_s)
        settled = True
    except QueueUnavailable as err:
        return queue_down(str(err), path)
    finally:
        if not settled:  # the client left, or Redis went away: withdraw when possible
            _release_later(queue, job_id, waiter)
    if timed_out:
        try:
            await asyncio.to_thread(queue.release, job_id, waiter)
        except QueueUnavailable as err:
            log.warning("could not withdraw from job %s: %s", job_id, err)
        raise ProblemError(
            COMPILE_TIMEOUT, f"compiling did not finish within {settings.compile_timeout_s:g} s (job {job_id})"
        )
    if view is None:
        return problem_response(
            COMPILE_LOST, f"job {job_id} expired from the queue", path, headers={"Retry-After": str(RETRY_AFTER_S)}
        )
    if view.status == "finished" and view.result is not None:
        return CompileResponse.model_validate(view.result)
    failure = PlanFailure.from_dict(view.problem or PlanFailure.plain(COMPILE_LOST.slug, "no result").as_dict())
    error = failure_to_problem(failure)
    if error.kind.status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_S)}
        return problem_response(error.kind, error.detail, path, headers=headers, **error.extra)
    raise error


@compile_router.get(
    "/artifacts/{artifact_id}",
    operation_id="get_artifact",
    summary="Download a compiled library",
    description="The shared library a /compile produced (load it with `tvm.runtime.load_module` and "
    "run it on `tvm.relax.VirtualMachine` with the plan's devices). With the S3 backend and "
    "`redirect=true`, a 307 to a presigned URL of the object instead (the local backend ignores it).",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The library."},
        307: {"description": "redirect=true on the S3 backend: the presigned URL (Location)."},
        **problem_responses(NOT_FOUND, ARTIFACT_STORE_UNAVAILABLE),
    },
)
async def get_artifact(
    request: Request,
    artifact_id: str,
    settings: SettingsDep,
    redirect: Annotated[bool, Query(description="S3 backend: redirect to a presigned URL.")] = False,
) -> Response:
    if not ARTIFACT_ID.fullmatch(artifact_id):
        raise ProblemError(NOT_FOUND, "artifact ids are 64 lowercase hex digits")
    if settings.queue_url or settings.artifact_url:
        store = artifact_backend(request)
        try:
            if redirect:
                url = await asyncio.to_thread(store.presign, artifact_id)
                if url is not None:
                    return RedirectResponse(url, status_code=307)
            download = await asyncio.to_thread(store.open, artifact_id)
        except ArtifactStoreUnavailable as err:
            return store_down(str(err), request.url.path)
        if download is None:
            raise ProblemError(NOT_FOUND, f"no artifact {artifact_id}")
        return StreamingResponse(
            download.chunks,
            media_type="application/octet-stream",
            headers={
                "Content-Length": str(download.size),
                "Content-Disposition": f'attachment; filename="{artifact_id}.so"',
            },
        )
    opened = await asyncio.to_thread(artifact_store(settings).open, artifact_id)
    if opened is None:
        raise ProblemError(NOT_FOUND, f"no artifact {artifact_id}")

    # Read through the descriptor opened under the store's lock: an eviction
    # meanwhile unlinks the name, not these bytes. (A file object: closed by its
    # finalizer too, should the client leave before the first chunk.)
    file = os.fdopen(opened.fd, "rb")

    def chunks() -> Iterator[bytes]:
        with file:
            while chunk := file.read(CHUNK_BYTES):
                yield chunk

    return StreamingResponse(
        chunks(),
        media_type="application/octet-stream",
        headers={
            "Content-Length": str(opened.size),
            "Content-Disposition": f'attachment; filename="{artifact_id}.so"',
        },
    )


# The job API is part of the compile surface (same keys): served wherever /compile is.
compile_router.include_router(jobs_router)
