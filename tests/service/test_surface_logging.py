"""Logging never blocks a request, in the web process or its workers.

The server runs as a real `devplan serve` subprocess whose stdout and stderr (and so
its planning workers') are one pipe that the test never reads. Once the pipe is full
every writer thread is stuck in write(); requests must keep being answered, and the
dropped records show up in `devplan_log_records_dropped_total`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO_ROOT, find_free_port

TINY = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  negative(%x)\n}\n'
PLANS = 1500
CLIENTS = 4
_DROPPED = re.compile(r'^devplan_log_records_dropped_total\{process="(\w+)"\} ([0-9.e+]+)$', re.MULTILINE)


@dataclass
class UnreadServer:
    base_url: str
    process: subprocess.Popen[bytes]
    read_end: int  # the pipe's read end, held open and never read


def _pipe_nobody_reads() -> tuple[int, int]:
    """A pipe shrunk to one page where Linux allows it, so it fills after a few lines."""
    read_end, write_end = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    except (ImportError, AttributeError, OSError):
        pass  # the default 64 KiB pipe: it fills too, after a few hundred lines
    return read_end, write_end


@pytest.fixture
def unread_server(tmp_path: Path) -> Iterator[UnreadServer]:
    port = find_free_port()
    env = dict(os.environ)
    env.update(
        {
            "DEVPLAN_HOST": "127.0.0.1",
            "DEVPLAN_PORT": str(port),
            "DEVPLAN_POOL_SIZE": "2",
            "DEVPLAN_LOG_LEVEL": "debug",  # every request and every plan logs a line
            "DEVPLAN_LOG_QUEUE_SIZE": "100",
            "DEVPLAN_ARTIFACT_DIR": str(tmp_path / "artifacts"),
        }
    )
    read_end, write_end = _pipe_nobody_reads()
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve"],
        cwd=REPO_ROOT,
        env=env,
        stdout=write_end,
        stderr=write_end,
        start_new_session=True,
    )
    os.close(write_end)
    server = UnreadServer(f"http://127.0.0.1:{port}", process, read_end)
    try:
        deadline = time.monotonic() + 120
        while True:  # start-up: poll until ready (this wait is not an assertion)
            assert process.poll() is None, f"devplan serve exited with {process.returncode}"
            try:
                if httpx.get(server.base_url + "/readyz", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "devplan serve did not become ready"
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        os.close(read_end)


def _dropped(base_url: str) -> dict[str, float]:
    text = httpx.get(base_url + "/metrics", timeout=30).text
    return {process: float(value) for process, value in _DROPPED.findall(text)}


def test_unread_stderr_never_stops_healthz_or_plan(unread_server: UnreadServer) -> None:
    """1,500 logged plans through a server whose log pipe is never read: every /plan and
    every /healthz is answered, the drop counter rises (web process and planning workers),
    and SIGTERM still shuts the server down cleanly."""
    base = unread_server.base_url
    before = _dropped(base)
    assert set(before) == {"web", "planning", "compile"}

    done = threading.Event()
    health: list[int | str] = []

    def poll_health() -> None:
        with httpx.Client(base_url=base, timeout=30) as c:
            while not done.is_set():
                try:
                    health.append(c.get("/healthz").status_code)
                except httpx.HTTPError as err:
                    health.append(repr(err))
                done.wait(0.02)

    def plan_many(count: int) -> list[int]:
        with httpx.Client(base_url=base, timeout=60) as c:
            body = {"module": TINY, "default_device": "cpu"}
            return [c.post("/plan", json=body).status_code for _ in range(count)]

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        with ThreadPoolExecutor(CLIENTS) as clients:
            statuses = [s for batch in clients.map(plan_many, [PLANS // CLIENTS] * CLIENTS) for s in batch]
    finally:
        done.set()
        poller.join()

    assert statuses == [200] * PLANS
    assert health and all(s == 200 for s in health), [s for s in health if s != 200][:5]
    assert httpx.get(base + "/healthz", timeout=30).status_code == 200
    after = _dropped(base)
    # Each process holds at most 100 queued lines and the pipe a few more (4 KiB, or 64 KiB
    # where it cannot shrink); the web process logged 1,500 requests and the two workers
    # 1,500 plans between them, so most of each were dropped.
    assert after["web"] > before["web"]
    assert after["web"] >= PLANS // 2
    assert after["planning"] > before["planning"]
    assert after["planning"] >= PLANS // 2

    unread_server.process.send_signal(signal.SIGTERM)
    assert unread_server.process.wait(60) == 0
