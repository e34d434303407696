"""`devplan worker`: an RQ worker that runs compile jobs (docs/farm.md).

`DevplanWorker` is RQ's `SpawnWorker` (each job's work horse is a fresh
interpreter started with posix_spawn: nothing forks a process that has imported
TVM) with the farm's semantics:

- SIGTERM: finish the current job, then exit (RQ's warm shutdown). A second
  SIGTERM kills the job's process group (horse and compile process) and puts the
  job back at the front of the queue, without spending one of its retries.
- Heartbeats: a running job's entry in RQ's started registry lives
  `DEVPLAN_WORKER_HEARTBEAT_S` seconds past the last heartbeat (RQ hard-codes
  `monitoring interval + 60 s`); a worker looks for entries that expired (jobs
  whose machine died) every `DEVPLAN_WORKER_MAINTENANCE_S` seconds (RQ's default is
  10 minutes) and retries them, so a lost job is noticed within about the sum.
- After every job, whatever ended it, the job's scratch library is removed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import time
from typing import Any

from rq.worker import SpawnWorker

from service.config import Settings, get_settings

log = logging.getLogger("devplan.worker")

DEQUEUED_FIELD = "devplan_dequeued_at"
"""Field of RQ's job hash: when a worker took the job (Unix time, set before the horse starts)."""


def _monitoring_interval(heartbeat_s: int) -> int:
    """How often the worker heartbeats a running job: a third of the heartbeat TTL."""
    return max(1, heartbeat_s // 3)


class DevplanWorker(SpawnWorker):
    """SpawnWorker with the farm's heartbeat, maintenance, scratch clean-up and cold stop
    (see the module docstring). Settings come from the environment, so the work horse,
    which RQ rebuilds from the class and a few attributes, sees the same ones."""

    def get_heartbeat_ttl(self, job: Any, working_time: float = 0.0) -> int:
        heartbeat_s = get_settings().worker_heartbeat_s
        return max(heartbeat_s, 2 * _monitoring_interval(heartbeat_s))

    @property
    def dequeue_timeout(self) -> int:
        # RQ blocks worker_ttl - 15 s in BLPOP and checks maintenance only between waits.
        return max(1, min(self.worker_ttl - 15, int(self.maintenance_interval)))

    def prepare_execution(self, job: Any) -> Any:
        # An attempt counts from the moment a worker takes the job (a machine may die before
        # the horse runs any of our code). RQ's started_at is stamped by the work horse, after
        # its interpreter started; the dequeue time is ours (benchmarks/farm.py reports both).
        job.meta["attempts"] = int(job.meta.get("attempts", 0)) + 1
        job.save_meta()
        try:
            self.connection.hset(job.key, DEQUEUED_FIELD, repr(time.time()))
        except Exception:
            log.warning("could not stamp the dequeue time of job %s", job.id, exc_info=True)
        return super().prepare_execution(job)

    def monitor_work_horse(self, job: Any, queue: Any, execution: Any) -> None:
        try:
            super().monitor_work_horse(job, queue, execution)
        finally:
            remove_scratch(job.id)

    def request_force_stop(self, signum: int, frame: Any) -> None:
        """Cold shutdown: kill the running job's horse (and its compile process: same process
        group) and requeue the job at the front, then exit."""
        job = self.get_current_job() if self.horse_pid else None
        if job is None:
            super().request_force_stop(signum, frame)
            return
        from rq.queue import Queue

        # The stop runs inside RQ's horse monitor, whose alarm (every job monitoring interval)
        # would raise out of this handler mid-way: the monitor would then reap the killed horse
        # as a failure and spend one of the job's retries. No more alarms from here on.
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.alarm(0)
        log.warning("worker %s: second stop signal; killing job %s and requeueing it", self.name, job.id)
        self.kill_horse()
        self.wait_for_horse()
        remove_scratch(job.id)
        job.refresh()  # type: ignore[no-untyped-call]  # the horse's meta (attempts), which the requeue below saves back
        queue = Queue(job.origin, connection=self.connection)
        with self.connection.pipeline() as pipe:
            self.cleanup_execution(job, pipeline=pipe, execution=self.execution)
            job.started_at = None
            queue._enqueue_job(job, pipeline=pipe, at_front=True)
            pipe.execute()
        raise SystemExit(1)


def remove_scratch(job_id: str) -> None:
    """Remove the scratch library of `job_id` and its run check's directory (never raises:
    clean-up must not fail a job)."""
    try:
        import shutil

        from service import sandbox
        from service.artifact_store import open_store

        scratch = open_store(get_settings()).scratch(job_id)
        scratch.unlink(missing_ok=True)
        shutil.rmtree(sandbox.check_dir_of(scratch), ignore_errors=True)  # a killed run check's directory
    except Exception:
        log.warning("could not remove the scratch library of job %s", job_id, exc_info=True)


def make_worker(settings: Settings, queues: list[str] | None = None, name: str | None = None) -> DevplanWorker:
    """A worker on the settings' Redis for `queues` (default: the compile queue)."""
    from service.jobs.queue import connect

    connection = connect(settings.queue_url)
    return DevplanWorker(
        queues or [settings.queue_name],
        connection=connection,
        name=name,
        worker_ttl=max(settings.worker_heartbeat_s, 20),
        maintenance_interval=settings.worker_maintenance_s,
        job_monitoring_interval=_monitoring_interval(settings.worker_heartbeat_s),
        default_result_ttl=settings.job_result_ttl_s,
    )


def wait_for_redis(connection: Any, url: str, max_delay_s: float = 30.0) -> None:
    """Block until Redis answers (a worker may start before it, as in a compose file): retry
    with a doubling delay up to `max_delay_s`, logging each failure."""
    from redis.exceptions import RedisError

    delay = 1.0
    while True:
        try:
            connection.ping()
            return
        except RedisError as err:
            log.warning("Redis at %s does not answer (%s); retrying in %.0f s", url, err, delay)
        time.sleep(delay)
        delay = min(2 * delay, max_delay_s)


def run_worker(
    settings: Settings, queues: list[str] | None = None, *, burst: bool = False, name: str | None = None
) -> int:
    """Run a worker until it is stopped (or, with `burst`, until the queue is empty); the exit code."""
    if importlib.util.find_spec("tvm") is None:
        log.error("devplan worker needs apache-tvm: install the tvm extra (pip install 'devplan[tvm,farm]')")
        return 1
    if not settings.queue_url:
        log.error("devplan worker needs a queue: set DEVPLAN_QUEUE_URL=redis://host:6379/0 or --queue-url")
        return 1
    worker = make_worker(settings, queues, name)
    from service import sandbox

    sandbox.startup(settings, f"worker {worker.name}")  # its layers, in the start-up log
    wait_for_redis(worker.connection, settings.queue_url)
    level = settings.log_level.upper()
    log.info(
        "worker %s on %s (queues %s, heartbeat %d s, maintenance %d s, pid %d)",
        worker.name,
        settings.queue_url,
        ",".join(worker.queue_names()),
        settings.worker_heartbeat_s,
        settings.worker_maintenance_s,
        os.getpid(),
    )
    with contextlib.suppress(KeyboardInterrupt):
        worker.work(burst=burst, logging_level=level)
    return 0
