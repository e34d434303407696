"""The optimum of each hard case of benchmarks/optimize.py, computed once with
a long time limit, for the benchmark's ratio column.

Each case's problem (the project's own `Problem`: classes, allowed devices,
kernel ns, copy edges, budgets) is built by the optimize pipeline with the
solve step replaced by a capture; HiGHS then solves the same MILP that
`solver.optimize.search_milp` uses, warm-started by the search's plan, with
`--limit` seconds (default 300) and no symmetry-breaking shortcuts beyond the
valid one; with `--windows S` the start is first improved by S seconds of the
window search (for the cases no run proves: a better start, a better best
known). Proven optima are printed as OPTIMA entries (run time in ns and
the problem's fingerprint), unproven cases as UNPROVEN entries (the best
plan's run time, HiGHS's bound, the fingerprint); paste them into
benchmarks/optimize.py.

    python benchmarks/optimize_reference.py [--limit S] [LABEL ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import optimize as bench

import solver
from solver.optimize import (
    Problem,
    Weights,
    evaluate,
    run,
)
from solver.optimize.problem import identical_devices
from solver.optimize.search import expand, fingerprint, obvious_plans
from solver.optimize.search_lns import improve
from solver.optimize.search_milp import Effort, _Model, _run_here
from solver.work import Work


class _Captured(Exception):
    def __init__(self, problem: Problem, weights: Weights) -> None:
        super().__init__("captured")
        self.problem = problem
        self.weights = weights


def capture(module: Any, fields: dict[str, Any]) -> tuple[Problem, Weights]:
    """The problem the optimize pipeline builds for a request (not solved)."""
    original = run.solve

    def grab(problem: Problem, weights: Weights, work: Work) -> None:
        raise _Captured(problem, weights)

    run.solve = grab  # type: ignore[assignment]
    try:
        run.optimize(module, solver.PlanConfig(mode="optimize", timeout_ms=600_000, **fields))
    except _Captured as got:
        return got.problem, got.weights
    finally:
        run.solve = original
    raise RuntimeError("the pipeline did not reach the solve step")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=float, default=300.0, help="HiGHS time limit per case (s)")
    parser.add_argument(
        "--windows",
        type=float,
        default=0.0,
        help="HiGHS nodes (thousands) of the window search (search_lns) on the start before HiGHS (default 0)",
    )
    parser.add_argument("labels", nargs="*")
    args = parser.parse_args()
    cases = [(label, bench.corpus(model), fields) for label, model, fields in bench.MODEL_CASES]
    cases.append((bench.DAG_CASE[0], lambda: bench.dag(10_000), bench.DAG_CASE[1]))
    for label, load, fields in cases:
        if args.labels and label not in args.labels:
            continue
        problem, weights = capture(load(), fields)
        plans = obvious_plans(problem, weights, Work(1 << 62))
        start = None
        if plans:
            best = min(plans, key=lambda p: p.objective)
            start = expand(problem, weights, best.assign, Work(1 << 62))
            if args.windows > 0:
                start, _ = improve(problem, weights, start, Work(int(args.windows * 1000)))
        model = _Model(problem, weights, identical_devices(problem))
        began = time.perf_counter()
        result = _run_here(model, model.cost, Effort(1 << 40), args.limit, start, None)
        took = time.perf_counter() - began
        ns = evaluate(problem, weights, result.assign)[1] if result.assign else None
        bound = problem.fixed_ns + result.dual
        if result.optimal and ns is not None:
            print(f'    "{label}": ({ns}, "{fingerprint(problem)}"),  # {took:.0f} s', flush=True)
        else:
            print(
                f'    "{label}": ({ns}, {bound:.0f}, "{fingerprint(problem)}"),  # not proven in {took:.0f} s',
                flush=True,
            )


if __name__ == "__main__":
    main()
