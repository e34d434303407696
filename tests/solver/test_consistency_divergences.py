"""Where TVM 0.19's answer is broken or decided by how it reads nested copies:
the cases of tests/data/divergences/, each with its verdict and
how that verdict was established (verdicts.json, README.md there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

import relay
import solver
from relay.device import device_name

Mode = Literal["tvm", "optimize"]

from ._corpus import CORPUS
from .consistency_check import check_consistent as oracle

DATA = Path(__file__).resolve().parents[1] / "data" / "divergences"
VERDICTS: dict[str, Any] = json.loads((DATA / "verdicts.json").read_text())
CONFIG = solver.PlanConfig(virtual_devices=("cpu", "cuda"), z3_check=True)


def _read(name: str, suffix: str = ".relay") -> relay.Module:
    path = DATA / f"{name}{suffix}"
    return relay.parse_text(path.read_text(), name=path.name)


def _spots(entries: list[tuple[Any, Any, Any]]) -> list[dict[str, Any]]:
    return [
        {"line": s.line, "column": s.column, "src": device_name(a), "dst": device_name(b)}
        for s, a, b in entries
        if s is not None
    ]


@pytest.mark.parametrize("name", sorted(VERDICTS["cases"]))
def test_divergence_case_verdict(name: str) -> None:
    case = VERDICTS["cases"][name]
    module = _read(name)
    if case["verdict"] == "conflict":
        with pytest.raises(solver.PlanningConflict) as info:
            solver.plan(module, CONFIG)
        spots = [[c.span.line, c.span.column] for c in info.value.constraints if c.span is not None]
        assert spots == case["constraints"]
        return
    result = solver.plan(module, CONFIG)
    assert len(result.copies) == case["copies"]
    assert _spots(result.divergences) == case["divergences"]
    assert oracle(result.module) == []
    assert relay.structural_equal(result.module, _read(name, ".planned.relay")), relay.print_text(
        result.module
    )
    # The repaired plan is a fixed point of the TVM mode, with nothing left to repair.
    again = solver.plan(result.module, CONFIG)
    assert relay.structural_equal(again.module, result.module)
    assert again.divergences == []


@pytest.mark.parametrize("name", sorted(VERDICTS["cases"]))
def test_divergence_cases_plan_consistently_in_optimize_mode(name: str) -> None:
    module = _read(name)
    try:
        result = solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), mode="optimize"))
    except solver.PlanningConflict as err:
        assert err.constraints
        return
    assert oracle(result.module) == []
    assert result.divergences == []  # divergences are about TVM's answer


def test_nested_copies_read_as_tvm_does_only_in_tvm_mode() -> None:
    """`device_copy(device_copy(%x, cpu, cuda), cuda, cpu)` where the inner copy
    is also used on cuda: TVM 0.19 reads the outer copy as cpu -> cpu of %x, so
    its argument must be on the cpu while the inner copy is on cuda (the 1-in-267
    case of random programs). The optimize mode reads each copy alone and plans it."""
    module = _read("dc_of_dc_shared")
    with pytest.raises(solver.PlanningConflict) as info:
        solver.plan(module, CONFIG)
    assert {c.kind for c in info.value.constraints} == {"copy"}
    result = solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), mode="optimize"))
    assert oracle(result.module) == []


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_pin_against_an_annotation_is_a_conflict_naming_both(mode: Mode) -> None:
    """mlp.annotated.relay computes its first nn.dense inside a cpu on_device;
    a request pin of that dense to cuda contradicts it."""
    path = CORPUS / "mlp.annotated.relay"
    module = relay.parse_text(path.read_text(), name=str(path))
    pin = {"select": {"op": "nn.dense", "index": 0}, "device": "cuda"}
    with pytest.raises(solver.PlanningConflict) as info:
        solver.plan(module, solver.PlanConfig(constraints=(pin,), mode=mode))
    kinds = {c.kind for c in info.value.constraints}
    assert "constraint #0" in kinds
    assert kinds & {"annotation"}, kinds
    # The same pin to the annotation's own device is no conflict, and consistent.
    same = {"select": {"op": "nn.dense", "index": 0}, "device": "cpu"}
    result = solver.plan(module, solver.PlanConfig(constraints=(same,), mode=mode))
    assert oracle(result.module) == []


def test_issue_example_reports_the_copy_tvm_drops() -> None:
    """The issue's first example: one copy, listed as a divergence at the inner
    on_device (4:8), from the cpu to cuda."""
    result = solver.plan(_read("od_of_od"), CONFIG)
    assert (
        _spots(result.copies)
        == _spots(result.divergences)
        == [{"line": 4, "column": 8, "src": "cpu", "dst": "cuda"}]
    )


TWO_RESULT_PINS = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) {
  %0 = negative(%x);
  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0], constrain_result=True);
  %2 = on_device(%0, virtual_device=meta[VirtualDevice][1], constrain_result=True);
  add(%1, %2)
}
"""


@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_conflicts_name_what_the_user_wrote(mode: Mode) -> None:
    """Two constrain_result annotations of one value on cpu and cuda: the
    conflict names negative(%x) both times, never the copy the TVM mode's
    conflicting-inputs step inserted."""
    module = relay.parse_text(TWO_RESULT_PINS)
    with pytest.raises(solver.PlanningConflict) as info:
        solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), mode=mode))
    err = info.value
    assert "device_copy" not in err.message
    assert err.message.count("negative(%x)") == 2
    assert all("device_copy" not in c.description for c in err.constraints)


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")
def test_a_pin_is_described_by_the_expression_it_pins() -> None:
    path = CORPUS / "mlp.annotated.relay"
    module = relay.parse_text(path.read_text(), name=str(path))
    pin = {"select": {"op": "nn.dense", "index": 0}, "device": "cuda"}
    with pytest.raises(solver.PlanningConflict) as info:
        solver.plan(module, solver.PlanConfig(constraints=(pin,)))
    described = [c.description for c in info.value.constraints if c.kind == "constraint #0"]
    assert described == ["request constraint #0 pins nn.dense(..., %fc1_weight) on cuda"]
