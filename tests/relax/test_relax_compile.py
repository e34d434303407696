"""`POST /compile` for the cpu builds each public Relax model's plan, and the offload
decoder's, and the run check against the module without devices passes in the sandbox
under the default limits (issues 27 and 28): the defaults are what this test proves, so
it sets none of them. Slow: each model is built twice and run twice (tv_vit_b_16 runs
about two minutes a run on a 2-core box)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.config import Settings
from tests._service import TestClient, thread_client

from .corpus import MODELS, path_of

pytestmark = pytest.mark.slow

# The settings whose defaults must let every corpus model's compile and run check pass.
LIMITS = (
    "compile_timeout_s",
    "compile_memory_bytes",
    "compile_file_bytes",
    "compile_sandbox",
    "run_check_cpu_s",
    "run_check_wall_s",
    "run_check_memory_bytes",
    "run_check_file_bytes",
)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """One service for all the models (its sandbox probed once), with the limits at
    their defaults whatever the environment says."""
    with thread_client(**{name: Settings.model_fields[name].default for name in LIMITS}) as c:
        yield c


def _body(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "module": path_of(name, "json").read_text(),
        "default_device": "cpu",
        "host_device": "cpu",
        **fields,
    }


@pytest.mark.parametrize("name", MODELS)
def test_compile_for_the_cpu_builds_the_plan_and_its_run_check_passes(client: TestClient, name: str) -> None:
    # For the cpu alone both modes plan the same module (everything on the cpu), so
    # building the optimize plan builds the TVM-mode one too: checked here, built once.
    plans = {
        mode: client.post("/plan", json=_body(name, mode=mode, output_format="json")) for mode in ("tvm", "optimize")
    }
    for r in plans.values():
        assert r.status_code == 200, r.text
    assert plans["tvm"].json()["module"] == plans["optimize"].json()["module"]
    r = client.post("/compile", json=_body(name, mode="optimize", run_check=True))
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    assert report["planned"] is True
    assert report["devices"] == ["llvm:0"]
    check = report["check"]
    assert check["sandbox"], check  # the check ran in the sandbox
    assert check["max_abs_error"] is not None
    assert check["max_abs_error"] <= 1e-4
