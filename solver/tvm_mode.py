"""TVM mode: TVM 0.19 PlanDevices' answer, step by step (docs/planning.md).

1-5. `steps.presolve`: devices and pins, normalisation, shapes, the hard
     constraints in the union-find, free on_device unification and TVM's
     defaulting walk;
6.   with `z3_check`, Z3 checks the compacted system and must agree;
7.   `steps.rewrite_module`: every device made explicit;
then the why-answers and the constraint log when asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relay.ast import Module

from .config import PlanConfig
from .deadline import Deadline
from .explain.why import Explainer
from .result import ConstraintLog, PlanResult, PlanStats, WhyResult
from .rewrite import Rewriter
from .solve import ModelResult
from .steps import Devices, Laps, check_with_z3, planned_result, presolve, presolved_devices, rewrite_module
from .steps.support import check_support


def plan_tvm(
    module: Module,
    config: PlanConfig,
    devices: Devices,
    why: Sequence[Mapping[str, Any]] = (),
    record: bool = False,
) -> PlanResult:
    """Plan `module` as TVM mode does; `devices` is step 1's result (the
    request checked before the clock starts), `why`/`record` as in `plan`."""
    deadline = Deadline(config.timeout_ms, config.clock)
    deadline.check("start")
    lap = Laps(deadline)
    pre = presolve(module, config, deadline, devices=devices, laps=lap, log_soft_steps=bool(why) or record)
    fr, collector, ds = pre.front, pre.collector, pre.ds
    defaults = pre.defaults
    assert defaults is not None

    model: ModelResult | None = None
    if config.z3_check:
        device_of, model = check_with_z3(ds, defaults, deadline.remaining_ms())
        lap("z3")
    else:
        device_of = presolved_devices(ds)

    rewriter = Rewriter(collector, device_of)
    out_module, summary = rewrite_module(module, fr.functions, rewriter, devices.ref_table, fr.from_expr)
    if config.op_support:
        # TVM's placement ignores operator support; a plan that breaks it is refused.
        check_support(out_module, config.op_support, [*devices.table, devices.default, devices.host])
    lap("rewrite")

    stats = PlanStats(
        classes=len(defaults.final_root),
        variables=model.variables if model is not None else None,
        hard_constraints=collector.hard_count,
        soft_constraints=collector.soft_count,
        time_ms=lap.times,
        nodes=len(ds.parent),
        z3_constraints=model.constraints if model is not None else None,
        z3_assumptions=model.assumptions if model is not None else None,
        z3_checked=model is not None,
    )
    answers: tuple[WhyResult, ...] = ()
    log: ConstraintLog | None = None
    if why or record:
        explainer = Explainer(module, collector, fr.planned_roots(), ds.canonical(devices.default))
        answers = tuple(explainer.answer_selector(s, f"why #{i}") for i, s in enumerate(why))
        log = explainer.log() if record else None
    return planned_result(out_module, stats, rewriter, summary, why=answers, constraints=log)
