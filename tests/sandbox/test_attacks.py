"""POST /compile with run_check of kernels that attack the server (issue 27): each ends as a
422 run-check-failed or a 504 compile-timeout naming the limit, the file `system` would
make does not exist, /healthz answers and the next compile succeeds. /readyz names the
layers, and with DEVPLAN_COMPILE_SANDBOX=off says so (the check then runs unconfined).

Only the `system` attack runs in the default stage (the layers have their own cheap tests
in test_layers.py); every attack runs under `slow`."""

from __future__ import annotations

import itertools
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from service import sandbox
from service.config import Settings
from service.main import create_app

from .kernels import CPU_S, EXPECTED, MEMORY_BYTES, WALL_S, attack_lines, one_device

FOUND = sandbox.detect()
pytestmark = pytest.mark.skipif(FOUND.seccomp is not None, reason=f"seccomp unavailable here: {FOUND.seccomp}")
_fresh = itertools.count(2)  # each clean compile adds a new constant: a new module, no cache hit


def _app(artifacts: str, wall_s: float, **settings: Any) -> TestClient:
    settings.setdefault("compile_timeout_s", 900)
    config = Settings(
        pool_kind="thread",
        pool_size=1,
        artifact_dir=artifacts,
        run_check_cpu_s=CPU_S,
        run_check_wall_s=wall_s,
        run_check_memory_bytes=MEMORY_BYTES,
        **settings,
    )
    return TestClient(create_app(config), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with tempfile.TemporaryDirectory() as artifacts, _app(artifacts, 600) as c:
        yield c


@pytest.fixture(scope="module")
def short_wall_client() -> Iterator[TestClient]:
    with tempfile.TemporaryDirectory() as artifacts, _app(artifacts, WALL_S) as c:
        yield c


def attack(client: TestClient, name: str, target: Path) -> None:
    """Compile the attack `name` with run_check; assert it ends as EXPECTED names and that
    the service is healthy and compiles a clean module afterwards."""
    module = one_device(attack_lines(name, path=str(target)) if name in ("system", "fopen") else attack_lines(name))
    response = client.post("/compile", json={"module": module, "default_device": "cpu", "run_check": True})
    kind, detail = EXPECTED[name]
    assert response.status_code == (504 if kind == "compile-timeout" else 422), response.text
    body = response.json()
    assert body["type"].endswith(f"/{kind}")
    assert body["detail"].startswith("the run check "), body["detail"]
    assert detail in body["detail"]
    assert not target.exists()
    assert_healthy_and_compiling(client)


def assert_healthy_and_compiling(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    clean = one_device(add=next(_fresh))
    response = client.post("/compile", json={"module": clean, "default_device": "cpu", "run_check": True})
    assert response.status_code == 200, response.text
    assert response.json()["cache_hit"] is False
    check = response.json()["report"]["check"]
    assert check["max_abs_error"] == 0.0
    assert check["sandbox"][:3] == ["rlimits", "wall-clock", "seccomp"]
    assert 0 < check["cpu_s"] < CPU_S and 0 < check["peak_bytes"] < MEMORY_BYTES


def test_system_attack_is_stopped_and_the_service_goes_on(client: TestClient, tmp_path: Path) -> None:
    attack(client, "system", tmp_path / "escaped")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in EXPECTED if n not in ("system", "sleep")])
def test_attack_is_stopped_and_the_service_goes_on(client: TestClient, tmp_path: Path, name: str) -> None:
    attack(client, name, tmp_path / "escaped")


@pytest.mark.slow
def test_endless_sleep_hits_the_wall_clock(short_wall_client: TestClient, tmp_path: Path) -> None:
    attack(short_wall_client, "sleep", tmp_path / "escaped")


def test_readyz_names_the_active_layers(client: TestClient) -> None:
    body = client.get("/readyz").json()
    expected = sandbox.config_from(Settings(), FOUND)
    assert body["sandbox"]["mode"] == "on"
    assert body["sandbox"]["layers"] == list(expected.layers)
    assert body["sandbox"]["layers"][:3] == ["rlimits", "wall-clock", "seccomp"]
    assert body["sandbox"].get("unavailable", {}) == dict(expected.unavailable)


def test_sandbox_off_is_said_and_the_check_still_runs() -> None:
    with tempfile.TemporaryDirectory() as artifacts, _app(artifacts, 600, compile_sandbox="off") as c:
        assert c.get("/readyz").json()["sandbox"] == {"mode": "off", "layers": [], "unavailable": {}}
        response = c.post("/compile", json={"module": one_device(), "default_device": "cpu", "run_check": True})
        assert response.status_code == 200, response.text
        assert response.json()["report"]["check"] == {"max_abs_error": 0.0, "sandbox": []}


def _sandbox_children(marker: str) -> list[int]:
    """Live processes whose command line names `marker` (a zombie's is empty)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_a_compile_killed_during_its_check_leaves_no_child_and_no_directory(tmp_path: Path) -> None:
    # The compile's own time limit (30 s) ends it while its check sleeps (the check's wall
    # clock is 600 s): the child dies with the compile process, its directory goes with it.
    artifacts = tmp_path / "artifacts"
    with _app(str(artifacts), 600, compile_timeout_s=30) as c:
        module = one_device(attack_lines("sleep"))
        response = c.post("/compile", json={"module": module, "default_device": "cpu", "run_check": True})
        assert response.status_code == 504, response.text
        assert "within 30 s" in response.json()["detail"]
        assert list(artifacts.glob("tmp-*")) == []
        from tests.farm.conftest import wait_until

        wait_until("the run check's child to be gone", lambda: not _sandbox_children(str(artifacts)), 60)
        assert_healthy_and_compiling(c)
