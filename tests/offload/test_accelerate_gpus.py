"""Several GPUs plus the cpu: accelerate's sequential fill over two GPUs
(tests/data/accelerate, made by accelerate itself) as an input map, layers
split between GPUs with their activations copied over the link between
them, and our plan against accelerate's fill under the same budgets."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from service.planning import PlanJob, PlanOutcome, run_plan
from tests.offload.corpus import decoder_text as _text
from tests.offload.corpus import needs_corpus

pytestmark = pytest.mark.tvm

ROOT = Path(__file__).resolve().parents[2]
GPUS = ("cpu", "cuda", "cuda:1")


@lru_cache(maxsize=1)
def _fills() -> dict[float, dict[str, Any]]:
    data = json.loads((ROOT / "tests" / "data" / "accelerate" / "llama_h1024_l8.gpus2.json").read_text())
    return {float(m["fraction"]): m for m in data["maps"]}


def _job(fraction: float, **fields: Any) -> PlanJob:
    half = int(_fills()[fraction]["gpu_budget_bytes"]) // 2
    profiles = {"cuda": {"memory_bytes": half}, "cuda:1": {"memory_bytes": half}}
    base: dict[str, Any] = {"input_format": "json", "language": "relax", "mode": "optimize",
                            "include": ("placements",), "virtual_devices": GPUS, "device_profiles": profiles}
    return PlanJob(_text(), **{**base, **fields})


@lru_cache(maxsize=4)
def _theirs(fraction: float) -> PlanOutcome:
    return run_plan(_job(fraction, accelerate_device_map=_fills()[fraction]["device_map"]))


@needs_corpus
@pytest.mark.parametrize("fraction", [0.5, 0.75])
def test_accelerates_two_gpu_fill_runs_on_its_first_gpu(fraction: float) -> None:
    theirs = _theirs(fraction)
    handed = theirs.accelerate_input
    assert handed is not None and theirs.placements is not None
    used = {v for v in _fills()[fraction]["device_map"].values() if isinstance(v, int)}
    assert used == {1} and handed["main_device"] == 1  # the fill left GPU 0 to its reserve
    ops = {p["device"] for p in theirs.placements if p["kind"] == "operator"}
    assert ops == {"cuda:1"}
    assert set(handed["memory_budgets"]) == {"cuda", "cuda:1"}
    assert handed["peak_memory_bytes"].get("cuda", 0) == 0


SPLIT = {"model.embed_tokens": 0, **{f"model.layers.{i}": 0 if i < 4 else 1 for i in range(8)}, "model.norm": 1,
         "lm_head": 1}


def _split(gbps: float) -> PlanOutcome:
    link = {"gbps": gbps, "latency_us": 0.0}
    return run_plan(PlanJob(_text(), input_format="json", language="relax", mode="optimize", include=("placements",),
                            virtual_devices=GPUS, links={"cuda->cuda:1": link, "cuda:1->cuda": link},
                            accelerate_device_map=SPLIT))


@needs_corpus
@pytest.mark.slow
def test_layers_split_between_gpus_copy_activations_over_their_link() -> None:
    fast, slow = _split(50.0), _split(5.0)
    assert fast.placements is not None and fast.copies is not None
    layer = {p["node"]: p["device"] for p in fast.placements}
    assert {layer[p["node"]] for p in fast.placements if p["kind"] == "operator"} == {"cuda", "cuda:1"}
    assert fast.as_dict()["accelerate_device_map"] == SPLIT and fast.as_dict()["accelerate_expressible"]
    crossing = [c for c in fast.copies if {c["src"], c["dst"]} == {"cuda", "cuda:1"}]
    assert crossing and all(c["bytes"] for c in crossing)
    moved = sum(c["bytes"] * len(c["to"]) for c in crossing)  # the cost model prices a copy per use
    assert fast.accelerate_input is not None and slow.accelerate_input is not None
    # only the link changed: the difference is the activations' bytes at 5 against 50 GB/s
    difference = slow.accelerate_input["predicted_ms"] - fast.accelerate_input["predicted_ms"]
    assert difference == pytest.approx(moved / 5e6 - moved / 50e6, rel=0.02)


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.5, 0.75])
def test_our_plan_over_two_gpus_is_no_slower_than_accelerates_fill(fraction: float) -> None:
    """Two GPUs of half the budget each plus the cpu, both priced with copies synchronous as
    accelerate runs them: ours within its budgets, no slower than accelerate's own fill."""
    theirs = _theirs(fraction).accelerate_input
    ours = run_plan(_job(fraction, overlap=False, timeout_ms=120_000))
    assert theirs is not None and ours.cost is not None
    assert ours.cost["predicted_ms"] <= 1.01 * theirs["predicted_ms"], (ours.cost["predicted_ms"], theirs)
    budgets = _job(fraction).options.device_profiles
    assert all(ours.cost["peak_memory_bytes"].get(d, 0) <= int(p["memory_bytes"]) for d, p in budgets.items())
    used = {p["device"] for p in ours.placements or () if p["kind"] == "operator"}
    assert {"cuda", "cuda:1"} <= used  # both GPUs work
