"""Golden planning cases (tests/data/plan): one per construct of docs/planning.md."""

from __future__ import annotations

import pytest

import relay
import solver

from .golden import DATA, GOLDEN_CONFIG, cases, plan_case

CONSTRUCTS = {
    "plain_default",
    "annotated_arg",
    "explicit_copy",
    "let_binding",
    "function_attributes",
    "higher_order_param",
    "higher_order_result",
    "tuple_of_functions",
    "if_over_functions",
    "globals_call_globals",
    "references",
    "adt_match",
    "host_shape_of",
    "host_reshape_tensor",
    "host_alloc",
    "free_on_device",
    "memory_scopes",
    "conflicting_input",
    "nested_annotations",
    "primitive_functions",
    "projection_annotation",
    "function_body_annotation",
}


def _expected(name: str) -> relay.Module:
    path = DATA / f"{name}.out.relay"
    return relay.parse_text(path.read_text(), name=str(path))


def test_every_construct_has_a_case() -> None:
    assert CONSTRUCTS <= set(cases())


@pytest.mark.parametrize("name", cases())
def test_golden(name: str) -> None:
    result = plan_case(name)
    relay.verify(result.module)
    assert relay.structural_equal(result.module, _expected(name)), relay.print_text(result.module)


@pytest.mark.parametrize("name", cases())
def test_golden_idempotent(name: str) -> None:
    expected = _expected(name)
    again = solver.plan(expected, GOLDEN_CONFIG)
    assert relay.structural_equal(again.module, expected), relay.print_text(again.module)


def test_golden_copies_reported() -> None:
    result = plan_case("conflicting_input")
    assert len(result.copies) == 2
    assert {(str(s), str(d)) for _, s, d in result.copies} == {
        (str(result.virtual_devices[0]), str(result.virtual_devices[1]))
    }
    spans = sorted((s.line, s.column) for s, _, _ in result.copies if s is not None)
    # the copied multiply (%0, line 3) and the conflicting input %y (line 2)
    assert [line for line, _ in spans] == [2, 3]


def test_golden_summary() -> None:
    result = plan_case("annotated_arg")
    assert result.functions == {"main": {"params": ["cpu", "cpu"], "result": "cuda"}}
    assert result.expressions_by_device["cpu"] >= 1 and result.expressions_by_device["cuda"] >= 1
    assert set(result.stats.time_ms) == {"infer", "collect", "presolve", "z3", "rewrite"}
    assert result.stats.z3_checked
    assert result.stats.variables is not None and result.stats.variables <= result.stats.classes * 4
