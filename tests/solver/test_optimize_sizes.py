"""Sizes and FLOPs of the optimize mode's cost model (solver/optimize/sizes.py,
cost_model.py): one dtype-bytes rule for every caller, FLOPs from the table."""

from __future__ import annotations

import pytest

import relay
from solver.optimize.cost_model import FLOP_RULES, flop_rule, op_flops, type_text
from solver.optimize.sizes import dtype_bytes, static_type_bytes, type_bytes


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("float32", 4),
        ("float16", 2),
        ("bfloat16", 2),
        ("float64", 8),
        ("int8", 1),
        ("uint8", 1),
        ("int64", 8),
        ("bool", 1),
        ("int4", 1),  # sub-byte elements take a byte each
        ("uint1", 1),
        ("float32x4", 16),  # vector lanes multiply (the old rule read "324" bits: 41 bytes)
        ("int8x4", 4),
        ("float16x8", 16),
        ("float8_e4m3fn", 1),  # a variant suffix is not part of the width (was 106)
        ("handle", 4),  # unreadable: counted as 32 bits
    ],
)
def test_dtype_bytes(dtype: str, expected: int) -> None:
    assert dtype_bytes(dtype) == expected


def test_type_bytes_of_vector_tensor_and_tuple() -> None:
    vec = relay.TensorType((2, 3), "float32x4")
    assert type_bytes(vec, 1) == (2 * 3 * 16, False)
    pair = relay.TupleType((vec, relay.TensorType((5,), "int8")))
    assert type_bytes(pair, 1) == (96 + 5, False)
    symbolic = relay.TensorType((relay.ANY, 4), "float32")
    assert type_bytes(symbolic, 7) == (7 * 4 * 4, True)
    assert static_type_bytes(symbolic) is None
    assert static_type_bytes(vec) == 96


def test_vector_tensor_copies_its_lanes() -> None:
    """A copy of a float32x4 tensor moves 16 bytes per element."""
    import solver

    text = """
    def @main(%x: Tensor[(1024), float32x4]) {
      nn.relu(%x)
    }
    """
    config = solver.PlanConfig(
        mode="optimize",
        default_device="cuda",
        virtual_devices=("cpu", "cuda"),
        host_device="cpu",
        constraints=(
            {"select": {"param": "@main:%x"}, "device": "cpu"},
            {"select": {"op": "nn.relu"}, "device": "cuda"},
        ),
    )
    result = solver.plan(relay.parse_text(text), config)
    assert result.cost is not None
    assert result.cost.copies == 1
    assert result.cost.bytes_copied == 1024 * 16


def _t(*shape: int) -> relay.TensorType:
    return relay.TensorType(shape, "float32")


def test_flops_from_the_table() -> None:
    conv = op_flops(
        "nn.conv2d",
        [_t(1, 3, 8, 8), _t(16, 3, 3, 3)],
        _t(1, 16, 8, 8),
        {"kernel_layout": "OIHW", "data_layout": "NCHW"},
        1,
    )
    assert conv == 2 * (16 * 8 * 8) * (3 * 3 * 3)
    assert op_flops("nn.dense", [_t(4, 32), _t(10, 32)], _t(4, 10), {}, 1) == 2 * 40 * 32
    assert op_flops("nn.batch_matmul", [_t(2, 5, 3), _t(2, 3, 7)], _t(2, 5, 7), {"transpose_a": True}, 1) == (
        2 * 70 * 5
    )
    assert op_flops("nn.max_pool2d", [_t(1, 1, 4, 4)], _t(1, 1, 2, 2), {"pool_size": (2, 2)}, 1) == 16
    assert op_flops("nn.global_avg_pool2d", [_t(1, 8, 4, 4)], _t(1, 8, 1, 1), {}, 1) == 128
    assert op_flops("nn.softmax", [_t(2, 10)], _t(2, 10), {}, 1) == 100
    assert op_flops("reshape", [_t(2, 10)], _t(20), {}, 1) == 0
    assert op_flops("exp", [_t(2, 10)], _t(2, 10), {}, 1) == 80
    assert op_flops("add", [_t(2, 10), _t(10)], _t(2, 10), {}, 1) == 20  # not listed: elementwise
    assert op_flops("nn.dense", [None, None], None, {}, 1) is None
    assert flop_rule("nn.conv2d") is FLOP_RULES["nn.conv2d"]


def test_cost_key_type_text_is_the_printers() -> None:
    """The cost key writes a type as relay's printer does (one definition)."""
    ty = relay.TensorType((relay.IntImm(3, "int64"), 4), "float16")
    assert type_text(ty) == "Tensor[(3i64, 4), float16]"
    assert type_text(relay.TupleType((ty,))) == "(Tensor[(3i64, 4), float16],)"
    assert type_text(None) == "?"
