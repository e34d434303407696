"""A pin leaves the problem as it was: the `on_device` wrapper a pin puts
around an operator's result, when only operators read that result, is the
operator's value, not a class of its own read at the end of the run. So the
pinned problem has the unpinned one's classes, edges and bytes, and its peak
memory by liveness is the same (the wrapper once held its operand live until
the last step, and an all-cpu decoder was charged about 400 MB more than its
weights and one forward's activations)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

import relay
import solver
from service.planning import PlanJob, build_config, read_source, run_plan
from solver.optimize.run import Optimized, optimize

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
DECODER = CORPUS / "relax" / "offload" / "llama_h1024_l8.json"
RESNET = CORPUS / "resnet18.relay"
MAPS = CORPUS / "relax" / "offload" / "llama_h1024_l8.accelerate.json"

# x (16 KiB, resident) -> negative (16 KiB) -> sum over rows (256 B) -> relu -> exp
CHAIN = """#[version = "0.0.5"]
def @main(%x: Tensor[(64, 64), float32]) {
  %0 = negative(%x);
  %1 = sum(%0, axis=[0], keepdims=True);
  %2 = nn.relu(%1);
  exp(%2)
}
"""


def _plan(pins: tuple[dict[str, Any], ...]) -> Optimized:
    config = solver.PlanConfig(
        virtual_devices=("cpu",), default_device="cpu", mode="optimize", constraints=pins
    )
    return optimize(relay.parse_text(CHAIN), config)


def _shape(found: Optimized) -> tuple[Any, ...]:
    p = found.problem
    return (len(p.classes), sorted(p.edges), p.weight_bytes, p.largest, p.ops, p.liveness.order)


def test_a_pinned_operator_keeps_the_problem_and_its_peak() -> None:
    unpinned = _plan(())
    pinned = _plan(({"select": {"op": "negative"}, "device": "cpu"},))
    assert _shape(pinned) == _shape(unpinned)
    # By hand, every class on the cpu in program order: x resident (16384);
    # negative's step holds its result (16384); sum's step that result, still
    # read, and its own (16384 + 256); relu's and exp's steps 256 + 256. Had the
    # wrapper a class of its own, read last, negative's result would stay to
    # the end (16384 + 256 + 256 at relu's step).
    for found in (unpinned, pinned):
        cost = found.result.cost
        assert cost is not None
        assert cost.peak_memory_bytes == {"cpu": 16384 + 16384 + 256}


@pytest.mark.skipif(not RESNET.is_file(), reason=f"corpus not found ({RESNET})")
def test_resnet18_with_its_convolutions_pinned_where_they_are_is_the_same_problem() -> None:
    job = PlanJob(
        RESNET.read_text(), include=("placements",), mode="optimize", virtual_devices=("cpu", "cuda")
    )
    placements = run_plan(job).placements
    assert placements is not None
    convs = {p["device"] for p in placements if p["kind"] == "operator" and p["name"] == "nn.conv2d"}
    assert len(convs) == 1
    pins = ({"select": {"op": "nn.conv2d"}, "device": convs.pop()},)
    source = read_source(job)
    found = [
        optimize(
            source.module,
            source.configure(build_config(dataclasses.replace(job, constraints=c), 60_000, time.monotonic)),
        )
        for c in ((), pins)
    ]
    unpinned, pinned = found
    assert _shape(pinned) == _shape(unpinned)
    assert pinned.solution.assign == unpinned.solution.assign
    assert unpinned.result.cost is not None and pinned.result.cost is not None
    assert pinned.result.cost.peak_memory_bytes == unpinned.result.cost.peak_memory_bytes


@pytest.mark.tvm
@pytest.mark.skipif(not (DECODER.is_file() and MAPS.is_file()), reason=f"corpus not found ({DECODER})")
def test_the_decoder_all_on_the_cpu_holds_its_weights_and_one_forward() -> None:
    # accelerate's map {"": "cpu"}: every weight and operator pinned to the cpu.
    maps = json.loads(MAPS.read_text())
    job = PlanJob(
        DECODER.read_text(),
        input_format="json",
        language="relax",
        mode="optimize",
        accelerate_device_map={"": "cpu"},
        timeout_ms=300_000,
    )
    cost = run_plan(job).cost
    assert cost is not None
    assert set(cost["peak_memory_bytes"]) == {"cpu"}
    peak = cost["peak_memory_bytes"]["cpu"]
    weights = maps["param_bytes"]
    # One forward of 128 tokens: the logits (128 x 32000 floats, 16.4 MB) are
    # its largest value; the rest live beside them are far smaller.
    logits = 128 * 32000 * 4
    assert weights + logits <= peak <= weights + 2 * logits
