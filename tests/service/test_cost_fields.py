"""The optimize report's proof fields over HTTP and in `--explain`:
`method`, `bound_ms` and `gap` reach the client as the solver reports them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import relay
import solver
from service.cli import main
from service.config import Settings
from service.examples import BIG_HEAD
from service.main import create_app
from service.planning import cost_lines


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(pool_kind="thread", pool_size=1))) as c:
        yield c


def test_plan_response_carries_method_bound_and_gap(client: TestClient) -> None:
    body = {"module": BIG_HEAD, "mode": "optimize", "virtual_devices": ["cpu", "cuda"]}
    r = client.post("/plan", json=body)
    assert r.status_code == 200, r.text
    cost = r.json()["cost"]
    direct = solver.plan(
        relay.parse_text(BIG_HEAD), solver.PlanConfig(mode="optimize", virtual_devices=("cpu", "cuda"))
    ).cost
    assert direct is not None
    assert cost["method"] == direct.method == "min-cut"
    assert cost["optimal"] is True and cost["gap"] == 0
    assert cost["bound_ms"] == pytest.approx(cost["predicted_ms"])


def test_explain_prints_method_and_proof(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "head.relay"
    path.write_text(BIG_HEAD)
    assert main(["plan", str(path), "--mode", "optimize", "--explain"]) == 0
    err = capsys.readouterr().err
    summary = next(line for line in err.splitlines() if line.startswith("predicted "))
    assert "(optimal; method min-cut;" in summary


def test_unproven_plan_prints_bound_and_gap() -> None:
    cost: dict[str, Any] = {
        "predicted_ms": 2.0, "tvm_mode_predicted_ms": None, "tvm_mode_reason": "over budget",
        "copies": 1, "bytes_copied": 4, "per_device": {}, "optimal": False, "bound_ms": 1.6,
        "gap": 0.25, "method": "search + highs", "solver_ms": 3.0,
    }
    summary = cost_lines(cost)[0]
    assert "bound 1.600 ms, gap 25.00%" in summary and "method search + highs" in summary
    assert "no gap (bound 0)" in cost_lines({**cost, "bound_ms": 0.0, "gap": None})[0]
