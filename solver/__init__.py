"""Device planning for Relay modules: TVM PlanDevices semantics on a union-find
presolve with Z3 as the solver of record (see docs/device-planning.md)."""

from .config import PlanConfig, complete_spec, resolve_device
from .errors import ConflictConstraint, PlanConfigError, PlanningConflict, SolverTimeout
from .planner import PlanResult, PlanStats, device_name, plan

__all__ = [
    "ConflictConstraint",
    "PlanConfig",
    "PlanConfigError",
    "PlanResult",
    "PlanStats",
    "PlanningConflict",
    "SolverTimeout",
    "complete_spec",
    "device_name",
    "plan",
    "resolve_device",
]
