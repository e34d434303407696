"""POST /compile with run_check of kernels that attack the server: each ends as a
422 run-check-failed or a 504 compile-timeout naming the limit, the file `system` would
make does not exist, /healthz answers and the next compile succeeds. /readyz names the
layers, and with DEVPLAN_COMPILE_SANDBOX=off says so (the check then runs unconfined).

Only the `system` attack runs in the default stage (the layers have their own cheap tests
in test_layers.py); every attack runs under `slow`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from service import sandbox
from service.config import Settings
from tests._service import TestClient, thread_client

from .kernels import CPU_S, ESCAPES, EXPECTED, MEMORY_BYTES, WALL_S, attack_lines, escape_lines, one_device

FOUND = sandbox.detect()
pytestmark = pytest.mark.skipif(FOUND.seccomp is not None, reason=f"seccomp unavailable here: {FOUND.seccomp}")
_fresh = itertools.count(2)  # each clean compile adds a new constant: a new module, no cache hit


def _app(wall_s: float, **settings: Any) -> AbstractContextManager[TestClient]:
    settings.setdefault("compile_timeout_s", 900)
    return thread_client(
        run_check_cpu_s=CPU_S, run_check_wall_s=wall_s, run_check_memory_bytes=MEMORY_BYTES, **settings
    )


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with _app(600) as c:
        yield c


@pytest.fixture(scope="module")
def short_wall_client() -> Iterator[TestClient]:
    with _app(WALL_S) as c:
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
@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_more_escapes_are_stopped_and_change_nothing(client: TestClient, tmp_path: Path, name: str) -> None:
    mark, path = tmp_path / "mark", tmp_path / "escaped"
    mark.write_text("kept")
    module = one_device(escape_lines(name, mark=str(mark), path=str(path)))
    response = client.post("/compile", json={"module": module, "default_device": "cpu", "run_check": True})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/run-check-failed")
    assert "seccomp (SIGSYS)" in body["detail"]
    assert mark.read_text() == "kept" and not path.exists()
    assert_healthy_and_compiling(client)


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
    with _app(600, compile_sandbox="off") as c:
        assert c.get("/readyz").json()["sandbox"] == {"mode": "off", "layers": [], "unavailable": {}}
        response = c.post("/compile", json={"module": one_device(), "default_device": "cpu", "run_check": True})
        assert response.status_code == 200, response.text
        assert response.json()["report"]["check"] == {"max_abs_error": 0.0, "sandbox": []}


def _sandbox_children(library: Path) -> list[int]:
    """Live run-check children (bwrap or Python) of `library`'s check (a zombie's command
    line is empty; the C compiler that writes `library` names it but not the directory)."""
    marker = str(sandbox.check_dir_of(library))
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                words = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if "service.sandbox" in words and marker in words:
                found.append(int(entry.name))
    return found


def _filtered(pids: list[int]) -> bool:
    """True when one of `pids` runs under a seccomp filter (/proc status `Seccomp: 2`)."""
    for pid in pids:
        try:
            if "Seccomp:\t2" in Path(f"/proc/{pid}/status").read_text():
                return True
        except OSError:
            continue
    return False


@pytest.mark.slow
def test_the_check_ends_within_the_compile_time_limit_and_names_its_wall_clock(tmp_path: Path) -> None:
    # A compile limit of 40 s and a check allowed 600 s: the check gets what is left of the 40 s.
    with _app(600, artifact_dir=str(tmp_path / "artifacts"), compile_timeout_s=40) as c:
        module = one_device(attack_lines("sleep"))
        response = c.post("/compile", json={"module": module, "default_device": "cpu", "run_check": True})
        assert response.status_code == 504, response.text
        assert "the run check hit its wall-clock limit" in response.json()["detail"]
        assert "(the rest of the compile's 40 s)" in response.json()["detail"]
        assert list((tmp_path / "artifacts").glob("tmp-*")) == []


@pytest.mark.slow
def test_a_compile_killed_during_its_check_leaves_no_child_and_no_directory(tmp_path: Path) -> None:
    # The caller stops waiting (a cancelled request, DELETE /jobs/{id}, the time limit) while
    # the check sleeps: stop() kills the compile process, the child dies with it (PDEATHSIG,
    # bwrap's --die-with-parent) and the check's directory goes with the library.
    import solver
    from service.compile_workers import CompileJob, CompileRun
    from service.planning import PlanJob
    from tests.farm.conftest import wait_until

    library = tmp_path / "tmp-killed.so"
    job = CompileJob(
        plan=PlanJob(module=one_device(attack_lines("sleep")), options=solver.PlanOptions(default_device="cpu")),
        targets=None,
        cuda_arch=None,
        run_check=True,
        library=str(library),
        sandbox=sandbox.config_from(Settings(run_check_wall_s=600), FOUND),
    )
    run = CompileRun(job)
    try:
        # The event: the child's filter is on (so it is past loading and runs the kernel).
        wait_until("the run check's child to run its kernel", lambda: _filtered(_sandbox_children(library)), 300)
    finally:
        run.stop()
    wait_until("the run check's child to be gone", lambda: not _sandbox_children(library), 60)
    assert not library.exists()
    assert not sandbox.check_dir_of(library).exists()
