"""Relax modules the bridge makes from corpus models, planned like their Relay
originals: optimize mode, the final softmax pinned to the cpu.

The Relax plan must make the same copies as the Relay plan, predict a time
within 10% of it, change the module only where devices go, be a fixed point
of `RealizeVDevice`, and (on two CPU virtual devices with different
profiles) compile and compute what the unannotated module computes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tvm
from tvm import relax

import relay
import tvm_bridge
from service.relax_planning import plan_relax
from solver import PlanConfig, plan
from tvm_bridge.check import max_abs_error, random_inputs
from tvm_bridge.relax_plan import print_relax, read_relax, strip_devices

from .helpers import load_corpus

pytestmark = pytest.mark.tvm

LLVM_ONLY = {"cpu": "llvm", "cuda": "llvm"}


def _config(op: str) -> PlanConfig:
    return PlanConfig(
        mode="optimize",
        default_device="cuda",
        host_device="cpu",
        timeout_ms=60_000,
        constraints=({"select": {"op": op}, "device": "cpu"},),
    )


def _relax_of(module: relay.Module) -> tuple[Any, Any]:
    """The bridge's Relax module of an unplanned Relay module, printed and
    read back the way a user's TVMScript arrives."""
    lowered = tvm_bridge.to_relax(module, LLVM_ONLY)
    return read_relax(print_relax(lowered))


def _compare(model: str) -> None:
    module = load_corpus(f"{model}.relay")
    want = plan(module, _config("nn.softmax"))
    mod, source = _relax_of(module)
    got = plan_relax(mod, _config("relax.nn.softmax"), source)
    assert want.cost is not None and got.result.cost is not None
    # The same copies: as many, between the same devices, of as many bytes.
    assert got.copies == len(want.copies) >= 1
    assert [(str(s), str(d)) for _, s, d in got.result.copies] == [(str(s), str(d)) for _, s, d in want.copies]
    assert got.result.cost.bytes_copied == want.cost.bytes_copied
    assert abs(got.result.cost.predicted_ms - want.cost.predicted_ms) <= 0.1 * want.cost.predicted_ms
    # Only devices changed, and TVM's own pass has nothing left to do.
    tvm.ir.assert_structural_equal(strip_devices(got.module), strip_devices(mod))
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(got.module), got.module)
    # Re-planning the output changes nothing, in either mode.
    for config in (_config("relax.nn.softmax"), PlanConfig(default_device="cuda", timeout_ms=60_000)):
        tvm.ir.assert_structural_equal(plan_relax(got.module, config).module, got.module)
    # Each copy's line is a binding of the TVMScript.
    for span, _, _ in got.result.copies:
        assert span is not None and span.source is source


def test_mlp_relax_plan_matches_the_relay_plan() -> None:
    _compare("mlp")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18", "mobilenet"])
def test_corpus_relax_plan_matches_the_relay_plan(model: str) -> None:
    _compare(model)


PROFILES = {
    "cpu": {"peak_gflops": 10.0, "mem_gbps": 5.0, "launch_us": 20.0},
    "cpu:1": {"peak_gflops": 1000.0, "mem_gbps": 500.0, "launch_us": 1.0},
}


def _two_cpus(model: str) -> None:
    module = load_corpus(f"{model}.relay")
    mod, source = _relax_of(module)
    config = PlanConfig(
        virtual_devices=("cpu:0", "cpu:1"),
        default_device="cpu:1",
        host_device="cpu:0",
        mode="optimize",
        device_profiles=PROFILES,
        constraints=({"select": {"op": "relax.nn.softmax"}, "device": "cpu:0"},),
        timeout_ms=60_000,
    )
    got = plan_relax(mod, config, source)
    assert got.copies >= 1
    assert len(got.module.global_infos["vdevice"]) == 2
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(got.module), got.module)
    inputs = random_inputs(module["main"])
    expected = tvm_bridge.run(tvm_bridge.compile(mod, LLVM_ONLY), inputs)
    hetero = tvm_bridge.compile(got.module)
    assert max_abs_error(tvm_bridge.run(hetero, inputs), expected) <= 1e-5


def test_mlp_relax_plan_runs_on_two_cpus_like_the_unannotated_module() -> None:
    _two_cpus("mlp")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18", "mobilenet"])
def test_corpus_relax_plan_runs_on_two_cpus(model: str) -> None:
    _two_cpus(model)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model",
    ["dcgan", "dqn", "squeezenet", "vgg16", "inception_v3", "densenet121", "resnet3d_18", "lstm", "synthetic"],
)
def test_every_corpus_model_as_relax_plans_like_relay_in_tvm_mode(model: str) -> None:
    module = load_corpus(f"{model}.relay")
    mod, source = _relax_of(module)
    config = PlanConfig(timeout_ms=60_000)
    want = plan(module, config)
    got = plan_relax(mod, config, source)
    assert got.copies == len(want.copies)
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(got.module), got.module)
    tvm.ir.assert_structural_equal(strip_devices(got.module), strip_devices(mod))
    again, _ = read_relax(print_relax(got.module))
    tvm.ir.assert_structural_equal(again, got.module)


def test_benchmark_table_runs_on_mlp() -> None:
    """benchmarks/relax.py stays runnable (its numbers are in docs/relax.md)."""
    import runpy

    bench = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "relax.py"))
    rows = dict(bench["run"]("mlp", 1))
    assert rows["relax: total, our path"] > 0 and rows["relay: total"] > 0
    assert rows["relax / relay"] == pytest.approx(rows["relax: total, our path"] / rows["relay: total"])
