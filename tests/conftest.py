"""Fixtures shared by every test package: the corpus, free ports, a running devplan server.

Markers (declared in pyproject.toml): `tvm` tests are skipped when apache-tvm is
not importable, `gpu` tests when no CUDA GPU is visible, so the default run
passes on a plain CPU machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = (REPO_ROOT / ".." / "shared" / "corpus").resolve()


# --------------------------------------------------------------------------
# Markers


@lru_cache(maxsize=1)
def tvm_available() -> bool:
    return importlib.util.find_spec("tvm") is not None


@lru_cache(maxsize=1)
def gpu_available() -> bool:
    """A CUDA GPU is visible (nvidia-smi lists one)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_tvm = pytest.mark.skip(reason="apache-tvm is not installed (pip install -e '.[tvm]')")
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU visible (nvidia-smi -L lists none)")
    for item in items:
        if "tvm" in item.keywords and not tvm_available():
            item.add_marker(skip_tvm)
        if "gpu" in item.keywords and not gpu_available():
            item.add_marker(skip_gpu)


# --------------------------------------------------------------------------
# Data


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """../shared/corpus beside the repo (read only); tests using it skip when it is absent."""
    if not CORPUS_DIR.is_dir():
        pytest.skip(f"corpus not found at {CORPUS_DIR} (expected ../shared/corpus beside the repo)")
    return CORPUS_DIR


# --------------------------------------------------------------------------
# Servers


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def free_port() -> int:
    return find_free_port()


@dataclass
class RunningServer:
    """A `devplan serve` subprocess on loopback."""

    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def start_server(
    log_path: Path, env_overrides: dict[str, str] | None = None, ready_timeout_s: float = 120.0
) -> RunningServer:
    """Start `python -m service.cli serve` on a free port and wait until /readyz answers 200."""
    import httpx

    port = find_free_port()
    env = dict(os.environ)
    env.update(
        {
            "DEVPLAN_HOST": "127.0.0.1",
            "DEVPLAN_PORT": str(port),
            "DEVPLAN_LOG_LEVEL": "info",
            "DEVPLAN_ARTIFACT_DIR": str(log_path.parent / "artifacts"),
        }
    )
    env.update(env_overrides or {})
    with open(log_path, "wb") as log_file:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = RunningServer(f"http://127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + ready_timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"devplan serve exited with {process.returncode}:\n{server.log_text()[-4000:]}"
            )
        try:
            if httpx.get(server.base_url + "/readyz", timeout=10).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(
                f"devplan serve not ready after {ready_timeout_s} s:\n{server.log_text()[-4000:]}"
            )
        time.sleep(0.2)


def stop_server(server: RunningServer) -> int | None:
    """SIGTERM, then SIGKILL after 20 s; returns the exit status."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(10)
    return server.process.returncode


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real server for the session (uvicorn, process pool of 2)."""
    log_path = tmp_path_factory.mktemp("server") / "devplan.log"
    srv = start_server(log_path, {"DEVPLAN_POOL_SIZE": "2"})
    try:
        yield srv
    finally:
        stop_server(srv)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    """start(env_overrides) -> RunningServer; every server started is stopped after the test."""
    started: list[RunningServer] = []

    def start(env_overrides: dict[str, str] | None = None) -> RunningServer:
        srv = start_server(tmp_path / f"server{len(started)}.log", env_overrides)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        stop_server(srv)


def chain_module(length: int, op: str = "negative") -> str:
    """Relay text of `@main` computing `length` chained calls: `%i = op(%i-1)` graph bindings."""
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(4), float32]) {", f"  %0 = {op}(%x);"]
    lines += [f"  %{i} = {op}(%{i - 1});" for i in range(1, length)]
    lines += [f"  %{length - 1}", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def slow_module() -> str:
    """A module that takes well over a second to parse and plan (30,000 chained calls)."""
    return chain_module(30_000)
