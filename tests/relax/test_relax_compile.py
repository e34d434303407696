"""`POST /compile` for the cpu builds each public Relax model's plan and its
run check against the module without devices passes (issue 28). Slow: each
builds the model twice and runs it twice (tv_vit_b_16 takes over two minutes
a run on a 2-core box, so the compile and its run check get larger limits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from service.main import create_app

from .corpus import PUBLIC, path_of

pytestmark = pytest.mark.slow

# TVM 0.27's llvm codegen cannot build these exports (a bool `cumsum` and a
# bool `equal` of the Hugging Face attention mask): the answer is a clean
# compile-failed problem, never a 500.
TVM_CANNOT_BUILD = {"hf_gpt2"}


def _compile(name: str, tmp_path: Path, mode: str) -> Any:
    settings = Settings(
        pool_kind="thread",
        pool_size=1,
        artifact_dir=tmp_path,
        compile_timeout_s=1800.0,
        run_check_cpu_s=900.0,
        run_check_wall_s=1200.0,
        run_check_memory_bytes=16 << 30,
    )
    body = {
        "module": path_of(name, "json").read_text(),
        "mode": mode,
        "default_device": "cpu",
        "host_device": "cpu",
        "run_check": True,
    }
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        return client.post("/compile", json=body)


@pytest.mark.parametrize("name", PUBLIC)
def test_compile_for_the_cpu_builds_the_plan_and_its_run_check_passes(name: str, tmp_path: Path) -> None:
    r = _compile(name, tmp_path, "optimize")
    if name in TVM_CANNOT_BUILD:
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"].endswith("/compile-failed")
        return
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert report["planned"] is True
    assert report["check"]["max_abs_error"] is not None
    assert report["check"]["max_abs_error"] <= 1e-4
