"""The device-map view's grouping rule and accelerate's maps as pattern pins."""

from __future__ import annotations

from typing import Any

import pytest

from service.device_map import (
    FunctionParams,
    accelerate_device,
    accelerate_pins,
    data_inputs,
    device_map,
    device_map_table,
)


def _param(node: int, index: int, device: str, function: str = "@main") -> dict[str, Any]:
    return {"node": node, "kind": "parameter", "name": f"%p{index}", "function": function,
            "index": index, "device": device, "inputs": []}


def _op(node: int, name: str, device: str, *inputs: int) -> dict[str, Any]:
    return {"node": node, "kind": "operator", "name": name, "function": "@main", "device": device,
            "inputs": list(inputs)}


PARAMS = FunctionParams(
    "@main",
    ("input_ids", "p_embed_tokens_weight", "p_layers_0_w", "p_layers_0_norm", "p_layers_1_w", "p_lm_head_weight"),
    (512, 4000, 1000, 10, 1000, 4000),
    1,
)


def _placements(layer1_matmul: str = "cuda") -> list[dict[str, Any]]:
    return [
        _param(0, 0, "cpu"),
        _param(1, 1, "cpu"),
        _op(2, "take", "cpu", 1, 0),  # embed group: first input with one is the table
        _param(3, 2, "cuda"),
        _op(4, "R.permute_dims", "cuda", 3),  # layers_0
        _op(5, "R.matmul", "cuda", 2, 4),  # reads layers_0's weight through the transpose: layers_0
        _param(6, 3, "cuda"),
        _op(7, "R.multiply", "cuda", 6, 5),  # layers_0 (its norm weight)
        _op(8, "R.nn.softmax", "cuda", 7),  # no parameter: joins its input's group, layers_0
        _param(9, 4, "cuda"),
        _op(10, "R.permute_dims", "cuda", 9),
        _op(11, "R.matmul", layer1_matmul, 8, 10),  # layers_1, not its first input's layers_0
        _op(12, "R.add", "cuda", 8, 11),  # layers_1: the later of its inputs' modules, not the first
        _param(13, 5, "cuda"),
        _op(14, "R.permute_dims", "cuda", 13),
        _op(15, "R.reshape", "cuda", 14),  # still the head's weight
        _op(16, "R.matmul", "cuda", 12, 15),  # lm_head
        _op(17, "R.arange", "cpu"),  # no input: in no group
        _op(18, "R.astype", "cpu", 0),  # reads only a data input: in no group
    ]


def test_device_map_groups_by_weights() -> None:
    groups = {g.module: g for g in device_map(_placements(), [PARAMS])}
    assert list(groups) == ["embed_tokens", "layers.0", "layers.1", "lm_head"]  # no group for input_ids
    assert groups["embed_tokens"].to_json() == {
        "module": "embed_tokens", "device": "cpu", "operators": {"cpu": 1}, "parameter_bytes": 4000,
    }
    assert groups["layers.0"].to_json() == {
        "module": "layers.0", "device": "cuda", "operators": {"cuda": 4}, "parameter_bytes": 1010,
    }
    assert dict(groups["layers.1"].operators) == {"cuda": 3}
    assert dict(groups["lm_head"].operators) == {"cuda": 3}
    counted = sum(n for g in groups.values() for _, n in g.operators)
    assert counted == 11  # every operator but arange and the cast of input_ids


def test_a_group_on_two_devices_is_split() -> None:
    groups = {g.module: g for g in device_map(_placements(layer1_matmul="cpu"), [PARAMS])}
    assert groups["layers.1"].device == "split"
    assert groups["layers.1"].to_json()["operators"] == {"cuda": 2, "cpu": 1}
    assert groups["layers.0"].device == "cuda"


def test_num_input_decides_the_data_inputs() -> None:
    two = FunctionParams("@main", PARAMS.names, PARAMS.sizes, 2)  # the embedding table counted as data
    groups = [g.module for g in device_map(_placements(), [two])]
    assert groups == ["layers.0", "layers.1", "lm_head"]


def test_data_inputs_default_to_the_first_parameter() -> None:
    import relay

    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32], %w: Tensor[(2), float32]) { multiply(%x, %w) }
"""
    func = relay.parse_text(text).functions[0][1]
    assert data_inputs(func) == 1
    assert data_inputs(func, 0) == 0 and data_inputs(func, 5) == 2


def test_a_group_without_operators_takes_its_parameters_device() -> None:
    params = FunctionParams("@main", ("x", "p_unused_weight"), (4, 8), 1)
    (group,) = device_map([_param(0, 0, "cuda"), _param(1, 1, "cpu")], [params])
    assert (group.module, group.device, group.operators, group.parameter_bytes) == ("unused", "cpu", (), 8)


def test_table_lists_every_group() -> None:
    table = device_map_table(device_map(_placements(layer1_matmul="cpu"), [PARAMS]))
    lines = table.splitlines()
    assert lines[0].split() == ["module", "device", "ops", "on", "cpu", "ops", "on", "cuda", "parameter", "MB"]
    assert lines[3].split() == ["layers.1", "split", "1", "2", "0.0"]
    assert len(lines) == 5


# ---------------------------------------------------------------------------
# accelerate's maps


NAMES = (
    "input_ids",
    "p_model_embed_tokens_weight",
    *(f"p_model_layers_{i}_mlp_up_proj_weight" for i in range(12)),
    "p_model_norm_weight",
    "p_lm_head_weight",
)


def test_accelerate_map_as_pattern_pins() -> None:
    params = FunctionParams("@main", NAMES, (0,) * len(NAMES), 1)
    amap = {"model.embed_tokens": 0, "model.layers.1": 0, "model.layers.2": "cpu", "model.rotary_emb": "cpu",
            "lm_head": "cuda:1"}
    assert accelerate_pins(amap, params) == [
        {"select": {"param": "@main:p_model_embed_tokens_*"}, "device": "cuda"},
        {"select": {"param": "@main:p_model_layers_1_*"}, "device": "cuda"},  # not layers 10 and 11
        {"select": {"param": "@main:p_model_layers_2_*"}, "device": "cpu"},
        {"select": {"param": "@main:p_lm_head_*"}, "device": "cuda:1"},
    ]  # model.rotary_emb owns no weight: no pin


def test_accelerate_whole_model_on_one_device() -> None:
    params = FunctionParams("@main", NAMES, (0,) * len(NAMES), 1)
    assert accelerate_pins({"": "cpu"}, params) == [
        {"select": {"param": "@main:p_model_*"}, "device": "cpu"},
        {"select": {"param": "@main:p_lm_*"}, "device": "cpu"},
    ]


def test_accelerate_map_in_frontend_nn_names() -> None:
    names = ("input_ids", "model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "lm_head.weight")
    params = FunctionParams("@forward", names, (0,) * len(names), 1)
    assert accelerate_pins({"model.layers.0": 0, "lm_head": "cpu"}, params) == [
        {"select": {"param": "@forward:model.layers.0.*"}, "device": "cuda"},
        {"select": {"param": "@forward:lm_head.*"}, "device": "cpu"},
    ]


@pytest.mark.parametrize("bad", ["disk", "mps", -1, True, None])
def test_accelerate_devices_we_cannot_place_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="accelerate device"):
        accelerate_device(bad)
