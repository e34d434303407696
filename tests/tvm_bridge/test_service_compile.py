"""POST /compile and GET /artifacts/{id} through the app (TestClient)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from service.config import Settings
from service.api.routes.compile import COMPILE_EXAMPLE
from service.main import create_app

from .helpers import corpus_path

# The worked example the route shows in Swagger UI: plan on two CPUs, compile, check.
TWO_CPU = COMPILE_EXAMPLE["value"]


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
            '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {\n  nn.fancy(%x)\n}\n',
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


def make_app() -> object:
    """App factory for the real-server test: the app with the compile routes."""
    import os

    from service.api.routes.compile import compile_router

    app = create_app(
        Settings(pool_kind="thread", pool_size=1, artifact_dir=Path(os.environ["DEVPLAN_ARTIFACT_DIR"]))
    )
    if not any(getattr(r, "path", "") == "/compile" for r in app.routes):
        app.include_router(compile_router)
    return app


def test_real_server_compiles_and_serves_the_artifact(tmp_path: Path) -> None:
    """uvicorn in a subprocess, requests over TCP."""
    import os
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, DEVPLAN_ARTIFACT_DIR=str(tmp_path), PYTHONPATH=str(root))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "tests.tvm_bridge.test_service_compile:make_app",
            "--factory",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=root,
        env=env,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        response = httpx.post(base + "/compile", json=TWO_CPU, timeout=300)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["report"]["check"]["max_abs_error"] <= 1e-6
        library = httpx.get(base + body["download"], timeout=30)
        assert library.status_code == 200 and len(library.content) == body["size_bytes"]
        assert (tmp_path / f"{body['artifact_id']}.so").exists()
        missing = httpx.get(base + "/artifacts/" + "f" * 64, timeout=30)
        assert missing.status_code == 404
        assert missing.headers["content-type"].startswith("application/problem+json")
    finally:
        server.terminate()
        server.wait(30)
