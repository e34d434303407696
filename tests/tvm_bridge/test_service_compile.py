"""POST /compile and GET /artifacts/{id} through the app (TestClient)."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from service.api.routes.compile import COMPILE_EXAMPLE
from service.compile_workers import CompileJob, CompileRun
from service.config import Settings
from service.main import create_app
from tests.conftest import RunningServer

from .helpers import corpus_path

# The worked example the route shows in Swagger UI: plan on two CPUs, compile, check.
TWO_CPU = cast(dict[str, Any], COMPILE_EXAMPLE["value"])


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    artifacts = tmp_path_factory.mktemp("artifacts")
    settings = Settings(pool_kind="thread", pool_size=1, artifact_dir=artifacts)
    app = create_app(settings)
    if not any(getattr(r, "path", "") == "/compile" for r in app.routes):
        from service.api.routes.compile import compile_router

        app.include_router(compile_router)  # until service/main.py includes it
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_compile_plans_lowers_compiles_and_checks(client: TestClient) -> None:
    response = client.post("/compile", json=TWO_CPU)
    assert response.status_code == 200, response.text
    body = response.json()
    report = body["report"]
    assert report["planned"] is True
    assert report["devices"] == ["llvm:0", "llvm:1"]
    assert report["device_copies"] >= 1
    assert set(report["functions_per_device"]) <= {"llvm:0", "llvm:1", "default"}
    assert report["check"]["max_abs_error"] <= 1e-6
    assert body["download"] == f"/artifacts/{body['artifact_id']}"
    assert body["cache_hit"] is False

    again = client.post("/compile", json=TWO_CPU)
    assert again.status_code == 200 and again.json()["cache_hit"] is True
    assert again.json()["artifact_id"] == body["artifact_id"]

    library = client.get(body["download"])
    assert library.status_code == 200
    assert len(library.content) == body["size_bytes"]
    import hashlib

    assert hashlib.sha256(library.content).hexdigest() == body["sha256"]


def test_downloaded_library_runs(client: TestClient, tmp_path: Path) -> None:
    import tvm

    import tvm_bridge

    body = client.post("/compile", json=TWO_CPU).json()
    path = tmp_path / "lib.so"
    path.write_bytes(client.get(body["download"]).content)
    lib = tvm_bridge.load_library(path)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype("float32")
    w = np.random.default_rng(2).standard_normal((4, 3)).astype("float32")
    out = tvm_bridge.run(lib, [x, w], [tvm.cpu(0), tvm.cpu(1)], input_devices=[0, 1])
    np.testing.assert_allclose(out, np.maximum(x, 0) @ w.T, rtol=1e-5)


def test_planned_corpus_module_compiles_for_llvm_and_cuda(client: TestClient) -> None:
    text = corpus_path("mlp.annotated.planned.relay").read_text()
    response = client.post("/compile", json={"module": text, "cuda_arch": "sm_80", "run_check": True})
    assert response.status_code == 200, response.text
    report = response.json()["report"]
    assert report["planned"] is False and report["plan_ms"] == 0
    assert sorted(report["devices"]) == ["cuda:0", "llvm:0"]
    assert "skipped" in report["check"] or report["check"]["max_abs_error"] < 1e-3


@pytest.mark.parametrize(
    "module, kind",
    [
        (corpus_path("constructs/adt_match.relay"), "unsupported-construct"),
        (
            '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {\n  acos(%x)\n}\n',
            "unsupported-construct",
        ),
    ],
)
def test_unsupported_module_is_a_422_problem(client: TestClient, module: object, kind: str) -> None:
    text = module.read_text() if isinstance(module, Path) else module
    response = client.post(
        "/compile", json={"module": text, "default_device": "cpu", "targets": {"cpu": "llvm"}}
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"].endswith(kind)
    assert body["locations"] and body["locations"][0]["line"] >= 1


def test_bad_target_is_a_422_problem(client: TestClient) -> None:
    request = dict(TWO_CPU, targets={"cpu": "llvm -bogus=1"})
    response = client.post("/compile", json=request)
    assert response.status_code == 422
    assert response.json()["type"].endswith("invalid-target")


@pytest.mark.parametrize("artifact_id", ["0" * 64, "../../etc/passwd", "%2e%2e%2fconfig", "A" * 64])
def test_unknown_or_invalid_artifact_ids_are_404(client: TestClient, artifact_id: str) -> None:
    response = client.get(f"/artifacts/{artifact_id}")
    assert response.status_code == 404


def test_real_server_compiles_and_serves_the_artifact(server: RunningServer) -> None:
    """`devplan serve` (the session's uvicorn subprocess, tests/conftest.py), requests over TCP."""
    base = server.base_url
    response = httpx.post(base + "/compile", json=TWO_CPU, timeout=300)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["report"]["check"]["max_abs_error"] <= 1e-6
    library = httpx.get(base + body["download"], timeout=30)
    assert library.status_code == 200 and len(library.content) == body["size_bytes"]
    assert (server.log_path.parent / "artifacts" / f"{body['artifact_id']}.so").exists()
    missing = httpx.get(base + "/artifacts/" + "f" * 64, timeout=30)
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")


# --------------------------------------------------------------------------
# The cache key through the route


def test_cache_hit_when_only_timeout_or_explain_change(client: TestClient) -> None:
    first = client.post("/compile", json=TWO_CPU)
    assert first.status_code == 200, first.text
    same = client.post("/compile", json=dict(TWO_CPU, timeout_ms=4321, explain=True))
    assert same.status_code == 200 and same.json()["cache_hit"] is True
    assert same.json()["artifact_id"] == first.json()["artifact_id"]
    other = client.post("/compile", json=dict(TWO_CPU, run_check=False))
    assert other.status_code == 200 and other.json()["cache_hit"] is False


# --------------------------------------------------------------------------
# Worker processes: failures, time limit, cancellation. Targets run in the
# spawned worker; `ready` is set once the temporary library exists.


def _write_then_block(ready: Any, job: CompileJob, conn: Any) -> None:
    """A compile that has written its temporary library and never finishes."""
    import threading

    Path(job.library).write_bytes(b"half a library")
    ready.set()
    threading.Event().wait()


def _check_explodes(job: CompileJob, conn: Any) -> None:
    """The real worker, with a run check that raises after the library was exported."""
    import tvm_bridge.check
    from service.compile_workers import worker_main

    def boom(*args: Any) -> float:
        assert Path(job.library).exists()  # the temporary is there when the check fails
        raise RuntimeError("check exploded at /very/secret/path")

    tvm_bridge.check.max_abs_error = boom  # type: ignore[assignment]
    worker_main(job, conn)


def _fresh_app(tmp_path: Path, **settings: Any) -> Any:
    return create_app(Settings(pool_kind="thread", pool_size=1, artifact_dir=tmp_path, **settings))


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith("tmp-") or p.suffix == ".tmp"]


def test_failing_check_is_a_bare_500_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.api.routes import compile as route

    monkeypatch.setattr(route, "CompileRun", lambda job: CompileRun(job, target=_check_explodes))
    with TestClient(_fresh_app(tmp_path), raise_server_exceptions=False) as c:
        response = c.post("/compile", json=TWO_CPU)
    assert response.status_code == 500
    body = response.json()
    assert set(body) <= {"type", "title", "status", "request_id"}
    assert body["type"].endswith("/internal-error")
    assert "secret" not in response.text and "RuntimeError" not in response.text
    assert _leftovers(tmp_path) == []
    assert not list(tmp_path.glob("*.so"))


def test_non_tensor_parameter_with_run_check_is_a_422_saying_what_to_change(tmp_path: Path) -> None:
    module = (
        '#[version = "0.0.5"]\ndef @main(%x: (Tensor[(2), float32], Tensor[(2), float32])) {\n  %x.0\n}\n'
    )
    request = {"module": module, "default_device": "cpu", "targets": {"cpu": "llvm"}, "run_check": True}
    with TestClient(_fresh_app(tmp_path), raise_server_exceptions=False) as c:
        response = c.post("/compile", json=request)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/invalid-check")
    assert "%x is not a tensor" in body["detail"] and "turn the run check off" in body["detail"]
    assert body["locations"][0]["line"] == 2
    assert _leftovers(tmp_path) == []


def test_run_check_without_main_is_a_422(tmp_path: Path) -> None:
    module = '#[version = "0.0.5"]\ndef @f(%x: Tensor[(2), float32]) {\n  negative(%x)\n}\n'
    request = {"module": module, "default_device": "cpu", "targets": {"cpu": "llvm"}, "run_check": True}
    with TestClient(_fresh_app(tmp_path), raise_server_exceptions=False) as c:
        response = c.post("/compile", json=request)
    assert response.status_code == 422, response.text
    assert response.json()["type"].endswith("/invalid-check")
    assert "add @main" in response.json()["detail"]


class _HeldRun(CompileRun):
    """A compile run whose wait first sees the temporary library exist (an event,
    no clock), then behaves as the real wait with `timeout_s` (None: the caller's)."""

    def __init__(self, job: CompileJob, ready: Any, slots: Any) -> None:
        super().__init__(job, target=functools.partial(_write_then_block, ready))
        self.ready = ready
        self.slots = slots
        self.timeout_s: float | None = None
        self.stops: list[dict[str, Any]] = []

    async def wait(self, timeout_s: float) -> dict[str, Any] | None:
        assert await asyncio.to_thread(self.ready.wait, 120)
        return await super().wait(timeout_s if self.timeout_s is None else self.timeout_s)

    def stop(self) -> None:
        library = Path(self.job.library)
        existed = library.exists()
        super().stop()
        slot = self.slots()
        self.stops.append(
            {
                "existed": existed,
                "exitcode": self.proc.exitcode,
                "slot_still_held": slot is not None and slot.locked(),
                "library_left": library.exists(),
            }
        )


def _held(
    monkeypatch: pytest.MonkeyPatch, app: Any, timeout_s: float | None
) -> tuple[list[dict[str, Any]], list[_HeldRun]]:
    """Make the route start `_HeldRun`s; returns the stop records and the runs."""
    from service.api.routes import compile as route

    ctx = multiprocessing.get_context("spawn")
    stops: list[dict[str, Any]] = []
    runs: list[_HeldRun] = []

    def make(job: CompileJob) -> _HeldRun:
        run = _HeldRun(job, ctx.Event(), lambda: getattr(app.state, "compile_slots", None))
        run.timeout_s = timeout_s
        run.stops = stops
        runs.append(run)
        return run

    monkeypatch.setattr(route, "CompileRun", make)
    return stops, runs


def test_time_limit_kills_the_compile_after_its_temporary_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _fresh_app(tmp_path)
    stops, _ = _held(monkeypatch, app, timeout_s=0.0)  # the limit has passed once the file exists
    with TestClient(app, raise_server_exceptions=False) as c:
        response = c.post("/compile", json=TWO_CPU)
    assert response.status_code == 504
    assert response.json()["type"].endswith("/compile-timeout")
    assert stops == [
        {"existed": True, "exitcode": -signal.SIGKILL, "slot_still_held": True, "library_left": False}
    ]
    assert _leftovers(tmp_path) == []


def test_cancelled_compile_is_killed_before_its_slot_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _fresh_app(tmp_path)
    stops, runs = _held(monkeypatch, app, timeout_s=None)  # it would run for compile_timeout_s

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            task = asyncio.create_task(client.post("/compile", json=TWO_CPU))
            while not runs:  # the route starts its run without awaiting anything before
                await asyncio.sleep(0)
                assert not task.done(), task.result()
            assert await asyncio.to_thread(runs[0].ready.wait, 120)  # its temporary exists
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        slots = app.state.compile_slots
        assert not slots.locked()  # released after the kill

    asyncio.run(scenario())
    assert stops == [
        {"existed": True, "exitcode": -signal.SIGKILL, "slot_still_held": True, "library_left": False}
    ]
    assert _leftovers(tmp_path) == []
