"""POST /plan/diff: requests or reports on either side, rules, problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.planning import PlanJob, plan_report

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")
SOFTMAX_ON_CPU = {"select": {"op": "nn.softmax"}, "device": "cpu"}


@pytest.fixture(scope="module")
def mlp() -> str:
    return (CORPUS / "mlp.annotated.relay").read_text()


@needs_corpus
def test_two_requests(client: Any, mlp: str) -> None:
    body = {
        "before": {"module": mlp},
        "after": {"module": mlp, "constraints": [SOFTMAX_ON_CPU]},
        "fail_on": ["copies-added", "moved-to:cuda"],
    }
    res = client.post("/plan/diff", json=body)
    assert res.status_code == 200, res.text
    d = res.json()
    assert "nn.softmax" in [m["after"]["name"] for m in d["moved"]]
    assert all(m["after"]["device"] == "cpu" for m in d["moved"])
    assert [r["hit"] for r in d["rules"]] == [True, False] and d["failed"] is True


@needs_corpus
def test_a_report_against_its_request_is_empty(client: Any, mlp: str) -> None:
    _, report = plan_report(PlanJob(module=mlp, mode="optimize"))
    res = client.post(
        "/plan/diff",
        json={"before": report, "after": {"module": mlp, "mode": "optimize"}, "fail_on": ["any-change"]},
    )
    assert res.status_code == 200, res.text
    d = res.json()
    assert d["changed"] is False and d["failed"] is False
    assert d["matched"] == len(report["placements"])
    assert d["predicted_ms"]["before"] == pytest.approx(d["predicted_ms"]["after"])


@needs_corpus
def test_problems(client: Any, mlp: str) -> None:
    bad_module = client.post(
        "/plan/diff", json={"before": {"module": "def @main( {"}, "after": {"module": mlp}}
    )
    assert bad_module.status_code == 400
    assert bad_module.json()["type"].endswith("/malformed-module")
    bad_rule = client.post(
        "/plan/diff", json={"before": {"module": mlp}, "after": {"module": mlp}, "fail_on": ["x"]}
    )
    assert bad_rule.status_code == 422 and "unknown rule" in bad_rule.json()["detail"]
    # HTTP names the request field, never the CLI flag.
    assert bad_rule.json()["detail"].startswith("fail_on[0]: ") and "--" not in bad_rule.json()["detail"]
    neither = client.post("/plan/diff", json={"before": {"placements": []}, "after": {"module": mlp}})
    assert neither.status_code == 422
    _, report = plan_report(PlanJob(module=mlp))
    for broken in (
        {**report, "report_version": 99},
        {**report, "placements": [{**report["placements"][0], "node": "x"}]},
        {**report, "copies": [{"src": "cpu"}]},
    ):
        res = client.post("/plan/diff", json={"before": broken, "after": report})
        assert res.status_code == 422, res.text
        assert res.json()["type"].endswith("/validation-error")
    conflict = client.post(
        "/plan/diff",
        json={
            "before": {"module": mlp},
            "after": {"module": mlp, "constraints": [{"select": {"op": "nn.softmax"}, "device": "nope"}]},
        },
    )
    assert conflict.status_code == 422


@needs_corpus
def test_plan_includes_placements_on_request(client: Any, mlp: str) -> None:
    import jsonschema

    from service.report import load_schema

    plain = client.post("/plan", json={"module": mlp})
    assert plain.status_code == 200 and "placements" not in plain.json()
    res = client.post("/plan", json={"module": mlp, "include": ["placements"]})
    assert res.status_code == 200, res.text
    body = res.json()
    _, report = plan_report(PlanJob(module=mlp))
    assert body["placements"] == report["placements"]
    assert body["copies"] == report["copies"]
    assert body["prediction"] == report["prediction"]
    schema = load_schema()
    for p in body["placements"]:
        jsonschema.validate(p, {**schema["$defs"]["placement"], "$defs": schema["$defs"]})
    assert client.post("/plan", json={"module": mlp, "include": ["everything"]}).status_code == 422


def test_swagger_example_runs(client: Any) -> None:
    from service.api.routes.plan import DIFF_EXAMPLES

    res = client.post("/plan/diff", json=DIFF_EXAMPLES["pin"]["value"])
    assert res.status_code == 200, res.text
    d = res.json()
    assert [m["after"]["name"] for m in d["moved"] if m["after"]["kind"] == "operator"] == ["add"]
    assert {r["rule"]: r["hit"] for r in d["rules"]}["moved-to:cpu"] is True
