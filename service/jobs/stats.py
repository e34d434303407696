"""Farm metrics kept in Redis, so every API replica reports the whole farm.

Workers record each job's end (final status, seconds queued, seconds running)
into Redis hashes; `FarmCollector` turns them, with the queue depth and the
number of live workers, into Prometheus series at scrape time:

- `devplan_queue_depth` (gauge), `devplan_queue_workers` (gauge: registered, alive);
- `devplan_jobs_total{status}`: jobs by final status (finished, failed, canceled, lost);
- `devplan_job_queued_seconds`, `devplan_job_run_seconds`: histograms.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
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


class FarmCollector:
    """A Prometheus collector reading the farm's state from Redis at scrape time (a Redis
    that cannot be reached yields `devplan_queue_up 0` and nothing else)."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        from service.jobs.queue import QueueUnavailable, redis_errors

        up = GaugeMetricFamily("devplan_queue_up", "1 when the compile queue's Redis answers.")
        try:
            depth = self.queue.depth()
            workers = self.queue.workers_alive()
            with redis_errors("stats"):
                final = self.queue.redis.hgetall(FINAL)
                hists = {which: self.queue.redis.hgetall(key) for which, key in HISTOGRAMS.items()}
        except QueueUnavailable:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        g = GaugeMetricFamily("devplan_queue_depth", "Compile jobs waiting in the queue.")
        g.add_metric([], depth)
        yield g
        w = GaugeMetricFamily("devplan_queue_workers", "Workers registered on the compile queue (alive).")
        w.add_metric([], workers)
        yield w
        c = CounterMetricFamily("devplan_jobs", "Compile jobs by final status.", labels=["status"])
        decoded = {k.decode(): int(v) for k, v in final.items()}
        for status in FINAL_STATUSES:
            c.add_metric([status], decoded.get(status, 0))
        yield c
        for which, raw in hists.items():
            values = {k.decode(): v.decode() for k, v in raw.items()}
            buckets = [(str(b), float(values.get(f"le:{b}", 0))) for b in BUCKETS]
            count = float(values.get("count", 0))
            buckets.append(("+Inf", count))
            h = HistogramMetricFamily(
                f"devplan_job_{which}_seconds",
                "Seconds compile jobs waited in the queue." if which == "queued" else "Seconds compile jobs ran.",
            )
            h.add_metric([], buckets, sum_value=float(values.get("sum", 0.0)))
            yield h
