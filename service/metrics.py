"""Prometheus metrics of one app instance (its own registry, so tests can build many apps)."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from service.errors import PLAN_OUTCOMES
from service.logs import dropped_counts

# The *_created series double the output and no dashboard of ours reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _LogDrops(Collector):
    """devplan_log_records_dropped_total{process}: read from service.logs at scrape time
    (logging is process-wide, the registry per app)."""

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "devplan_log_records_dropped",
            "Log records dropped because the log output was blocked, by process (web; planning and "
            "compile workers, as they reported them).",
            labels=("process",),
        )
        for process, count in sorted(dropped_counts().items()):
            family.add_metric((process,), count)
        return [family]


class Metrics:
    """Request counts and latencies by route and status; plan outcomes and solver time."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "devplan_http_requests",
            "HTTP requests by route, method and status.",
            ("route", "method", "status"),
            registry=r,
        )
        self.latency = Histogram(
            "devplan_http_request_duration_seconds",
            "HTTP request latency by route, method and status.",
            ("route", "method", "status"),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.plans = Counter("devplan_plans", "Planning requests by outcome.", ("outcome",), registry=r)
        self.conflicts = Counter(
            "devplan_plan_conflicts", "Plans rejected with a device conflict.", registry=r
        )
        self.timeouts = Counter("devplan_plan_timeouts", "Plans that exceeded their time limit.", registry=r)
        self.solver_seconds = Histogram(
            "devplan_solver_seconds",
            "Planner time per successful plan (infer to rewrite, parsing and printing excluded).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.plan_seconds = Histogram(
            "devplan_plan_seconds",
            "Wall time of a plan in its worker (parse, plan, print), any outcome.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("devplan_plans_in_flight", "Plans running or waiting for a slot.", registry=r)
        self.admitted = Gauge(
            "devplan_admitted_requests",
            "Requests with a body admitted now (running, waiting for a slot or still sending their body).",
            registry=r,
        )
        self.inflight_bytes = Gauge(
            "devplan_inflight_request_bytes", "Body bytes held by admitted requests.", registry=r
        )
        self.admission_rejections = Counter(
            "devplan_admission_rejections",
            "Requests answered 503 overloaded by admission control, by bound (requests, bytes).",
            ("reason",),
            registry=r,
        )
        self.pool_slots = Gauge(
            "devplan_pool_slots",
            "Planning slots: configured; effective (configured minus slots whose worker cannot be "
            "restarted); busy.",
            ("state",),
            registry=r,
        )
        r.register(_LogDrops())
        for reason in ("requests", "bytes"):
            self.admission_rejections.labels(reason)
        for outcome in PLAN_OUTCOMES:
            self.plans.labels(outcome)

    def render(self) -> bytes:
        return generate_latest(self.registry)
