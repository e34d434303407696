"""Helpers of the web-process hardening tests (tests/security/test_web_*.py): servers started
with tight limits, raw sockets for what HTTP clients will not send, hostile inputs."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.conftest import RunningServer, start_server, stop_server

# Guards so that a test which goes wrong fails instead of hanging; assertions never use them.
HANG_GUARD_S = 60.0

TINY = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  nn.relu(%x)\n}\n'


@contextmanager
def running_server(log_dir: Path, env: dict[str, str]) -> Iterator[RunningServer]:
    """A `devplan serve` on loopback with `env` on top of the defaults, stopped afterwards."""
    log_dir.mkdir(parents=True, exist_ok=True)
    server = start_server(log_dir / "devplan.log", env)
    try:
        yield server
    finally:
        stop_server(server)


def address(server: RunningServer) -> tuple[str, int]:
    parts = urlsplit(server.base_url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def connect(server: RunningServer) -> socket.socket:
    """A raw TCP connection to the server (closed by the caller)."""
    sock = socket.create_connection(address(server), timeout=HANG_GUARD_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the event waited for)."""
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def status_of(response: bytes) -> int:
    """The status code of a raw HTTP/1.1 response."""
    return int(response.split(b" ", 2)[1])


def fan_module(n: int) -> str:
    """A chain of `n` operators where each also reads the first one's value (Relay text)."""
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(4), float32]) {", "  %0 = negative(%x);"]
    lines += [f"  %{i} = add(%{i - 1}, %0);" for i in range(1, n)]
    lines += [f"  %{n - 1}", "}"]
    return "\n".join(lines) + "\n"


def hostile_reports(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two reports only whose parameters match exactly: every operator goes through the
    matcher's propagation step against every free one (benchmarks/diff_matching.py)."""
    from benchmarks.diff_matching import hostile_report

    return hostile_report(n, False), hostile_report(n, True)
