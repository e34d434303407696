"""The built-in device profiles against recorded runs of what TVM builds.

No timing here: the measured numbers are recorded in benchmarks/calibration.json
(with the date and the machine) by `benchmarks/calibrate.py measure`, and the
cuda ones are the issue's H200 runs. The tests check that the built-in
profiles predict those runs within 3x (cpu) and 2x (cuda), that the cost
model's classes and rates behave as docs/calibration.md says, and (slow) that
the profiles are what the documented fit gives from the record.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import relay
import solver
from relay.ast import Call, Op, TensorType, TupleType
from relay.device import VirtualDevice, parse_target
from solver.optimize.cost_model import (
    BUILTIN_PROFILES,
    OP_CLASSES,
    ClassRate,
    DeviceProfile,
    KernelPart,
    KernelWork,
    device_profile,
    kernel_ns,
    op_part,
    work_ns,
)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
RECORD = ROOT / "benchmarks" / "calibration.json"

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"model corpus not found at {CORPUS}")


def _record() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(RECORD.read_text())
    return doc


def _all_on(name: str, device: str) -> float:
    """The optimizer's prediction (ms) of corpus model `name` all on `device`."""
    path = CORPUS / f"{name}.relay"
    module = relay.parse_text(path.read_text(), name=path.name)
    config = solver.PlanConfig(
        mode="optimize", default_device=device, host_device=device, virtual_devices=(device,)
    )
    cost = solver.plan(module, config).cost
    assert cost is not None
    assert not cost.estimates, cost.estimates
    return float(cost.predicted_ms)


def test_the_record_says_when_where_and_how() -> None:
    record = _record()
    assert record["date"] and record["machine"]["cpu"] and record["machine"]["cores"]
    assert record["tvm"].startswith("0.27")
    assert set(record["models"]) >= {"mlp", "resnet18", "mobilenet", "squeezenet"}
    classes = {k["class"] for m in record["models"].values() for k in m["kernels"]}
    assert classes == set(OP_CLASSES)  # every class was measured
    assert record["cuda_runs"]["ms"]


@needs_corpus
@pytest.mark.parametrize("name", ["mlp", "resnet18", "mobilenet", "squeezenet"])
def test_cpu_prediction_within_3x_of_the_recorded_run(name: str) -> None:
    measured = float(_record()["models"][name]["run_ms"])
    predicted = _all_on(name, "cpu")
    assert measured / 3 <= predicted <= measured * 3, (predicted, measured)


@needs_corpus
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "densenet121", "mobilenet", "squeezenet"])
def test_cuda_prediction_within_2x_of_the_h200_run(name: str) -> None:
    measured = float(_record()["cuda_runs"]["ms"][name])
    predicted = _all_on(name, "cuda")
    assert measured / 2 <= predicted <= measured * 2, (predicted, measured)


def _t(*shape: int) -> TensorType:
    return TensorType(tuple(shape), "float32")


def test_operator_classes() -> None:
    x = _t(1, 32, 56, 56)
    cases: list[tuple[str, list[Any], Any, str]] = [
        ("nn.conv2d", [x, _t(64, 32, 3, 3)], None, "conv"),
        ("nn.dense", [_t(1, 512), _t(10, 512)], None, "dense"),
        ("nn.batch_matmul", [_t(8, 4, 4), _t(8, 4, 4)], None, "dense"),
        ("nn.max_pool2d", [x], None, "pooling"),
        ("nn.global_avg_pool2d", [x], None, "pooling"),
        ("nn.softmax", [_t(1, 10)], None, "reduction"),
        ("sum", [_t(1, 10)], None, "reduction"),
        ("transpose", [x], None, "data movement"),
        ("concatenate", [TupleType((x, x))], None, "data movement"),
        ("nn.relu", [x], None, "elementwise"),
        ("nn.batch_norm", [x, _t(32), _t(32), _t(32), _t(32)], None, "elementwise"),
    ]
    for name, args, attrs, expected in cases:
        assert op_part(name, args, None, attrs, 1).op_class == expected, name


def _conv_call(text: str) -> tuple[str, list[Any], Any, Any]:
    module = relay.parse_text(text)
    call = module["main"].body
    assert isinstance(call, Call) and isinstance(call.op, Op)
    args = [p.type_annotation for p in module["main"].params]
    return call.op.name, args, _t(1, 32, 56, 56), call.attrs


def test_depthwise_needs_one_group_per_input_channel() -> None:
    base = "def @main(%x: Tensor[(1, 32, 56, 56), float32], %w: Tensor[{w}, float32]) {{ nn.conv2d(%x, %w, {a}) }}"
    depthwise = _conv_call(
        base.format(w="(32, 1, 3, 3)", a="padding=[1, 1, 1, 1], groups=32, channels=32, kernel_size=[3, 3]")
    )
    grouped = _conv_call(
        base.format(w="(32, 8, 3, 3)", a="padding=[1, 1, 1, 1], groups=4, channels=32, kernel_size=[3, 3]")
    )
    assert op_part(*depthwise, 1).op_class == "depthwise conv"
    assert op_part(*grouped, 1).op_class == "conv"
    # FLOPs: 2 x outputs x (weight elements / output channels)
    assert op_part(*depthwise, 1).flops == 2 * 32 * 56 * 56 * 9
    assert op_part(*depthwise, 1).outputs == 32 * 56 * 56


def test_work_ns_rates_saturation_and_fusion() -> None:
    profile = DeviceProfile(
        peak_gflops=100.0,
        mem_gbps=10.0,
        launch_us=2.0,
        classes=(("conv", ClassRate(0.5, 1.0, 1000)), ("elementwise", ClassRate(1.0, 2.0))),
    )
    conv = KernelPart("conv", 1_000_000, 1000)
    # 1 MFLOP at 50 GFLOP/s = 20 us, plus the 2 us launch.
    assert work_ns(KernelWork((conv,), 0), profile) == 22_000
    # Half the saturation: half the rate.
    small = KernelPart("conv", 1_000_000, 500)
    assert work_ns(KernelWork((small,), 0), profile) == 42_000
    # Memory-bound elementwise at 2 x 10 GB/s.
    relu = KernelPart("elementwise", 1000, 1000)
    assert work_ns(KernelWork((relu,), 400_000), profile) == 22_000
    # A class the profile does not rate runs at the plain roofline.
    pool = KernelPart("pooling", 1_000_000, 1000)
    assert work_ns(KernelWork((pool,), 0), profile) == kernel_ns(1_000_000, 0, profile)
    # Fused: the same arithmetic, the fused kernel's own bytes, one launch;
    # never dearer than its parts one by one.
    apart = work_ns(KernelWork((conv,), 8000), profile) + work_ns(KernelWork((relu,), 8000), profile)
    fused = work_ns(KernelWork((conv, relu), 8000), profile)
    assert fused < apart
    assert fused >= work_ns(KernelWork((conv,), 8000), profile)
    # Always an integer number of ns, at least 1.
    assert work_ns(KernelWork((), 0), DeviceProfile(1.0, 1.0, 0.0)) == 1


def test_builtin_profiles_rate_every_class() -> None:
    for kind in ("llvm", "cuda"):
        rated = {name for name, _ in BUILTIN_PROFILES[kind].classes}
        assert rated == set(OP_CLASSES), kind
        for _, rate in BUILTIN_PROFILES[kind].classes:
            assert rate.compute > 0 and rate.memory > 0 and rate.saturation >= 0
    # The GPU is faster than the CPU at every class (the cuda fit's floor).
    cpu, gpu = BUILTIN_PROFILES["llvm"], BUILTIN_PROFILES["cuda"]
    for cls in OP_CLASSES:
        assert gpu.peak_gflops * gpu.rate(cls).compute >= cpu.peak_gflops * cpu.rate(cls).compute, cls


def test_request_rates_replace_the_class_efficiencies() -> None:
    cuda = VirtualDevice(2, 0, parse_target("cuda"))
    builtin = device_profile("cuda", cuda, {})
    assert builtin.classes == BUILTIN_PROFILES["cuda"].classes
    # Stating the rates: a plain roofline with them.
    own = device_profile("cuda", cuda, {"cuda": {"peak_gflops": 100.0}})
    assert own.classes == () and own.peak_gflops == 100.0
    # A budget or a launch cost alone keeps the calibrated classes.
    budget = device_profile("cuda", cuda, {"cuda": {"memory_bytes": 1 << 30, "launch_us": 9}})
    assert budget.classes == builtin.classes and budget.memory_bytes == 1 << 30 and budget.launch_us == 9


@pytest.mark.slow
@needs_corpus
def test_builtin_profiles_are_the_documented_fit_of_the_record() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import calibrate  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    record = _record()
    launch, rates = calibrate.fit_llvm(record)
    llvm = BUILTIN_PROFILES["llvm"]
    assert llvm.launch_us == launch
    assert dict(llvm.classes) == rates
    claunch, crates = calibrate.fit_cuda(rates)
    cuda = BUILTIN_PROFILES["cuda"]
    assert cuda.launch_us == claunch
    assert dict(cuda.classes) == crates
