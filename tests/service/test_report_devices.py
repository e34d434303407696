"""The devices /explore sends by default (`virtual_devices: ["cpu", "cuda"]`)
on the annotated corpus models: both modes plan over HTTP and every report
has a TVM-mode prediction (the request's cpu is the metadata's cpu, compared
as TVM's CompilationConfig compares devices); same-named devices that differ
are a located 422 saying what differs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from fastapi.testclient import TestClient

import relay
import solver
from service.config import Settings
from service.main import create_app
from service.planning import PlanJob, plan_report
from service.report import load_schema

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")
ANNOTATED = ["mlp.annotated.relay", "lstm.annotated.relay", "resnet18.annotated.relay"]
EXPLORE_DEVICES = ("cpu", "cuda")
VALIDATOR = jsonschema.Draft202012Validator(load_schema())


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(
        create_app(Settings(pool_kind="thread", pool_size=1)), raise_server_exceptions=False
    ) as c:
        yield c


@needs_corpus
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
@pytest.mark.parametrize("name", ANNOTATED)
def test_report_has_a_tvm_mode_prediction(name: str, mode: str) -> None:
    text = (CORPUS / name).read_text()
    _, rep = plan_report(PlanJob(module=text, name=name, mode=mode, virtual_devices=EXPLORE_DEVICES))
    assert VALIDATOR.is_valid(rep)
    prediction = rep["prediction"]
    assert prediction.get("reason") is None, prediction["reason"]
    assert prediction["predicted_ms"] > 0
    assert set(prediction["per_device"]) <= {"cpu", "cuda"}
    # The price the cost model gives the TVM mode's own plan of the request.
    config = solver.PlanConfig(virtual_devices=EXPLORE_DEVICES)
    tvm = solver.plan(relay.parse_text(text), config)
    tvm_ms = solver.evaluate_planned(tvm.module, config).predicted_ms
    if mode == "tvm":
        assert prediction["basis"] == "tvm-plan"
        assert prediction["predicted_ms"] == pytest.approx(tvm_ms)
    else:
        assert rep["cost"]["tvm_mode_predicted_ms"] == pytest.approx(tvm_ms)
        assert prediction["predicted_ms"] <= rep["cost"]["tvm_mode_predicted_ms"]


@needs_corpus
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_explore_default_devices_plan_over_http(client: TestClient, mode: str) -> None:
    text = (CORPUS / "mlp.annotated.relay").read_text()
    body = {"module": text, "mode": mode, "virtual_devices": list(EXPLORE_DEVICES), "include": ["placements"]}
    r = client.post("/plan", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["prediction"]["predicted_ms"] > 0 and out["prediction"].get("reason") is None
    assert {p["device"] for p in out["placements"]} <= {"cpu", "cuda"}


def test_same_named_devices_that_differ_are_a_422_naming_the_difference(client: TestClient) -> None:
    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4, 4), float32]) {\n  exp(%x)\n}\n'
    arm = {"device_type": "cpu", "target": "llvm -keys=arm_cpu,cpu"}
    body = {"module": text, "mode": "optimize", "virtual_devices": ["cpu", arm, "cuda"]}
    r = client.post("/plan", json=body)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["type"].endswith("/invalid-config")
    assert "target keys (cpu vs arm_cpu,cpu)" in problem["detail"]
