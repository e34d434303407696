"""Optimize-mode candidates compared as TVM's CompilationConfig compares devices
(`solver.steps.PrimitiveDevices`): one host target is set as the host of every
primitive target, so the metadata's cpu (llvm with an llvm host, as TVM writes
it) and a request's `cpu` (llvm, no host) are one candidate, while two cpus
with different targets stay two, each with its own name."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

import relay
import solver
from relay.device import VirtualDevice, device_name, parse_target
from solver.steps import PrimitiveDevices, resolve_devices

from ._corpus import CORPUS
from ._lexical import operator_devices

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")

ANNOTATED = ["mlp.annotated", "lstm.annotated", "resnet18.annotated"]
# What /explore sends by default.
EXPLORE_DEVICES = ("cpu", "cuda")
SKYLAKE = {"device_type": "cpu", "target": "llvm -mcpu=skylake-avx512"}
SKYLAKE_NAME = "cpu (target llvm -mcpu=skylake-avx512)"

LLVM = parse_target("llvm")


def _module(name: str) -> relay.Module:
    path = CORPUS / f"{name}.relay"
    return relay.parse_text(path.read_text(), name=str(path))


def _optimize(module: relay.Module, **fields: Any) -> solver.PlanResult:
    return solver.plan(module, solver.PlanConfig(mode="optimize", **fields))


def test_host_target_as_compilation_config_picks_it() -> None:
    """The host of the first target that has one (without its own host); else
    the first cpu target; else llvm."""
    fast = parse_target("llvm -mcpu=znver4")
    cuda_on_fast = VirtualDevice(2, 0, parse_target("cuda", host=fast))
    cuda_alone = VirtualDevice(2, 0, dataclasses.replace(parse_target("cuda"), host=None))
    skylake_cpu = VirtualDevice(1, 0, parse_target("llvm -mcpu=skylake"))
    assert PrimitiveDevices.of([skylake_cpu, cuda_on_fast]).host_target == fast
    assert PrimitiveDevices.of([cuda_alone, skylake_cpu]).host_target == skylake_cpu.target
    assert PrimitiveDevices.of([cuda_alone, VirtualDevice(1)]).host_target == LLVM
    hosted_host = VirtualDevice(2, 0, parse_target("cuda", host=dataclasses.replace(LLVM, host=fast)))
    assert PrimitiveDevices.of([hosted_host]).host_target == LLVM  # the host's own host is dropped


def test_canonical_sets_the_config_host_on_every_target() -> None:
    primitive = PrimitiveDevices(LLVM)
    host_device = VirtualDevice(1, 0, LLVM)
    cpu = primitive.canonical(host_device)
    assert cpu.target is not None and cpu.target.host == LLVM
    assert dataclasses.replace(cpu.target, host=None) == LLVM
    assert primitive.canonical(cpu) is cpu  # already in the form: unchanged
    # A target with another host is overridden, as CompilationConfig does.
    other = VirtualDevice(2, 0, parse_target("cuda", host=parse_target("llvm -mcpu=znver4")))
    assert primitive.same(other, VirtualDevice(2, 0, parse_target("cuda")))
    # Without a target there is nothing to fill; different targets stay different.
    assert primitive.canonical(VirtualDevice(1)) == VirtualDevice(1)
    assert not primitive.same(host_device, VirtualDevice(1, 0, parse_target("llvm -mcpu=skylake")))
    assert not primitive.same(host_device, VirtualDevice(1, 1, LLVM))
    assert primitive.fits(VirtualDevice(1), cpu) and primitive.fits(host_device, cpu)
    assert not primitive.fits(VirtualDevice(2), cpu)


@needs_corpus
def test_request_cpu_is_the_metadata_cpu_in_the_config_form() -> None:
    module = _module("mlp.annotated")
    devices = resolve_devices(module, solver.PlanConfig(mode="optimize", virtual_devices=EXPLORE_DEVICES))
    meta_cpu = module.meta["VirtualDevice"][0]
    request_cpu = devices.table[1]
    assert isinstance(meta_cpu, VirtualDevice) and isinstance(request_cpu, VirtualDevice)
    assert meta_cpu.device_type == request_cpu.device_type == 1
    assert meta_cpu != request_cpu  # TVM's cpu carries an llvm host, the request's none
    primitive = PrimitiveDevices.of(devices.table)
    assert primitive.canonical(request_cpu) == meta_cpu
    assert primitive.canonical(meta_cpu) is meta_cpu


@needs_corpus
@pytest.mark.parametrize("name", ANNOTATED)
def test_annotated_model_plans_with_the_explore_devices(name: str) -> None:
    """The request's cpu and cuda add nothing the metadata and the defaults do
    not already name: the plan and both predictions are those of the request
    without them, and the report has a TVM-mode prediction."""
    module = _module(name)
    alone = _optimize(module)
    result = _optimize(module, virtual_devices=EXPLORE_DEVICES)
    relay.verify(result.module)
    assert relay.structural_equal(result.module, alone.module)
    assert result.cost is not None and alone.cost is not None
    assert result.cost.tvm_mode_reason is None
    assert result.cost.tvm_mode_predicted_ms is not None and result.cost.tvm_mode_predicted_ms > 0
    assert result.cost.tvm_mode_predicted_ms == alone.cost.tvm_mode_predicted_ms
    assert result.cost.predicted_ms == alone.cost.predicted_ms
    assert result.cost.predicted_ms <= result.cost.tvm_mode_predicted_ms
    assert set(result.cost.per_device) <= {"cpu", "cuda"}
    # The TVM mode's plan priced the same way as the report prices it.
    tvm = solver.plan(module, solver.PlanConfig(virtual_devices=EXPLORE_DEVICES))
    evaluation = solver.evaluate_planned(tvm.module, solver.PlanConfig(virtual_devices=EXPLORE_DEVICES))
    assert evaluation.predicted_ms == pytest.approx(result.cost.tvm_mode_predicted_ms)


@needs_corpus
def test_two_cpus_with_different_targets_are_two_named_candidates() -> None:
    """A second cpu:0 with `-mcpu` is its own candidate under its own name: a
    profile keyed by that name moves the unpinned operators onto it, and the
    planned text names its target where they run."""
    module = _module("mlp.annotated")
    devices = ("cpu", SKYLAKE, "cuda")
    plain = _optimize(module, virtual_devices=devices)
    fast = {SKYLAKE_NAME: {"peak_gflops": 1e6, "mem_gbps": 1e5}}
    moved = _optimize(module, virtual_devices=devices, device_profiles=fast)
    assert plain.cost is not None and moved.cost is not None
    assert SKYLAKE_NAME not in plain.expressions_by_device  # identical profiles: the default rule keeps cpu
    by_device = Counter(d for _, d in operator_devices(relay.parse_text(relay.print_text(moved.module))))
    assert set(by_device) == {"cpu", SKYLAKE_NAME}
    # The annotated first dense (and its bias add) stay on the metadata's cpu.
    assert moved.cost.per_device["cpu"].operators == by_device["cpu"] == 2
    assert moved.cost.per_device[SKYLAKE_NAME].operators == by_device[SKYLAKE_NAME] > 0
    assert moved.cost.predicted_ms < plain.cost.predicted_ms
    on_skylake = [vd for vd in moved.virtual_devices if device_name(vd) == SKYLAKE_NAME]
    assert on_skylake and all(
        vd.target is not None and vd.target.attr_dict["mcpu"] == "skylake-avx512" for vd in on_skylake
    )


def test_same_named_devices_that_differ_name_the_difference() -> None:
    """Two cpu:0 whose targets differ only in their keys share the name `cpu`:
    the request is refused, saying what differs."""
    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4, 4), float32]) {\n  exp(%x)\n}\n'
    arm = {"device_type": "cpu", "target": "llvm -keys=arm_cpu,cpu"}
    with pytest.raises(solver.PlanConfigError) as err:
        _optimize(relay.parse_text(text), virtual_devices=("cpu", arm, "cuda"))
    message = str(err.value)
    assert "both named 'cpu'" in message and "target keys (cpu vs arm_cpu,cpu)" in message


def test_host_and_cpu_of_one_module_are_one_candidate() -> None:
    """A module whose metadata holds both TVM's cpu (llvm with an llvm host)
    and its host device (llvm alone): the TVM mode keeps them apart (copies
    between them), the optimize mode plans on one cpu with no copy."""
    cpu = VirtualDevice(1, 0, dataclasses.replace(LLVM, host=LLVM))
    host = VirtualDevice(1, 0, LLVM)
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32]) {
  %0 = on_device(exp(%x), virtual_device=meta[VirtualDevice][0]);
  %1 = on_device(log(%x), virtual_device=meta[VirtualDevice][1]);
  vm.shape_of(add(%0, %1), dtype="int64")
}
"""
    module = relay.parse_text(text, virtual_devices=[cpu, host])
    tvm = solver.plan(module, solver.PlanConfig())
    assert len(tvm.copies) == 2 and {str(s) for _, s, _ in tvm.copies} == {str(cpu), str(host)}
    result = _optimize(module)
    relay.verify(result.module)
    assert result.cost is not None
    assert result.copies == [] and result.cost.copies == 0
    # exp, log and add (vm.shape_of is a host operator, not a kernel)
    assert set(result.cost.per_device) == {"cpu"} and result.cost.per_device["cpu"].operators == 3
    assert result.cost.tvm_mode_predicted_ms is not None
