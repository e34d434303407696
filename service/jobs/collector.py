"""The farm's Prometheus collector: reads the queue and the counters that
service.jobs.stats keeps in Redis at scrape time, so every API replica reports
the whole farm."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from service.jobs.queue import QueueUnavailable, redis_errors
from service.jobs.stats import BUCKETS, FINAL, FINAL_STATUSES, HISTOGRAMS


class FarmCollector:
    """A Prometheus collector reading the farm's state from Redis at scrape time (a Redis
    that cannot be reached yields `devplan_queue_up 0` and nothing else)."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily


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
