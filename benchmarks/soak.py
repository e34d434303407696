"""Soak test of the real server: many clients, a mix of good and hostile requests, for minutes.

    .venv/bin/python benchmarks/soak.py                        # 32 clients, 10 minutes, own server
    .venv/bin/python benchmarks/soak.py --minutes 3 --clients 16
    .venv/bin/python benchmarks/soak.py --url http://127.0.0.1:8000   # an already running server

Starts `devplan serve` on 127.0.0.1 (unless --url) and runs N asyncio clients over
loopback, each sending a random request from the mix below until the time is up:
valid plans (TVM mode and, when the schema has `mode`, optimize mode), compiles of a tiny
module (when `/compile` exists), conflicts,
truncated and random bodies, bodies over the size limit, deep nesting, huge
constraint lists, plans that time out, and pictures when `/plan/picture` exists.
Every kind has the statuses it may get; a 5xx outside them is unexpected (must be
0: 503 `overloaded` and 504 `solver-timeout` are expected where they can happen).
Every --sample-s seconds it records the planning workers alive, their resident
memory, the web process's, and the artifact store's bytes. Prints Markdown tables:
the samples over time, then requests by kind and status, then a verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
sys.path.insert(0, str(ROOT))

PLAIN_TEXT = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(2, 2), float32], %y: Tensor[(2, 2), float32]) {
  %0 = add(%x, %y);
  nn.relu(%0)
}
"""
MAX_BODY_BYTES = 2 * 1024 * 1024  # the soak server's limit (smaller than the default: cheaper oversizes)


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of request: how to build one, and the statuses it may legitimately get."""

    name: str
    weight: int
    expected: frozenset[int]


@dataclass(slots=True)
class Tally:
    by_kind: dict[str, Counter[int]] = field(default_factory=dict)
    transport_errors: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)

    def record(self, kind: Kind, status: int, body: bytes) -> None:
        self.by_kind.setdefault(kind.name, Counter())[status] += 1
        if status >= 500 and status not in kind.expected:
            self.unexpected.append(f"{kind.name} -> {status}: {body[:300]!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def corpus_text(name: str, fallback: str) -> str:
    path = CORPUS / name
    return path.read_text() if path.exists() else fallback


def chain(length: int) -> str:
    body = "".join(f"  %{i} = negative(%{i - 1});\n" for i in range(1, length))
    return (
        '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  %0 = negative(%x);\n'
        f"{body}  %{length - 1}\n}}\n"
    )


class Mix:
    """The request mix; `build(kind)` gives (method, path, body bytes, headers)."""

    def __init__(self, schema: dict[str, Any], rng: random.Random) -> None:
        from service.examples import CONFLICT, PLAIN, PLAN_EXAMPLES

        self.rng = rng
        request_schema = schema.get("components", {}).get("schemas", {}).get("PlanRequest", {})
        self.has_mode = "mode" in request_schema.get("properties", {})
        self.has_picture = "/plan/picture" in schema.get("paths", {})
        self.has_compile = "/compile" in schema.get("paths", {})
        self.valid: list[dict[str, Any]] = [
            dict(PLAN_EXAMPLES["plain"]["value"]),
            dict(PLAN_EXAMPLES["cpu_annotation"]["value"]),
            {"module": corpus_text("mlp.annotated.relay", PLAIN)},
            {"module": corpus_text("resnet18.relay", PLAIN)},
            {"module": corpus_text("dqn.relay", PLAIN)},
        ]
        # Optimize-mode requests: the Swagger examples written for it, else the valid ones with the mode.
        self.optimize = [dict(v["value"]) for k, v in PLAN_EXAMPLES.items() if k.startswith("optimize")]
        self.optimize = self.optimize or [{**v, "mode": "optimize"} for v in self.valid]
        self.conflict = (
            dict(PLAN_EXAMPLES["conflict"]["value"]) if "conflict" in PLAN_EXAMPLES else {"module": CONFLICT}
        )
        self.slow = chain(20_000)
        ok_or_client = frozenset({200, 400, 422, 503})
        self.kinds = [
            Kind("plan", 30, ok_or_client),
            Kind("conflict", 8, frozenset({422, 503})),
            Kind("truncated", 6, frozenset({422, 503})),
            Kind("random-bytes", 6, frozenset({400, 422, 503})),
            Kind("oversized", 3, frozenset({413, 503})),
            Kind("deep-nesting", 5, frozenset({400, 422, 503})),
            Kind("huge-constraints", 4, ok_or_client),
            Kind("timeout", 3, frozenset({200, 504, 503})),
            Kind("health", 5, frozenset({200})),
        ]
        if self.has_mode:
            self.kinds.append(Kind("plan-optimize", 15, ok_or_client))
        if self.has_picture:
            self.kinds.append(Kind("picture", 8, frozenset({200, 422, 503})))
        if self.has_compile:
            # A tiny module for the CPU: mostly cache hits after the first, so artifact bytes stay flat.
            self.kinds.append(Kind("compile", 2, frozenset({200, 422, 503})))
        self.weights = [k.weight for k in self.kinds]

    def pick(self) -> Kind:
        return self.rng.choices(self.kinds, self.weights)[0]

    def build(self, kind: Kind) -> tuple[str, str, bytes | None]:
        rng = self.rng
        name = kind.name
        if name == "health":
            return "GET", rng.choice(["/healthz", "/readyz", "/metrics", "/version"]), None
        if name in ("plan", "plan-optimize", "picture"):
            body: dict[str, Any] = dict(rng.choice(self.optimize if name == "plan-optimize" else self.valid))
            body["explain"] = rng.random() < 0.3
            path = "/plan/picture" if name == "picture" else "/plan"
            return "POST", path, json.dumps(body).encode()
        if name == "compile":
            compile_body = {
                "module": PLAIN_TEXT,
                "default_device": "cpu",
                "targets": {"cpu": "llvm"},
                "run_check": rng.random() < 0.5,
                "timeout_ms": rng.choice([5_000, 10_000]),  # not part of the artifact's identity
            }
            return "POST", "/compile", json.dumps(compile_body).encode()
        if name == "conflict":
            return "POST", "/plan", json.dumps(self.conflict).encode()
        if name == "truncated":
            full = json.dumps(rng.choice(self.valid)).encode()
            return "POST", "/plan", full[: rng.randrange(1, len(full))]
        if name == "random-bytes":
            return "POST", "/plan", rng.randbytes(rng.randrange(1, 4096))
        if name == "oversized":
            return "POST", "/plan", b"x" * (MAX_BODY_BYTES + 1024)
        if name == "deep-nesting":
            depth = rng.randrange(1_000, 50_000)
            if rng.random() < 0.5:
                return "POST", "/plan", b"[" * depth + b"]" * depth
            module = "def @main(%x: Tensor[(4), float32]) { " + "(" * depth + "%x" + ")" * depth + " }"
            return "POST", "/plan", json.dumps({"module": module}).encode()
        if name == "huge-constraints":
            n = rng.randrange(1_000, 20_000)
            # Thousands of pins to cpu (repeated selectors; one time in four one that matches nothing).
            # Only the absence of 5xx matters here: today the planner answers 422 for a repeated selector.
            ops = ["add", "nn.relu"] if rng.random() < 0.75 else ["add", "nn.relu", "no.such.op"]
            constraints = [{"select": {"op": ops[i % len(ops)]}, "device": "cpu"} for i in range(n)]
            return "POST", "/plan", json.dumps({"module": PLAIN_TEXT, "constraints": constraints}).encode()
        if name == "timeout":
            return (
                "POST",
                "/plan",
                json.dumps({"module": self.slow, "timeout_ms": rng.choice([1, 50, 200])}).encode(),
            )
        raise ValueError(name)


# --------------------------------------------------------------------------
# The server and its processes


def start_server(args: argparse.Namespace, artifact_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = free_port()
    env = dict(os.environ)
    env.update(
        {
            "DEVPLAN_HOST": "127.0.0.1",
            "DEVPLAN_PORT": str(port),
            "DEVPLAN_POOL_SIZE": str(args.pool_size),
            "DEVPLAN_LOG_LEVEL": "warning",
            "DEVPLAN_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
            "DEVPLAN_WORKER_MEMORY_BYTES": str(args.worker_memory_bytes),
            "DEVPLAN_ARTIFACT_DIR": str(artifact_dir),
            "PYTHONPATH": str(ROOT),
        }
    )
    log = open(artifact_dir.parent / "server.log", "wb")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(
                f"server exited with {proc.returncode}; see {artifact_dir.parent / 'server.log'}"
            )
        try:
            if httpx.get(url + "/readyz", timeout=10).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("server not ready after 180 s")


def _proc_stat(pid: int) -> tuple[str, int, str] | None:
    """(state, rss bytes, command line) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return fields[0].decode(), int(fields[21]) * os.sysconf("SC_PAGE_SIZE"), cmdline


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out


@dataclass(slots=True)
class Sample:
    t_s: float
    requests: int
    unexpected_5xx: int
    workers_alive: int
    workers_dead: int
    worker_rss_max_mib: float
    worker_rss_sum_mib: float
    web_rss_mib: float
    artifact_bytes: int
    effective_slots: str


def sample(server_pid: int | None, url: str, artifact_dir: Path | None, t0: float, tally: Tally) -> Sample:
    import httpx

    alive = dead = 0
    rss: list[int] = []
    web = 0.0
    if server_pid is not None:
        web_stat = _proc_stat(server_pid)
        web = web_stat[1] / 2**20 if web_stat else 0.0
        for child in _children(server_pid):
            stat = _proc_stat(child)
            if stat is None or "resource_tracker" in stat[2]:
                continue
            if stat[0] in ("Z", "X"):
                dead += 1
            else:
                alive += 1
                rss.append(stat[1])
    effective = "?"
    try:
        for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
            if line.startswith('devplan_pool_slots{state="effective"}'):
                effective = line.split()[-1]
    except httpx.HTTPError:
        pass
    artifacts = 0
    if artifact_dir is not None and artifact_dir.exists():
        artifacts = sum(p.stat().st_size for p in artifact_dir.rglob("*") if p.is_file())
    return Sample(
        round(time.monotonic() - t0, 1),
        sum(sum(c.values()) for c in tally.by_kind.values()),
        len(tally.unexpected),
        alive,
        dead,
        round(max(rss, default=0) / 2**20, 1),
        round(sum(rss) / 2**20, 1),
        round(web, 1),
        artifacts,
        effective,
    )


# --------------------------------------------------------------------------
# The run


async def run(args: argparse.Namespace, url: str, server_pid: int | None, artifact_dir: Path | None) -> int:
    import httpx

    rng = random.Random(args.seed)
    async with httpx.AsyncClient(timeout=180) as probe:
        schema = (await probe.get(url + "/openapi.json")).json()
    mix = Mix(schema, rng)
    tally = Tally()
    samples: list[Sample] = []
    t0 = time.monotonic()
    stop_at = t0 + args.minutes * 60

    async def client(i: int) -> None:
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(base_url=url, timeout=180, limits=limits) as c:
            while time.monotonic() < stop_at:
                kind = mix.pick()
                method, path, body = mix.build(kind)
                headers = {"content-type": "application/json"} if body is not None else {}
                try:
                    r = await c.request(method, path, content=body, headers=headers)
                    tally.record(kind, r.status_code, r.content)
                except httpx.HTTPError as err:
                    # The server may close the connection of a refused oversized body mid-send.
                    tally.transport_errors[f"{kind.name}: {type(err).__name__}"] += 1

    async def sampler() -> None:
        while time.monotonic() < stop_at:
            samples.append(await asyncio.to_thread(sample, server_pid, url, artifact_dir, t0, tally))
            await asyncio.sleep(args.sample_s)

    mode_note = "TVM and optimize modes" if mix.has_mode else "TVM mode (no `mode` in the schema)"
    picture_note = "with pictures" if mix.has_picture else "no /plan/picture"
    compile_note = "with compiles" if mix.has_compile else "no /compile"
    print(
        f"soak: {args.clients} clients, {args.minutes} min, {url}, {mode_note}, {picture_note}, {compile_note}\n"
    )
    await asyncio.gather(sampler(), *(client(i) for i in range(args.clients)))
    samples.append(await asyncio.to_thread(sample, server_pid, url, artifact_dir, t0, tally))

    print(
        "| t (s) | requests | unexpected 5xx | workers alive | dead | worker RSS max (MiB) "
        "| worker RSS sum (MiB) | web RSS (MiB) | artifact bytes | effective slots |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    every = max(1, len(samples) // 20)
    for s in samples[::every] + ([samples[-1]] if (len(samples) - 1) % every else []):
        print(
            f"| {s.t_s} | {s.requests} | {s.unexpected_5xx} | {s.workers_alive} | {s.workers_dead} "
            f"| {s.worker_rss_max_mib} | {s.worker_rss_sum_mib} | {s.web_rss_mib} | {s.artifact_bytes} "
            f"| {s.effective_slots} |"
        )
    print("\n| kind | requests | statuses |")
    print("| --- | --- | --- |")
    for kind in mix.kinds:
        counts = tally.by_kind.get(kind.name, Counter())
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
        print(f"| {kind.name} | {sum(counts.values())} | {statuses} |")
    if tally.transport_errors:
        print("\ntransport errors (client side):", dict(tally.transport_errors))
    warm = [s for s in samples if s.t_s >= min(60.0, args.minutes * 60 / 3)]
    if warm:
        first, last = warm[0], warm[-1]
        print(
            f"\nafter warm-up: worker RSS sum {first.worker_rss_sum_mib} -> {last.worker_rss_sum_mib} MiB, "
            f"web RSS {first.web_rss_mib} -> {last.web_rss_mib} MiB, "
            f"artifacts {first.artifact_bytes} -> {last.artifact_bytes} bytes"
        )
    final = samples[-1]
    total = sum(sum(c.values()) for c in tally.by_kind.values())
    print(
        f"\n{total} requests in {final.t_s} s ({total / max(final.t_s, 1e-9):.1f}/s); "
        f"unexpected 5xx: {len(tally.unexpected)}; dead workers at the end: {final.workers_dead}; "
        f"effective slots: {final.effective_slots}"
    )
    for line in tally.unexpected[:10]:
        print("  unexpected:", line)
    ok = not tally.unexpected and final.workers_dead == 0
    print("verdict:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--url", help="an already running server (then no process or artifact sampling)")
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--worker-memory-bytes", type=int, default=768 * 1024 * 1024)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    if args.url:
        return asyncio.run(run(args, args.url.rstrip("/"), None, None))
    with tempfile.TemporaryDirectory(prefix="devplan-soak-") as tmp:
        artifact_dir = Path(tmp) / "artifacts"
        artifact_dir.mkdir()
        proc, url = start_server(args, artifact_dir)
        try:
            return asyncio.run(run(args, url, proc.pid, artifact_dir))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
