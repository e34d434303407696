"""Module names as accelerate writes them: dotted parameter names, the rule
over torch-export names, and a device map's own entries."""

from __future__ import annotations

import pytest

from service.module_names import (
    SOURCE_INFERRED,
    SOURCE_PARAMETERS,
    SOURCE_REQUEST,
    covers,
    dotted_module,
    map_owners,
    module_names,
    request_names,
)

LLAMA = (
    "p_model_embed_tokens_weight",
    "p_model_layers_0_self_attn_q_proj_weight",
    "p_model_layers_0_input_layernorm_weight",
    "p_model_layers_1_mlp_up_proj_weight",
    "p_model_layers_10_mlp_up_proj_weight",
    "p_model_norm_weight",
    "p_lm_head_weight",
)


def test_torch_export_names_of_a_decoder_are_inferred_as_accelerate_writes_them() -> None:
    names = module_names(LLAMA)
    assert names.source == SOURCE_INFERRED
    assert names.order() == [
        "model.embed_tokens",
        "model.layers.0",
        "model.layers.1",
        "model.layers.10",
        "model.norm",
        "lm_head",
    ]  # in the order of their first weight, not numbered blocks first


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        # GPT-2: the parents of the numbered blocks (transformer) take the other modules as children
        (
            ("p_transformer_wte_weight", "p_transformer_h_0_attn_c_attn_weight", "p_transformer_ln_f_bias",
             "p_lm_head_weight"),
            ["transformer.wte", "transformer.h.0", "transformer.ln_f", "lm_head"],
        ),
        # T5's encoder: a child named with `_` stays one module
        (
            ("p_shared_weight", "p_encoder_block_0_layer_0_SelfAttention_q_weight",
             "p_encoder_final_layer_norm_weight"),
            ["shared", "encoder.block.0", "encoder.final_layer_norm"],
        ),
        # ResNet: numbered children of a list whose name has a digit, BatchNorm's buffers as leaves
        (
            ("p_conv1_weight", "p_bn1_weight", "b_bn1_running_mean", "b_bn1_num_batches_tracked",
             "p_layer1_0_conv1_weight", "p_fc_bias"),
            ["conv1", "bn1", "layer1.0", "fc"],
        ),
        # a Sequential at the top (torchvision's `features`), numbered twice
        (("p_features_0_0_weight", "p_features_12_weight", "p_classifier_1_weight"),
         ["features.0", "features.12", "classifier.1"]),
        # MultiheadAttention's packed projection is one leaf of three words
        (("p_attn_in_proj_weight", "p_attn_in_proj_bias", "p_attn_out_proj_weight"), ["attn", "attn_out_proj"]),
    ],
)
def test_the_inference_rule_on_other_torch_exports(weights: tuple[str, ...], expected: list[str]) -> None:
    assert module_names(weights).order() == expected


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("model.layers.3.mlp.up_proj.weight", "model.layers.3"),
        ("model.embed_tokens.weight", "model.embed_tokens"),
        ("lm_head.weight", "lm_head"),
        ("encoder.layers.encoder_layer_0.ln_1.weight", "encoder.layers.encoder_layer_0.ln_1"),
        ("weight", "weight"),
    ],
)
def test_dotted_names_are_the_models_own(name: str, module: str) -> None:
    assert dotted_module(name) == module


def test_dotted_names_win_over_the_rule() -> None:
    names = module_names(("model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "lm_head.weight"))
    assert names.source == SOURCE_PARAMETERS
    assert names.order() == ["model.embed_tokens", "model.layers.0", "lm_head"]


@pytest.mark.parametrize(
    ("entry", "weight", "dotted", "expected"),
    [
        ("model.layers.1", "p_model_layers_1_mlp_up_proj_weight", False, True),
        ("model.layers.1", "p_model_layers_10_mlp_up_proj_weight", False, False),  # not layer 10
        ("model.layers", "p_model_layers_10_mlp_up_proj_weight", False, True),
        ("model.norm", "p_model_norm_weight", False, True),
        ("model.norm", "p_model_normx_weight", False, False),
        ("", "p_lm_head_weight", False, True),
        ("model.layers.1", "model.layers.1.mlp.up_proj.weight", True, True),
        ("model.layers.1", "model.layers.10.mlp.up_proj.weight", True, False),
        ("lm_head.weight", "lm_head.weight", True, True),  # a weight may be its own entry
    ],
)
def test_an_entry_covers_the_weights_under_it(entry: str, weight: str, dotted: bool, expected: bool) -> None:
    assert covers(entry, weight, dotted) is expected


def test_the_most_specific_entry_owns_a_weight() -> None:
    owners = map_owners(["", "model.layers", "model.layers.1"], LLAMA)
    assert owners["p_model_layers_1_mlp_up_proj_weight"] == "model.layers.1"
    assert owners["p_model_layers_10_mlp_up_proj_weight"] == "model.layers"
    assert owners["p_lm_head_weight"] == ""
    assert map_owners(["model.layers"], LLAMA)["p_lm_head_weight"] is None
    names = request_names(["", "model.layers"], LLAMA)
    assert names.source == SOURCE_REQUEST and names.order() == ["", "model.layers"]
