"""accelerate's device maps on a small hand-made decoder: reading a map
(and refusing bad ones by their entry), where `dispatch_model` stores each
weight and runs each operator, and a plan read back as a map."""

from __future__ import annotations

from typing import Any

import pytest

from service.accelerate import (
    MapError,
    accelerate_value,
    device_of,
    main_device,
    placement,
    plan_map,
    read_map,
)
from service.device_map import FunctionParams, weight_names

NAMES = (
    "input_ids",
    "p_model_embed_tokens_weight",
    "p_model_layers_0_mlp_weight",
    "p_model_layers_1_mlp_weight",
    "p_model_norm_weight",
    "p_lm_head_weight",
)
SIZES = (512, 4000, 1000, 1000, 10, 4000)
PARAMS = FunctionParams("@main", NAMES, SIZES, 1)
WEIGHTS = weight_names([PARAMS])
DEVICES = ("cpu", "cuda", "cuda:1")


def _param(node: int, index: int, device: str = "") -> dict[str, Any]:
    return {"node": node, "kind": "parameter", "name": NAMES[index], "function": "@main", "index": index,
            "device": device, "inputs": []}


def _op(node: int, name: str, *inputs: int, device: str = "") -> dict[str, Any]:
    return {"node": node, "kind": "operator", "name": name, "function": "@main", "device": device,
            "inputs": list(inputs)}


# A decoder's shape: the gather, a mask of no module, two layers with a residual, the norm, the head.
PLACEMENTS = [
    _param(0, 0),
    _param(1, 1),
    _op(2, "R.take", 1, 0),  # model.embed_tokens
    _op(3, "R.arange"),  # no module: the model's own forward
    _param(4, 2),
    _op(5, "R.permute_dims", 4),  # layers.0 (its weight, re-laid out)
    _op(6, "R.matmul", 2, 5),  # layers.0
    _op(7, "R.add", 2, 6),  # layers.0: the latest module of its inputs
    _param(8, 3),
    _op(9, "R.matmul", 7, 8),  # layers.1
    _op(10, "R.add", 7, 9),  # layers.1, not layers.0 (its first input's)
    _op(11, "R.multiply", 10, 3),  # layers.1 (the mask has no module)
    _param(12, 4),
    _op(13, "R.multiply", 11, 12),  # model.norm
    _param(14, 5),
    _op(15, "R.matmul", 13, 14),  # lm_head
]
MODULE_OF_OP = {2: "model.embed_tokens", 3: None, 5: "model.layers.0", 6: "model.layers.0", 7: "model.layers.0",
                9: "model.layers.1", 10: "model.layers.1", 11: "model.layers.1", 13: "model.norm", 15: "lm_head"}


@pytest.mark.parametrize(
    ("value", "device"),
    [(0, "cuda"), (1, "cuda:1"), ("cuda", "cuda"), ("cuda:0", "cuda"), ("cuda:2", "cuda:2"), ("cpu", "cpu"),
     ("disk", "disk")],
)
def test_accelerate_devices(value: Any, device: str) -> None:
    assert device_of(value) == device
    assert device_of(accelerate_value(device)) == device


@pytest.mark.parametrize("bad", ["mps", "xpu:0", -1, True, None, 1.0])
def test_devices_accelerate_does_not_write_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="not an accelerate device"):
        device_of(bad)


def test_the_main_device_is_the_gpu_of_the_lowest_index() -> None:
    assert main_device(["cpu", "cuda:1", "disk", "cuda"]) == "cuda"
    assert main_device(["cpu", "cuda:1"]) == "cuda:1"
    assert main_device(["cpu", "disk"]) == "cpu"


def _devices(amap: dict[str, Any]) -> dict[int, str]:
    return dict(placement(read_map(amap, WEIGHTS, DEVICES), PLACEMENTS, [PARAMS]).devices)


def test_modules_on_the_cpu_run_on_the_main_gpu_with_their_weights_on_the_cpu() -> None:
    amap = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", "model.norm": "cpu",
            "lm_head": "cpu"}
    devices = _devices(amap)
    assert {devices[n] for n in MODULE_OF_OP} == {"cuda"}  # every operator, the mask's included
    assert [devices[n] for n in (1, 4, 8, 12, 14)] == ["cuda", "cuda", "cpu", "cpu", "cpu"]  # weights stay
    assert 0 not in devices  # input_ids is data, not placed by the map


def test_two_gpus_run_their_own_modules_and_the_rest_on_the_first() -> None:
    amap = {"model.embed_tokens": 1, "model.layers.0": 1, "model.layers.1": 0, "model.norm": "cpu", "lm_head": 1}
    devices = _devices(amap)
    expected = {"model.embed_tokens": "cuda:1", "model.layers.0": "cuda:1", "model.layers.1": "cuda",
                "model.norm": "cuda", "lm_head": "cuda:1", None: "cuda"}
    assert {n: devices[n] for n in MODULE_OF_OP} == {n: expected[m] for n, m in MODULE_OF_OP.items()}


def test_a_map_without_a_gpu_runs_on_the_cpu_and_reads_disk_weights_each_pass() -> None:
    handed = read_map({"": "cpu", "lm_head": "disk"}, WEIGHTS, DEVICES)
    placed = placement(handed, PLACEMENTS, [PARAMS])
    assert handed.main == "cpu"
    assert set(placed.devices.values()) == {"cpu"}  # disk weights are stored on the host, read each pass
    assert placed.disk_bytes == 4000 and placed.disk_weights == ("p_lm_head_weight",)


@pytest.mark.parametrize(
    ("amap", "entry", "words"),
    [
        ({"": "cpu", "model.layers.7": 0}, "model.layers.7", "has no module"),  # a block the model lacks
        ({"": "cpu", "decoder.block.0": 0}, "decoder.block.0", "has no module"),  # no parent owns weights
        ({"": 2}, "", "does not have"),  # cuda:2 is no device of the request
        ({"": "mps"}, "", "not an accelerate device"),
    ],
)
def test_bad_maps_name_the_entry(amap: dict[str, Any], entry: str, words: str) -> None:
    with pytest.raises(MapError, match=words) as info:
        read_map(amap, WEIGHTS, DEVICES)
    assert info.value.entry == entry
    assert repr(entry) in info.value.message


def test_an_unassigned_weight_is_named_with_its_module() -> None:
    amap = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", "model.norm": "cpu"}
    with pytest.raises(MapError) as info:
        read_map(amap, WEIGHTS, DEVICES)
    assert "lm_head" in info.value.message and "p_lm_head_weight" in info.value.message
    assert "model.norm" not in info.value.message.split("(")[0]


def test_a_weightless_module_is_accepted_with_a_notice() -> None:
    handed = read_map({"": "cpu", "model.rotary_emb": "cpu"}, WEIGHTS, DEVICES)
    (notice,) = handed.notices
    assert "model.rotary_emb" in notice and "owns no weight" in notice


def _planned(devices: dict[int, str]) -> list[dict[str, Any]]:
    return [{**p, "device": devices[p["node"]]} for p in PLACEMENTS]


def test_a_plan_as_the_map_that_runs_it_round_trips() -> None:
    for amap in (
        {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", "model.norm": "cpu", "lm_head": 0},
        {"model.embed_tokens": 1, "model.layers.0": 1, "model.layers.1": 0, "model.norm": "cpu", "lm_head": 1},
        {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu", "model.norm": "cpu",
         "lm_head": "cpu"},
    ):
        devices = _devices(amap)
        devices[0] = "cpu"
        back = plan_map(_planned(devices), [PARAMS])
        assert back.expressible and dict(back.device_map) == amap, back.faults
        assert back.names == "inferred"


def test_compute_on_the_cpu_with_weights_on_a_gpu_is_at_fault() -> None:
    devices = _devices({"": 0})
    devices[0] = "cpu"
    for node in (9, 10):  # layers.1's matmul and residual on the cpu, its weight on the GPU
        devices[node] = "cpu"
    back = plan_map(_planned(devices), [PARAMS])
    assert not back.expressible
    (fault,) = back.faults
    assert (fault.module, fault.operators, fault.plan_device, fault.accelerate_device) == (
        "model.layers.1", 2, "cpu", "cuda")
    assert "weights live on cuda" in fault.reason
    assert back.to_json()["accelerate_at_fault"] == [fault.to_json()]


def test_operators_of_no_module_off_the_main_device_are_listed_apart() -> None:
    devices = _devices({"": 0})
    devices[0] = devices[3] = "cpu"  # the mask (no module) computed on the host
    back = plan_map(_planned(devices), [PARAMS])
    assert back.expressible and not back.faults  # no module is at fault: the map is the plan's
    (outside,) = back.outside
    assert (outside.module, outside.operators, outside.plan_device, outside.accelerate_device) == ("", 1, "cpu", "cuda")
    assert back.to_json()["accelerate_outside_modules"] == [outside.to_json()]


def test_compute_on_the_cpu_with_a_gpu_in_the_map_is_at_fault() -> None:
    devices = _devices({"": 0})
    devices[0] = "cpu"
    devices[1] = devices[2] = "cpu"  # the embedding table and its gather stay on the cpu (llama.cpp's choice)
    back = plan_map(_planned(devices), [PARAMS])
    assert back.device_map["model.embed_tokens"] == "cpu"
    (fault,) = back.faults
    assert fault.module == "model.embed_tokens" and "main device cuda" in fault.reason


def test_a_module_whose_weights_are_split_is_at_fault_with_inferred_names() -> None:
    params = FunctionParams("@main", (*NAMES, "p_lm_head_bias"), (*SIZES, 4), 1)
    bias = {"node": 16, "kind": "parameter", "name": "p_lm_head_bias", "function": "@main", "index": 6,
            "device": "cpu", "inputs": []}
    placements = [*_planned({**_devices({"": 0}), 0: "cpu"}), bias]
    back = plan_map(placements, [params])
    assert back.device_map["lm_head"] == 0  # the device holding most of its bytes
    assert any(f.module == "lm_head" and f.operators == 0 for f in back.faults)


def test_split_modules_get_an_entry_per_submodule_with_dotted_names() -> None:
    names = ("input_ids", "model.layers.0.attn.weight", "model.layers.0.mlp.weight")
    params = FunctionParams("@forward", names, (8, 100, 100), 1)
    placements = [
        {"node": 0, "kind": "parameter", "name": names[0], "function": "@forward", "index": 0, "device": "cpu",
         "inputs": []},
        {"node": 1, "kind": "parameter", "name": names[1], "function": "@forward", "index": 1, "device": "cuda",
         "inputs": []},
        {"node": 2, "kind": "operator", "name": "R.matmul", "function": "@forward", "device": "cuda",
         "inputs": [0, 1]},
        {"node": 3, "kind": "parameter", "name": names[2], "function": "@forward", "index": 2, "device": "cpu",
         "inputs": []},
        {"node": 4, "kind": "operator", "name": "R.matmul", "function": "@forward", "device": "cuda",
         "inputs": [2, 3]},
    ]
    back = plan_map(placements, [params])
    assert dict(back.device_map) == {"model.layers.0.attn": 0, "model.layers.0.mlp": "cpu"}
    assert back.expressible and back.names == "parameters"
