"""The cost report of an optimize-mode plan: the response's `cost` object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .sizes import Estimate


@dataclass(frozen=True)
class DeviceCost:
    """One device's share of a plan."""

    operators: int
    predicted_ms: float  # its kernels' time plus `copy_ms`
    weight_bytes: int  # weights resident on the device (stored there for the whole run)
    copy_ms: float = 0.0  # the copies into the device (part of `predicted_ms`)
    kernel_ms: float = 0.0  # its kernels' time: `predicted_ms` less `copy_ms`
    # the part of `copy_ms` that ran beside compute (a copy stream per link, weights
    # prefetched ahead); 0 without overlap. The plan's
    # `predicted_ms` is the sum over devices of `predicted_ms - overlap_hidden_ms`.
    overlap_hidden_ms: float = 0.0
    # the most bytes the device holds at once: resident weights, live activations,
    # copies in (streamed weights) and prefetched weights (`solver.optimize.memory`)
    peak_memory_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "operator_calls": self.operators,  # operator calls, not expressions
            "predicted_ms": self.predicted_ms,
            "copy_ms": self.copy_ms,
            "kernel_ms": self.kernel_ms,
            "overlap_hidden_ms": self.overlap_hidden_ms,
            "weight_bytes": self.weight_bytes,
            "peak_memory_bytes": self.peak_memory_bytes,
        }


@dataclass(frozen=True)
class CostReport:
    """The cost of an optimize-mode plan (the response's `cost` object)."""

    predicted_ms: float
    tvm_mode_predicted_ms: float | None
    tvm_mode_reason: str | None
    copies: int
    bytes_copied: int
    per_device: Mapping[str, DeviceCost]
    optimal: bool
    bound_ms: float
    solver_ms: float
    estimates: tuple[Estimate, ...] = ()
    # device name -> the most bytes it holds at once under the plan (memory by
    # liveness, `solver.optimize.memory`); budgets are checked against it
    peak_memory_bytes: Mapping[str, int] = field(default_factory=dict)
    # whether `predicted_ms` is the overlapped schedule's length (copies of
    # weights beside compute) or the synchronous sum of kernel and copy times
    overlap: bool = False
    # how the plan was found and proven (docs/optimize.md section 7): "single choice",
    # "min-cut", "min-cut + budget", "min-cut + budget (dual bound)", "z3", "z3 (time-out)",
    # "highs (optimal)", "highs (run time optimal)", "search + highs (<HiGHS status>)", "search"
    method: str = "z3"
    classes: int = 0
    z3_variables: int = 0
    # the request's time limit stopped the search (`on_timeout: "best"`): the
    # best plan found by then, not the answer the search gives when it finishes
    time_limit_reached: bool = False

    @property
    def gap(self) -> float | None:
        """predicted / bound - 1 (0 when the bound meets the plan); None when
        the bound is 0 (nothing to divide by)."""
        if self.bound_ms <= 0:
            return None
        return max(0.0, round(self.predicted_ms / self.bound_ms - 1, 6))

    def to_json(self) -> dict[str, Any]:
        return {
            "predicted_ms": self.predicted_ms,
            "tvm_mode_predicted_ms": self.tvm_mode_predicted_ms,
            "tvm_mode_reason": self.tvm_mode_reason,
            "copies": self.copies,
            "bytes_copied": self.bytes_copied,
            "per_device": {name: dc.to_json() for name, dc in self.per_device.items()},
            "optimal": self.optimal,
            "bound_ms": self.bound_ms,
            "gap": self.gap,
            "peak_memory_bytes": dict(self.peak_memory_bytes),
            "overlap": self.overlap,
            "method": self.method,
            "solver_ms": self.solver_ms,
            "estimates": [e.to_json() for e in self.estimates],
            "time_limit_reached": self.time_limit_reached,
        }
