"""Optimize-mode plans through the bridge: two CPU virtual devices with
different profiles, compiled and run, numerically equal to the unannotated
single-device build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import relay
import tvm_bridge
from tvm_bridge.check import max_abs_error, random_inputs

from .helpers import corpus_path, load_corpus

solver = pytest.importorskip("solver")

# cpu:1 is modelled as a much faster device than cpu (cpu:0), so everything
# that is not pinned goes there; the pinned head stays on cpu:0.
PROFILES = {
    "cpu": {"peak_gflops": 10.0, "mem_gbps": 5.0, "launch_us": 20.0},
    "cpu:1": {"peak_gflops": 1000.0, "mem_gbps": 500.0, "launch_us": 1.0},
}


def _optimize(
    module: relay.Module, pins: tuple[dict[str, Any], ...], profiles: dict[str, Any] = PROFILES
) -> Any:
    config = solver.PlanConfig(
        virtual_devices=("cpu:0", "cpu:1"),
        default_device="cpu:1",
        host_device="cpu:0",
        constraints=pins,
        mode="optimize",
        device_profiles=profiles,
        z3_check=True,
    )
    return solver.plan(module, config)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "pinned_op"),
    [("mlp", "nn.softmax"), ("resnet18", "nn.softmax")],
)
def test_optimize_plan_on_two_cpus_matches_unannotated_build(model: str, pinned_op: str) -> None:
    module = load_corpus(f"{model}.relay")
    result = _optimize(module, ({"select": {"op": pinned_op}, "device": "cpu:0"},))
    cost = result.cost
    assert cost is not None and cost.copies >= 1
    # The backbone runs on the fast device, the pinned head on the slow one.
    assert set(cost.per_device) == {"cpu", "cpu:1"}
    assert cost.per_device["cpu:1"].operators > cost.per_device["cpu"].operators >= 1
    lowered = tvm_bridge.to_relax(result.module)
    assert len(tvm_bridge.vdevices_of(lowered)) == 2
    hetero = tvm_bridge.compile(lowered)
    single = tvm_bridge.compile(tvm_bridge.to_relax(module))
    inputs = random_inputs(module["main"])
    expected = tvm_bridge.run(single, inputs)
    assert max_abs_error(tvm_bridge.run(hetero, inputs), expected) <= 1e-5


def test_optimize_plan_moves_an_expensive_operator_between_cpus() -> None:
    """Swap the profiles: the unpinned operators follow the faster device,
    and the result is still the unannotated program's."""
    module = load_corpus("mlp.relay")
    pins = ({"select": {"op": "nn.batch_flatten"}, "device": "cpu:1"},)
    swapped = {"cpu": PROFILES["cpu:1"], "cpu:1": PROFILES["cpu"]}
    result = _optimize(module, pins, swapped)
    assert result.cost is not None and result.cost.per_device["cpu"].operators >= 3
    compiled = tvm_bridge.compile(tvm_bridge.to_relax(result.module))
    inputs = random_inputs(module["main"])
    expected = tvm_bridge.run(tvm_bridge.compile(tvm_bridge.to_relax(module)), inputs)
    assert max_abs_error(tvm_bridge.run(compiled, inputs), expected) <= 1e-5


@pytest.mark.slow
def test_compile_route_takes_the_optimize_fields(tmp_path: Path) -> None:
    """POST /compile plans in optimize mode when asked (same fields as /plan):
    the head pinned to cpu:0, the rest on the faster cpu:1, checked numerically."""
    import warnings

    from service.config import Settings
    from service.main import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    request = {
        "module": corpus_path("mlp.relay").read_text(),
        "virtual_devices": ["cpu:0", "cpu:1"],
        "default_device": "cpu:1",
        "host_device": "cpu:0",
        "constraints": [{"select": {"op": "nn.softmax"}, "device": "cpu:0"}],
        "device_profiles": PROFILES,
        "run_check": True,
    }
    app = create_app(Settings(pool_kind="thread", pool_size=1, artifact_dir=tmp_path))
    with TestClient(app, raise_server_exceptions=False) as client:
        tvm = client.post("/compile", json=request)
        optimize = client.post("/compile", json={**request, "mode": "optimize"})
    assert tvm.status_code == optimize.status_code == 200, optimize.text[:2000]
    report = optimize.json()["report"]
    assert report["devices"] == ["llvm:0", "llvm:1"] and report["device_copies"] >= 1
    assert report["check"]["max_abs_error"] <= 1e-5
    # TVM mode: the pin pulls every producer onto cpu:0, so the plans differ.
    assert tvm.json()["artifact_id"] != optimize.json()["artifact_id"]
    assert tvm.json()["report"]["functions_per_device"] != report["functions_per_device"]
