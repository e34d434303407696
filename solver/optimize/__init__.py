"""Optimize mode (docs/optimize.md): one job per module.

- `sizes`: bytes of dtypes, types and expressions; `Estimate`s of guesses;
- `cost_model`: device and link profiles, kernel and copy times, cost keys
  and the measured table, FLOPs per operator;
- `report`: the plan's `CostReport`;
- `cut_collector`: TVM mode's collector with cuttable operator edges;
- `problem`: the problem over classes, its objective, and `build_problem`;
- `mincut`, `z3_encoding`, `strategies`: solving;
- `explain`: support and budget conflicts, the cost reason for why-answers;
- `run`: the pipeline, the TVM-mode prediction and `evaluate_planned`.


The package itself re-exports only the problem model (plain data and pure
functions); the pipeline is `solver.optimize.run` (it imports the shared
steps, which import this package's report, so the arrows point one way).
"""

from .problem import Problem, Solution, Weights, budget_violations, evaluate
from .sizes import module_types

__all__ = ["Problem", "Solution", "Weights", "budget_violations", "evaluate", "module_types"]
