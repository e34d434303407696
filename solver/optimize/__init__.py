"""Optimize mode (issue 11, docs/optimize.md): one job per module.

- `sizes`: bytes of dtypes, types and expressions; `Estimate`s of guesses;
- `cost_model`: device and link profiles, kernel and copy times, cost keys
  and the measured table, FLOPs per operator;
- `report`: the plan's `CostReport`;
- `cut_collector`: TVM mode's collector with cuttable operator edges;
- `problem`: the problem over classes, its objective, and `build_problem`;
- `mincut`, `z3_encoding`, `strategies`: solving;
- `explain`: support and budget conflicts, the cost reason for why-answers;
- `run`: the pipeline, the TVM-mode prediction and `evaluate_planned`.
"""

from .problem import Problem, Solution, Weights, budget_violations, evaluate
from .run import Evaluation, Optimized, evaluate_planned, optimize, optimize_fixed, plan_optimize
from .sizes import module_types

__all__ = [
    "Evaluation",
    "Optimized",
    "Problem",
    "Solution",
    "Weights",
    "budget_violations",
    "evaluate",
    "evaluate_planned",
    "module_types",
    "optimize",
    "optimize_fixed",
    "plan_optimize",
]
