"""A real build farm on loopback for the farm tests: Debian's redis-server (AOF on, so a
restart keeps the queue), moto's S3 server, and `devplan worker` subprocesses.

Everything waits for events (a ping answered, a worker registered, a job state) with
generous deadlines, never fixed sleeps; every process started here is stopped here."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rq")
pytest.importorskip("boto3")
pytest.importorskip("moto")
pytest.importorskip("tvm")

REPO = Path(__file__).resolve().parents[2]
BUCKET = "devplan-farm-test"
HEARTBEAT_S = 3
MAINTENANCE_S = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy (an event), failing after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except Exception:  # noqa: BLE001 - not ready yet (connection refused, ...)
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@dataclass
class RedisServer:
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server missing"
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--appendonly", "yes", "--save", "", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        from redis import Redis

        client = Redis.from_url(self.url, socket_connect_timeout=1)
        wait_until("redis-server to answer", client.ping, 30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.proc = None


@dataclass
class Farm:
    redis: RedisServer
    s3_endpoint: str
    env: dict[str, str]
    workdir: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def connection(self) -> Any:
        from redis import Redis

        return Redis.from_url(self.redis.url, socket_connect_timeout=2)

    def s3(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.s3_endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def start_worker(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        """A `devplan worker --name NAME` subprocess; `env` overrides the farm's environment."""
        log = (self.workdir / f"worker-{name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))",
             "worker", "--name", name],
            cwd=REPO, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT,
        )
        self.workers[name] = proc
        return proc

    def registered(self) -> set[str]:
        from rq import Worker

        return {w.name for w in Worker.all(connection=self.connection())}

    def idle(self) -> set[str]:
        from rq import Worker

        return {w.name for w in Worker.all(connection=self.connection()) if w.get_state() == "idle"}

    def wait_idle(self, names: set[str]) -> None:
        wait_until(f"workers {sorted(names)} registered and idle", lambda: names <= self.idle(), 120)

    def stop_worker(self, name: str) -> None:
        proc = self.workers.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def worker_log(self, name: str) -> str:
        path = self.workdir / f"worker-{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def stop_cold(proc: subprocess.Popen[bytes]) -> None:
    """Stop a worker and whatever job it runs: SIGTERM (warm), a second SIGTERM (kills the
    horse's process group), then SIGKILL as the last resort."""
    for sig in (signal.SIGTERM, signal.SIGTERM):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


@contextlib.contextmanager
def start_farm(workdir: Path) -> Iterator[Farm]:
    """Redis (AOF in `workdir`), moto's S3 server with the bucket, and the environment
    workers get; on exit every worker, moto and Redis are stopped and os.environ restored."""
    redis = RedisServer(free_port(), workdir)
    redis.start()
    s3_port = free_port()
    moto_log = (workdir / "moto.log").open("ab")
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
        stdout=moto_log, stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{s3_port}"
    env = dict(os.environ)
    env.update(
        DEVPLAN_QUEUE_URL=redis.url,
        DEVPLAN_ARTIFACT_URL=f"s3://{BUCKET}/artifacts",
        DEVPLAN_WORKER_HEARTBEAT_S=str(HEARTBEAT_S),
        DEVPLAN_WORKER_MAINTENANCE_S=str(MAINTENANCE_S),
        DEVPLAN_COMPILE_RETRIES="2",
        DEVPLAN_LOG_LEVEL="info",
        AWS_ENDPOINT_URL_S3=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        PYTHONPATH=str(REPO),
    )
    farm = Farm(redis, endpoint, env, workdir)
    saved = {k: os.environ.get(k) for k in env if k.startswith(("AWS_", "DEVPLAN_"))}
    try:
        wait_until("moto's S3 server", lambda: farm.s3().list_buckets() is not None, 60)
        farm.s3().create_bucket(Bucket=BUCKET)
        os.environ.update({k: env[k] for k in saved})  # the in-process API's boto3 reads these
        yield farm
    finally:
        for name in list(farm.workers):
            stop_cold(farm.workers.pop(name))
        moto.terminate()
        moto.wait(30)
        moto_log.close()
        redis.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        from service.config import get_settings

        get_settings.cache_clear()  # nothing may keep settings read while the farm's variables were set


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server; .ci/run does)")
    with start_farm(tmp_path_factory.mktemp("farm")) as farm:
        yield farm
