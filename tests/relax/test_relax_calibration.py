"""The built-in llvm profile against recorded cpu runs of the Relax corpus.
No timing here: `benchmarks/calibrate.py measure-relax` recorded
the runs in benchmarks/calibration_relax.json (date, machine, load); these
tests check the predictions against that record and that the record's kernel
features are what the cost model computes today (a formula change without a
new measurement would silently change the fit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.relax_planning import plan_relax
from solver import PlanConfig

from .._scripts import load_script
from .corpus import load

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "calibration_relax.json"


def _record() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(RECORD.read_text())
    return doc


def _calibrate() -> Any:
    return load_script("benchmarks/calibrate.py", "bench_calibrate")


MEASURED = sorted(name for name, model in _record()["models"].items() if "run_ms" in model)


def test_the_record_says_when_where_and_what() -> None:
    record = _record()
    assert record["date"] and record["machine"]["cpu"] and record["tvm"].startswith("0.27")
    assert len(MEASURED) >= 6
    for name in MEASURED:
        model = record["models"][name]
        assert model["run_ms"] > 0 and model["runs"] >= 1 and "load_average" in model
    assert record["kernels"]


@pytest.mark.parametrize("name", MEASURED)
def test_cpu_prediction_within_3x_of_the_recorded_run(name: str) -> None:
    measured = float(_record()["models"][name]["run_ms"])
    mod, _ = load(name)
    config = PlanConfig(mode="optimize", default_device="cpu", host_device="cpu", virtual_devices=("cpu",))
    cost = plan_relax(mod, config).result.cost
    assert cost is not None and not [e for e in cost.estimates if e.kind == "unknown type"]
    assert measured / 3 <= cost.predicted_ms <= measured * 3, (cost.predicted_ms, measured)


def test_recorded_kernel_features_are_the_cost_model_s() -> None:
    calibrate = _calibrate()
    for name, kernels in _record()["kernels"].items():
        features = {key: calibrate._features(work) for key, work, _ in calibrate.relax_kernel_modules(load(name)[0])}
        for k in kernels:
            assert {f: k.get(f) for f in features[k["key"]]} == features[k["key"]], k["key"]
