"""`--explain` at model size: a one-line summary first, each parameter's device
only for functions with at most 20 parameters (else a count per device and a
pointer to the report), and one per-device table whose figures are the JSON
answer's `cost.per_device`, kernels and copies in their own columns, the rows
adding up to `cost.predicted_ms`."""

from __future__ import annotations

from typing import Any

import pytest

from service.planning import PARAMETERS_LISTED
from tests._service import thread_client
from tests.conftest import CORPUS_DIR
from tests.explain_table import TITLE, device_rows


def _chain(params: int) -> str:
    """`@main(%x, %w0 ... %w{params-2})`: a chain of adds and a dense, with
    weights heavy enough that a small cuda budget sends some to the cpu."""
    weights = ", ".join(f"%w{i}: Tensor[(64, 64), float32]" for i in range(params - 1))
    body = "%x"
    for i in range(params - 1):
        body = f"nn.dense({body}, %w{i})" if i % 2 == 0 else f"add({body}, %w{i})"
    return f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(64, 64), float32], {weights}) {{\n  {body}\n}}\n'


def _plan(client: Any, params: int, **extra: Any) -> dict[str, Any]:
    r = client.post("/plan", json={"module": _chain(params), "explain": True, **extra})
    assert r.status_code == 200, r.text[:2000]
    body: dict[str, Any] = r.json()
    return body


def _check_table(lines: list[str], cost: dict[str, Any]) -> None:
    assert sum(line.startswith(TITLE) for line in lines) == 1
    rows = device_rows(lines)
    total = rows.pop("total")
    assert set(rows) == set(cost["per_device"])
    for name, d in cost["per_device"].items():
        row = rows[name]
        assert int(row["operators"]) == d["operator_calls"] and int(row["weight bytes"]) == d["weight_bytes"]
        share = d["predicted_ms"] - d["overlap_hidden_ms"]
        assert row["total ms"] == f"{share:.3f}" and row["copies ms"] == f"{d['copy_ms']:.3f}"
        assert row["kernels ms"] == f"{d['kernel_ms']:.3f}" and int(row["peak bytes"]) == d["peak_memory_bytes"]
        hidden = float(row.get("hidden ms", 0.0))
        assert hidden == pytest.approx(d["overlap_hidden_ms"], abs=1e-3)
        assert float(row["kernels ms"]) + float(row["copies ms"]) - hidden == pytest.approx(share, abs=2e-3)
    assert total["total ms"] == f"{cost['predicted_ms']:.3f}"
    shares = (d["predicted_ms"] - d["overlap_hidden_ms"] for d in cost["per_device"].values())
    assert sum(shares) == pytest.approx(cost["predicted_ms"], abs=1e-5)


def test_many_parameters_are_counted_and_the_table_is_cost_per_device() -> None:
    params = PARAMETERS_LISTED + 5
    with thread_client() as client:
        body = _plan(
            client,
            params,
            mode="optimize",
            device_profiles={"cuda": {"memory_bytes": 6 * 64 * 64 * 4}},
            overlap=False,  # priced synchronously, streaming gains nothing: the budget splits the chain
        )
    lines, cost = body["explanation"], body["cost"]
    ops = {d: n["operator_calls"] for d, n in cost["per_device"].items()}
    assert set(ops) == {"cpu", "cuda"} and all(ops.values()), cost["per_device"]
    first = lines[0]
    assert len(first) < 200 and first.startswith("1 function; ")
    assert f"cpu {ops['cpu']}, cuda {ops['cuda']}" in first and f"predicted {cost['predicted_ms']:.3f} ms" in first
    (function,) = [line for line in lines if line.startswith("@main")]
    assert f"@main: {params} parameters (" in function and "--report" in function and "%w3" not in function
    _check_table(lines, cost)
    assert cost["copies"] >= 1 and any(d["copy_ms"] > 0 for d in cost["per_device"].values())


def test_few_parameters_are_listed_by_name() -> None:
    with thread_client() as client:
        body = _plan(client, PARAMETERS_LISTED, mode="optimize")
    function = next(line for line in body["explanation"] if line.startswith("@main"))
    assert function.startswith("@main(%x on ") and f"%w{PARAMETERS_LISTED - 2} on " in function
    _check_table(body["explanation"], body["cost"])


def test_tvm_mode_table_is_the_records_prices() -> None:
    """No `cost` in the TVM mode: the table prices the TVM plan (the report's
    `prediction`), each copy on the device it copies into."""
    with thread_client() as client:
        r = client.post(
            "/plan",
            json={"module": _chain(5), "explain": True, "include": ["placements"],
                  "constraints": [{"select": {"param": "@main:%x"}, "device": "cpu"}]},
        )
    assert r.status_code == 200, r.text[:2000]
    body = r.json()
    rows = device_rows(body["explanation"])
    total = rows.pop("total")
    for name, d in body["prediction"]["per_device"].items():
        assert float(rows[name]["kernels ms"]) == pytest.approx(d["kernel_ms"], abs=1e-3)
    copies = sum(c["predicted_ms"] or 0 for c in body["copies"])
    assert float(total["copies ms"]) == pytest.approx(copies, abs=1e-3)
    assert "weight bytes" not in rows[next(iter(rows))]


@pytest.mark.slow
@pytest.mark.tvm
@pytest.mark.skipif(not (CORPUS_DIR / "relax").is_dir(), reason="needs ../shared/corpus/relax")
def test_mobilenet_under_a_budget_reads_in_one_screen() -> None:
    pytest.importorskip("tvm")
    text = (CORPUS_DIR / "relax" / "tv_mobilenet_v3_small.json").read_text()
    with thread_client() as client:
        r = client.post(
            "/plan",
            json={"module": text, "explain": True, "mode": "optimize", "device_profiles": {"cuda": {"memory_bytes": "1MB"}}},
        )
    assert r.status_code == 200, r.text[:2000]
    body = r.json()
    lines = body["explanation"]
    assert len(lines[0]) < 200 and all(len(line) < 250 for line in lines), [line for line in lines if len(line) >= 250]
    _check_table(lines, body["cost"])
