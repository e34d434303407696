"""Optimize-mode plans through the bridge: two CPU virtual devices with
different profiles, compiled and run, numerically equal to the unannotated
single-device build (issue 11)."""

from __future__ import annotations

from typing import Any

import pytest

import relay
import tvm_bridge
from tvm_bridge.check import max_abs_error, random_inputs

from .helpers import load_corpus

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
