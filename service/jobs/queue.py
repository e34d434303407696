"""Compile jobs on an RQ queue: submit (one job per cache key in flight), look up, list, cancel.

Redis keys of ours (beside RQ's own `rq:*`), all with a TTL:

- `devplan:inflight:<cache key>` -> the id of the job building that key while it
  is queued or running, so identical requests share it;
- `devplan:waiters:<job id>`: the set of requests waiting on the job (a sync
  `/compile` or a `/jobs/compile` submission each add a token). A time-out or a
  `DELETE` removes its token; the job is cancelled only when the set is empty.

Everything that talks to Redis raises `QueueUnavailable` when Redis cannot be
reached, so routes answer 503 `queue-unavailable`, never 500.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from service.config import Settings
from service.errors import COMPILE_CANCELED, COMPILE_LOST
from service.jobs.stats import record_final
from service.planning import PlanFailure

log = logging.getLogger("devplan.jobs")
T = TypeVar("T")

JOB_FUNCTION = "service.jobs.task.run_compile_job"
FAILURE_CALLBACK = "service.jobs.task.on_job_failure"
INFLIGHT = "devplan:inflight:"
WAITERS = "devplan:waiters:"
STATUSES = ("queued", "started", "finished", "failed", "canceled")
_QUEUED = {"queued", "deferred", "scheduled", "created", "rate_limited", "ready_to_enqueue"}
_ACTIVE = _QUEUED | {"started"}


class QueueUnavailable(Exception):
    """Redis cannot be reached (or answered with an error): 503 queue-unavailable."""


@contextlib.contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Turn the redis client's connection and server errors into QueueUnavailable."""
    from redis.exceptions import RedisError

    try:
        yield
    except RedisError as err:
        raise QueueUnavailable(f"{what}: {type(err).__name__}: {err}") from None


def connect(url: str) -> Any:
    """A Redis client that fails fast when the server is down (2 s to connect)."""
    from redis import Redis

    return Redis.from_url(url, socket_connect_timeout=2, socket_timeout=30, health_check_interval=15)


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as GET /jobs/{id} shows it (see `public_status` for the status vocabulary)."""

    id: str
    status: str
    position: int | None
    enqueued_at: str | None
    started_at: str | None
    ended_at: str | None
    worker: str | None
    attempts: int
    result: dict[str, Any] | None  # the /compile response (finished)
    problem: dict[str, Any] | None  # {"kind", "message", ...}: a PlanFailure as a dict (failed, canceled)
    waiters: int = 0
    compile_pid: int | None = None

    @property
    def done(self) -> bool:
        return self.status in ("finished", "failed", "canceled")


def public_status(rq_status: str, result: dict[str, Any] | None) -> str:
    """RQ's status in our vocabulary: deferred/scheduled are queued, stopped is canceled, and a
    job that returned a failure (a compile error, a time-out) is failed."""
    if rq_status in _QUEUED:
        return "queued"
    if rq_status == "stopped":
        return "canceled"
    if rq_status == "finished" and result is not None and "error" in result:
        return "failed"
    return rq_status


class JobQueue:
    """The compile queue of one Redis (`Settings.queue_url`)."""

    def __init__(self, settings: Settings, connection: Any = None, job_function: str = JOB_FUNCTION) -> None:
        """`job_function`: the dotted name workers run (tests substitute one that holds)."""
        from rq import Queue

        self.settings = settings
        self.job_function = job_function
        self.redis = connection if connection is not None else connect(settings.queue_url)
        self.queue = Queue(settings.queue_name, connection=self.redis)
        self.key_ttl_s = int((settings.compile_retries + 1) * (settings.compile_timeout_s + 120) + 600)

    def _redis(self, what: str, fn: Callable[[], T]) -> T:
        with redis_errors(what):
            return fn()

    def ping(self) -> None:
        """Raise QueueUnavailable unless Redis answers."""
        self._redis("ping", self.redis.ping)

    # -- submitting

    def submit(self, key: str, payload: dict[str, Any], waiter: str) -> tuple[str, bool]:
        """The job building `key` (a new one unless one is in flight), with `waiter` added
        to its waiters; returns (job id, whether an existing job was shared)."""
        with redis_errors("submit"):
            for _ in range(5):
                job_id = uuid.uuid4().hex
                if self.redis.set(INFLIGHT + key, job_id, nx=True, ex=self.key_ttl_s):
                    self._add_waiter(job_id, waiter)
                    self._enqueue(job_id, key, payload)
                    return job_id, False
                existing = self.redis.get(INFLIGHT + key)
                if existing is None:
                    continue
                existing_id = existing.decode()
                if self._rq_status(existing_id) in _ACTIVE:
                    self._add_waiter(existing_id, waiter)
                    # It may have ended between the two reads: then our waiter is harmless.
                    return existing_id, True
                self._forget_inflight(key, existing_id)
            raise QueueUnavailable("could not claim the cache key (it kept changing); retry")

    def _add_waiter(self, job_id: str, waiter: str) -> None:
        with self.redis.pipeline() as pipe:
            pipe.sadd(WAITERS + job_id, waiter)
            pipe.expire(WAITERS + job_id, self.key_ttl_s)
            pipe.execute()

    def _enqueue(self, job_id: str, key: str, payload: dict[str, Any]) -> None:
        from rq import Callback, Retry

        s = self.settings
        try:
            self.queue.enqueue(
                self.job_function,
                dict(payload, key=key),
                job_id=job_id,
                description=f"compile {key[:12]}",
                # RQ's own limit is a backstop: the compile has its own, inside the job.
                job_timeout=int(s.compile_timeout_s) + 120,
                result_ttl=s.job_result_ttl_s,
                failure_ttl=s.job_result_ttl_s,
                retry=Retry(max=s.compile_retries) if s.compile_retries > 0 else None,
                on_failure=Callback(FAILURE_CALLBACK),
                meta={"key": key, "attempts": 0, "retries": s.compile_retries},
            )
        except BaseException:
            self._forget_inflight(key, job_id)
            raise

    def _forget_inflight(self, key: str, job_id: str) -> None:
        """Delete the in-flight entry of `key` if it still names `job_id`."""
        forget_inflight(self.redis, key, job_id)

    # -- reading

    def _rq_status(self, job_id: str) -> str | None:
        from rq.exceptions import NoSuchJobError
        from rq.job import Job

        try:
            return str(Job.fetch(job_id, connection=self.redis).get_status(refresh=False).value)
        except NoSuchJobError:
            return None

    def view(self, job_id: str) -> JobView | None:
        """The job, or None when Redis has no such job (never existed, or its TTL passed)."""
        from rq.exceptions import NoSuchJobError
        from rq.job import Job

        with redis_errors("job lookup"):
            try:
                job = Job.fetch(job_id, connection=self.redis)
            except NoSuchJobError:
                return None
            return self._view(job)

    def _view(self, job: Any) -> JobView:
        rq_status = str(job.get_status(refresh=False).value)
        result: dict[str, Any] | None = None
        if rq_status == "finished":
            value = job.return_value()
            result = value if isinstance(value, dict) else None
        status = public_status(rq_status, result)
        problem: dict[str, Any] | None = None
        response: dict[str, Any] | None = None
        if status == "failed":
            if result is not None and "error" in result:
                problem = dict(result["error"])
            else:
                attempts = int(job.meta.get("attempts", 0))
                message = (
                    f"the job's worker died or its work horse was killed ({attempts} attempt(s), "
                    f"{job.meta.get('retries', self.settings.compile_retries)} retries allowed): "
                    f"{_last_line(_failure_text(job))}"
                )
                problem = PlanFailure.plain(COMPILE_LOST.slug, message).as_dict()
        elif status == "canceled":
            problem = PlanFailure.plain(COMPILE_CANCELED.slug, "the job was cancelled").as_dict()
        elif status == "finished" and result is not None:
            response = dict(result.get("ok") or {})
        position = job.get_position() if status == "queued" else None
        pid = job.meta.get("compile_pid")
        return JobView(
            id=job.id,
            status=status,
            position=position,
            enqueued_at=_iso(job.enqueued_at),
            started_at=_iso(job.started_at),
            ended_at=_iso(job.ended_at),
            worker=job.worker_name or None,
            attempts=int(job.meta.get("attempts", 0)),
            result=response,
            problem=problem,
            waiters=int(self.redis.scard(WAITERS + job.id)),
            compile_pid=int(pid) if pid is not None else None,
        )

    def list(self, status: str | None = None, limit: int = 50) -> list[JobView]:
        """Recent jobs (queued, running, and those RQ still keeps), newest first."""
        from rq.job import Job
        from rq.registry import (
            CanceledJobRegistry,
            FailedJobRegistry,
            FinishedJobRegistry,
            StartedJobRegistry,
        )

        with redis_errors("job list"):
            ids: list[str] = list(self.queue.get_job_ids())
            for registry in (StartedJobRegistry, FinishedJobRegistry, FailedJobRegistry, CanceledJobRegistry):
                ids.extend(registry(queue=self.queue).get_job_ids())
            seen: set[str] = set()
            views = []
            for job in Job.fetch_many(list(dict.fromkeys(ids)), connection=self.redis):
                if job is None or job.id in seen:
                    continue
                seen.add(job.id)
                view = self._view(job)
                if status is None or view.status == status:
                    views.append(view)
        views.sort(key=lambda v: v.enqueued_at or "", reverse=True)
        return views[:limit]

    # -- cancelling

    def release(self, job_id: str, waiter: str | None) -> bool:
        """Remove `waiter` from the job's waiters and cancel the job when none is left
        (without a token: cancel when at most one request waits). True when cancelled."""
        with redis_errors("release"):
            if waiter is not None:
                self.redis.srem(WAITERS + job_id, waiter)
            elif self.redis.scard(WAITERS + job_id) <= 1:
                self.redis.delete(WAITERS + job_id)
            if self.redis.scard(WAITERS + job_id) > 0:
                return False
            return self.cancel(job_id)

    def cancel(self, job_id: str, settle_s: float = 10.0) -> bool:
        """Cancel a queued job (it never starts) or stop a running one (its work horse and
        compile process are killed; the worker removes its scratch file). True when the job
        ended cancelled; False when it had already ended."""
        from rq.command import send_stop_job_command
        from rq.exceptions import InvalidJobOperation, NoSuchJobError
        from rq.job import Job

        with redis_errors("cancel"):
            deadline = time.monotonic() + settle_s
            sent_stop = False
            while True:
                try:
                    job = Job.fetch(job_id, connection=self.redis)
                except NoSuchJobError:
                    return False
                rq_status = str(job.get_status(refresh=False).value)
                if rq_status in ("canceled", "stopped"):
                    self._after_cancel(job)
                    return True
                if rq_status not in _ACTIVE:
                    return False
                if rq_status in _QUEUED:
                    with contextlib.suppress(InvalidJobOperation):
                        job.cancel()
                elif not sent_stop:
                    with contextlib.suppress(InvalidJobOperation):
                        send_stop_job_command(self.redis, job_id)
                        sent_stop = True
                if time.monotonic() > deadline:
                    log.warning("job %s did not stop within %.0f s", job_id, settle_s)
                    return False
                time.sleep(0.05)

    def _after_cancel(self, job: Any) -> None:
        key = job.meta.get("key")
        if isinstance(key, str):
            self._forget_inflight(key, job.id)
        if not job.meta.get("counted"):
            job.meta["counted"] = True
            job.save_meta()
            record_final(self.redis, "canceled")

    # -- observability

    def depth(self) -> int:
        with redis_errors("queue depth"):
            return int(self.queue.count)

    def workers_alive(self) -> int:
        from rq import Worker

        with redis_errors("workers"):
            return int(Worker.count(connection=self.redis, queue=self.queue))


def forget_inflight(redis: Any, key: str, job_id: str) -> None:
    """Delete `devplan:inflight:<key>` if it still names `job_id` (a compare-and-delete)."""
    script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
    with redis_errors("in-flight entry"):
        redis.eval(script, 1, INFLIGHT + key, job_id)


def _failure_text(job: Any) -> str | None:
    """The traceback or reason RQ recorded for a failed job (its latest result)."""
    latest = job.latest_result()
    text = getattr(latest, "exc_string", None)
    return str(text) if text else None


def _last_line(text: str | None) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no traceback"
