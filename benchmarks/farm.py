"""Build-farm benchmark: compile throughput with 1 and 2 workers, and queue latency.

Starts its own farm on loopback (Debian's redis-server, moto's S3 server, `devplan
worker` subprocesses), then measures:

- jobs per minute with 1 and with 2 workers, each on `--jobs` resnet18 compiles
  (the corpus model planned onto one CPU and compiled for llvm; each job gets its own
  cache key through `assume_dim`, which cannot change this static model);
- on an idle queue with one idle worker, `--samples` no-op jobs: enqueue-to-dequeue
  latency (RQ's `enqueued_at` to `started_at`, goal p95 under 50 ms) and, apart from
  it, the work horse's start (dequeue to the job function running: a fresh
  interpreter started with posix_spawn, then the imports).

Prints a Markdown table. Needs the farm extra, tvm, redis-server and moto.

    python benchmarks/farm.py --jobs 6 --samples 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CORPUS = ROOT / ".." / "shared" / "corpus"


def noop_job() -> float:
    """A job that does nothing but say when it ran (for the latency samples)."""
    return time.time()


def _ts(value: datetime | None) -> float:
    assert value is not None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _wait_done(job: Any, timeout_s: float = 900) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = str(job.get_status(refresh=True).value)
        if status in ("finished", "failed", "stopped", "canceled"):
            return status
        time.sleep(0.02)
    raise TimeoutError(f"job {job.id} did not end")


def throughput(farm: Any, settings: Any, workers: int, jobs: int, offset: int) -> tuple[float, float, int]:
    """(jobs per minute, mean seconds per job, jobs finished) with `workers` workers."""
    from rq.job import Job

    from service.artifacts import cache_key
    from service.jobs.http import job_payload
    from service.jobs.queue import JobQueue
    from service.models import CompileRequest

    names = [f"bench-{workers}-{i}" for i in range(workers)]
    for name in names:
        farm.start_worker(name)
    farm.wait_idle(set(names))
    queue = JobQueue(settings)
    text = (CORPUS / "resnet18.relay").read_text()
    ids = []
    start = time.time()
    for i in range(jobs):
        body = CompileRequest.model_validate(
            {
                "module": text,
                "default_device": "cpu",
                "host_device": "cpu",
                "targets": {"cpu": "llvm"},
                "assume_dim": offset + i + 1,
            }
        )
        job_id, _ = queue.submit(cache_key(body), job_payload(body, settings), f"bench-{i}")
        ids.append(job_id)
    statuses = [_wait_done(Job.fetch(job_id, connection=farm.connection())) for job_id in ids]
    fetched = [Job.fetch(job_id, connection=farm.connection()) for job_id in ids]
    end = max(_ts(job.ended_at) for job in fetched)
    run_s = [_ts(job.ended_at) - _ts(job.started_at) for job in fetched]
    for name in names:
        farm.stop_worker(name)
    ok = sum(1 for s, job in zip(statuses, fetched, strict=True) if s == "finished" and "ok" in job.return_value())
    return jobs / (end - start) * 60, statistics.mean(run_s), ok


def latency(farm: Any, samples: int) -> tuple[list[float], list[float], list[float]]:
    """Milliseconds, one idle worker: enqueue -> dequeue (the worker took it), dequeue -> the
    work horse running (RQ's started_at), and the horse's start -> the job function running."""
    from rq import Queue

    from service.worker import DEQUEUED_FIELD

    farm.start_worker("bench-latency")
    farm.wait_idle({"bench-latency"})
    queue = Queue("compile", connection=farm.connection())
    dequeue_ms, horse_ms, call_ms = [], [], []
    for _ in range(samples):
        job = queue.enqueue("benchmarks.farm.noop_job", result_ttl=600)
        _wait_done(job)
        job.refresh()
        ran_at = float(job.return_value())
        dequeued = float(farm.connection().hget(job.key, DEQUEUED_FIELD))
        dequeue_ms.append((dequeued - _ts(job.enqueued_at)) * 1000)
        horse_ms.append((_ts(job.started_at) - dequeued) * 1000)
        call_ms.append((ran_at - _ts(job.started_at)) * 1000)
        farm.wait_idle({"bench-latency"})  # the next sample starts on an idle queue and worker
    farm.stop_worker("bench-latency")
    return dequeue_ms, horse_ms, call_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=6, help="resnet18 compiles per worker count (6; 0: latency only)")
    parser.add_argument("--samples", type=int, default=20, help="no-op jobs for the latency (20)")
    args = parser.parse_args(argv)

    import tempfile

    from service.config import Settings
    from tests.farm.conftest import BUCKET, start_farm

    with start_farm(Path(tempfile.mkdtemp(prefix="devplan-farm-bench-"))) as farm:
        settings = Settings(queue_url=farm.redis.url, artifact_url=f"s3://{BUCKET}/artifacts", compile_timeout_s=600)
        rows = []
        for workers in (1, 2) if args.jobs > 0 else ():
            per_min, mean_s, ok = throughput(farm, settings, workers, args.jobs, offset=workers * 1000)
            rows.append((workers, per_min, mean_s, ok))
        dequeue_ms, horse_ms, call_ms = latency(farm, args.samples)
    print("| workers | resnet18 jobs | finished | jobs/min | mean s per job (run) |")
    print("|---|---|---|---|---|")
    for workers, per_min, mean_s, ok in rows:
        print(f"| {workers} | {args.jobs} | {ok} | {per_min:.1f} | {mean_s:.2f} |")
    print()
    print(f"| idle queue, {args.samples} no-op jobs | p50 ms | p95 ms | max ms |")
    print("|---|---|---|---|")
    rows2 = (
        ("enqueue -> dequeue (worker took it)", dequeue_ms),
        ("work horse start (dequeue -> horse running, posix_spawn + imports)", horse_ms),
        ("horse running -> job function called", call_ms),
    )
    for name, values in rows2:
        print(
            f"| {name} | {_percentile(values, 0.5):.1f} | {_percentile(values, 0.95):.1f} | {max(values):.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
