"""The build farm end to end: a real redis-server, real `devplan worker` subprocesses (RQ
SpawnWorkers), moto's S3 server on loopback, and the API in process."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.artifacts import cache_key
from service.config import Settings
from service.jobs.http import farm_dependency_down
from service.jobs.queue import JobQueue
from service.main import create_app
from service.models import CompileRequest
from tests.farm.conftest import BUCKET, Farm, alive, wait_until
from tests.farm.held import GO, HELD

pytestmark = pytest.mark.tvm

_names = itertools.count(1)


def tiny(width: int, run_check: bool = False) -> dict[str, Any]:
    """A two-CPU module (relu on one device, dense on the other); `width` makes its cache key."""
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
        "run_check": run_check,
    }


def settings_for(farm: Farm) -> Settings:
    return Settings(
        pool_kind="thread",
        pool_size=1,
        queue_url=farm.redis.url,
        artifact_url=f"s3://{BUCKET}/artifacts",
        compile_timeout_s=180,
        worker_heartbeat_s=3,
        worker_maintenance_s=1,
    )


@pytest.fixture(scope="module")
def api(farm: Farm) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(farm)), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def held_api(farm: Farm) -> Iterator[TestClient]:
    """The API with jobs whose compile process holds until the test pushes a token to GO."""
    settings = settings_for(farm)
    app = create_app(settings)
    app.state.job_queue = JobQueue(settings, job_function="tests.farm.held.held_compile_job")
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture()
def two_workers(farm: Farm) -> list[str]:
    """Two registered, idle workers (started when fewer are running)."""
    running = [name for name, proc in farm.workers.items() if proc.poll() is None]
    while len(running) < 2:
        name = f"w{next(_names)}"
        farm.start_worker(name)
        running.append(name)
    names = sorted(running[:2])
    farm.wait_idle(set(names))
    return names


def wait_job(client: TestClient, job_id: str, statuses: tuple[str, ...], timeout_s: float = 180) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/jobs/{job_id}").json()
        return body if body.get("status") in statuses else None

    result: dict[str, Any] = wait_until(f"job {job_id} in {statuses}", check, timeout_s)
    return result


def next_held_pid(farm: Farm, timeout_s: float = 120) -> int:
    """Block until a held compile process reports its pid (an event: BLPOP)."""
    from redis import Redis

    got = Redis.from_url(farm.redis.url, socket_timeout=timeout_s + 30).blpop([HELD], timeout=timeout_s)
    assert got is not None, "no compile process started"
    return int(got[1])


def test_four_jobs_spread_over_two_idle_workers(farm: Farm, api: TestClient, two_workers: list[str]) -> None:
    submitted = []
    for width in range(3, 7):
        response = api.post("/jobs/compile", json=tiny(width))
        assert response.status_code == 202, response.text
        assert response.headers["location"] == f"/jobs/{response.json()['id']}"
        submitted.append(response.json()["id"])
    finished = [wait_job(api, job_id, ("finished", "failed")) for job_id in submitted]
    assert [job["status"] for job in finished] == ["finished"] * 4, finished
    assert {job["worker"] for job in finished} == set(two_workers)
    for job in finished:
        assert job["attempts"] == 1
        assert job["result"]["artifact_id"] == job["result"]["sha256"]
        assert job["enqueued_at"] <= job["started_at"] <= job["ended_at"]
    listed = api.get("/jobs", params={"status": "finished"}).json()["jobs"]
    assert set(submitted) <= {job["id"] for job in listed}
    # Each job's work horse (a fresh interpreter) logged its end as a JSON line
    # through the non-blocking log queue, flushed before the horse ended.
    logged = set()
    for name in two_workers:
        for line in (farm.workdir / f"worker-{name}.log").read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # RQ's own lines are plain text
            if isinstance(record, dict) and record.get("logger") == "devplan.jobs":
                logged.add(record.get("job_id"))
    assert set(submitted) <= logged
    # The same request again is a cache hit: a finished job named by the key, nothing enqueued.
    before = farm.connection().llen("rq:queue:compile")
    again = api.post("/jobs/compile", json=tiny(3))
    assert again.status_code == 200 and again.json()["status"] == "finished"
    assert again.json()["result"]["cache_hit"] is True
    assert again.json()["id"] == cache_key(CompileRequest.model_validate(tiny(3)))
    assert farm.connection().llen("rq:queue:compile") == before
    assert api.get(f"/jobs/{again.json()['id']}").json()["status"] == "finished"


def test_metrics_read_the_farm_from_redis(farm: Farm, api: TestClient, two_workers: list[str]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    # (create_app registers the farm collector in queue mode.)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(api.get("/metrics").text)
        for s in family.samples
    }
    assert samples[("devplan_queue_up", ())] == 1
    assert samples[("devplan_queue_depth", ())] == 0
    assert samples[("devplan_queue_workers", ())] >= 2
    assert samples[("devplan_jobs_total", (("status", "finished"),))] >= 4  # the four jobs above
    assert samples[("devplan_job_run_seconds_count", ())] >= 4
    assert samples[("devplan_job_queued_seconds_count", ())] >= 4


def test_artifact_from_s3_is_the_built_library(farm: Farm, api: TestClient, two_workers: list[str]) -> None:
    response = api.post("/compile", json=tiny(11, run_check=True))
    assert response.status_code == 200, response.text
    body = response.json()
    artifact_id = body["artifact_id"]
    assert body["report"]["check"]["max_abs_error"] < 1e-5
    download = api.get(f"/artifacts/{artifact_id}")
    assert download.status_code == 200
    data = download.content
    assert hashlib.sha256(data).hexdigest() == artifact_id == body["sha256"]  # the worker's hash of its file
    assert len(data) == body["size_bytes"]
    stored = farm.s3().get_object(Bucket=BUCKET, Key=f"artifacts/{artifact_id}.so")["Body"].read()
    assert stored == data
    redirect = api.get(f"/artifacts/{artifact_id}", params={"redirect": "true"}, follow_redirects=False)
    assert redirect.status_code == 307
    assert httpx.get(redirect.headers["location"]).content == data
    assert api.get(f"/artifacts/{'0' * 64}").status_code == 404
    # The bucket's lifecycle rule expired the library: the same request is a miss and compiles again.
    farm.s3().delete_object(Bucket=BUCKET, Key=f"artifacts/{artifact_id}.so")
    again = api.post("/jobs/compile", json=tiny(11, run_check=True))
    assert again.status_code == 202, again.text
    rebuilt = wait_job(api, again.json()["id"], ("finished", "failed"))
    assert rebuilt["status"] == "finished" and rebuilt["result"]["cache_hit"] is False
    assert api.get(f"/artifacts/{rebuilt['result']['artifact_id']}").status_code == 200


RELAX_MODULE = """@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        a = R.add(x, y)
        b = R.hint_on_device(a, R.device(1, 1))
        c = R.exp(R.hint_on_device(a, R.device(1, 0)))
        return c
"""


def test_a_relax_module_compiles_through_the_queue(farm: Farm, api: TestClient, two_workers: list[str]) -> None:
    # /jobs/compile takes Relax too; the worker plans and builds it like /compile does.
    body = {"module": RELAX_MODULE, "default_device": "cpu:0", "host_device": "cpu:0", "run_check": True}
    response = api.post("/jobs/compile", json=body)
    assert response.status_code == 202, response.text
    job = wait_job(api, response.json()["id"], ("finished", "failed"))
    assert job["status"] == "finished", job.get("problem")
    report = job["result"]["report"]
    assert report["devices"] == ["llvm:0", "llvm:1"]
    assert report["device_copies"] >= 1 and report["check"]["max_abs_error"] <= 1e-6
    assert api.get(f"/artifacts/{job['result']['artifact_id']}").status_code == 200


def test_queue_mode_with_a_shared_artifact_directory(farm: Farm, tmp_path: Path) -> None:
    """DEVPLAN_ARTIFACT_DIR_SHARED=1: workers write the local store (a mount they all share)."""
    shared = tmp_path / "shared-artifacts"
    env = {
        "DEVPLAN_ARTIFACT_URL": "",
        "DEVPLAN_ARTIFACT_DIR": str(shared),
        "DEVPLAN_ARTIFACT_DIR_SHARED": "1",
        "DEVPLAN_QUEUE_NAME": "compile-shared",
    }
    name = f"w{next(_names)}"
    farm.start_worker(name, **env)
    try:
        farm.wait_idle({name})
        settings = settings_for(farm).model_copy(
            update={
                "artifact_url": "",
                "artifact_dir": shared,
                "artifact_dir_shared": True,
                "queue_name": "compile-shared",
            }
        )
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            response = client.post("/compile", json=tiny(91))
            assert response.status_code == 200, response.text
            artifact_id = response.json()["artifact_id"]
            library = shared / f"{artifact_id}.so"
            download = client.get(f"/artifacts/{artifact_id}")
            assert download.status_code == 200 and download.content == library.read_bytes()
            assert hashlib.sha256(download.content).hexdigest() == artifact_id
            assert client.post("/compile", json=tiny(91)).json()["cache_hit"] is True
        assert [p.name for p in shared.glob("tmp-*")] == []
    finally:
        farm.stop_worker(name)


def test_identical_requests_share_one_job(farm: Farm, held_api: TestClient, two_workers: list[str]) -> None:
    first = held_api.post("/jobs/compile", json=tiny(21))
    second = held_api.post("/jobs/compile", json=tiny(21))
    assert first.status_code == second.status_code == 202
    job_id = first.json()["id"]
    assert second.json()["id"] == job_id
    assert second.json()["waiters"] == 2
    next_held_pid(farm)  # the one compile process of the one job
    # One of the two withdraws: the other still waits, so the job keeps running.
    withdrawn = held_api.delete(f"/jobs/{job_id}", params={"waiter": first.json()["waiter"]})
    assert withdrawn.status_code == 200 and withdrawn.json()["canceled"] is False
    assert withdrawn.json()["job"]["status"] == "started"
    farm.connection().rpush(GO, "go")
    done = wait_job(held_api, job_id, ("finished", "failed", "canceled"))
    assert done["status"] == "finished", done
    assert farm.connection().llen(HELD) == 0  # no second compile ran


def test_delete_of_a_running_job_kills_its_compile(farm: Farm, held_api: TestClient, two_workers: list[str]) -> None:
    objects_before = {o["Key"] for o in farm.s3().list_objects_v2(Bucket=BUCKET).get("Contents", [])}
    submitted = held_api.post("/jobs/compile", json=tiny(31)).json()
    job_id = submitted["id"]
    pid = next_held_pid(farm)
    job = wait_job(held_api, job_id, ("started",))
    from service.artifact_store import open_store

    scratch = open_store(settings_for(farm)).scratch(job_id)
    assert scratch.exists()  # the held compile wrote a partial library
    response = held_api.delete(f"/jobs/{job_id}", params={"waiter": submitted["waiter"]})
    assert response.status_code == 200 and response.json()["canceled"] is True
    assert response.json()["job"]["status"] == "canceled"
    assert response.json()["job"]["problem"]["type"].endswith("/compile-canceled")
    wait_until(f"compile process {pid} gone", lambda: not alive(pid), 30)
    wait_until("scratch library removed", lambda: not scratch.exists(), 30)
    objects_after = {o["Key"] for o in farm.s3().list_objects_v2(Bucket=BUCKET).get("Contents", [])}
    assert objects_after == objects_before
    farm.wait_idle({job["worker"]})  # the worker lives on


def test_worker_killed_mid_job_the_other_finishes_it(
    farm: Farm, held_api: TestClient, two_workers: list[str]
) -> None:
    job_id = held_api.post("/jobs/compile", json=tiny(41)).json()["id"]
    pid = next_held_pid(farm)
    victim = wait_job(held_api, job_id, ("started",))["worker"]
    survivor = next(name for name in two_workers if name != victim)
    # The machine dies: worker, work horse and compile process (the horse's process group).
    horse_group = os.getpgid(pid)
    farm.workers[victim].send_signal(signal.SIGKILL)
    os.killpg(horse_group, signal.SIGKILL)
    farm.workers[victim].wait(10)
    wait_until(f"compile process {pid} gone", lambda: not alive(pid), 30)
    # Noticed after the heartbeat TTL; retried on the survivor, which holds again.
    retry_pid = next_held_pid(farm, timeout_s=60)
    assert retry_pid != pid
    farm.connection().rpush(GO, "go")
    done = wait_job(held_api, job_id, ("finished", "failed", "canceled"))
    assert done["status"] == "finished", (done, farm.worker_log(survivor))
    assert done["worker"] == survivor
    assert done["attempts"] == 2
    farm.workers.pop(victim)


def test_a_job_whose_retries_ran_out_fails_as_compile_lost(farm: Farm, two_workers: list[str]) -> None:
    settings = settings_for(farm).model_copy(update={"compile_retries": 0})
    app = create_app(settings)
    app.state.job_queue = JobQueue(settings, job_function="tests.farm.held.held_compile_job")
    with TestClient(app, raise_server_exceptions=False) as client:
        job_id = client.post("/jobs/compile", json=tiny(45)).json()["id"]
        pid = next_held_pid(farm)
        victim = wait_job(client, job_id, ("started",))["worker"]
        horse_group = os.getpgid(pid)
        farm.workers[victim].send_signal(signal.SIGKILL)
        os.killpg(horse_group, signal.SIGKILL)
        farm.workers[victim].wait(10)
        farm.workers.pop(victim)
        failed = wait_job(client, job_id, ("failed", "finished", "canceled"), timeout_s=60)
        assert failed["status"] == "failed"
        assert failed["problem"]["type"].endswith("/compile-lost")
        assert "0 retries allowed" in failed["problem"]["detail"]
        # A sync request for the same key is not stuck on the lost job: it gets a new one.
        assert farm.connection().get(f"devplan:inflight:{cache_key(CompileRequest.model_validate(tiny(45)))}") is None


def test_sigterm_finishes_the_job_then_the_worker_exits(
    farm: Farm, held_api: TestClient, two_workers: list[str]
) -> None:
    from rq import Worker

    # One SIGTERM: the running job finishes on that worker, then the worker exits 0.
    job_id = held_api.post("/jobs/compile", json=tiny(61)).json()["id"]
    next_held_pid(farm)
    victim = wait_job(held_api, job_id, ("started",))["worker"]
    farm.workers[victim].send_signal(signal.SIGTERM)
    worker = Worker.find_by_key(f"rq:worker:{victim}", connection=farm.connection())
    assert worker is not None
    wait_until("the warm shutdown to be recorded", lambda: worker.refresh() or worker.shutdown_requested_date)
    farm.connection().rpush(GO, "go")
    assert farm.workers[victim].wait(60) == 0
    done = wait_job(held_api, job_id, ("finished", "failed", "canceled"))
    assert done["status"] == "finished" and done["worker"] == victim
    farm.workers.pop(victim)


@pytest.mark.slow
def test_a_second_sigterm_requeues_the_job_on_the_other_worker(
    farm: Farm, held_api: TestClient, two_workers: list[str]
) -> None:
    """(Slow stage: a worker lost mid-job and its job run by the other is in the default stage,
    test_worker_killed_mid_job_the_other_finishes_it.)"""
    from rq import Worker
    from rq.job import Job

    # Two SIGTERMs: the job's horse and compile process are killed and the job is requeued
    # (no retry spent); the other worker runs it.
    job_id = held_api.post("/jobs/compile", json=tiny(62)).json()["id"]
    pid = next_held_pid(farm)
    victim = wait_job(held_api, job_id, ("started",))["worker"]
    survivor = next(name for name in two_workers if name != victim)
    farm.workers[victim].send_signal(signal.SIGTERM)
    worker = Worker.find_by_key(f"rq:worker:{victim}", connection=farm.connection())
    assert worker is not None
    wait_until("the warm shutdown to be recorded", lambda: worker.refresh() or worker.shutdown_requested_date)
    farm.workers[victim].send_signal(signal.SIGTERM)
    farm.workers[victim].wait(60)
    farm.workers.pop(victim)
    wait_until(f"compile process {pid} gone", lambda: not alive(pid), 30)
    retry_pid = next_held_pid(farm)
    assert retry_pid != pid
    farm.connection().rpush(GO, "go")
    done = wait_job(held_api, job_id, ("finished", "failed", "canceled"))
    assert done["status"] == "finished" and done["worker"] == survivor
    assert done["attempts"] == 2
    assert Job.fetch(job_id, connection=farm.connection()).retries_left == 2


def test_the_cold_stop_is_not_cut_short_by_the_horse_monitors_alarm(
    farm: Farm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second SIGTERM arrives while RQ's horse monitor waits under its alarm: an alarm
    going off inside the stop must not abort it (the monitor would then reap the killed horse
    as a failure and spend a retry). Here the alarm goes off exactly while the horse is killed."""
    from rq import Queue, Retry
    from rq.job import Job
    from rq.timeouts import HorseMonitorTimeoutException, UnixSignalDeathPenalty

    from service.worker import make_worker

    queue = Queue(f"cold-stop-{next(_names)}", connection=farm.connection())
    job = queue.enqueue("builtins.len", "abcd", retry=Retry(max=2))
    queue.remove(job)  # the worker took it
    waiting = queue.enqueue("builtins.len", "abc")
    worker = make_worker(settings_for(farm), queues=[queue.name], name=f"cold-stop-{next(_names)}")
    worker._horse_pid = os.getpid()  # nothing is killed: the stubs below stand in for the horse
    monkeypatch.setattr(worker, "get_current_job", lambda: job)
    monkeypatch.setattr(worker, "kill_horse", lambda: os.kill(os.getpid(), signal.SIGALRM))
    monkeypatch.setattr(worker, "wait_for_horse", lambda: (os.getpid(), 9, None))
    with pytest.raises(SystemExit), UnixSignalDeathPenalty(60, HorseMonitorTimeoutException):
        worker.request_force_stop(signal.SIGTERM, None)
    assert queue.job_ids == [job.id, waiting.id]  # back at the front
    assert Job.fetch(job.id, connection=farm.connection()).retries_left == 2


def test_sync_compile_past_its_limit_is_504_and_cancels_the_job(farm: Farm, two_workers: list[str]) -> None:
    settings = settings_for(farm).model_copy(update={"compile_timeout_s": 2.0})
    app = create_app(settings)
    queue = JobQueue(settings, job_function="tests.farm.held.held_compile_job")
    app.state.job_queue = queue
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/compile", json=tiny(71))
        assert response.status_code == 504, response.text
        assert response.json()["type"].endswith("/compile-timeout")
        job_id = response.json()["detail"].rsplit("job ", 1)[1].rstrip(")")
        # Cancelled whether it was still queued (it never starts) or running (stopped).
        assert wait_job(client, job_id, ("canceled", "finished", "failed"))["status"] == "canceled"
        held = farm.connection().lpop(HELD)
        if held is not None:  # it had started: its compile process was killed with the horse
            wait_until(f"compile process {int(held)} gone", lambda: not alive(int(held)), 30)


def test_redis_down_is_503_while_plan_works_and_jobs_run_after(
    farm: Farm, api: TestClient, two_workers: list[str]
) -> None:
    farm.redis.stop()
    try:
        for response in (
            api.post("/compile", json=tiny(51)),
            api.post("/jobs/compile", json=tiny(51)),
            api.get(f"/jobs/{'a' * 32}"),
            api.get("/jobs"),
        ):
            assert response.status_code == 503, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
            assert response.json()["type"].endswith("/queue-unavailable")
            assert int(response.headers["retry-after"]) > 0
        down = asyncio.run(farm_dependency_down(SimpleNamespace(app=api.app)))  # type: ignore[arg-type]
        assert down is not None and down[0] == "redis"
        plan = api.post("/plan", json={"module": tiny(51)["module"], "virtual_devices": ["cpu:0", "cpu:1"]})
        assert plan.status_code == 200, plan.text
        assert "devplan_queue_up 0.0" in api.get("/metrics").text
    finally:
        farm.redis.start()  # AOF: the queue and the workers' registrations survive
    assert asyncio.run(farm_dependency_down(SimpleNamespace(app=api.app))) is None  # type: ignore[arg-type]
    response = api.post("/compile", json=tiny(52))
    assert response.status_code == 200, response.text
    assert response.json()["cache_hit"] is False


def test_unreachable_object_store_is_503(farm: Farm, api: TestClient) -> None:
    import boto3
    from botocore.config import Config

    from service.artifact_store.s3 import S3Artifacts
    from tests.farm.conftest import free_port

    dead = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(connect_timeout=1, retries={"max_attempts": 1}),
    )
    settings = settings_for(farm)
    app = create_app(settings)
    app.state.artifact_backend = S3Artifacts.from_url(settings.artifact_url, client=dead)
    with TestClient(app, raise_server_exceptions=False) as client:
        for response in (
            client.post("/compile", json=tiny(81)),
            client.post("/jobs/compile", json=tiny(81)),
            client.get(f"/artifacts/{'1' * 64}"),
        ):
            assert response.status_code == 503, response.text
            assert response.json()["type"].endswith("/artifact-store-unavailable")
            assert "retry-after" in response.headers
