"""Device planning for Relay modules: TVM PlanDevices semantics on a union-find
presolve with Z3 as the solver of record (see docs/device-planning.md)."""

from .config import DeviceSpec, PlanConfig, complete_spec, resolve_device
from .errors import ConflictConstraint, PlanConfigError, PlanningConflict, SolverTimeout
from .optimize.cost_model import CostTable, cost_key
from .optimize.report import CostReport, DeviceCost
from .optimize.sizes import Estimate, module_types
from .planner import PlanResult, PlanStats, plan

__all__ = [
    "ConflictConstraint",
    "CostReport",
    "CostTable",
    "DeviceCost",
    "DeviceSpec",
    "Estimate",
    "PlanConfig",
    "PlanConfigError",
    "PlanResult",
    "PlanStats",
    "PlanningConflict",
    "SolverTimeout",
    "complete_spec",
    "cost_key",
    "module_types",
    "plan",
    "resolve_device",
]
