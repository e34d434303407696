"""The last step of both modes: every device made explicit (section 5), and
the plan's result."""

from __future__ import annotations

import dataclasses
from typing import Any

from relay.ast import Function, GlobalVar, Module
from relay.device import VirtualDevice, device_name

from ..collect import is_optimizable
from ..optimize.report import CostReport
from ..result import ConstraintLog, PlanResult, PlanStats, WhyResult
from ..rewrite import Rewriter
from .consistency import check_consistent


def rewrite_module(
    module: Module,
    functions: list[tuple[GlobalVar, Function]],
    rewriter: Rewriter,
    ref_table: list[Any],
    from_expr: bool,
) -> tuple[Module, dict[str, dict[str, Any]]]:
    """Step 7 (section 5): rewrite every optimizable global; the output table is
    the input table followed by the devices the plan introduces."""
    out_functions = []
    summary: dict[str, dict[str, Any]] = {}
    names: dict[int, tuple[Any, str]] = {}

    def name_of(vd: Any) -> str:
        found = names.get(id(vd))
        if found is None:
            found = names[id(vd)] = (vd, device_name(vd))
        return found[1]

    for gv, func in functions:
        if not is_optimizable(func):
            out_functions.append((gv, func))
            continue
        new = rewriter.rewrite_function(func)
        out_functions.append((gv, new))
        if not new.is_primitive:
            summary[gv.name] = {
                "params": [name_of(p.virtual_device) for p in new.params],
                "result": name_of(new.virtual_device),
            }
    out_table = list(ref_table)
    for vd in rewriter.used:
        if vd not in out_table:
            out_table.append(vd)
    meta = dict(module.meta)
    meta["VirtualDevice"] = out_table
    expr = None if from_expr else module.expr
    return dataclasses.replace(module, functions=tuple(out_functions), meta=meta, expr=expr), summary


def planned_result(
    out_module: Module,
    stats: PlanStats,
    rewriter: Rewriter,
    functions: dict[str, dict[str, Any]],
    *,
    cost: CostReport | None = None,
    why: tuple[WhyResult, ...] = (),
    constraints: ConstraintLog | None = None,
) -> PlanResult:
    """The result of either mode: the rewritten module with its device table,
    and the copies and per-device expression counts of the rewriter that made it.

    The rewritten module is checked first: a value used on another
    device than its own without a copy is a planner bug, raised as
    `InternalInconsistency` (a 500), never returned as a plan."""
    check_consistent(out_module, rewriter.c.host)
    return PlanResult(
        module=out_module,
        virtual_devices=[v for v in out_module.meta["VirtualDevice"] if isinstance(v, VirtualDevice)],
        stats=stats,
        copies=rewriter.copies,
        functions=functions,
        expressions_by_device=rewriter.expressions_by_device(),
        cost=cost,
        why=why,
        constraints=constraints,
        divergences=rewriter.divergences,
    )
