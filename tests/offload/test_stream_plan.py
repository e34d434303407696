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


def test_the_resident_weight_dual_bounds_every_plan_within_the_budget() -> None:
    from solver.optimize import evaluate
    from solver.optimize.strategies import _resident_dual
    from solver.work import Work
    from tests.offload.test_memory_overlap import every_plan, layered

    problems = [p for p in map(random_layered, range(120)) if p.budgets]
    # Four layers whose weights are four times the budget: streaming them all is the optimum.
    problems.append(layered([4000] * 4, [(50_000, 1000)] * 4, 100, 4500))
    above_cheapest = 0
    for problem in problems:
        weights = Weights.of(problem)
        least = min(evaluate(problem, weights, p)[0] for p in every_plan(problem))
        dual = _resident_dual(problem, weights, (CPU, GPU), Work(10**9))
        assert dual <= least
        cheapest = sum(min(problem.unary[c][d] for d in ok) for c, ok in enumerate(problem.allowed))
        above_cheapest += dual // weights.per_ns > cheapest
    # The dual sees that weights beyond the budget cost copies (or cpu time) on most of them.
    assert above_cheapest >= len(problems) // 2


def test_a_large_weight_resident_first_leaves_room_for_more() -> None:
    import dataclasses

    from solver.optimize import evaluate
    from solver.optimize.cost_model import LinkProfile
    from tests.offload.test_memory_overlap import layered

    # Three 1000 B weights and a 5000 B head, 7000 B on the GPU, copies 1 B a ns after 500 ns: a
    # small weight saves 1.5 ns a byte resident, the head 1.1. Small ones first, the head streamed
    # needs 5200 B at its step, so one small weight fits beside it (1500 ns saved); the head
    # resident first leaves 1200 B for the copies of the small ones (5500 ns saved).
    link = LinkProfile(1.0, 0.5)
    problem = layered([1000, 1000, 1000, 5000], [(90_000, 5000)] * 4, 100, 7000)
    problem = dataclasses.replace(problem, links=[[None, link], [link, None]])
    weights = Weights.of(problem)
    _, start = _cut(stream.streamed(problem, CPU), weights, (CPU, GPU))
    plan = stream.stream_plan(problem, weights, GPU, CPU, start)
    assert plan == [CPU, GPU, CPU, GPU, CPU, GPU, GPU, GPU]
    assert not budget_violations(problem, plan)
    # Every kernel on the GPU, the three small weights copied in.
    assert evaluate(problem, weights, plan)[1] == 4 * 5000 + 3 * 1500
