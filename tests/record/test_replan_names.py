"""A planned Relax module planned again names its devices as the first plan
did: the bridge writes a bare `cuda` with the server's default
arch and an llvm host, and reading that back must not turn `cuda` into
`cuda (target cuda -arch=sm_75 ...)`."""

from __future__ import annotations

from typing import Any

import pytest

from service.planning import PlanJob, run_plan
from tests.record.test_relax_cli import DEVICES, SMALL
from tests.record.test_views import RELAX_HINTS, RELAX_PIN

pytestmark = pytest.mark.tvm
pytest.importorskip("tvm")

NO_VDEVICES = SMALL.replace(DEVICES, "")
SM_90 = SMALL.replace('I.vdevice("cuda", 0)', 'I.vdevice({"kind": "cuda", "arch": "sm_90"}, 0)')
EXP_ON_CUDA = ({"select": {"op": "R.exp", "index": 0}, "device": "cuda"},)
MATMUL_ON_CUDA = ({"select": {"op": "R.matmul", "index": 0}, "device": "cuda"},)


def _names(outcome: Any) -> dict[str, Any]:  # a PlanOutcome made with include: ["placements"]
    """Every device name a plan's views show."""
    return {
        "placements": sorted((p["binding"], p["device"]) for p in outcome.placements),
        "copies": sorted((c["src"], c["dst"]) for c in outcome.copies),
        "functions": outcome.summary["functions"],
        "by_device": sorted(outcome.summary["expressions_by_device"]),
    }


CASES: dict[str, tuple[str, tuple[dict[str, Any], ...], dict[str, Any]]] = {
    "request devices": (NO_VDEVICES, EXP_ON_CUDA, {"virtual_devices": ("cpu", "cuda"), "default_device": "cuda"}),
    "module vdevices": (RELAX_HINTS, (RELAX_PIN,), {}),
    "own arch": (SM_90, MATMUL_ON_CUDA, {}),
}


@pytest.mark.parametrize("mode", ["tvm", "optimize"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_replanning_keeps_device_names(case: str, mode: str) -> None:
    text, pins, extra = CASES[case]
    first = run_plan(PlanJob(module=text, mode=mode, constraints=pins, include=("placements",), **extra))
    again = run_plan(PlanJob(module=first.module, mode=mode, include=("placements",)))
    assert _names(again) == _names(first)
    assert first.placements is not None
    devices = {p["device"] for p in first.placements}
    if case == "own arch":  # the module's own attribute stays in the name
        assert any(d.startswith("cuda (target cuda ") and "-arch=sm_90" in d for d in devices), devices
    else:
        assert devices <= {"cpu", "cuda"} and "cuda" in devices
        assert len(devices) == 2 or case == "request devices"
