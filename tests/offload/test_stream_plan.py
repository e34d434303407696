"""The streaming plan (solver/optimize/stream.py): weights made resident with
the budgeted device's peak kept up to date give the plan that checking the
memory rule whole after every move gives."""

from __future__ import annotations

import pytest

from solver.optimize import Weights, budget_violations, stream
from solver.optimize.strategies import _cut
from tests.offload.test_memory_overlap import CPU, GPU, random_layered


def test_resident_weights_kept_up_to_date_match_the_whole_check(monkeypatch: pytest.MonkeyPatch) -> None:
    problems = [p for p in map(random_layered, range(120)) if p.budgets]
    assert len(problems) >= 40
    plans = []
    for problem in problems:
        _, start = _cut(stream.streamed(problem, CPU), Weights.of(problem), (CPU, GPU))
        plans.append((problem, start, stream.stream_plan(problem, Weights.of(problem), GPU, CPU, start)))
    monkeypatch.setattr(stream, "_make_resident", lambda *args: None)  # the whole check, move by move
    made = 0
    for problem, start, fast in plans:
        assert fast == stream.stream_plan(problem, Weights.of(problem), GPU, CPU, start)
        if fast is not None:
            made += 1
            assert not budget_violations(problem, fast)
    assert made >= 20
