"""POST /plan throughput and latency, and the HTTP overhead over a direct plan.

    .venv/bin/python benchmarks/service.py                  # starts its own server
    .venv/bin/python benchmarks/service.py --url http://127.0.0.1:8000 --duration 5

For a small module and resnet-50, at concurrency 1, 8 and 32, a load generator
in a separate process (asyncio + httpx over loopback) keeps that many requests
in flight for --duration seconds and records every latency. Prints a Markdown
table: requests/s, p50, p99, errors. Then the same small module is planned
directly in this process (parse + solver.plan + print, and solver.plan alone)
to show what HTTP, JSON and the worker hop add.

The load generator shares the machine with the server: on a 2-core box its own
CPU use lowers the server's numbers a little; that is part of what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


# --------------------------------------------------------------------------
# Load generator (runs in its own process)


async def _load(
    url: str, body: dict[str, Any], concurrency: int, duration_s: float, min_requests: int
) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    worker_ms: list[float] = []  # parse + plan + print inside the worker, from the response
    errors: dict[str, int] = {}
    started = 0
    stop_at = time.perf_counter() + duration_s

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal started
        while time.perf_counter() < stop_at or started < min_requests:
            started += 1
            t0 = time.perf_counter()
            try:
                r = await client.post(url + "/plan", json=body)
                ok = r.status_code == 200
                key = str(r.status_code)
            except httpx.HTTPError as err:
                ok, key = False, type(err).__name__
            if ok:
                latencies.append(time.perf_counter() - t0)
                if concurrency == 1:  # parsing every reply would load the shared CPUs
                    worker_ms.append(sum(r.json()["solver"]["time_ms"].values()))
            else:
                errors[key] = errors.get(key, 0) + 1

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        t_start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - t_start
    return {"latencies": latencies, "worker_ms": worker_ms, "errors": errors, "wall_s": wall}


def _loadgen_main(
    conn: Any, url: str, body: dict[str, Any], concurrency: int, duration_s: float, min_requests: int
) -> None:
    conn.send(asyncio.run(_load(url, body, concurrency, duration_s, min_requests)))
    conn.close()


def run_load(
    url: str, body: dict[str, Any], concurrency: int, duration_s: float, min_requests: int
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_loadgen_main, args=(child, url, body, concurrency, duration_s, min_requests))
    proc.start()
    result: dict[str, Any] = parent.recv()
    proc.join()
    return result


# --------------------------------------------------------------------------
# Server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(pool_size: int | None) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = free_port()
    env = dict(os.environ, DEVPLAN_PORT=str(port), DEVPLAN_HOST="127.0.0.1", DEVPLAN_LOG_LEVEL="warning")
    if pool_size:
        env["DEVPLAN_POOL_SIZE"] = str(pool_size)
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve"], cwd=ROOT, env=env, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=10).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready")


# --------------------------------------------------------------------------
# Direct planning


def direct_ms(module: str, repeat: int) -> tuple[float, float]:
    """Median ms of (parse + plan + print) and of solver.plan alone, in this process."""
    import relay
    import solver
    from service.planning import PlanJob, run_plan
    from service.pool import tune_malloc

    tune_malloc()  # as in the service's workers, so both sides allocate alike
    job = PlanJob(module=module)
    parsed = relay.parse_text(module)
    config = solver.PlanConfig()
    run_plan(job)
    solver.plan(parsed, config)
    full, only = [], []
    for _ in range(repeat):  # interleaved, so machine load hits both alike
        t0 = time.perf_counter()
        run_plan(job)
        t1 = time.perf_counter()
        solver.plan(parsed, config)
        t2 = time.perf_counter()
        full.append((t1 - t0) * 1000)
        only.append((t2 - t1) * 1000)
    return statistics.median(full), statistics.median(only)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="benchmark a running server instead of starting one")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per cell (default 8)")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated levels (default 1,8,32)")
    parser.add_argument("--pool-size", type=int, help="DEVPLAN_POOL_SIZE for the started server")
    parser.add_argument("--only", choices=("small", "resnet-50"), help="benchmark one module only")
    args = parser.parse_args()

    from service.examples import PLAIN

    modules = {"small (add+relu)": PLAIN}
    resnet = CORPUS / "resnet50.relay"
    if resnet.exists():
        modules["resnet-50"] = resnet.read_text()
    else:
        print(f"note: {resnet} not found; resnet-50 skipped", file=sys.stderr)

    if args.only:
        modules = {k: v for k, v in modules.items() if k.startswith(args.only)}
    proc = None
    url = args.url
    if url is None:
        proc, url = start_server(args.pool_size)
    try:
        import httpx

        ready = httpx.get(url + "/readyz", timeout=30).json()
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"server {url}, pool {ready.get('pool')}, {os.cpu_count()} CPUs, "
            f"load average {load:.1f} at start, {args.duration} s per cell\n"
        )
        print("| module | concurrency | requests | req/s | p50 ms | p99 ms | errors |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
        small_p50_c1 = None
        small_worker_c1 = None
        for name, module in modules.items():
            body = {"module": module}
            run_load(url, body, 2, 1.0, 4)  # warm-up (worker caches, connections)
            for c in (int(x) for x in args.concurrency.split(",")):
                res = run_load(url, body, c, args.duration, min_requests=2 * c)
                lat = [x * 1000 for x in res["latencies"]]
                rps = len(lat) / res["wall_s"] if res["wall_s"] > 0 else 0.0
                errors = ", ".join(f"{k}: {v}" for k, v in res["errors"].items()) or "0"
                p50 = percentile(lat, 50)
                if name.startswith("small") and c == 1:
                    small_p50_c1 = p50
                    small_worker_c1 = percentile(res["worker_ms"], 50)
                print(
                    f"| {name} | {c} | {len(lat)} | {rps:.1f} | {p50:.1f} | {percentile(lat, 99):.1f} | {errors} |",
                    flush=True,
                )
        full_ms, plan_ms = direct_ms(PLAIN, 100)
        print()
        print("| small module | ms |")
        print("| --- | ---: |")
        print(f"| direct solver.plan in this process, median of 100 | {plan_ms:.2f} |")
        print(f"| direct parse + plan + print in this process, median of 100 | {full_ms:.2f} |")
        if small_p50_c1 is not None and small_worker_c1 is not None:
            print(f"| POST /plan p50 at concurrency 1 (client side) | {small_p50_c1:.2f} |")
            print(
                f"| parse + plan + print inside the worker, p50 of the same requests | {small_worker_c1:.2f} |"
            )
            print(
                f"| HTTP + JSON + worker hop (difference of the two above) | {small_p50_c1 - small_worker_c1:.2f} |"
            )
            print(f"| POST /plan p50 minus direct solver.plan | {small_p50_c1 - plan_ms:.2f} |")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
