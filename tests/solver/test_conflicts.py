"""Conflicts: the explanation is a minimal set of constraints with kinds and spans."""

from __future__ import annotations

from pathlib import Path

import pytest

import relay
import solver

CFG = solver.PlanConfig(virtual_devices=("cpu", "cuda"))

TWO_CALLS = """#[version = "0.0.5"]
def @f(%a: Tensor[(4), float32]) -> Tensor[(4), float32] {
  negative(%a)
}

def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = on_device(%x, virtual_device=meta[VirtualDevice][0], constrain_result=True);
  %1 = @f(%0);
  %2 = on_device(%y, virtual_device=meta[VirtualDevice][1], constrain_result=True);
  %3 = @f(%2);
  add(%1, %3)
}
"""

PARAM_VS_ANNOTATION = """#[version = "0.0.5"]
def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = negative(%x);
  %1 = on_device(%0, virtual_device=meta[VirtualDevice][1], constrain_result=True);
  exp(%1)
}
"""

HOST_VS_ANNOTATION = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 8), float32]) -> Tensor[(2), int64] {
  %0 = exp(%x);
  %1 = vm.shape_of(%0, dtype="int64");
  on_device(%1, virtual_device=meta[VirtualDevice][1], constrain_result=True)
}
"""

COPY_VS_PARAM = """#[version = "0.0.5"]
def @main(%x {virtual_device=meta[VirtualDevice][1]}: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = device_copy(%x, src_virtual_device=meta[VirtualDevice][0], dst_virtual_device=meta[VirtualDevice][1]);
  exp(%0)
}
"""

NESTED_RESULTS = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = exp(%x);
  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0], constrain_result=True);
  %2 = on_device(%1, virtual_device=meta[VirtualDevice][1], constrain_result=True);
  negative(%2)
}
"""


def _conflict(text: str, config: solver.PlanConfig = CFG) -> solver.PlanningConflict:
    module = relay.parse_text(text, name="input.relay")
    with pytest.raises(solver.PlanningConflict) as info:
        solver.plan(module, config)
    return info.value


def _summary(err: solver.PlanningConflict) -> list[tuple[str, int, int]]:
    return [(c.kind, c.span.line, c.span.column) for c in err.constraints if c.span is not None]


def test_function_called_on_two_devices() -> None:
    err = _conflict(TWO_CALLS)
    assert _summary(err) == [
        ("annotation", 7, 8),
        ("call site", 8, 8),
        ("call site", 10, 8),
        ("annotation", 9, 8),
    ]
    assert err.constraints[0].devices == ["cpu"] and err.constraints[-1].devices == ["cuda"]
    message = str(err)
    assert "cpu" in message and "cuda" in message and "7:8" in message and "9:8" in message
    assert err.line == 7 and err.column == 8
    assert isinstance(err, relay.RelayError)


def test_parameter_attribute_against_annotation() -> None:
    err = _conflict(PARAM_VS_ANNOTATION)
    # Listed in the order the message tells it: the parameter first.
    assert _summary(err) == [("parameter attribute", 2, 11), ("operator", 3, 8), ("annotation", 4, 8)]
    assert err.message.startswith(
        "device conflict: parameter %x of @main is on cpu (parameter attribute at 2:11)"
    )
    assert "4:8" in err.message
    assert err.constraints[-1].expr_text.startswith("on_device(")


def test_host_operator_against_annotation() -> None:
    err = _conflict(HOST_VS_ANNOTATION)
    kinds = {c.kind for c in err.constraints}
    assert kinds == {"host operator", "annotation"}
    assert ("host operator", 4, 8) in _summary(err)


def test_copy_source_against_parameter() -> None:
    err = _conflict(COPY_VS_PARAM)
    assert {c.kind for c in err.constraints} == {"copy", "parameter attribute"}
    assert ("copy", 3, 8) in _summary(err)


def test_nested_results_disagree() -> None:
    err = _conflict(NESTED_RESULTS)
    assert [c.kind for c in err.constraints] == ["annotation", "annotation"]
    assert sorted(_summary(err)) == [("annotation", 4, 8), ("annotation", 5, 8)]


def test_request_constraint_named_in_conflict() -> None:
    text = PARAM_VS_ANNOTATION.replace(" {virtual_device=meta[VirtualDevice][0]}", "")
    config = solver.PlanConfig(
        virtual_devices=("cpu", "cuda"),
        constraints=({"select": {"param": "@main:%x"}, "device": "cpu"},),
    )
    err = _conflict(text, config)
    assert err.constraints[0].kind == "constraint #0"
    assert "constraint #0" in err.message


def test_explanation_is_minimal() -> None:
    """Dropping any one reported constraint makes the rest satisfiable: checked by
    removing the corresponding annotation from the program."""
    err = _conflict(NESTED_RESULTS)
    assert len(err.constraints) == 2
    module = relay.parse_text(
        NESTED_RESULTS.replace(
            "%2 = on_device(%1, virtual_device=meta[VirtualDevice][1], constrain_result=True);", "%2 = %1;"
        )
    )
    solver.plan(module, CFG)


def test_corpus_conflict_explanations_have_spans(request: pytest.FixtureRequest) -> None:
    from ._corpus import corpus_cases

    cases = corpus_cases("conflict")
    if not cases:
        pytest.skip("corpus not available")
    for _, base in cases[:20]:
        module = relay.parse_text(Path(str(base) + ".relay").read_text())
        with pytest.raises(solver.PlanningConflict) as info:
            solver.plan(module, solver.PlanConfig())
        err = info.value
        assert len(err.constraints) >= 2 or err.constraints[0].kind == "conflicting inputs"
        assert all(
            c.span is not None for c in err.constraints if c.kind in ("annotation", "copy", "call site")
        )


CALLEE_PARAM = """#[version = "0.0.5"]
def @f(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = on_device(%x, virtual_device=meta[VirtualDevice][0], constrain_result=True);
  negative(%0)
}

def @main(%y: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %1 = exp(%y);
  %2 = on_device(%1, virtual_device=meta[VirtualDevice][1], constrain_result=True);
  @f(%2)
}
"""


def test_message_names_parameter_call_and_devices() -> None:
    err = _conflict(CALLEE_PARAM)
    assert err.message.startswith(
        "device conflict: parameter %x of @f is on cpu (annotation at 3:8) "
        "but the call at 10:3 passes exp(%y) on cuda (annotation at 9:8)"
    )
    kinds = [c.kind for c in err.constraints]
    assert kinds[0] == "annotation" and kinds[-1] == "annotation" and "call site" in kinds
    assert ("call site", 10, 3) in _summary(err)


def _pinned_chain(n: int) -> str:
    """n `negative` calls between an on_device cpu start and an on_device cuda end."""
    lines = [
        '#[version = "0.0.5"]',
        "def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {",
        "  %0 = on_device(negative(%x), virtual_device=meta[VirtualDevice][0], constrain_result=True);",
    ]
    lines += [f"  %{i} = negative(%{i - 1});" for i in range(1, n)]
    lines.append(f"  on_device(negative(%{n - 1}), virtual_device=meta[VirtualDevice][1], constrain_result=True)")
    return "\n".join([*lines, "}", ""])


def test_a_long_chain_conflict_names_both_pins_and_every_link() -> None:
    # The core is the whole path: both annotations and each call linking them.
    # (Its proof is one Z3 check; the old deletion pass took 43 s at 2,000 calls.)
    n = 2_000
    err = _conflict(_pinned_chain(n))
    kinds = [c.kind for c in err.constraints]
    assert kinds.count("annotation") == 2
    assert len(err.constraints) == n + 2
    assert {c.devices[0] for c in err.constraints if c.devices} == {"cpu", "cuda"}
    # Minimal: without one link in the middle the chain plans.
    broken = _pinned_chain(n).replace(f"%{n // 2} = negative(%{n // 2 - 1});", f"%{n // 2} = %x;")
    solver.plan(relay.parse_text(broken), CFG)
