"""The TVM mode's operator-support check: with `op_support`, a
TVM-mode plan that runs an operator on a device that cannot run it is a
planning conflict naming each operator and its location."""

from __future__ import annotations

import pytest

import relay
import solver
from solver.steps.support import check_support, unsupported_by_device

from ._corpus import CORPUS

DEVICES = [solver.complete_spec("cpu"), solver.complete_spec("cuda")]


def _mlp() -> solver.PlanResult:
    path = CORPUS / "mlp.relay"
    if not path.exists():
        pytest.skip(f"corpus not found at {CORPUS}")
    return solver.plan(relay.parse_text(path.read_text(), name=str(path)), solver.PlanConfig())


def test_dense_on_a_cuda_that_cannot_run_it_is_a_conflict_naming_each_dense() -> None:
    result = _mlp()
    with pytest.raises(solver.PlanningConflict) as info:
        check_support(result.module, {"cuda": {"unsupported": ["nn.dense"]}}, DEVICES)
    err = info.value
    dense_lines = [
        i + 1 for i, line in enumerate((CORPUS / "mlp.relay").read_text().splitlines()) if "nn.dense(" in line
    ]
    assert [c.span.line for c in err.constraints if c.span is not None] == dense_lines
    assert all(c.kind == "operator support" and c.devices == ["cuda"] for c in err.constraints)
    assert 'mode: "optimize"' in err.message


def test_support_rules_the_plan_keeps_are_no_conflict() -> None:
    result = _mlp()
    check_support(result.module, {"cpu": ["nn.dense"], "cuda": ["nn.conv2d"]}, DEVICES)
    check_support(result.module, {}, DEVICES)


def test_device_names_are_checked() -> None:
    with pytest.raises(solver.PlanConfigError, match="unknown device 'tpu'"):
        unsupported_by_device({"tpu": ["nn.dense"]}, ["cpu", "cuda"])
    with pytest.raises(solver.PlanConfigError, match="must list operator names"):
        unsupported_by_device({"cuda": "nn.dense"}, ["cpu", "cuda"])
    assert unsupported_by_device({"cuda:0": {"unsupported": ["exp"]}}, ["cpu", "cuda"]) == {
        "cuda": frozenset({"exp"})
    }


def test_fused_operators_count_where_their_call_runs() -> None:
    path = CORPUS / "resnet18.fused.relay"
    if not path.exists():
        pytest.skip(f"corpus not found at {CORPUS}")
    result = solver.plan(relay.parse_text(path.read_text(), name=str(path)), solver.PlanConfig())
    with pytest.raises(solver.PlanningConflict) as info:
        check_support(result.module, {"cuda": ["nn.conv2d"]}, DEVICES)
    assert info.value.constraints and all("nn.conv2d" in c.description for c in info.value.constraints)


def test_tvm_mode_plan_refuses_unsupported_placement_and_optimize_mode_avoids_it() -> None:
    path = CORPUS / "mlp.relay"
    if not path.exists():
        pytest.skip(f"corpus not found at {CORPUS}")
    module = relay.parse_text(path.read_text(), name=str(path))
    support = {"cuda": {"unsupported": ["nn.dense"]}}
    with pytest.raises(solver.PlanningConflict) as info:
        solver.plan(module, solver.PlanConfig(op_support=support))
    assert {c.kind for c in info.value.constraints} == {"operator support"}
    assert 'mode: "optimize"' in info.value.message
    result = solver.plan(module, solver.PlanConfig(op_support=support, mode="optimize"))
    assert result.cost is not None
