"""The why-answer's cost reason prices each move from the moved class's own
kernel and edges (`solver.optimize.explain.Moves`): for every class and
device of random plans it gives the run time `evaluate` gives the moved plan,
and the devices `budget_violations` finds it overfills."""

from __future__ import annotations

import random

import pytest

from solver.optimize import Weights, budget_violations, evaluate
from solver.optimize.explain import Moves
from tests.solver.test_optimize_search import random_problem


@pytest.mark.parametrize(("seed", "devices"), [(s, 2 + s % 3) for s in range(24)])
def test_moves_price_as_the_whole_plan_does(seed: int, devices: int) -> None:
    problem = random_problem(200 + seed, devices, 14, budgets=True)
    weights = Weights.of(problem)
    rng = random.Random(seed)
    checked = 0
    for _ in range(4):
        assign = [rng.choice(ok) for ok in problem.allowed]
        moves = Moves(problem, assign)
        assert moves.base_ns == evaluate(problem, weights, assign)[1]
        for c in range(len(assign)):
            for d in range(devices):
                trial = list(assign)
                trial[c] = d
                assert moves.ns(c, d) == evaluate(problem, weights, trial)[1]
                assert moves.over(c, d) == [x for x, _need, _budget in budget_violations(problem, trial)]
                checked += 1
    assert checked == 4 * 14 * devices
