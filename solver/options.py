"""The options of one planning request as plain data: `PlanOptions`.

The HTTP request model (pydantic), the CLI and the worker job all build or
carry a `PlanOptions`; `to_config` is the one place it becomes the solver's
`PlanConfig`, checked by the one validation (`config.check_config`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import DeviceSpec, Mode, OnTimeout, PlanConfig, check_config


@dataclass(frozen=True)
class PlanOptions:
    """How to plan a module (everything but the module and its presentation).
    Plain data (str, int, bool, dict, list, tuple): it pickles cheaply and
    crosses process boundaries as is."""

    virtual_devices: tuple[DeviceSpec, ...] = ()
    default_device: DeviceSpec = "cuda"
    host_device: DeviceSpec = "cpu"
    # Request-level pins: {"select": {...}, "device": SPEC}, named `constraint #k`.
    constraints: tuple[Mapping[str, Any], ...] = ()
    timeout_ms: int = 10_000
    # Optimize mode at the time limit: "fail" (SolverTimeout) or "best" (the best plan so far, marked).
    on_timeout: OnTimeout = "fail"
    # TVM mode: confirm the plan with Z3 (it cannot change it); optimize mode: Z3 confirms a min-cut plan.
    z3_check: bool = False
    # Type-check the module first, as TVM does; operator names are always checked.
    check_types: bool = True
    mode: Mode = "tvm"
    # Optimize mode: device name -> {"unsupported": [op, ...]} (or the list itself).
    op_support: Mapping[str, Any] = field(default_factory=dict)
    # device name -> any of peak_gflops, mem_gbps, launch_us, memory_bytes
    device_profiles: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # "SRC->DST" -> any of gbps, latency_us
    links: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # {"version": 1, "entries": [{"key", "device", "ns"}, ...]}
    cost_table: Mapping[str, Any] | None = None
    assume_dim: int = 1
    # Optimize mode: weight copies overlap compute (False: synchronous, as accelerate runs a map).
    overlap: bool = True

    def to_config(
        self, *, timeout_ms: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> PlanConfig:
        """The solver's configuration (`timeout_ms` overrides the options' own,
        e.g. with the time left after parsing; `clock` measures it). Raises
        PlanConfigError when the options are not a valid configuration."""
        # Every option is the configuration field of the same name (a new option
        # is a field here and in PlanConfig; tests/solver/test_structure.py checks).
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["virtual_devices"] = tuple(self.virtual_devices)
        values["constraints"] = tuple(self.constraints)
        if timeout_ms is not None:
            values["timeout_ms"] = timeout_ms
        config = PlanConfig(**values, clock=clock)
        check_config(config)
        return config
