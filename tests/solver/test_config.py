"""Device specs, the virtual-device table, request-level constraints, time-outs."""

from __future__ import annotations

import pytest
import z3

import relay
import solver
from relay.device import VirtualDevice, parse_target

ANNOTATED = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = multiply(%x, %y);
  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0]);
  exp(%1)
}
"""

CHAIN = """#[version = "0.0.5"]
def @main(%data: Tensor[(4), float32], %w: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = nn.relu(%data);
  %1 = multiply(%0, %w);
  %2 = nn.relu(%1);
  exp(%2)
}
"""


def test_resolve_shorthand_reuses_table_entry() -> None:
    table = [VirtualDevice(2, 0, parse_target("cuda")), VirtualDevice(1, 0, parse_target("llvm"))]
    vd, index, new_table = solver.resolve_device("cpu", table)
    assert index == 1 and vd is table[1] and new_table == table


def test_resolve_appends_completed_spec() -> None:
    vd, index, table = solver.resolve_device("cuda:1", [])
    assert index == 0 and table == [vd]
    assert (vd.device_type, vd.virtual_device_id, vd.target.kind) == (2, 1, "cuda")
    vd, _, _ = solver.resolve_device({"target": "cuda -arch=sm_90"}, [])
    assert vd.device_type == 2 and vd.target.attr_dict["arch"] == "sm_90"
    vd, _, _ = solver.resolve_device({"device_type": "cpu", "memory_scope": "global"}, [])
    assert vd.memory_scope == "global" and vd.target.kind == "llvm"
    vd, _, _ = solver.resolve_device({"target": {"kind": "cuda", "arch": "sm_80"}}, [])
    assert vd.target.attr_dict["arch"] == "sm_80"


def test_resolve_target_must_agree() -> None:
    table = [VirtualDevice(2, 0, parse_target("cuda -arch=sm_80"))]
    _, index, _ = solver.resolve_device({"target": "cuda -arch=sm_80"}, table)
    assert index == 0
    _, index, table2 = solver.resolve_device({"target": "cuda -arch=sm_90"}, table)
    assert index == 1 and len(table2) == 2


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "tpu",
        "cuda:x",
        {"device_type": "cuda", "colour": 1},
        {},
        {"target": 3},
        {"device_type": "cpu", "target": "cuda"},
        7,
    ],
)
def test_bad_specs(spec: object) -> None:
    with pytest.raises(solver.PlanConfigError):
        solver.resolve_device(spec, [])  # type: ignore[arg-type]


def test_config_table_resolves_meta_references() -> None:
    module = relay.parse_text(ANNOTATED)
    result = solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda")))
    assert result.functions["main"] == {"params": ["cpu", "cpu"], "result": "cuda"}
    assert [v.device_type for v in result.virtual_devices[:2]] == [1, 2]
    assert result.module.meta["VirtualDevice"][:2] == result.virtual_devices[:2]


def test_missing_meta_reference_is_a_config_error() -> None:
    module = relay.parse_text(ANNOTATED)
    with pytest.raises(solver.PlanConfigError, match=r"meta\[VirtualDevice\]\[0\]"):
        solver.plan(module, solver.PlanConfig())


def test_default_device_cpu() -> None:
    module = relay.parse_text(CHAIN)
    result = solver.plan(module, solver.PlanConfig(default_device="cpu"))
    assert result.functions["main"] == {"params": ["cpu", "cpu"], "result": "cpu"}
    assert result.copies == []


def _plan_with(*constraints: dict) -> solver.PlanResult:
    module = relay.parse_text(CHAIN, name="chain.relay")
    return solver.plan(module, solver.PlanConfig(constraints=tuple(constraints)))


def test_param_selector() -> None:
    # Like a parameter attribute: operators share their arguments' device, so
    # the whole (unannotated) chain follows %data onto the cpu.
    result = _plan_with({"select": {"param": "@main:%data"}, "device": "cpu"})
    assert result.functions["main"] == {"params": ["cpu", "cpu"], "result": "cpu"}
    assert result.copies == []


def test_function_selector() -> None:
    result = _plan_with({"select": {"function": "@main"}, "device": "cpu"})
    assert result.functions["main"] == {"params": ["cpu", "cpu"], "result": "cpu"}


def test_op_selector_inserts_copies_at_its_boundary() -> None:
    result = _plan_with({"select": {"op": "multiply"}, "device": "cpu"})
    assert result.functions["main"] == {"params": ["cpu", "cpu"], "result": "cuda"}
    ((span, src, dst),) = result.copies
    assert (src.device_type, dst.device_type) == (1, 2)
    assert span is not None and span.line == 4


def test_op_selector_with_index() -> None:
    # The second relu (evaluation order) and everything feeding it run on the
    # cpu; one copy takes its result to the cuda context.
    result = _plan_with({"select": {"op": "nn.relu", "index": 1}, "device": "cpu"})
    assert result.functions["main"] == {"params": ["cpu", "cpu"], "result": "cuda"}
    assert len(result.copies) == 1
    # The first relu alone: %data goes to the cpu, %w stays on the default device.
    result = _plan_with({"select": {"op": "nn.relu", "index": 0}, "device": "cpu"})
    assert result.functions["main"] == {"params": ["cpu", "cuda"], "result": "cuda"}
    assert len(result.copies) == 1


def test_repeated_op_pins_agree_or_are_refused() -> None:
    # The same pin twice (a client that merges pin lists) plans like one pin.
    once = _plan_with({"select": {"op": "multiply"}, "device": "cpu"})
    pin = {"select": {"op": "multiply"}, "device": "cpu"}
    twice = _plan_with(pin, dict(pin))
    assert relay.structural_equal(once.module, twice.module)
    # Two pins of one call to different devices name both constraints.
    with pytest.raises(solver.PlanConfigError, match="#0 and #1"):
        _plan_with(pin, {"select": {"op": "multiply", "index": 0}, "device": "cuda"})


@pytest.mark.parametrize(
    "select",
    [
        {"param": "@main:%nope"},
        {"param": "@g:%data"},
        {"function": "@g"},
        {"op": "nn.conv2d"},
        {"op": "nn.relu", "index": 5},
    ],
)
def test_selector_matching_nothing_names_it(select: dict) -> None:
    with pytest.raises(solver.PlanConfigError, match="constraint #0") as info:
        _plan_with({"select": select, "device": "cpu"})
    key = next(iter(select))
    assert str(select[key]).lstrip("@").split(":")[0] in str(info.value)


def test_bad_selector_shape() -> None:
    with pytest.raises(solver.PlanConfigError):
        _plan_with({"select": {"param": "@main:%data", "op": "exp"}, "device": "cpu"})
    with pytest.raises(solver.PlanConfigError):
        _plan_with({"device": "cpu"})


def test_unknown_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    monkeypatch.setattr(z3.Solver, "reason_unknown", lambda self: "timeout")
    module = relay.parse_text(CHAIN, name="chain.relay")
    with pytest.raises(solver.SolverTimeout):
        solver.plan(module, solver.PlanConfig(z3_check=True))


def test_fresh_context_per_call() -> None:
    """Two plans of the same module give equal results (no state kept between calls)."""
    a = _plan_with()
    b = _plan_with()
    assert relay.structural_equal(a.module, b.module)
    assert a.stats.classes == b.stats.classes


def test_expression_module_becomes_main() -> None:
    text = '#[version = "0.0.5"]\nfree_var %x: Tensor[(4), float32];\nfree_var %y: Tensor[(4), float32];\n'
    text += "%0 = add(%x, %y);\nexp(%0)\n"
    result = solver.plan(relay.parse_text(text), solver.PlanConfig())
    assert result.module.expr is None
    assert result.functions == {"main": {"params": ["cuda", "cuda"], "result": "cuda"}}
    relay.verify(result.module)


@pytest.mark.parametrize("timeout", [0, -5])
def test_bad_timeout(timeout: int) -> None:
    with pytest.raises(solver.PlanConfigError):
        solver.plan(relay.parse_text(CHAIN), solver.PlanConfig(timeout_ms=timeout))


def test_bad_device_specs_are_named() -> None:
    module = relay.parse_text(CHAIN)
    with pytest.raises(solver.PlanConfigError, match="default device"):
        solver.plan(module, solver.PlanConfig(default_device="tpu"))
    with pytest.raises(solver.PlanConfigError, match="host device"):
        solver.plan(module, solver.PlanConfig(host_device={"colour": "red"}))
    with pytest.raises(solver.PlanConfigError, match="constraint #0"):
        solver.plan(module, solver.PlanConfig(constraints=({"select": {"op": "exp"}, "device": "tpu:0"},)))
