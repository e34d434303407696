"""The offload program's quick plan (solver/optimize/search_dp.py):
where the Lagrangian bound is weak and no plan is near it, a coarse forward
pass gives a plan that fits, and the pass just below it settles the relaxed
optimum; the program stays sound with the quick path forced, and on the
public decoder at budgets accelerate's maps do not cover it reaches its goal."""

from __future__ import annotations

import math

import pytest

from solver.optimize import Weights, budget_violations, evaluate, search_dp
from solver.optimize.search_dp import _cases, _plan_of, _quick
from solver.work import Work
from tests.offload.test_offload_public import GENEROUS_MS, _text, needs_corpus
from tests.offload.test_search_dp import assert_sound, least_run_time
from tests.offload.test_search_dp_coarse import program_of
from tests.solver.test_optimize_search import random_problem


def test_quick_plans_fit_their_case_and_are_real_plans() -> None:
    found = 0
    for seed in range(24):
        problem = random_problem(700 + seed, 2, 11, budgets=True)
        g, c, order, relaxed = program_of(problem, 0.0)
        quick = _quick(relaxed, _cases(problem, order, g, c, 0.0, relaxed), Work(10**12))
        if quick is None or quick.bits is None:
            continue  # no case, or (a heuristic) nothing found below the Lagrangian's plan
        found += 1
        plan = _plan_of(problem, order, quick.bits, g, c)
        assert all(d in ok for d, ok in zip(plan, problem.allowed))
        assert not budget_violations(problem, plan)
        least = least_run_time(problem, Weights.of(problem))
        assert least is not None and evaluate(problem, Weights.of(problem), plan)[1] >= least
    assert found >= 3  # these seeds give plans (the check above is not vacuous)


@pytest.mark.parametrize("seed", range(40))
def test_with_the_quick_path_forced_bound_and_plan_stay_sound(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every Lagrangian counts as weak, and the coarse sets overflow at once
    # (no coarse plan), so the program takes the quick path whenever it has a case.
    monkeypatch.setattr(search_dp, "COARSE_GAP", -1.0)
    monkeypatch.setattr(search_dp, "COARSE_CAP", 0)
    problem = random_problem(900 + seed, 2, 11, budgets=True)
    assert_sound(problem, Weights.of(problem))


OTHER_BUDGETS = (0.55, 0.65)


@pytest.mark.tvm
@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("fraction", OTHER_BUDGETS)
def test_decoder_at_other_budgets_is_within_one_percent_in_few_passes(fraction: float) -> None:
    from service.planning import PlanJob, run_plan

    weights = 622_924_032  # the decoder's parameter bytes (float32)
    job = PlanJob(
        _text(),
        input_format="json",
        language="relax",
        mode="optimize",
        device_profiles={"cuda": {"memory_bytes": int(weights * fraction)}},
        timeout_ms=GENEROUS_MS,
        overlap=False,  # the offload program's goal is stated for synchronous copies
    )
    cost = run_plan(job).cost
    assert cost is not None
    assert cost["gap"] is not None and cost["gap"] <= 0.01
    assert math.isfinite(cost["bound_ms"]) and cost["bound_ms"] <= cost["predicted_ms"]
