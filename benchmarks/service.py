"""POST /plan throughput and latency, and where the time of one plan goes.

    .venv/bin/python benchmarks/service.py                  # starts its own server
    .venv/bin/python benchmarks/service.py --url http://127.0.0.1:8000 --duration 5

For a small module and resnet-50, at concurrency 1, 8 and 32, a load generator
in a separate process (asyncio + httpx over loopback) keeps that many requests
in flight for --duration seconds and records every latency. Prints a Markdown
table: requests/s, p50, p99, errors, and the load average when the cell ended.

Then, per module, the same plan in this process split into its steps (parse,
verify, plan, print: medians of interleaved runs), the worker's own time as
the responses report it, and what HTTP, JSON and the worker hop add on top
(the /plan p50 at concurrency 1 minus the worker's p50).

The load generator shares the machine with the server: on a 2-core box its own
CPU use lowers the server's numbers a little; that is part of what is measured.
Other processes on the machine move every number: compare runs only at a
similar load average, which is printed with each row.
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

STEPS = ("parse", "verify", "plan", "print")


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def steps_ms(module: str, repeat: int) -> dict[str, float]:
    """Median ms of each step of a plan in this process (as a worker runs them:
    relay.parse_text, relay.verify, solver.plan, relay.print_text), and of
    service.planning.run_plan, which does all four; runs are interleaved so
    machine load hits every step alike."""
    import relay
    import solver
    from service.planning import PlanJob, run_plan
    from service.pool import tune_malloc

    tune_malloc()  # as in the service's workers, so both sides allocate alike
    job = PlanJob(module=module)
    config = solver.PlanConfig()
    run_plan(job)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in (*STEPS, "run_plan")}
    for _ in range(repeat):
        t0 = time.perf_counter()
        parsed = relay.parse_text(module)
        t1 = time.perf_counter()
        relay.verify(parsed)
        t2 = time.perf_counter()
        result = solver.plan(parsed, config)
        t3 = time.perf_counter()
        relay.print_text(result.module)
        t4 = time.perf_counter()
        run_plan(job)
        t5 = time.perf_counter()
        for name, a, b in zip((*STEPS, "run_plan"), (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5)):
            times[name].append((b - a) * 1000)
        del parsed, result  # freed here, not inside the next parse
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="benchmark a running server instead of starting one")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per cell (default 8)")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated levels (default 1,8,32)")
    parser.add_argument("--pool-size", type=int, help="DEVPLAN_POOL_SIZE for the started server")
    parser.add_argument("--only", choices=("small", "resnet-50"), help="benchmark one module only")
    parser.add_argument("--repeat", type=int, default=30, help="in-process runs per module (default 30)")
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
    levels = [int(x) for x in args.concurrency.split(",")]
    proc = None
    url = args.url
    if url is None:
        proc, url = start_server(args.pool_size)
    # Per module: {concurrency: (p50, p99)} and the worker's own p50 at concurrency 1.
    latency: dict[str, dict[int, tuple[float, float]]] = {name: {} for name in modules}
    worker_p50: dict[str, float] = {}
    try:
        import httpx

        ready = httpx.get(url + "/readyz", timeout=30).json()
        print(
            f"server {url}, pool {ready.get('pool')}, {os.cpu_count()} CPUs, "
            f"load average {load_average():.1f} at start, {args.duration} s per cell\n"
        )
        print("| module | concurrency | requests | req/s | p50 ms | p99 ms | errors | load |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
        for name, module in modules.items():
            body = {"module": module}
            run_load(url, body, 2, 1.0, 4)  # warm-up (worker caches, connections)
            for c in levels:
                res = run_load(url, body, c, args.duration, min_requests=2 * c)
                lat = [x * 1000 for x in res["latencies"]]
                rps = len(lat) / res["wall_s"] if res["wall_s"] > 0 else 0.0
                errors = ", ".join(f"{k}: {v}" for k, v in res["errors"].items()) or "0"
                p50, p99 = percentile(lat, 50), percentile(lat, 99)
                latency[name][c] = (p50, p99)
                if c == 1:
                    worker_p50[name] = percentile(res["worker_ms"], 50)
                print(
                    f"| {name} | {c} | {len(lat)} | {rps:.1f} | {p50:.1f} | {p99:.1f} | {errors} "
                    f"| {load_average():.1f} |",
                    flush=True,
                )
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()

    print()
    print(f"Per module: steps in this process (median of {args.repeat}), then over HTTP.")
    print()
    cells = [f"/plan p50, p99 at c={c}" for c in levels]
    print(
        "| module | parse ms | verify ms | plan ms | print ms | run_plan ms | worker p50 ms "
        "| HTTP + hop ms | " + " | ".join(cells) + " | load |"
    )
    print("| --- " + "| ---: " * (8 + len(levels)) + "|")
    for name, module in modules.items():
        steps = steps_ms(module, args.repeat)
        worker = worker_p50.get(name, float("nan"))
        c1 = latency[name].get(1, (float("nan"), float("nan")))[0]
        row = [f"{steps[s]:.2f}" for s in (*STEPS, "run_plan")]
        row += [f"{worker:.2f}", f"{c1 - worker:.2f}"]
        row += [f"{latency[name][c][0]:.1f}, {latency[name][c][1]:.1f}" for c in levels]
        print(f"| {name} | " + " | ".join(row) + f" | {load_average():.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
