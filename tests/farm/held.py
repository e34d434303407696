"""A compile job whose compile process holds until the test lets it go (imported by the work
horses of the test's workers: they share the repository on sys.path).

The compile process first writes a partial library at the scratch path (as a compile
killed mid-export would leave), records its pid in Redis, then blocks on a Redis list
(`BLPOP`): the test pushes one token per compile it lets run. No sleeps anywhere."""

from __future__ import annotations

import multiprocessing.connection
import os
from pathlib import Path
from typing import Any

from service.compile_workers import CompileJob, worker_main
from service.jobs.task import run_compile_job

GO = "farm-test:go"
HELD = "farm-test:held"


def held_target(job: CompileJob, conn: multiprocessing.connection.Connection) -> None:
    from redis import Redis

    redis = Redis.from_url(os.environ["DEVPLAN_QUEUE_URL"])
    Path(job.library).write_bytes(b"partial library")
    redis.rpush(HELD, os.getpid())
    redis.blpop([GO], timeout=300)  # bounded: a failed test must not leave it forever
    worker_main(job, conn)


def held_compile_job(payload: dict[str, Any]) -> dict[str, Any]:
    return run_compile_job(payload, target=held_target)
