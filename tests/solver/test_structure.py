"""Where helpers that were written twice disagreed, the one
definition's behaviour (each test names the fix)."""

from __future__ import annotations

from typing import Any

import pytest

import relay
import solver
from solver.optimize.run import evaluate_planned
from solver.selectors import node_ids, op_calls

# An external function (not planned) before @main, with an `add` of its own.
EXTERNAL_FIRST = """#[version = "0.0.5"]
def @ext(%a: Tensor[(4), float32], Compiler="ccompiler", global_symbol="ext") -> Tensor[(4), float32] {
  add(%a, %a)
}

def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = add(%x, %x);
  %1 = add(%0, %x);
  negative(%1)
}
"""

CONFIG = solver.PlanConfig(virtual_devices=("cpu", "cuda"), default_device="cuda", host_device="cpu")


def _main_adds(module: relay.Module) -> list[relay.Call]:
    main = next(f for gv, f in module.functions if gv.name == "main")
    return [
        n for n in relay.traverse.post_order(main) if isinstance(n, relay.Call) and n.op == relay.op("add")
    ]


def test_kth_call_is_counted_by_one_rule_for_pins_and_why() -> None:
    """Fix: `{"op": "add", "index": 0}` named @ext's add in a why-query (which
    counted every function) but @main's first add as a pin (which skipped
    functions the planner does not plan). Both now count planned calls only."""
    module = relay.parse_text(EXTERNAL_FIRST)
    selector = {"op": "add", "index": 0}
    first_main_add = _main_adds(module)[0]
    assert op_calls(module, "add")[0] is first_main_add
    config = solver.PlanConfig(
        virtual_devices=("cpu", "cuda"),
        default_device="cuda",
        host_device="cpu",
        constraints=({"select": selector, "device": "cpu"},),
    )
    result = solver.plan(module, config, why=[selector])
    (answer,) = result.why[0].answers
    assert answer.node == node_ids(module).index(first_main_add)
    assert answer.device == "cpu"
    assert answer.reason == "request pin"
    # The picture outlines the same node (service.picture reads pins through solver.resolve).
    assert solver.resolve(module, selector) == [first_main_add]


def test_kth_call_out_of_range_counts_planned_calls() -> None:
    """Two planned adds: index 2 matches nothing, for a pin and a why-query
    alike, and both name the selector as JSON (pins wrote JSON, why-queries
    Python's repr)."""
    module = relay.parse_text(EXTERNAL_FIRST)
    with pytest.raises(
        solver.PlanConfigError, match=r'selector \{"index": 2, "op": "add"\} matches no operator call'
    ):
        solver.resolve(module, {"op": "add", "index": 2})
    selector: dict[str, Any] = {"op": "add", "index": 2}
    pin = {"select": selector, "device": "cpu"}
    with pytest.raises(solver.PlanConfigError, match=r'constraint #0: selector \{"index": 2, "op": "add"\}'):
        solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), constraints=(pin,)))
    with pytest.raises(solver.PlanConfigError, match=r'why #0: selector \{"index": 2, "op": "add"\}'):
        solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda")), why=[selector])


@pytest.mark.parametrize("kind", ["op", "node", "at"])
def test_tvm_mode_prediction_is_the_tvm_plan_for_every_pin_kind(kind: str) -> None:
    """The TVM-mode prediction runs the TVM mode's own presolve (one
    `steps.presolve`; the copy in optimize.py tested `p.kind == "op"` where the
    planner tested op/at/node, a difference pins cannot reach since their
    wrappers are never free): for a pin of any kind, the prediction is the
    cost of the TVM mode's plan of the same request."""
    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(64, 64), float32]) {\n  %0 = negative(%x);\n  nn.relu(%0)\n}\n'
    module = relay.parse_text(text)
    relu = next(n for n in node_ids(module) if isinstance(n, relay.Call) and n.op == relay.op("nn.relu"))
    selectors: dict[str, dict[str, Any]] = {
        "op": {"op": "nn.relu"},
        "node": {"node": node_ids(module).index(relu)},
        "at": {"at": f"{relu.span.line}:{relu.span.column}" if relu.span else "0:0"},
    }
    selector = selectors[kind]
    pins = ({"select": selector, "device": "cpu"},)
    tvm = solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), constraints=pins))
    optimize_config = solver.PlanConfig(virtual_devices=("cpu", "cuda"), constraints=pins, mode="optimize")
    optimized = solver.plan(module, optimize_config)
    assert optimized.cost is not None and optimized.cost.tvm_mode_predicted_ms is not None
    expected = evaluate_planned(tvm.module, optimize_config).predicted_ms
    assert optimized.cost.tvm_mode_predicted_ms == pytest.approx(expected, abs=1e-6)


def test_pins_of_different_kinds_on_one_call() -> None:
    """An `op` pin and a `node` pin of the same call: the same device plans
    like one pin; different devices are refused naming both constraints
    (the `op` and `node` paths were two resolvers; a node pin silently won)."""
    module = relay.parse_text(EXTERNAL_FIRST)
    first = node_ids(module).index(_main_adds(module)[0])
    same = (
        {"select": {"op": "add", "index": 0}, "device": "cpu"},
        {"select": {"node": first}, "device": "cpu"},
    )
    one = solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), constraints=same[:1]))
    both = solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), constraints=same))
    assert relay.structural_equal(one.module, both.module)
    clash = (same[0], {"select": {"node": first}, "device": "cuda"})
    with pytest.raises(solver.PlanConfigError, match=r"constraints #0 and #1 pin the same call of add"):
        solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), constraints=clash))


def test_a_pass_that_changes_nothing_returns_its_input() -> None:
    """Normalisation of a module without annotations or meta references
    rebuilds nothing: every planned function is the input's own object."""
    from solver.steps.devices import resolve_devices
    from solver.steps.prepare import front

    module = relay.parse_text(EXTERNAL_FIRST)
    fr = front(module, resolve_devices(module, CONFIG), solver.deadline.Deadline(10_000))
    assert all(a is b for (_, a), (_, b) in zip(fr.functions, module.functions))


def test_plan_options_become_the_config_field_by_field() -> None:
    """`PlanOptions.to_config` is the one conversion: every option is the
    PlanConfig field of the same name, and the result is validated."""
    import dataclasses

    options = solver.PlanOptions(
        virtual_devices=["cpu", "cuda"],  # type: ignore[arg-type]
        default_device="cpu",
        host_device="cpu",
        constraints=[{"select": {"op": "add"}, "device": "cpu"}],  # type: ignore[arg-type]
        timeout_ms=1234,
        z3_check=True,
        mode="optimize",
        op_support={"cuda": {"unsupported": ["add"]}},
        device_profiles={"cpu": {"launch_us": 3.0}},
        links={"cpu->cuda": {"gbps": 5.0}},
        cost_table={"version": 1, "entries": []},
        assume_dim=7,
    )
    config_fields = {f.name for f in dataclasses.fields(solver.PlanConfig)}
    assert {f.name for f in dataclasses.fields(solver.PlanOptions)} <= config_fields
    config = options.to_config()
    for f in dataclasses.fields(solver.PlanOptions):
        value = getattr(options, f.name)
        assert getattr(config, f.name) == (tuple(value) if isinstance(value, list) else value), f.name
    assert options.to_config(timeout_ms=5).timeout_ms == 5
    with pytest.raises(solver.PlanConfigError, match="assume_dim"):
        dataclasses.replace(options, assume_dim=0).to_config()
