"""Servers with tight limits for the web-process hardening tests, started once per session and
only when a test asks for one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import RunningServer

from .web_client import running_server

API_KEY = "web-test-key"


@pytest.fixture(scope="session")
def tight_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Keyless, one planning slot, one-second header and body timeouts, a 1 ms plan limit,
    1 MiB bodies, and one extra host name."""
    env = {
        "DEVPLAN_POOL_SIZE": "1",
        "DEVPLAN_HEADER_TIMEOUT_S": "1",
        "DEVPLAN_BODY_TIMEOUT_S": "1",
        "DEVPLAN_DEFAULT_TIMEOUT_MS": "1",
        "DEVPLAN_MAX_BODY_BYTES": "1MiB",
        "DEVPLAN_MAX_INFLIGHT_BYTES": "1MiB",
        "DEVPLAN_ALLOWED_HOSTS": "devplan.internal",
    }
    with running_server(tmp_path_factory.mktemp("tight"), env) as server:
        yield server


@pytest.fixture(scope="session")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """API keys on, two admitted requests with a body at most, Graphviz limited to one CPU second
    and allowed dense graphs."""
    env = {
        "DEVPLAN_API_KEYS": API_KEY,
        "DEVPLAN_POOL_SIZE": "1",
        "DEVPLAN_COMPILE_WORKERS": "1",
        "DEVPLAN_MAX_QUEUED_REQUESTS": "0",
        "DEVPLAN_PICTURE_CPU_S": "1",
        "DEVPLAN_PICTURE_MAX_EDGES_PER_NODE": "1000",
    }
    with running_server(tmp_path_factory.mktemp("keyed"), env) as server:
        yield server
