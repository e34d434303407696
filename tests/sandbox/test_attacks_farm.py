"""POST /jobs/compile with run_check of attacking kernels: the queue worker's
run check is sandboxed the same way. Each attack's job ends `failed` with the problem
naming the limit, after one attempt (a stopped child is the caller's failure, never
retried as if transient); the worker stays up and runs the next job.

Workers take their limits from the environment: one queue whose worker has a wall clock
far beyond the CPU limit, one (the sleep) whose wall clock is short. Every attack runs
in the slow stage (each needs a farm and two compiles in fresh work horses, the `system`
one about 25 s). The default stage holds the parts: the sandbox stops `system` on its own
(test_layers.py) and behind /compile (test_attacks.py), the queue's compile with its run
check finishes (tests/farm), and the queue's build returns a compile's failure as the job's
error instead of raising (tests/security/test_compile_hostile.py), so RQ does not retry it."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rq")
pytest.importorskip("moto")

from fastapi.testclient import TestClient

from service import sandbox
from service.config import Settings
from service.main import create_app
from tests.farm.conftest import BUCKET, Farm, start_farm, wait_until

from .kernels import CPU_S, EXPECTED, MEMORY_BYTES, WALL_S, attack_lines, one_device

FOUND = sandbox.detect()
pytestmark = pytest.mark.skipif(FOUND.seccomp is not None, reason=f"seccomp unavailable here: {FOUND.seccomp}")
_fresh = itertools.count(1000)
QUEUES = {"long": ("sandbox", 600), "short": ("sandbox-wall", WALL_S)}  # name: (queue, wall-clock s)


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server; .ci/run does)")
    with start_farm(tmp_path_factory.mktemp("farm")) as farm:
        for name, (queue, wall_s) in QUEUES.items():
            farm.start_worker(
                name,
                DEVPLAN_QUEUE_NAME=queue,
                DEVPLAN_RUN_CHECK_CPU_S=str(CPU_S),
                DEVPLAN_RUN_CHECK_WALL_S=str(wall_s),
                DEVPLAN_RUN_CHECK_MEMORY_BYTES=str(MEMORY_BYTES),
                DEVPLAN_COMPILE_TIMEOUT_S="900",
            )
        farm.wait_idle(set(QUEUES))
        for name in QUEUES:  # each worker said at start which layers its run checks get
            assert "run checks sandboxed with layers rlimits, wall-clock, seccomp" in farm.worker_log(name)
        yield farm


def _api(farm: Farm, which: str) -> TestClient:
    settings = Settings(
        pool_kind="thread",
        pool_size=1,
        queue_url=farm.redis.url,
        queue_name=QUEUES[which][0],
        artifact_url=f"s3://{BUCKET}/artifacts",
        compile_timeout_s=900,
        worker_heartbeat_s=3,
        worker_maintenance_s=1,
    )
    return TestClient(create_app(settings), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def api(farm: Farm) -> Iterator[TestClient]:
    with _api(farm, "long") as client:
        yield client


@pytest.fixture(scope="module")
def short_wall_api(farm: Farm) -> Iterator[TestClient]:
    with _api(farm, "short") as client:
        yield client


def _job(client: TestClient, module: str) -> dict[str, Any]:
    response = client.post("/jobs/compile", json={"module": module, "default_device": "cpu", "run_check": True})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]

    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/jobs/{job_id}").json()
        return body if body.get("status") in ("finished", "failed", "canceled") else None

    result: dict[str, Any] = wait_until(f"job {job_id} to end", done, 600)
    return result


def attack(farm: Farm, client: TestClient, worker: str, name: str, target: Path) -> None:
    module = one_device(attack_lines(name, path=str(target)) if name in ("system", "fopen") else attack_lines(name))
    job = _job(client, module)
    kind, detail = EXPECTED[name]
    assert job["status"] == "failed", job
    assert job["problem"]["type"].endswith(f"/{kind}")
    assert detail in job["problem"]["detail"]
    assert job["attempts"] == 1
    assert not target.exists()
    assert client.get("/healthz").status_code == 200
    clean = _job(client, one_device(add=next(_fresh)))
    assert clean["status"] == "finished", clean.get("problem")
    check = clean["result"]["report"]["check"]
    assert check["max_abs_error"] == 0.0 and check["sandbox"][:3] == ["rlimits", "wall-clock", "seccomp"]
    assert farm.workers[worker].poll() is None, farm.worker_log(worker)


@pytest.mark.slow
def test_system_attack_through_the_queue(farm: Farm, api: TestClient, tmp_path: Path) -> None:
    attack(farm, api, "long", "system", tmp_path / "escaped")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in EXPECTED if n not in ("system", "sleep")])
def test_attack_through_the_queue(farm: Farm, api: TestClient, tmp_path: Path, name: str) -> None:
    attack(farm, api, "long", name, tmp_path / "escaped")


@pytest.mark.slow
def test_endless_sleep_through_the_queue(farm: Farm, short_wall_api: TestClient, tmp_path: Path) -> None:
    attack(farm, short_wall_api, "short", "sleep", tmp_path / "escaped")
