"""The relax.frontend.nn decoder builder (scripts/llama_nn.py) at a toy size:
its entry function, parameter names and bytes, and that it plans with a
budget as it comes."""

from __future__ import annotations

from typing import Any

import pytest

import solver
from service.device_map import function_params
from service.module_names import module_names
from tests._scripts import load_script

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def built() -> tuple[Any, Any]:
    llama = load_script("scripts/llama_nn.py", "llama_nn")
    shape = llama.LlamaShape(hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=100, layers=2, seq=8)
    return shape, llama.build(shape)


def test_entry_function_and_parameters(built: tuple[Any, Any]) -> None:
    shape, mod = built
    func = mod["forward"]
    assert int(func.attrs["num_input"]) == 1
    names = [str(p.name) for p in func.params]
    assert names[0] == "input_ids" and names[1] == "model.embed_tokens.weight"
    assert "model.layers.1.mlp.gate_up_proj.weight" in names and names[-1] == "lm_head.weight"
    names_of = module_names(names[1:])
    assert names_of.source == "parameters"
    assert names_of.order() == ["model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "lm_head"]
    nbytes = 0
    for p in func.params[1:]:
        elements = 1
        for d in p.ty.shape:
            elements *= int(d)
        nbytes += elements * 2  # float16
    assert nbytes == shape.parameter_bytes()


def test_plans_as_it_comes_with_weights_in_the_budget(built: tuple[Any, Any]) -> None:
    from service.relax_planning import plan_relax

    shape, mod = built
    half = shape.parameter_bytes() // 2
    config = solver.PlanConfig(mode="optimize", device_profiles={"cuda": {"memory_bytes": half}})
    plan = plan_relax(mod, config)
    cost = plan.result.cost
    assert cost is not None and cost.per_device["cuda"].weight_bytes <= half
    assert cost.per_device["cpu"].weight_bytes > 0  # some weights had to stay on the cpu
    (params,) = function_params(plan.translation.module)
    assert params.function == "@forward" and params.data_inputs == 1
