"""`PlanFailure` is an ordinary exception that is still plain data:
it passes through `with` blocks and generators (Python sets its traceback),
pickles for the worker pool and round-trips through `as_dict`/`from_dict`."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from service.planning import KIND_CONFLICT, PlanFailure, PlanJob, run_plan

FAILURE = PlanFailure(
    KIND_CONFLICT,
    "device conflict",
    "error: planning conflict: device conflict",
    ({"line": 3, "column": 5, "message": "annotation: on_device puts %x on cpu"},),
    ({"kind": "annotation", "description": "d", "expression": "e", "line": 3, "column": 5, "devices": ["cpu"]},),
)


@contextmanager
def _around() -> Iterator[None]:
    yield


def test_a_failure_passes_through_a_context_manager() -> None:
    with pytest.raises(PlanFailure) as info, _around():
        raise FAILURE
    assert info.value is FAILURE and info.value.__traceback__ is not None
    assert str(info.value) == FAILURE.report


def test_a_failure_raised_while_handling_another_keeps_its_context() -> None:
    with pytest.raises(PlanFailure) as info:
        try:
            raise KeyError("inner")
        except KeyError:
            raise PlanFailure.plain("invalid-config", "bad") from None
    assert info.value.__suppress_context__ and isinstance(info.value.__context__, KeyError)


def test_a_failure_is_plain_data() -> None:
    again = pickle.loads(pickle.dumps(FAILURE))
    assert type(again) is PlanFailure and again == FAILURE and again.as_dict() == FAILURE.as_dict()
    assert PlanFailure.from_dict(FAILURE.as_dict()) == FAILURE
    assert set(FAILURE.as_dict()) == {"kind", "message", "report", "locations", "constraints"}
    assert isinstance(FAILURE.locations, tuple) and FAILURE != PlanFailure.plain(KIND_CONFLICT, "other")
    assert hash(again) == hash(FAILURE)


def test_a_planning_failure_from_inside_a_with_block_reaches_the_caller() -> None:
    """run_plan's own failures (an empty module) raised inside a context manager."""
    with pytest.raises(PlanFailure) as info, _around():
        run_plan(PlanJob(module="  "))
    assert info.value.kind == "malformed-module"
