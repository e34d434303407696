"""Device planning for Relay and Relax modules: TVM PlanDevices semantics on a
union-find presolve with Z3 as the solver of record (docs/planning.md). A Relax
module reaches the planner translated into Relay terms (service/relax_planning.py).

What the service (and any other caller) uses is exported here: `plan` with
its `PlanConfig` (built from a request's `PlanOptions`), the results, the
errors, the cost model's keys and table, and the selector helpers that why
answers and pictures share.
"""

from .api import plan
from .config import MODES, DeviceSpec, Mode, PlanConfig, check_config, complete_spec, resolve_device
from .errors import ConflictConstraint, PlanConfigError, PlanningConflict, SolverTimeout
from .explain.text import short_text
from .optimize.cost_model import CostTable, copy_ns, cost_key, ns_to_ms
from .optimize.problem import device_setup, kernel_costs
from .optimize.report import CostReport, DeviceCost
from .optimize.run import Evaluation, evaluate_planned
from .optimize.sizes import Estimate, Sizes, dtype_bytes, module_types, static_type_bytes
from .options import PlanOptions
from .result import MAX_ANSWERS, Answer, ConstraintLog, PlanResult, PlanStats, Step, WhyResult, answer_lines
from .selectors import (
    Alignment,
    Selector,
    align,
    input_roots,
    is_layout_only,
    node_id_of,
    node_ids,
    planned_roots,
    resolve,
    wrapper_op,
)

__all__ = [
    "MAX_ANSWERS",
    "MODES",
    "Alignment",
    "Answer",
    "ConflictConstraint",
    "ConstraintLog",
    "CostReport",
    "CostTable",
    "DeviceCost",
    "DeviceSpec",
    "Estimate",
    "Evaluation",
    "Mode",
    "PlanConfig",
    "PlanConfigError",
    "PlanOptions",
    "PlanResult",
    "PlanStats",
    "PlanningConflict",
    "Selector",
    "Sizes",
    "SolverTimeout",
    "Step",
    "WhyResult",
    "align",
    "answer_lines",
    "check_config",
    "complete_spec",
    "copy_ns",
    "cost_key",
    "device_setup",
    "dtype_bytes",
    "evaluate_planned",
    "input_roots",
    "is_layout_only",
    "kernel_costs",
    "module_types",
    "node_id_of",
    "node_ids",
    "ns_to_ms",
    "plan",
    "planned_roots",
    "resolve",
    "resolve_device",
    "short_text",
    "static_type_bytes",
    "wrapper_op",
]
