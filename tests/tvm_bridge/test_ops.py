"""Every operator of the corpus (and the planning tests' elementwise ops),
lowered from Relay text, compiled for llvm, run, and compared with numpy:
once on one device and once with its inputs copied from cpu:0 to cpu:1."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import relay
import tvm_bridge

from . import reference as ref
from .helpers import compile_and_run, copy_params_plan


@dataclass(frozen=True)
class Case:
    name: str
    shapes: tuple[tuple[int, ...], ...]
    body: str
    expected: Callable[..., Any]
    positive: tuple[int, ...] = ()  # inputs that must be > 0 (sqrt, variances)


def _text(case: Case) -> str:
    params = ", ".join(
        f"%p{i}: Tensor[({', '.join(map(str, s))}{',' if len(s) == 1 else ''}), float32]"
        for i, s in enumerate(case.shapes)
    )
    return f'#[version = "0.0.5"]\ndef @main({params}) {{\n  {case.body}\n}}\n'


B = "%p0, %p1, %p2, %p3, %p4"
CASES = [
    Case("add", ((2, 3), (2, 3)), "add(%p0, %p1)", np.add),
    Case("add_broadcast", ((2, 3), (3,)), "add(%p0, %p1)", np.add),
    Case("subtract", ((2, 3), (2, 3)), "subtract(%p0, %p1)", np.subtract),
    Case("multiply", ((2, 3), (2, 3)), "multiply(%p0, %p1)", np.multiply),
    Case("divide", ((2, 3), (2, 3)), "divide(%p0, %p1)", np.divide, positive=(1,)),
    Case("maximum", ((2, 3), (2, 3)), "maximum(%p0, %p1)", np.maximum),
    Case("negative", ((2, 3),), "negative(%p0)", np.negative),
    Case("exp", ((2, 3),), "exp(%p0)", np.exp),
    Case("sqrt", ((2, 3),), "sqrt(%p0)", np.sqrt, positive=(0,)),
    Case("sigmoid", ((2, 3),), "sigmoid(%p0)", ref.sigmoid),
    Case("tanh", ((2, 3),), "tanh(%p0)", np.tanh),
    Case("relu", ((2, 3),), "nn.relu(%p0)", lambda x: np.maximum(x, 0)),
    Case("scalar_constant", ((2, 3),), "multiply(%p0, 2f)", lambda x: x * 2),
    Case(
        "conv2d",
        ((1, 3, 6, 6), (4, 3, 3, 3)),
        "nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3])",
        lambda x, w: ref.conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1)),
    ),
    Case(
        "conv2d_strided_asym_pad",
        ((1, 2, 7, 7), (3, 2, 3, 2)),
        "nn.conv2d(%p0, %p1, strides=[2, 1], padding=[1, 0, 0, 1], channels=3, kernel_size=[3, 2])",
        lambda x, w: ref.conv(x, w, (2, 1), (1, 0, 0, 1), (1, 1)),
    ),
    Case(
        "conv2d_dilated_pad2",
        ((1, 2, 7, 7), (2, 2, 3, 3)),
        "nn.conv2d(%p0, %p1, padding=[2, 1], dilation=[2, 2], channels=2, kernel_size=[3, 3])",
        lambda x, w: ref.conv(x, w, (1, 1), (2, 1, 2, 1), (2, 2)),
    ),
    Case(
        "conv2d_depthwise",
        ((1, 4, 5, 5), (4, 1, 3, 3)),
        "nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1], groups=4, channels=4, kernel_size=[3, 3])",
        lambda x, w: ref.conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), groups=4),
    ),
    Case(
        "conv3d",
        ((1, 2, 4, 5, 5), (3, 2, 3, 3, 3)),
        "nn.conv3d(%p0, %p1, strides=[2, 2, 2], padding=[1, 1, 1, 1, 1, 1], channels=3, kernel_size=[3, 3, 3])",
        lambda x, w: ref.conv(x, w, (2, 2, 2), (1,) * 6, (1, 1, 1)),
    ),
    Case(
        "conv2d_transpose",
        ((1, 3, 4, 4), (3, 2, 4, 4)),
        "nn.conv2d_transpose(%p0, %p1, channels=2, kernel_size=[4, 4], strides=[2, 2], padding=[1, 1, 1, 1])",
        lambda x, w: ref.conv2d_transpose(x, w, (2, 2), (1, 1, 1, 1)),
    ),
    Case("dense", ((2, 5), (3, 5)), "nn.dense(%p0, %p1, units=3)", lambda x, w: x @ w.T),
    Case("dense_units_none", ((2, 5), (3, 5)), "nn.dense(%p0, %p1, units=None)", lambda x, w: x @ w.T),
    Case(
        "batch_norm",
        ((1, 3, 2, 2), (3,), (3,), (3,), (3,)),
        f"%0 = nn.batch_norm({B}, epsilon=2e-05f); %0.0",
        lambda *a: ref.batch_norm(*a, epsilon=2e-5),
        positive=(4,),
    ),
    Case(
        "batch_norm_no_scale",
        ((1, 3, 2, 2), (3,), (3,), (3,), (3,)),
        f"%0 = nn.batch_norm({B}, epsilon=2e-05f, scale=False); %0.0",
        lambda *a: ref.batch_norm(*a, epsilon=2e-5, scale=False),
        positive=(4,),
    ),
    Case(
        "batch_norm_axis_center",
        ((2, 3, 4), (4,), (4,), (4,), (4,)),
        f"%0 = nn.batch_norm({B}, axis=-1, center=False); %0.0",
        lambda *a: ref.batch_norm(*a, axis=2, center=False),
        positive=(4,),
    ),
    Case("bias_add", ((1, 3, 2, 2), (3,)), "nn.bias_add(%p0, %p1)", lambda x, b: x + b.reshape(1, 3, 1, 1)),
    Case("bias_add_last", ((2, 3), (3,)), "nn.bias_add(%p0, %p1, axis=-1)", lambda x, b: x + b),
    Case(
        "max_pool2d",
        ((1, 2, 6, 6),),
        "nn.max_pool2d(%p0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])",
        lambda x: ref.pool2d(x, (3, 3), (2, 2), (1, 1, 1, 1), "max"),
    ),
    Case(
        "avg_pool2d",
        ((1, 2, 6, 6),),
        "nn.avg_pool2d(%p0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])",
        lambda x: ref.pool2d(x, (3, 3), (2, 2), (1, 1, 1, 1), "avg", False),
    ),
    Case(
        "avg_pool2d_count_pad",
        ((1, 2, 5, 5),),
        "nn.avg_pool2d(%p0, pool_size=[3, 3], padding=[1, 1, 1, 1], count_include_pad=True)",
        lambda x: ref.pool2d(x, (3, 3), (1, 1), (1, 1, 1, 1), "avg", True),
    ),
    Case(
        "global_avg_pool2d",
        ((1, 3, 4, 5),),
        "nn.global_avg_pool2d(%p0)",
        lambda x: x.mean((2, 3), keepdims=True),
    ),
    Case(
        "adaptive_avg_pool3d",
        ((1, 2, 2, 3, 4),),
        "nn.adaptive_avg_pool3d(%p0, output_size=[1, 1, 1])",
        lambda x: x.mean((2, 3, 4), keepdims=True),
    ),
    Case("softmax", ((2, 5),), "nn.softmax(%p0)", ref.softmax),
    Case("softmax_axis1", ((1, 3, 2, 2),), "nn.softmax(%p0, axis=1)", lambda x: ref.softmax(x, 1)),
    Case("batch_flatten", ((2, 3, 2, 2),), "nn.batch_flatten(%p0)", lambda x: x.reshape(2, -1)),
    Case("dropout", ((2, 3),), "%0 = nn.dropout(%p0); %0.0", lambda x: x),
    Case(
        "concatenate",
        ((1, 2, 3), (1, 4, 3)),
        "concatenate((%p0, %p1), axis=1)",
        lambda a, b: np.concatenate([a, b], 1),
    ),
    Case(
        "split_sections",
        ((2, 6),),
        "%0 = split(%p0, indices_or_sections=3, axis=1); %0.2",
        lambda x: x[:, 4:],
    ),
    Case("split_indices", ((5, 2),), "%0 = split(%p0, indices_or_sections=[1, 3]); %0.1", lambda x: x[1:3]),
    Case(
        "expand_dims",
        ((3,),),
        "expand_dims(%p0, axis=1, num_newaxis=2)",
        lambda x: x.reshape(3, 1, 1),
    ),
    Case("expand_dims_negative", ((2, 3),), "expand_dims(%p0, axis=-1)", lambda x: x[..., None]),
    Case("reshape", ((2, 3, 4),), "reshape(%p0, newshape=[-1, 4])", lambda x: x.reshape(-1, 4)),
    Case("reshape_special", ((2, 3, 4),), "reshape(%p0, newshape=[0, -1])", lambda x: x.reshape(2, 12)),
    Case("reshape_like", ((2, 6), (3, 4)), "reshape_like(%p0, %p1)", lambda x, y: x.reshape(3, 4)),
    Case("zeros", ((2, 3),), 'add(%p0, zeros(shape=[2, 3], dtype="float32"))', lambda x: x),
    Case("transpose", ((2, 3, 4),), "transpose(%p0, axes=[2, 0, 1])", lambda x: x.transpose(2, 0, 1)),
    Case("squeeze", ((2, 1, 3),), "squeeze(%p0, axis=[1])", lambda x: x[:, 0]),
    Case(
        "strided_slice",
        ((4, 5),),
        "strided_slice(%p0, begin=[1, 0], end=[3, 5], strides=[1, 2])",
        lambda x: x[1:3, 0:5:2],
    ),
]


def _inputs(case: Case) -> list[np.ndarray]:
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32)
    out = []
    for i, shape in enumerate(case.shapes):
        x = rng.standard_normal(shape).astype("float32")
        if i in case.positive:
            x = np.abs(x) + 0.5
        out.append(x)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_operator_matches_numpy(case: Case) -> None:
    module = relay.parse_text(_text(case), name=case.name)
    inputs = _inputs(case)
    expected = case.expected(*inputs)
    single = compile_and_run(module, inputs)
    np.testing.assert_allclose(single, expected, rtol=1e-4, atol=1e-5)
    hetero = copy_params_plan(module)
    lowered = tvm_bridge.to_relax(hetero)
    assert len(tvm_bridge.vdevices_of(lowered)) == 2
    compiled = tvm_bridge.compile(lowered)
    assert compiled.input_devices["main"] == [0] * len(inputs)
    result = tvm_bridge.run(compiled, inputs)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5)


def test_corpus_operators_are_all_supported() -> None:
    """Every operator that occurs in the corpus has an emitter."""
    from .helpers import CORPUS

    if not CORPUS.exists():
        pytest.skip("corpus not found")
    import re

    names: set[str] = set()
    for path in list(CORPUS.glob("*.relay")) + list(CORPUS.glob("random/*.relay")):
        for match in re.finditer(r"(?<![%@\w.])([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*)\(", path.read_text()):
            names.add(match.group(1))
    special = {"on_device", "device_copy", "ref", "ref_read", "ref_write"}  # ref*: UnsupportedConstruct
    missing = sorted(n for n in names - special if n not in tvm_bridge.convert_map)
    assert missing == []
