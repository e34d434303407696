"""Depth and size: nothing recurses over expression depth; big modules plan in time."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import relay
import solver
from relay.ast import Call, Function, GlobalVar, TensorType, Var, on_device, op

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.plan import chain, higher_order, let_chain, many_functions, wide_dag


def _check(module: relay.Module, budget_s: float) -> solver.PlanResult:
    start = time.perf_counter()
    result = solver.plan(module, solver.PlanConfig())
    elapsed = time.perf_counter() - start
    assert elapsed < budget_s, f"planning took {elapsed:.1f} s"
    relay.verify(result.module)
    main = result.module["main"]
    assert main.virtual_device is not None and main.virtual_device.device_type == 2
    return result


@pytest.mark.parametrize("build", [chain, let_chain, wide_dag, many_functions, higher_order])
def test_twenty_thousand_nodes(build) -> None:  # type: ignore[no-untyped-def]
    _check(build(20_000), budget_s=30)


def test_deep_chain_with_annotation_at_the_bottom() -> None:
    """A cpu annotation 50,000 calls deep: one copy, found without recursion."""
    t = TensorType((4,), "float32")
    x, y = Var("x", t), Var("y", t)
    cpu = solver.resolve_device("cpu", [])[0]
    e: relay.Expr = on_device(Call(op("negative"), (y,)), cpu)
    for _ in range(50_000):
        e = Call(op("add"), (e, x))
    module = relay.Module(functions=((GlobalVar("main"), Function((x, y), e, t)),))
    result = _check(module, budget_s=60)
    assert len(result.copies) == 1
    assert result.functions["main"]["params"] == ["cuda", "cpu"]


@pytest.mark.slow
def test_two_hundred_thousand_nested_calls() -> None:
    _check(chain(200_000), budget_s=20)
