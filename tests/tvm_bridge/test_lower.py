"""Lowering planned Relay to Relax: devices, graph sharing, let, tuples,
if, local and global functions, constants, unsupported constructs."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import relay
import tvm_bridge
from relay import ast

from .helpers import CORPUS, CPU0, CPU1, compile_and_run, load_corpus, retarget

HEADER = '#[version = "0.0.5"]\n'
T = "Tensor[(2, 3), float32]"


def parse(body: str) -> ast.Module:
    return relay.parse_text(HEADER + body, name="test", virtual_devices=[CPU0, CPU1])


def script(mod: object) -> str:
    return mod["main"].script(show_meta=False)  # type: ignore[index]


TWO_DEVICES = f"""
def @main(%x {{virtual_device=meta[VirtualDevice][0]}}: {T}, %y {{virtual_device=meta[VirtualDevice][1]}}: {T},
          virtual_device=meta[VirtualDevice][1]) -> {T} {{
  %0 = exp(%x);
  %1 = device_copy(%0, src_virtual_device=meta[VirtualDevice][0], dst_virtual_device=meta[VirtualDevice][1]);
  add(%1, %y)
}}
"""


def test_virtual_devices_become_vdevices_and_copies_to_vdevice() -> None:
    mod = tvm_bridge.to_relax(parse(TWO_DEVICES))
    vdevs = tvm_bridge.vdevices_of(mod)
    assert [(str(v.target.kind.name), int(v.vdevice_id)) for v in vdevs] == [("llvm", 0), ("llvm", 1)]
    x, y = mod["main"].params
    assert int(x.ty.vdevice.vdevice_id) == 0 and int(y.ty.vdevice.vdevice_id) == 1
    text = script(mod)
    assert text.count("R.to_vdevice(") == 1
    compiled = tvm_bridge.compile(mod)
    assert compiled.input_devices["main"] == [0, 1]
    assert [d.index for d in compiled.devices] == [0, 1]
    a, b = np.ones((2, 3), "float32"), np.full((2, 3), 2, "float32")
    np.testing.assert_allclose(tvm_bridge.run(compiled, [a, b]), np.exp(a) + b, rtol=1e-6)


def test_targets_map_fills_devices_without_target() -> None:
    bare = relay.parse_text(
        HEADER + TWO_DEVICES,
        virtual_devices=[relay.VirtualDevice(1, 0), relay.VirtualDevice(2, 0)],
    )
    mod = tvm_bridge.to_relax(bare, {"cuda": "cuda -arch=sm_80"})
    kinds = [
        (str(v.target.kind.name), str(v.target.attrs.get("arch", ""))) for v in tvm_bridge.vdevices_of(mod)
    ]
    assert kinds == [("llvm", ""), ("cuda", "sm_80")]


def test_shared_node_is_computed_once() -> None:
    module = parse(f"def @main(%x: {T}) {{ %0 = exp(%x); %1 = tanh(%0); add(%1, %1) }}")
    text = script(tvm_bridge.to_relax(module))
    assert text.count("R.exp(") == 1 and text.count("R.tanh(") == 1
    x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    np.testing.assert_allclose(compile_and_run(module, [x]), 2 * np.tanh(np.exp(x)), rtol=1e-5)


def test_let_tuple_and_projection() -> None:
    module = parse(
        f"def @main(%x: {T}, %y: {T}) {{ let %t = (exp(%x), %y); let %u = %t.1; multiply(%t.0, %u) }}"
    )
    x, y = np.ones((2, 3), "float32"), np.full((2, 3), 3, "float32")
    np.testing.assert_allclose(compile_and_run(module, [x, y]), np.exp(x) * y, rtol=1e-6)


def test_tuple_result() -> None:
    module = parse(f"def @main(%x: {T}) {{ (exp(%x), negative(%x)) }}")
    x = np.ones((2, 3), "float32")
    out = compile_and_run(module, [x])
    assert isinstance(out, tuple) and len(out) == 2
    np.testing.assert_allclose(out[1], -x)


def test_if_takes_the_right_branch_on_two_devices() -> None:
    module = parse(
        f"""def @main(%c {{virtual_device=meta[VirtualDevice][0]}}: bool,
                       %x {{virtual_device=meta[VirtualDevice][0]}}: {T},
                       virtual_device=meta[VirtualDevice][1]) -> {T} {{
  %0 = device_copy(%x, src_virtual_device=meta[VirtualDevice][0], dst_virtual_device=meta[VirtualDevice][1]);
  if (%c) {{ exp(%0) }} else {{ %1 = negative(%0); add(%1, %0) }}
}}"""
    )
    compiled = tvm_bridge.compile(tvm_bridge.to_relax(module))
    x = np.full((2, 3), 0.5, "float32")
    np.testing.assert_allclose(tvm_bridge.run(compiled, [np.array(True), x]), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(tvm_bridge.run(compiled, [np.array(False), x]), 0 * x)


def test_local_and_global_function_calls() -> None:
    module = parse(
        f"""def @double(%a: {T}) -> {T} {{ add(%a, %a) }}
def @main(%x: {T}) -> {T} {{
  let %f = fn (%b: {T}) -> {T} {{ multiply(%b, %x) }};
  %0 = %f(%x);
  %1 = @double(%0);
  %2 = fn (%c: {T}) {{ negative(%c) }};
  %2(%1)
}}"""
    )
    mod = tvm_bridge.to_relax(module)
    assert {gv.name_hint for gv, _ in mod.functions_items()} >= {"main", "double"}
    x = np.full((2, 3), 3, "float32")
    np.testing.assert_allclose(compile_and_run(module, [x]), -2 * x * x)


def test_constants_are_relax_constants_on_the_device_of_their_use() -> None:
    data = np.arange(6, dtype="float32").reshape(2, 3)
    x = ast.Var("x", ast.TensorType((2, 3), "float32"), CPU1)
    const = ast.Constant(ast.NDArray("float32", (2, 3), data.tobytes()))
    body = ast.Call(ast.op("add"), (x, const))
    func = ast.Function((x,), body, None, (), (), CPU1)
    module = ast.Module(((ast.GlobalVar("main"), func),), (), {"VirtualDevice": [CPU0, CPU1]})
    mod = tvm_bridge.to_relax(module)
    assert "R.to_vdevice(metadata" in script(mod) or "R.hint_on_device(metadata" in script(mod)
    np.testing.assert_allclose(compile_and_run(module, [np.ones((2, 3), "float32")]), data + 1)


def test_function_body_is_put_on_its_result_device() -> None:
    module = parse(
        f"def @main(%x {{virtual_device=meta[VirtualDevice][0]}}: {T}, virtual_device=meta[VirtualDevice][1]) {{ exp(%x) }}"
    )
    mod = tvm_bridge.to_relax(module)
    assert int(mod["main"].ret_ty.vdevice.vdevice_id) == 1


def test_deep_chain_lowers_without_recursion() -> None:
    depth = sys.getrecursionlimit() * 3
    x = ast.Var("x", ast.TensorType((2,), "float32"))
    body: ast.Expr = x
    for _ in range(depth):
        body = ast.Call(ast.op("negative"), (body,))
    let_body: ast.Expr = body
    for i in range(depth):  # a long let chain on top
        v = ast.Var(f"v{i}")
        let_body = ast.Let(v, ast.Call(ast.op("exp"), (x,)), let_body)
    module = ast.Module(((ast.GlobalVar("main"), ast.Function((x,), let_body)),))
    mod = tvm_bridge.to_relax(module)
    assert len(mod["main"].body.blocks[0].bindings) >= depth


def test_adt_module_raises_unsupported_construct() -> None:
    module = load_corpus("constructs/adt_match.relay")
    with pytest.raises(tvm_bridge.UnsupportedConstruct) as info:
        tvm_bridge.to_relax(module)
    assert "algebraic data type Pair" in str(info.value)
    assert isinstance(info.value, relay.RelayError)


@pytest.mark.parametrize(
    "name, construct",
    [
        ("constructs/ref_roundtrip.relay", "reference"),
        ("constructs/higher_order_return.relay", "function"),
        ("constructs/tuple_of_functions.relay", "function"),
    ],
)
def test_unsupported_constructs_name_the_construct_and_span(name: str, construct: str) -> None:
    module = load_corpus(name)
    with pytest.raises(tvm_bridge.UnsupportedConstruct) as info:
        tvm_bridge.to_relax(module)
    assert construct in info.value.construct
    assert info.value.span is not None and info.value.line is not None


def test_unknown_operator_raises_with_name_and_span() -> None:
    module = parse(f"def @main(%x: {T}) {{\n  nn.fancy_op(%x)\n}}")
    with pytest.raises(tvm_bridge.UnsupportedOperator) as info:
        tvm_bridge.to_relax(module)
    assert info.value.name == "nn.fancy_op"
    assert (info.value.line, info.value.column) == (3, 3)
    assert re.search(r"nn\.fancy_op", str(info.value))


def test_host_operator_is_an_unsupported_operator() -> None:
    module = load_corpus("constructs/reshape_tensor_host.planned.relay")
    with pytest.raises(tvm_bridge.UnsupportedOperator) as info:
        tvm_bridge.to_relax(module)
    assert info.value.name == "vm.reshape_tensor"


def test_bad_attribute_is_a_bridge_error_not_a_crash() -> None:
    module = parse(f"def @main(%x: {T}) {{ reshape(%x, newshape=[4, 4]) }}")
    with pytest.raises(tvm_bridge.BridgeError) as info:
        tvm_bridge.to_relax(module)
    assert info.value.span is not None


def test_random_planned_program_on_two_cpus_matches_unplanned() -> None:
    """A TVM-planned cpu/cuda program with its cuda device mapped to cpu:1
    gives the result of the same program with every annotation removed."""
    module = load_corpus("random/r20050.planned.relay")
    two = retarget(module, {1: CPU0, 2: CPU1})
    bare = retarget(module, None)
    assert not tvm_bridge.vdevices_of(tvm_bridge.to_relax(bare))
    inputs = [np.linspace(-1, 1, 16, dtype="float32").reshape(4, 4), np.array(False)]
    for cond in (True, False):
        inputs[1] = np.array(cond)
        np.testing.assert_allclose(compile_and_run(two, inputs), compile_and_run(bare, inputs), rtol=1e-6)


RANDOM = sorted(p.name for p in (CORPUS / "random").glob("*.planned.relay")) if CORPUS.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("name", RANDOM)
def test_every_random_planned_program_lowers_or_is_unsupported(name: str) -> None:
    """TVM's plans of the random programs, cuda mapped to cpu:1: each either
    raises UnsupportedConstruct/UnsupportedOperator or computes what the
    program without annotations computes."""
    module = load_corpus(f"random/{name}")
    try:
        lowered = tvm_bridge.to_relax(retarget(module, {1: CPU0, 2: CPU1}))
    except (tvm_bridge.UnsupportedConstruct, tvm_bridge.UnsupportedOperator):
        return
    from tvm_bridge.check import max_abs_error, random_inputs

    inputs = random_inputs(module["main"])
    result = tvm_bridge.run(tvm_bridge.compile(lowered), inputs)
    expected = compile_and_run(retarget(module, None), inputs)
    assert max_abs_error(result, expected) <= 1e-5
