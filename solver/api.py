"""`plan(module, config)`: the one entry point, and the mode dispatch. The
only module that imports both modes (`tvm_mode`, `optimize.run`)."""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Mapping, Sequence
from typing import Any

from relay.ast import Module

from .config import PlanConfig, check_config
from .deadline import Deadline
from .errors import PlanningConflict
from .optimize.run import plan_optimize
from .result import PlanResult
from .selectors import Selector
from .steps import resolve_devices
from .steps.presolve import presolve
from .steps.typecheck import type_check
from .tvm_mode import plan_tvm


def plan(
    module: Module,
    config: PlanConfig | None = None,
    *,
    why: Sequence[Mapping[str, Any]] = (),
    record_constraints: bool = False,
) -> PlanResult:
    """Plan the devices of `module` (docs/planning.md, sections 1-5) in
    `config.mode`: "tvm" (TVM PlanDevices' answer) or "optimize" (the least
    predicted run time, docs/optimize.md).

    `why`: selectors to explain (`PlanResult.why`, solver/explain/why.py);
    `record_constraints`: keep the collected constraints (`PlanResult.constraints`).
    Raises PlanningConflict (with a minimal explanation), SolverTimeout, or
    PlanConfigError (bad configuration, spec or selector).
    """
    config = config or PlanConfig()
    check_config(config)
    # As TVM before planning: operator names, then (unless skipped) types.
    types = type_check(module, check_types=config.check_types, language=config.language)
    # The request is checked before the clock starts.
    devices = resolve_devices(module, config)
    for i, selector in enumerate(why):
        Selector.parse(selector, f"why #{i}")
    # The planner allocates millions of long-lived small objects on big
    # modules; the cyclic collector would rescan them over and over.
    enabled = gc.isenabled()
    gc.disable()
    try:
        if config.mode == "optimize":
            result = plan_optimize(module, config, devices, tuple(why), record_constraints)
        else:
            result = plan_tvm(module, config, devices, tuple(why), record_constraints)
        if config.z3_check and config.mode == "tvm":
            verify_planned(result.module, config)
    finally:
        if enabled:
            gc.enable()
    notices = _notices(module)
    if types.unchecked_ops or notices:
        result = dataclasses.replace(result, unchecked_ops=types.unchecked_ops, notices=notices)
    return result


def verify_planned(planned: Module, config: PlanConfig) -> None:
    """With `z3_check`: the rewritten module is re-verified, not only
    the classes it came from. Its own constraints are collected afresh (its
    annotations are now its only pins) and solved as in TVM mode; a conflict
    (found by the union-find, explained by Z3's unsat core) means the planner
    wrote an inconsistent module: an internal error, never a 200. The classes
    themselves were already confirmed by Z3; the re-check runs on its own
    deadline and does not call Z3 again when it finds no conflict.

    The re-check collects without TVM's conflicting-inputs pre-pass: that
    pass copies a variable a call uses on two devices, or gives up (TVM fails
    an internal check) when the call's device is unknown, which a consistent
    output can trigger (a local function whose parameter lives on another
    device than the variable passed to it; found by tests/solver/
    test_property.py). Its verdict says nothing about consistency.

    TVM mode only: re-planning an optimize-mode output the TVM way can conflict
    without the output being inconsistent (corpus random/r20026), so optimize
    mode relies on the consistency walk and `z3_confirm`."""
    again = dataclasses.replace(
        config,
        mode="tvm",
        virtual_devices=(),
        constraints=(),
        op_support={},
        device_profiles={},
        links={},
        cost_table=None,
        z3_check=False,
        clock=time.monotonic,
    )
    try:
        deadline = Deadline(again.timeout_ms, again.clock)
        presolve(planned, again, deadline, devices=resolve_devices(planned, again), copy_inputs=False)
    except PlanningConflict as err:
        raise RuntimeError(f"internal error: the planned module's own constraints conflict: {err.message}") from None


def _notices(module: Module) -> tuple[str, ...]:
    """What a client should know about a module that plans."""
    names = [gv.name for gv, _ in module.functions]
    if names and "main" not in names and module.expr is None:
        listed = ", ".join(f"@{n}" for n in names[:5]) + (", ..." if len(names) > 5 else "")
        notice = (
            f"the module has no @main: each global function is planned on its own ({listed}); "
            "TVM's build needs a @main"
        )
        return (notice,)
    return ()
