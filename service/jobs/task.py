"""The compile job as an RQ work horse runs it (`devplan worker`, a SpawnWorker).

The horse is a fresh interpreter (no fork after TVM import); the compile itself
runs in one more spawned process (`service.compile_workers.CompileRun`) with the
compile's own time limit and kill, so limits do not depend on the queue. The
horse and that process share a process group: when the worker stops the job
(`DELETE /jobs/{id}`) or dies cold, RQ kills the group and the worker removes
the job's scratch library (`DevplanWorker`).

A job never raises for an expected failure: it returns `{"ok": response}` or
`{"error": failure}` (a PlanFailure as a dict), and the API maps the latter to
status `failed` with its problem. Exceptions (and killed horses) are what RQ
retries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import solver
from service import sandbox
from service.artifact_store import ArtifactStoreUnavailable, open_store
from service.compile_workers import CompileJob, CompileRun, Target, worker_main
from service.config import get_settings
from service.errors import ARTIFACT_STORE_UNAVAILABLE, COMPILE_TIMEOUT
from service.jobs.queue import forget_inflight
from service.jobs.stats import observe, record_final
from service.logs import configure, flush
from service.models import CompileReport, CompileResponse
from service.planning import PlanFailure, PlanJob

log = logging.getLogger("devplan.jobs")
_logging_ready = False


def configure_horse_logging() -> None:
    """Once per process: the job's records as JSON lines through the
    non-blocking queue of service/logs.py. The work horse is a fresh
    interpreter (`DevplanWorker` is a SpawnWorker) that runs none of
    `devplan worker`'s set-up, so without this its records went to Python's
    last-resort handler: plain text, and a write that blocks the job when the
    log output stalls."""
    global _logging_ready
    if not _logging_ready:
        settings = get_settings()
        configure(settings.log_level, settings.log_queue_size)
        _logging_ready = True


def compile_response(result: dict[str, Any], cache_hit: bool) -> dict[str, Any]:
    """The /compile response (JSON) of a compile worker's `ok` result."""
    sha = str(result["sha256"])
    response = CompileResponse(
        artifact_id=sha,
        sha256=sha,
        size_bytes=int(str(result["size_bytes"])),
        download=f"/artifacts/{sha}",
        cache_hit=cache_hit,
        report=CompileReport.model_validate(result["report"]),
    )
    return response.model_dump(mode="json", exclude_none=True)


def plan_options(data: dict[str, Any]) -> solver.PlanOptions:
    """`solver.PlanOptions` from its JSON form (`dataclasses.asdict`): lists back to tuples."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(solver.PlanOptions):
        if f.name in data:
            value = data[f.name]
            values[f.name] = tuple(value) if isinstance(f.default, tuple) else value
    return solver.PlanOptions(**values)


def build(
    payload: dict[str, Any], job_id: str, on_start: Any = None, target: Target = worker_main
) -> dict[str, Any]:
    """Compile the payload's request into the artifact store: `{"ok": response}` or
    `{"error": failure}`. `on_start(pid)` is told the compile process's pid; `target` is
    the compile process's function (tests hold it)."""
    settings = get_settings()
    store = open_store(settings)
    key = str(payload["key"])
    try:
        cached = store.lookup(key)  # another job (or a sync /compile) may have built it meanwhile
    except ArtifactStoreUnavailable as err:
        return {"error": PlanFailure.plain(ARTIFACT_STORE_UNAVAILABLE.slug, str(err)).as_dict()}
    if cached is not None:
        return {"ok": dict(cached, cache_hit=True)}
    plan = PlanJob(
        module=str(payload["module"]),
        options=plan_options(payload["options"]),
        input_format=payload.get("format"),
        name="<request>",
        request_id=payload.get("request_id"),
    )
    scratch = store.scratch(job_id)
    compile_job = CompileJob(
        plan=plan,
        targets=payload.get("targets"),
        cuda_arch=payload.get("cuda_arch"),
        run_check=bool(payload.get("run_check", False)),
        library=str(scratch),
        sandbox=sandbox.config_from(settings),  # the layers this work horse finds (cached per process)
        deadline=time.time() + float(payload["compile_timeout_s"]),
    )
    timeout_s = float(payload["compile_timeout_s"])
    run = CompileRun(compile_job, target)
    try:
        if on_start is not None:
            on_start(run.proc.pid)
        result = asyncio.run(run.wait(timeout_s))
        if result is None:
            message = f"compiling did not finish within {timeout_s:g} s"
            return {"error": PlanFailure.plain(COMPILE_TIMEOUT.slug, message).as_dict()}
        if "error" in result:
            return {"error": result["error"]}
        response = compile_response(result["ok"], cache_hit=False)
        try:
            store.put(key, Path(compile_job.library), response["artifact_id"], response)
        except ArtifactStoreUnavailable as err:
            return {"error": PlanFailure.plain(ARTIFACT_STORE_UNAVAILABLE.slug, str(err)).as_dict()}
        return {"ok": response}
    finally:
        run.stop()  # kills it if it still runs; removes the scratch library


def run_compile_job(payload: dict[str, Any], target: Target = worker_main) -> dict[str, Any]:
    """The RQ job function (see the module docstring)."""
    from rq import get_current_job

    job: Any = get_current_job()  # rq's Job methods are untyped
    assert job is not None, "run_compile_job runs only as an RQ job"
    configure_horse_logging()
    # (DevplanWorker counted this attempt when it took the job.)

    def on_start(pid: int) -> None:
        job.meta["compile_pid"] = pid
        job.save_meta()

    started = datetime.now(UTC)
    try:
        outcome = build(payload, job.id, on_start, target)
    except Exception as err:  # unexpected: RQ records it and retries (a worker's bug, a lost disk...)
        log.exception("compile job %s failed", job.id)
        flush()
        raise RuntimeError(f"compile job failed: {type(err).__name__}: {err}") from None
    ended = datetime.now(UTC)
    log.info(
        "compile job %s %s in %.2f s",
        job.id,
        "finished" if "ok" in outcome else "failed",
        (ended - started).total_seconds(),
        extra={"job_id": job.id, "request_id": payload.get("request_id")},
    )
    redis = job.connection
    if job.enqueued_at is not None:
        enqueued = job.enqueued_at if job.enqueued_at.tzinfo else job.enqueued_at.replace(tzinfo=UTC)
        observe(redis, "queued", max(0.0, (started - enqueued).total_seconds()))
    observe(redis, "run", (ended - started).total_seconds())
    record_final(redis, "finished" if "ok" in outcome else "failed")
    job.meta["counted"] = True
    job.save_meta()
    forget_inflight(redis, str(payload["key"]), job.id)
    flush()  # the horse ends after its job; its queued lines would die with it
    return outcome


def on_job_failure(job: Any, connection: Any, exc_type: Any, exc_value: Any, tb: Any) -> None:
    """RQ's failure callback (a raised job, a killed horse, an abandoned job): when no retry
    is left the job ends failed; count it as lost and free its cache key."""
    if job.retries_left:
        return
    if not job.meta.get("counted"):
        record_final(connection, "lost")
    key = job.meta.get("key")
    if isinstance(key, str):
        forget_inflight(connection, key, job.id)
