"""accelerate's maps of a `relax.frontend.nn` decoder (scripts/llama_nn.py at a
toy size): its dotted parameter names are the model's own, so a plan whose
layers keep some weights on the GPU and stream others comes back as a map
of submodules, and that map, handed back in, is priced as the plan."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pytest

from service.module_names import map_owners
from service.planning import PlanJob, PlanOutcome, run_plan
from tests._scripts import load_script

pytestmark = pytest.mark.tvm


@lru_cache(maxsize=1)
def _model() -> tuple[str, int]:
    import tvm

    llama = load_script("scripts/llama_nn.py", "llama_nn")
    shape = llama.LlamaShape(hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=100, layers=2, seq=8)
    return tvm.ir.save_json(llama.build(shape)), shape.parameter_bytes()


def _plan(budget: int, **fields: Any) -> PlanOutcome:
    text, _ = _model()
    return run_plan(PlanJob(text, input_format="json", language="relax", mode="optimize", include=("placements",),
                            device_profiles={"cuda": {"memory_bytes": budget}}, **fields))


@pytest.mark.parametrize("fraction", [0.5, 0.75])
def test_a_plan_of_dotted_names_comes_back_as_a_map_priced_as_the_plan(fraction: float) -> None:
    _, weights_bytes = _model()
    planned = _plan(int(weights_bytes * fraction))
    answer = planned.as_dict()
    assert planned.placements is not None and planned.cost is not None
    amap = answer["accelerate_device_map"]
    assert answer["accelerate_names"] == "parameters"
    weights = [p["name"] for p in planned.placements if p["kind"] == "parameter" and p["name"] != "input_ids"]
    owners = map_owners(amap, weights)
    assert all(owners[w] is not None for w in weights)
    # every entry is a module of the model: a weight's name without its leaf, or a prefix of one
    modules = {w.rsplit(".", 1)[0] for w in weights}
    assert all(any(m == key or m.startswith(key + ".") for m in modules) for key in amap), amap
    if not answer["accelerate_expressible"]:
        faults = answer["accelerate_at_fault"]
        assert faults and all(f["reason"] and f["plan_device"] != f["accelerate_device"] for f in faults)
        return
    back = _plan(int(weights_bytes * fraction), accelerate_device_map=amap)
    assert back.accelerate_input is not None
    assert back.as_dict()["accelerate_device_map"] == amap
    assert abs(back.accelerate_input["predicted_ms"] - planned.cost["predicted_ms"]) <= 0.01 * planned.cost[
        "predicted_ms"
    ]
