"""Checks of a running build farm (docker/smoke.sh's farm stage; standard library only).

The farm: Redis, moto's S3 server, the API in queue mode and two workers, each in its own
container on the host network. This compiles three small models through the queue (each
downloaded and checked against its SHA-256), then starts a resnet18 compile, kills the
container of the worker that took it (worker, work horse and compile process die together, as
with a machine) and checks that the job still finishes, on the other worker, as attempt 2.

Usage: python3 smoke_farm.py API_URL REDIS_CONTAINER REDIS_PORT CORPUS WORKER=CONTAINER...
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def call(base: str, method: str, path: str, payload: Any = None, timeout: float = 60.0) -> tuple[int, bytes]:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait(what: str, check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
        except (OSError, ValueError):
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"FAILED: timed out after {timeout_s:.0f} s waiting for {what}")


def tiny(width: int) -> dict[str, Any]:
    return {
        "module": '#[version = "0.0.5"]\n'
        f"def @main(%x: Tensor[(2, {width}), float32], %w: Tensor[(4, {width}), float32]) {{\n"
        "  %0 = nn.relu(%x);\n"
        "  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0]);\n"
        "  nn.dense(%1, %w, units=4)\n"
        "}\n",
        "virtual_devices": ["cpu:0", "cpu:1"],
        "default_device": "cpu:1",
        "host_device": "cpu:0",
        "targets": {"cpu": "llvm"},
    }


def job(base: str, job_id: str) -> dict[str, Any]:
    status, body = call(base, "GET", f"/jobs/{job_id}")
    if status != 200:
        raise SystemExit(f"FAILED: GET /jobs/{job_id} answered {status}: {body[:300]!r}")
    result: dict[str, Any] = json.loads(body)
    return result


def submit(base: str, payload: dict[str, Any]) -> str:
    status, body = call(base, "POST", "/jobs/compile", payload)
    if status != 202:
        raise SystemExit(f"FAILED: POST /jobs/compile answered {status}: {body[:300]!r}")
    return str(json.loads(body)["id"])


def finished(base: str, job_id: str, timeout_s: float) -> dict[str, Any]:
    done = wait(f"job {job_id} to end", lambda: (j := job(base, job_id))["status"] in
                ("finished", "failed", "canceled") and j, timeout_s)
    if done["status"] != "finished":
        raise SystemExit(f"FAILED: job {job_id} ended {done['status']}: {done.get('problem')}")
    return dict(done)


def check_download(base: str, result: dict[str, Any]) -> None:
    artifact_id = result["artifact_id"]
    status, data = call(base, "GET", f"/artifacts/{artifact_id}")
    if status != 200 or hashlib.sha256(data).hexdigest() != artifact_id:
        raise SystemExit(f"FAILED: /artifacts/{artifact_id} answered {status}, {len(data)} bytes not matching")


def main(argv: list[str]) -> int:
    if len(argv) < 5:
        raise SystemExit(__doc__)
    base, redis_container, redis_port, corpus = argv[0], argv[1], argv[2], Path(argv[3])
    containers = dict(pair.split("=", 1) for pair in argv[4:])

    wait("the API's /healthz", lambda: call(base, "GET", "/healthz", timeout=5)[0] == 200, 120)

    def registered() -> bool:
        out = subprocess.run(
            ["podman", "exec", redis_container, "redis-cli", "-p", redis_port, "smembers", "rq:workers"],
            capture_output=True, text=True, check=False,
        ).stdout
        return all(f"rq:worker:{name}" in out for name in containers)

    wait(f"workers {sorted(containers)} registered", registered, 180)
    print(f"farm: API healthy, workers {', '.join(sorted(containers))} registered")

    start = time.monotonic()
    ids = [submit(base, tiny(width)) for width in (3, 4, 5)]
    workers = set()
    for job_id in ids:
        done = finished(base, job_id, 300)
        check_download(base, done["result"])
        workers.add(done["worker"])
    print(f"farm: three small models compiled through the queue in {time.monotonic() - start:.1f} s "
          f"(workers {', '.join(sorted(workers))}), downloads match their SHA-256")

    resnet = {
        "module": (corpus / "resnet18.relay").read_text(),
        "default_device": "cpu",
        "host_device": "cpu",
        "targets": {"cpu": "llvm"},
    }
    job_id = submit(base, resnet)
    started = wait("the resnet18 job to start", lambda: (j := job(base, job_id))["status"] == "started"
                   and j.get("worker") and j, 300)
    victim = started["worker"]
    subprocess.run(["podman", "kill", "--signal", "KILL", containers[victim]], check=True, capture_output=True)
    killed_at = time.monotonic()
    print(f"farm: killed {containers[victim]} (worker {victim}) while it compiled job {job_id}")
    done = finished(base, job_id, 300)
    if done["worker"] == victim or done["attempts"] != 2:
        raise SystemExit(f"FAILED: job {job_id} finished on {done['worker']} after {done['attempts']} attempts")
    check_download(base, done["result"])
    print(f"farm: job {job_id} finished on {done['worker']} (attempt 2) {time.monotonic() - killed_at:.1f} s "
          "after the kill")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
