"""`devplan profile`: one measured entry per distinct (operator, argument
types, attributes) and device, keyed as the optimizer looks them up.

The corpus mlp is read from its TVM JSON, which carries TVM's own checked
types, so the expected keys do not depend on our type inference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import relay
import solver
import tvm_bridge
from relay import ast
from relay.traverse import post_order
from tvm_bridge import profile as prof
from tvm_bridge.check import max_abs_error, random_inputs

from .helpers import corpus_path


def _kernel_calls(module: relay.Module) -> list[ast.Call]:
    return [
        n
        for n in post_order([f for _, f in module.functions])
        if isinstance(n, ast.Call) and isinstance(n.op, ast.Op)
    ]


def _mlp() -> relay.Module:
    return relay.load_json(corpus_path("mlp.json").read_text())


def _type(expr: ast.Expr) -> ast.Type | None:
    if isinstance(expr, ast.Var):
        return expr.type_annotation
    return expr.checked_type


def _distinct(module: relay.Module) -> tuple[list[prof.CallKey], list[prof.Skipped]]:
    return prof.distinct_calls(module, solver.module_types(module)[0], solver.cost_key)


def _profile(module: relay.Module, devices: list[str], repeat: int) -> prof.Profile:
    type_of, _ = solver.module_types(module)
    return prof.profile(module, devices, type_of=type_of, key_of=solver.cost_key, repeat=repeat)


def test_distinct_calls_of_mlp_match_the_optimizers_keys() -> None:
    module = _mlp()
    keys, skipped = prof.distinct_calls(module, solver.module_types(module)[0], solver.cost_key)
    assert skipped == []
    calls = _kernel_calls(module)
    expected = {solver.cost_key(c.op.name, [_type(a) for a in c.args], c.attrs) for c in calls}  # type: ignore[attr-defined]
    assert {k.key for k in keys} == expected
    assert sum(k.calls for k in keys) == len(calls)
    # relu on (1, 128) and on (1, 64) are different kernels; the three dense calls too.
    assert sum(1 for k in keys if k.op == "nn.dense") == 3
    assert sum(1 for k in keys if k.op == "nn.relu") == 2


def test_one_op_module_computes_the_operator() -> None:
    keys, _ = _distinct(_mlp())
    dense = next(k for k in keys if k.op == "nn.dense")
    one = prof.one_op_module(dense)
    relay.verify(one)
    func = one.functions[0][1]
    assert [p.type_annotation for p in func.params] == list(dense.arg_types)
    inputs = random_inputs(func)
    out = tvm_bridge.run(tvm_bridge.compile(tvm_bridge.to_relax(one)), inputs)
    assert max_abs_error(out, inputs[0] @ inputs[1].T) <= 1e-4


def test_tuple_argument_becomes_parameters() -> None:
    a, b = ast.TensorType((2, 3), "float32"), ast.TensorType((2, 5), "float32")
    attrs = ast.Attrs((("axis", 1),))
    arg = ast.TupleType((a, b))
    call = prof.CallKey(solver.cost_key("concatenate", [arg], attrs), "concatenate", (arg,), attrs, None, 1)
    one = prof.one_op_module(call)
    func = one.functions[0][1]
    assert [p.type_annotation for p in func.params] == [a, b]
    relay.verify(one)
    inputs = random_inputs(func)
    out = tvm_bridge.run(tvm_bridge.compile(tvm_bridge.to_relax(one)), inputs)
    assert max_abs_error(out, np.concatenate(inputs, axis=1)) == 0.0


def test_missing_devices_are_reported_not_measured() -> None:
    slots, missing = prof.present_devices(["cpu", "tpu"])
    assert [s.name for s in slots] == ["cpu"]
    assert len(missing) == 1 and missing[0].startswith("tpu")


@pytest.mark.slow
def test_profile_mlp_writes_one_entry_per_key_and_device(tmp_path: Path) -> None:
    result = _profile(_mlp(), ["cpu"], repeat=3)
    assert result.skipped == ()
    table = result.table()
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    pairs = [(e["key"], e["device"]) for e in doc["entries"]]
    assert len(pairs) == len(set(pairs)) == len(result.keys)
    assert {k for k, _ in pairs} == {k.key for k in result.keys}
    assert all(isinstance(e["ns"], int) and e["ns"] > 0 for e in doc["entries"])
    # The optimizer reads it back under the same keys.
    parsed = solver.CostTable.from_document(doc)
    assert all(parsed.lookup(k.key, "cpu") is not None for k in result.keys)


@pytest.mark.slow
def test_devplan_profile_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tvm

    from service.cli import main

    out = tmp_path / "table.json"
    code = main(["profile", str(corpus_path("mlp.json")), "--devices", "cpu,cuda", "--output", str(out)])
    _, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out.read_text())
    devices = {e["device"] for e in doc["entries"]}
    gpu = bool(tvm.cuda(0).exist)
    assert devices == ({"cpu", "cuda"} if gpu else {"cpu"})
    if not gpu:
        assert "not measured: cuda" in err
    keys, _ = _distinct(_mlp())
    assert len(doc["entries"]) == len(keys) * len(devices)
    # A module that does not parse is exit 2, as for `devplan plan`.
    bad = tmp_path / "bad.relay"
    bad.write_text('#[version = "0.0.5"]\ndef @main( {')
    assert main(["profile", str(bad)]) == 2
