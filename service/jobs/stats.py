"""Farm metrics kept in Redis, so every API replica reports the whole farm.

Workers record each job's end (final status, seconds queued, seconds running)
into Redis hashes; `service.jobs.collector.FarmCollector` turns them, with the queue depth and the
number of live workers, into Prometheus series at scrape time:

- `devplan_queue_depth` (gauge), `devplan_queue_workers` (gauge: registered, alive);
- `devplan_jobs_total{status}`: jobs by final status (finished, failed, canceled, lost);
- `devplan_job_queued_seconds`, `devplan_job_run_seconds`: histograms.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("devplan.jobs")

FINAL = "devplan:stats:final"
HISTOGRAMS = {"queued": "devplan:stats:queued", "run": "devplan:stats:run"}
BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
FINAL_STATUSES = ("finished", "failed", "canceled", "lost")


def record_final(redis: Any, status: str) -> None:
    """Count one job ending with `status` (never raises: metrics must not fail a job)."""
    try:
        redis.hincrby(FINAL, status, 1)
    except Exception:
        log.warning("could not record a job's final status", exc_info=True)


def observe(redis: Any, which: str, seconds: float) -> None:
    """Add one observation to the histogram `which` ("queued" or "run")."""
    key = HISTOGRAMS[which]
    try:
        with redis.pipeline() as pipe:
            for bound in BUCKETS:
                if seconds <= bound:
                    pipe.hincrby(key, f"le:{bound}", 1)
            pipe.hincrby(key, "count", 1)
            pipe.hincrbyfloat(key, "sum", seconds)
            pipe.execute()
    except Exception:
        log.warning("could not record a job duration", exc_info=True)
