"""The optimize-mode pipeline (docs/optimize.md): choose the devices
that minimise the predicted run time, subject to pins, operator support and
memory budgets.

The hard constraints are TVM mode's except one: the edge between a primitive
operator call and each tensor argument is *cuttable* (`cut_collector`). The
union-find classes are the decision variables of a `Problem` (`problem`),
solved by `strategies`; the plan is rewritten as in TVM mode and reported
with its predicted cost and the TVM mode's prediction under the same model.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relay.ast import Function, GlobalVar, Module
from relay.device import VirtualDevice

from ..collect import Collector, is_optimizable
from ..config import PlanConfig
from ..deadline import Deadline
from ..errors import ConflictConstraint, PlanningConflict, SolverTimeout
from ..explain.why import Explainer
from ..result import PlanResult, PlanStats
from ..rewrite import Rewriter
from ..steps import (
    Devices,
    Front,
    Laps,
    PrimitiveDevices,
    planned_result,
    presolve,
    presolved_devices,
    resolve_devices,
    rewrite_module,
)
from ..work import Work
from .cost_model import ns_to_ms
from .cut_collector import CutCollector, as_cut
from .explain import budget_conflict, cost_reason, support_conflict
from .memory import overlap_bound, schedule
from .overlap import overlap_lower, overlap_plan
from .problem import (
    Built,
    Problem,
    Solution,
    Weights,
    budget_violations,
    build_problem,
    candidate_devices,
    evaluate,
)
from .report import CostReport, DeviceCost
from .sizes import Sizes, module_types
from .stalls import stall_lower
from .strategies import GAP_GOAL_PPM, solve
from .z3_encoding import z3_confirm


@dataclass(frozen=True)
class Optimized:
    """An optimize-mode plan with its problem (for tests and the report)."""

    result: PlanResult
    problem: Problem
    solution: Solution
    weights: Weights


def entry_function(functions: Sequence[tuple[GlobalVar, Function]]) -> Function | None:
    """The function whose parameters are the weights a budget counts: @main,
    else the only global function (`relax.frontend.nn` names its entry
    `forward`); None when there are several and none is @main."""
    main = next((f for gv, f in functions if gv.name == "main"), None)
    if main is None and len(functions) == 1:
        return functions[0][1]
    return main


def plan_optimize(
    module: Module,
    config: PlanConfig,
    devices: Devices | None = None,
    why: Sequence[Mapping[str, Any]] = (),
    record: bool = False,
) -> PlanResult:
    """Plan `module` in optimize mode (docs/optimize.md); `devices` is step 1's
    result when the caller resolved it, `why`/`record` as in `solver.plan`."""
    return optimize(module, config, why, record, devices=devices).result


def optimize(
    module: Module,
    config: PlanConfig,
    why: Sequence[Mapping[str, Any]] = (),
    record: bool = False,
    *,
    devices: Devices | None = None,
) -> Optimized:
    """Plan `module` in optimize mode; the result with its problem and solution."""
    if devices is None:
        devices = resolve_devices(module, config)
    deadline = Deadline(config.timeout_ms, config.clock)
    lap = Laps(deadline)
    times = lap.times
    sizes_of: list[Sizes] = []

    def cut_collector(fr: Front) -> CutCollector:
        # Types of the prepared functions decide which operator edges are cuttable.
        typed = dataclasses.replace(module, functions=tuple(fr.functions), expr=None)
        type_of, notes = module_types(typed, stated=config.language == "relax")
        sizes = Sizes(type_of, config.assume_dim)
        sizes.estimates.extend(notes)
        sizes.run([f for _, f in fr.functions if is_optimizable(f)])
        sizes_of.append(sizes)
        collector = fr.collector(module, deadline, CutCollector)
        assert isinstance(collector, CutCollector)
        collector.is_tensor = sizes.is_tensor
        return collector

    pre = presolve(
        module,
        config,
        deadline,
        devices=devices,
        laps=lap,
        make_collector=cut_collector,
        copy_inputs=False,
        soft_steps=False,
    )
    fr, ds, sizes = pre.front, pre.ds, sizes_of[0]
    functions = fr.functions
    collector = pre.collector
    assert isinstance(collector, CutCollector)

    extra = [devices.default, devices.host]
    primitive = PrimitiveDevices.of([*devices.table, *extra])
    candidates = candidate_devices(ds, devices.table, extra, primitive)
    built = build_problem(
        collector.cuts(), candidates, devices.default, config, sizes, entry_function(functions), primitive
    )
    problem = built.problem
    lap("build")
    conflict = support_conflict(ds, built, "device conflict: pins and operator support disagree: ")
    if conflict is not None:
        raise conflict
    weights = Weights.of(problem)
    work = search_work(config, deadline)
    enough = None
    cut_ns = overlap_lower(problem, weights, 0) if config.overlap else 0  # the bound before any search
    if config.overlap and problem.budgets:
        # A plan within the gap goal of the overlapped bound needs no more search.
        cut_goal = _goal(cut_ns)

        def enough(assign: list[int]) -> list[int] | None:
            moved = overlap_plan(problem, weights, assign, work.part(OVERLAP_UNITS), cut_goal)
            ns = schedule(problem, moved, True).total_ns
            return moved if ns <= cut_goal or ns <= _goal(stall_lower(problem, weights, ns)) else None

    solution = solve(problem, weights, work, enough)
    if solution is None:
        raise budget_conflict(problem, ds, deadline.remaining_ms())
    overlap_lower_ns: int | None = None
    if config.overlap:
        sync_lower_ns = min(solution.lower, solution.objective) // weights.per_ns
        overlap_lower_ns = max(cut_ns, overlap_bound(problem, sync_lower_ns))
        moved = overlap_plan(problem, weights, solution.assign, work.part(OVERLAP_UNITS), _goal(overlap_lower_ns))
        if moved != solution.assign:
            objective = evaluate(problem, weights, moved)[0]
            # the search's "optimal" was about the synchronous price
            method = solution.method.replace("(optimal)", "(synchronous optimum)")
            solution = dataclasses.replace(
                solution, assign=moved, objective=objective, method=f"{method} + overlap moves"
            )
        # The bound that sees the budget's stalls (stalls.py) needs the plan's own time.
        final_ns = schedule(problem, solution.assign, True).total_ns
        overlap_lower_ns = max(overlap_lower_ns, stall_lower(problem, weights, final_ns))
    if work.cut_short:
        solution = dataclasses.replace(solution, method=f"{solution.method} ({CUT_SHORT})")
    lap("solve")
    z3_checked = solution.method.startswith("z3")
    if config.z3_check and not z3_checked:
        variables = z3_confirm(problem, weights, solution, deadline.remaining_ms())
        solution = dataclasses.replace(solution, variables=variables)
        z3_checked = True
        lap("z3")

    chosen = {problem.classes[c]: d for c, d in enumerate(solution.assign)}
    default_c = ds.canonical(devices.default)
    free_device: dict[int, VirtualDevice] = {}

    def device_of(elem: int) -> VirtualDevice:
        r = ds.find(elem)
        d = chosen.get(r)
        partial = ds.vd[r]
        if d is not None:
            # a partial that differs from the candidate only in its target's host
            # (steps.devices.PrimitiveDevices) takes the candidate's form
            return ds.canonical(partial.join(candidates[d]) or candidates[d])
        found = free_device.get(r)
        if found is None:
            found = free_device[r] = ds.canonical(partial.default_from(default_c))
        return found

    rewriter = Rewriter(collector, device_of)
    out_module, summary = rewrite_module(module, functions, rewriter, devices.ref_table, fr.from_expr)
    lap("rewrite")

    _, ns, copies, nbytes = evaluate(problem, weights, solution.assign)
    report = _report(problem, solution, weights, built, ns, copies, nbytes, times, overlap_lower_ns)
    started = time.perf_counter()
    tvm_ms: float | None = None
    reason: str | None = f"not computed: the search {CUT_SHORT}"
    if not work.cut_short:
        tvm_ms, reason = tvm_mode_prediction(module, config, deadline.remaining_ms())
    report = dataclasses.replace(
        report, tvm_mode_predicted_ms=tvm_ms, tvm_mode_reason=reason, time_limit_reached=work.cut_short
    )
    times["tvm_mode"] = round((time.perf_counter() - started) * 1000, 3)
    report = dataclasses.replace(report, solver_ms=times.get("solve", 0.0))
    stats = PlanStats(
        classes=len(problem.classes),
        variables=solution.variables,
        hard_constraints=collector.hard_count,
        soft_constraints=0,
        time_ms=times,
        nodes=len(ds.parent),
        z3_checked=z3_checked,
    )
    result = planned_result(out_module, stats, rewriter, summary, cost=report)
    if why or record:
        explainer = Explainer(
            module,
            collector,
            fr.planned_roots(),
            default_c,
            device_of,
            cost_reason=cost_reason(problem, weights, solution, ds),
        )
        answers = tuple(explainer.answer_selector(s, f"why #{i}") for i, s in enumerate(why))
        log = explainer.log() if record else None
        result = dataclasses.replace(result, why=answers, constraints=log)
    return Optimized(result, problem, solution, weights)


# How an answer the time limit stopped says so (`on_timeout: "best"`).
CUT_SHORT = "stopped at the time limit"
# With `on_timeout: "best"`, the search's clock stops at this share of the
# time left when it starts: the rest is for writing the plan out.
BEST_SHARE = 0.8
# The search's whole allowance (each step has its own, `strategies`).
SEARCH_UNITS = 1 << 62
# With overlap, the moves toward a shorter overlapped schedule (`overlap.overlap_plan`):
# classes and edges walked (at least `overlap.SCHEDULE_UNITS` a schedule): at most 300
# schedules, about 290 of the public decoder and 80 of an 80-layer decoder.
OVERLAP_UNITS = 600_000


def _goal(lower_ns: int) -> int:
    """The run time within the search's gap goal of the bound `lower_ns`."""
    return lower_ns + lower_ns * GAP_GOAL_PPM // 1_000_000


def search_work(config: PlanConfig, deadline: Deadline) -> Work:
    """The work allowance of one optimize search (docs/optimize.md, "When the
    search stops"): counted units decide where it stops; the deadline only
    ends it (SolverTimeout) or, with `on_timeout: "best"`, cuts it short at
    BEST_SHARE of the time left so the best plan so far can still be written."""
    if config.on_timeout == "best":
        left = deadline.remaining_ms()
        early = Deadline(max(1, int(left * BEST_SHARE)), config.clock)
        return Work(SEARCH_UNITS, early, best=True)
    return Work(SEARCH_UNITS, deadline)


def _report(
    problem: Problem,
    solution: Solution,
    weights: Weights,
    built: Built,
    ns: int,
    copies: int,
    nbytes: int,
    times: Mapping[str, float],
    overlap_lower_ns: int | None = None,
) -> CostReport:
    """The cost report of a plan: the synchronous price `ns` (kernels and
    copies), or with overlap (`overlap_lower_ns`, the bound of every plan's
    overlapped time, given) the length of the overlapped schedule
    (`memory.schedule`), per device its share, and the peak memory by liveness."""
    overlap = overlap_lower_ns is not None
    timed = schedule(problem, solution.assign, overlap)
    # per device: operator calls, kernel + copy ns, weight bytes, copy ns (a copy
    # counts on the device it copies into)
    per: dict[str, list[int]] = {name: [0, 0, 0, 0] for name in problem.names}
    for c, d in enumerate(solution.assign):
        row = per[problem.names[d]]
        row[0] += problem.ops[c]
        row[1] += problem.unary[c][d]
        row[2] += problem.weight_bytes[c]
    for u, v, b, uses in problem.edges:
        du, dv = solution.assign[u], solution.assign[v]
        if du != dv:
            copy = problem.edge_ns(b, dv, du, uses)
            per[problem.names[du]][1] += copy
            per[problem.names[du]][3] += copy
    for d, ns_in in problem.fixed_copy_ns.items():
        per[problem.names[d]][1] += ns_in
        per[problem.names[d]][3] += ns_in
    index = {name: d for d, name in enumerate(problem.names)}
    per_device = {
        name: DeviceCost(
            row[0],
            ns_to_ms(row[1]),
            row[2],
            copy_ms=ns_to_ms(row[3]),
            kernel_ms=ns_to_ms(row[1] - row[3]),
            overlap_hidden_ms=ns_to_ms(timed.hidden_ns.get(index[name], 0)),
            peak_memory_bytes=timed.peak_bytes.get(index[name], 0),
        )
        for name, row in per.items()
        if row[0] or row[1] or row[2]
    }
    lower_ns = min(solution.lower, solution.objective) // weights.per_ns
    optimal = solution.lower >= solution.objective
    if overlap_lower_ns is not None:
        lower_ns = overlap_lower_ns
        ns = timed.total_ns
        optimal = lower_ns >= ns
    seen: set[tuple[str, str, int | None, int | None]] = set()
    estimates = []
    for e in built.estimates:
        key = (e.kind, e.message, e.span.line if e.span else None, e.span.column if e.span else None)
        if key not in seen:
            seen.add(key)
            estimates.append(e)
    return CostReport(
        predicted_ms=ns_to_ms(ns),
        tvm_mode_predicted_ms=None,
        tvm_mode_reason=None,
        copies=copies,
        bytes_copied=nbytes,
        per_device=per_device,
        optimal=optimal,
        bound_ms=ns_to_ms(min(lower_ns, ns)),
        peak_memory_bytes={problem.names[d]: b for d, b in sorted(timed.peak_bytes.items()) if b},
        overlap=overlap,
        solver_ms=times.get("solve", 0.0),
        estimates=tuple(estimates),
        method=solution.method,
        classes=len(problem.classes),
        z3_variables=solution.variables,
    )


def tvm_mode_prediction(
    module: Module, config: PlanConfig, timeout_ms: int
) -> tuple[float | None, str | None]:
    """The TVM mode's plan of the same request under the same cost model, or
    (None, reason) when that plan conflicts or violates support or budgets.
    It is part of the answer, so one that does not finish in `timeout_ms`
    ends the request (SolverTimeout) rather than answer differently on a
    busy machine; with `on_timeout: "best"` it is left out instead."""
    tvm_config = dataclasses.replace(config, mode="tvm", z3_check=False, timeout_ms=max(1, timeout_ms))
    try:
        evaluation = evaluate_planned(module, tvm_config, pins=True)
    except PlanningConflict as err:
        return None, f"the TVM mode's plan conflicts or violates operator support: {err}"
    except SolverTimeout as err:
        if config.on_timeout != "best":
            raise
        return None, f"the TVM mode's plan did not finish in the time left: {err}"
    if evaluation.violations:
        return None, "the TVM mode's plan exceeds the memory budget: " + "; ".join(evaluation.violations)
    return evaluation.predicted_ms, None


@dataclass(frozen=True)
class Evaluation:
    """The predicted cost of a fixed placement under the cost model."""

    predicted_ms: float
    copies: int
    violations: tuple[str, ...]
    per_device_ops: Mapping[str, int]


def evaluate_planned(planned: Module, config: PlanConfig, pins: bool = False) -> Evaluation:
    """The predicted cost (synchronous: kernels plus the module's own copies,
    each a `device_copy`) of the TVM mode's plan of `planned` under `config`'s
    cost model: for a module the planner wrote (every device explicit), that
    module's own placement; with `pins`, the request's pins apply too (the
    TVM-mode prediction of a request). Raises PlanningConflict when the plan
    conflicts or places an operator on a device without support."""
    evaluation_config = dataclasses.replace(
        config, mode="optimize", constraints=config.constraints if pins else ()
    )
    problem, assign = optimize_fixed(planned, evaluation_config)
    weights = Weights.of(problem)
    _, ns, copies, _ = evaluate(problem, weights, assign)
    violations = tuple(
        f"{problem.names[d]} needs {need} bytes, budget {budget}"
        for d, need, budget in budget_violations(problem, assign)
    )
    ops: dict[str, int] = {}
    for c, d in enumerate(assign):
        ops[problem.names[d]] = ops.get(problem.names[d], 0) + problem.ops[c]
    return Evaluation(ns_to_ms(ns), copies, violations, ops)


@dataclass(frozen=True)
class _TvmPlan:
    collector: Collector
    device_of: Callable[[int], VirtualDevice]
    table: list[Any]
    default: VirtualDevice
    host: VirtualDevice


def _tvm_presolve(module: Module, config: PlanConfig) -> _TvmPlan:
    """The TVM mode's steps 1-5 (`steps.presolve`, as TVM mode runs them)
    without the rewrite: the collector and each class's device."""
    pre = presolve(module, config, Deadline(config.timeout_ms, config.clock))
    devices = pre.devices
    return _TvmPlan(pre.collector, presolved_devices(pre.ds), devices.table, devices.default, devices.host)


def optimize_fixed(planned: Module, config: PlanConfig) -> tuple[Problem, list[int]]:
    """The problem of a planned module with every class at the device the TVM
    mode gives it (the module's own annotations decide)."""
    internals = _tvm_presolve(planned, dataclasses.replace(config, mode="tvm"))
    device_of: Callable[[int], VirtualDevice] = internals.device_of
    tvm_collector = internals.collector
    # Costs over the TVM collector's classes: operator edges are all hard there,
    # so copies are exactly the module's device_copy calls.
    typed = dataclasses.replace(planned, functions=tuple(tvm_collector.functions), expr=None)
    type_of, _ = module_types(typed, stated=config.language == "relax")
    sizes = Sizes(type_of, config.assume_dim)
    sizes.run([f for _, f in tvm_collector.functions if is_optimizable(f)])
    cut = as_cut(tvm_collector)
    extra = [internals.default, internals.host]
    primitive = PrimitiveDevices.of([*internals.table, *extra])
    candidates = candidate_devices(tvm_collector.ds, internals.table, extra, primitive)
    built = build_problem(
        cut, candidates, internals.default, config, sizes, entry_function(tvm_collector.functions), primitive
    )
    problem = built.problem
    conflict = support_conflict(tvm_collector.ds, built, "")
    if conflict is not None:
        raise conflict
    assign = []
    for c, root in enumerate(problem.classes):
        vd = device_of(root)
        d = next(
            (i for i, cand in enumerate(candidates) if primitive.fits(cand, vd) or primitive.fits(vd, cand)),
            problem.allowed[c][0],
        )
        assign.append(d)
    for c, d in enumerate(assign):
        if d not in problem.allowed[c]:
            raise PlanningConflict(
                f"operator support: class {c} on {problem.names[d]}",
                [
                    ConflictConstraint(
                        "operator support", f"placed on {problem.names[d]}", "", None, [problem.names[d]]
                    )
                ],
            )
    return problem, assign
