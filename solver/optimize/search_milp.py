"""The optimize problem as a mixed-integer program, solved by HiGHS
(`highspy`), for the cases the exact cuts do not settle: three or
more devices, or budgets the priced cuts cannot prove.

Why a MILP library: Z3 `Optimize` over the same problem times out at model
scale (resnet50 with cpu and two 60 MB GPUs: every operator on the cpu,
118x the optimum, after its time limit), while HiGHS proves the optimum of
that problem in under a second (benchmarks/optimize.py has the rows). Z3
stays the solver of record for the constraints: the encoding, conflicts and
their unsat cores, and `z3_check`'s confirmation of the final plan.

Formulation (run time in integer ns; tie-breaks in a second stage):

- x[c,d] binary for each class c and allowed device d, sum_d x[c,d] = 1;
- for each cuttable edge e (consumer u, producer v), z[e,s,t] >= 0 for the
  devices s of v and t of u, with sum_t z[e,s,t] = x[v,s] and
  sum_s z[e,s,t] = x[u,t] (the local marginal polytope, much tighter than
  z >= x + x - 1); a copy costs edge_ns on z[e,s,t], s != t;
- a budget on d, the memory rule by liveness (`memory`): r_d = weights on d,
  and at each step of the order r_d + live activations on d + the class's
  largest result and copies into it when on d <= budget - the module's own
  copies into d; bytes copied into d for e are b * (x[u,d] - z[e,d,d]);
- identical devices (same profile, budget, links, support and kernel costs)
  are interchangeable: the first free class that may take them may only take
  the first of the group (valid: any plan can be relabelled so), and the
  final plan is relabelled so the most classes sit on their preferred device.

Stage 2 (when stage 1 proved its run time U): the same
constraints with run time <= U and the tie-break objective
copies * per_copy + non_default, so the whole integer objective is proven.

The bound: HiGHS's dual bound on the run time, less 0.25 ns and 1e-9 of
itself for its floating-point tolerances, rounded up (costs are integer ns).
It is valid to those tolerances; the exact paths (minimum cut, Z3) need none.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import highspy
import numpy as np

from ..work import Work
from .problem import Problem, Weights, budget_violations, evaluate, identical_devices

log = logging.getLogger(__name__)

_INF = highspy.kHighsInf
# The fewest checks (`Effort`) the tie-break stage gets.
STAGE2_CHECKS = 8


@dataclass(frozen=True)
class MilpResult:
    """What HiGHS found: a plan (or None), a lower bound on the run time in
    ns, whether that run time is proven minimal, whether the whole objective
    (tie-breaks included) is, whether the problem is infeasible, and the
    branch-and-bound nodes it explored."""

    assign: list[int] | None
    bound_ns: int
    ns_proven: bool
    proven: bool
    infeasible: bool
    status: str
    nodes: int = 0
    # The size of the model HiGHS was given (0 when it was given none).
    nonzeros: int = 0


class _Model:
    """Columns and rows of the MILP, built once, solved in one or two stages."""

    def __init__(self, problem: Problem, weights: Weights, symmetric: Sequence[Sequence[int]]) -> None:
        self.problem = problem
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.integer: list[int] = []
        self.tie: list[float] = []  # stage-2 objective per column
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []
        self.row_start: list[int] = []
        self.row_index: list[int] = []
        self.row_value: list[float] = []
        self.tie_constant = 0.0
        self.x: list[dict[int, int]] = []
        self.breakers: list[int] = []  # rows of the symmetry breaking (dropped in stage 2)
        p = problem
        for c, ok in enumerate(p.allowed):
            cols = {}
            for d in ok:
                cols[d] = self._col(p.unary[c][d], 1.0, True, 0.0 if d == p.pref[c] else 1.0)
            self.x.append(cols)
            self._row(1.0, 1.0, [(i, 1.0) for i in cols.values()])
        self.z: list[dict[tuple[int, int], int]] = []
        for u, v, b, uses in p.edges:
            ze: dict[tuple[int, int], int] = {}
            for s in p.allowed[v]:
                for t in p.allowed[u]:
                    copy = s != t
                    ze[s, t] = self._col(
                        p.edge_ns(b, s, t, uses) if copy else 0,
                        1.0,
                        False,
                        0.0 if copy else -uses * weights.per_copy,
                    )
            self.tie_constant += uses * weights.per_copy
            self.z.append(ze)
            for s in p.allowed[v]:
                self._row(0.0, 0.0, [*((ze[s, t], 1.0) for t in p.allowed[u]), (self.x[v][s], -1.0)])
            for t in p.allowed[u]:
                self._row(0.0, 0.0, [*((ze[s, t], 1.0) for s in p.allowed[v]), (self.x[u][t], -1.0)])
        for group in symmetric:
            first = next((c for c, ok in enumerate(p.allowed) if len(ok) > 1 and group[0] in ok), None)
            if first is not None:
                for g in group[1:]:
                    self.breakers.append(len(self.row_lo))
                    self._row(0.0, 0.0, [(self.x[first][g], 1.0)])
        live = p.liveness
        for d, budget in p.budgets.items():
            # The memory rule (`memory`): resident weights, and at each step
            # the live activations, the class's largest result and its copies in.
            room = float(budget)
            resident = self._col(0, _INF, False, 0.0)
            terms: dict[int, float] = {resident: -1.0}
            for c in range(len(p.allowed)):
                col = self.x[c].get(d)
                if col is not None and p.weight_bytes[c]:
                    terms[col] = terms.get(col, 0.0) + p.weight_bytes[c]
            self._row(0.0, 0.0, list(terms.items()))
            self._row(-_INF, room, [(resident, 1.0)])
            at: list[dict[int, float]] = [{} for _ in live.order]
            for c in range(len(p.allowed)):
                col = self.x[c].get(d)
                if col is None:
                    continue
                k = live.pos[c]
                if p.largest[c]:
                    at[k][col] = at[k].get(col, 0.0) + p.largest[c]
                if not live.weight[c] and live.value[c]:
                    for j in range(k + 1, live.last[c] + 1):
                        at[j][col] = at[j].get(col, 0.0) + live.value[c]
            for e, (u, v, b, uses) in enumerate(p.edges):
                col = self.x[u].get(d)
                if col is None or not b:
                    continue
                row = at[live.pos[u]]
                row[col] = row.get(col, 0.0) + b * uses
                stay = self.z[e].get((d, d))
                if stay is not None:
                    row[stay] = row.get(stay, 0.0) - b * uses
            for row in at:
                if any(v for v in row.values()):
                    self._row(-_INF, room, [(resident, 1.0), *row.items()])

    def _col(self, cost: int, upper: float, integer: bool, tie: float) -> int:
        self.cost.append(float(cost))
        self.upper.append(upper)
        self.tie.append(tie)
        if integer:
            self.integer.append(len(self.cost) - 1)
        return len(self.cost) - 1

    def _row(self, lo: float, hi: float, terms: Sequence[tuple[int, float]]) -> None:
        self.row_lo.append(lo)
        self.row_hi.append(hi)
        self.row_start.append(len(self.row_index))
        for i, v in terms:
            self.row_index.append(i)
            self.row_value.append(v)

    def highs(self, time_limit_s: float | None, objective: Sequence[float]) -> highspy.Highs:
        h = highspy.Highs()  # type: ignore[no-untyped-call]
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        if time_limit_s is not None:
            h.setOptionValue("time_limit", max(0.01, time_limit_s))
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 0.5)
        # HiGHS's own symmetry detection can outlast the whole search (densenet121
        # with three 6 MB GPUs: minutes after "Found 468 generators"); identical
        # devices are told apart by `breakers` instead.
        h.setOptionValue("mip_detect_symmetry", False)
        n = len(self.cost)
        empty_i = np.array([], dtype=np.int32)
        h.addCols(
            n, np.array(objective), np.zeros(n), np.array(self.upper), 0, empty_i, empty_i, np.array([])
        )
        h.addRows(
            len(self.row_lo),
            np.array(self.row_lo),
            np.array(self.row_hi),
            len(self.row_index),
            np.array(self.row_start, dtype=np.int32),
            np.array(self.row_index, dtype=np.int32),
            np.array(self.row_value),
        )
        ints = np.array(self.integer, dtype=np.int32)
        h.changeColsIntegrality(len(ints), ints, np.array([highspy.HighsVarType.kInteger] * len(ints)))
        return h

    def start(self, h: highspy.Highs, assign: Sequence[int]) -> None:
        idx: list[int] = []
        val: list[float] = []
        for c, cols in enumerate(self.x):
            for d, i in cols.items():
                idx.append(i)
                val.append(1.0 if d == assign[c] else 0.0)
        h.setSolution(len(idx), np.array(idx, dtype=np.int32), np.array(val))

    def read(self, h: highspy.Highs) -> list[int] | None:
        values = h.getSolution().col_value
        if len(values) != len(self.cost):
            return None
        return [max(cols, key=lambda d: values[cols[d]]) for cols in self.x]


def relabel(
    problem: Problem, weights: Weights, assign: Sequence[int], groups: Sequence[Sequence[int]]
) -> list[int]:
    """The plan with the devices of each identical group permuted to the best
    objective (run time and copies do not change; the preferred-device
    tie-break may), trying every permutation of groups of up to 4 devices."""
    best = list(assign)
    best_value = evaluate(problem, weights, best)[0]
    for group in groups:
        if len(group) > 4:
            continue
        for perm in itertools.permutations(group):
            mapping = dict(zip(group, perm))
            trial = [mapping.get(d, d) for d in best]
            if any(trial[c] not in ok for c, ok in enumerate(problem.allowed)):
                continue
            value = evaluate(problem, weights, trial)[0]
            if value < best_value and not budget_violations(problem, trial):
                best, best_value = trial, value
    return best


def feasible_plan(problem: Problem, assign: Sequence[int]) -> bool:
    """Support and budgets hold at integer precision."""
    return all(assign[c] in ok for c, ok in enumerate(problem.allowed)) and not budget_violations(
        problem, assign
    )


def _bound(dual: float, fixed_ns: int) -> int:
    """An integer lower bound on the run time from HiGHS's dual bound."""
    if not math.isfinite(dual):
        return fixed_ns
    return fixed_ns + max(0, math.ceil(dual - 0.25 - 1e-9 * abs(dual)))


@dataclass(frozen=True)
class Effort:
    """How much work one HiGHS run may do: branch-and-bound nodes; `checks`,
    the times HiGHS checks its limits times the model's columns (it checks
    between the rounds of its root node's cuts and heuristics and at every
    node, so this bounds the root's work too, which nodes do not; a check
    costs about as much as the model is large; its callbacks report no
    simplex iterations during a MIP); and with `stall_nodes` a stop once that
    many nodes pass with neither the bound nor the plan improving. Counted,
    so a run stops at the same point on an idle or a busy machine
    (solver.work)."""

    nodes: int
    checks: int = 1 << 40
    stall_nodes: int | None = None
    # The largest model (columns) HiGHS is given: on larger ones its root node
    # can run for many seconds between two checks (densenet121 with two 9 MB
    # GPUs, 11555 columns: 8 to 36 s without one), which no count can bound.
    columns: int = 1 << 40
    # The largest model (nonzeros of its rows) HiGHS is given: its root LP's
    # work grows with them, before its first check.
    nonzeros: int = 1 << 40

    def scaled(self, share: float) -> Effort:
        """This effort times `share` (at least one node and one check)."""
        stall = None if self.stall_nodes is None else max(1, int(self.stall_nodes * share))
        return dataclasses.replace(
            self, nodes=max(1, int(self.nodes * share)), checks=max(1, int(self.checks * share)), stall_nodes=stall
        )


@dataclass(frozen=True)
class _Run:
    """One HiGHS run: its model status, dual bound (objective units, without
    the problem's constant), the device of each class when it has a plan,
    the nodes it explored, and whether the deadline (not its effort) stopped it."""

    status: str
    infeasible: bool
    optimal: bool
    dual: float
    assign: list[int] | None
    nodes: int = 0
    clock: bool = False
    iterations: int = 0
    checks: int = 0


def _run_here(
    model: _Model,
    objective: Sequence[float],
    effort: Effort,
    limit_s: float | None,
    start: Sequence[int] | None,
    stage2_ns: float | None,
    report: Callable[[str, Any], None] | None = None,
) -> _Run:
    """Run HiGHS in this process (the child's side of `_run`); `limit_s`:
    HiGHS's own time limit, only where no parent watches the deadline."""
    h = model.highs(limit_s, objective)
    h.setOptionValue("mip_max_nodes", max(1, effort.nodes))
    if stage2_ns is not None:
        for row in model.breakers:  # the tie-breaks tell identical devices apart
            h.changeRowBounds(row, -_INF, _INF)
        n = len(model.cost)
        h.addRow(-_INF, stage2_ns, n, np.arange(n, dtype=np.int32), np.array(model.cost))
    if start is not None:
        model.start(h, start)
    # The effort's stall rule, checked where HiGHS checks its own limits: at
    # the same points of the search whatever the machine's load.
    moved = [0, -math.inf]  # node count when the bound or the plan last improved, the bound then
    stop = [""]
    checks = [0]
    most_checks = max(1, effort.checks // max(1, len(model.cost)))

    def progress(event: Any) -> None:
        out = event.data_out
        dual = float(out.mip_dual_bound)
        nodes = int(out.mip_node_count)
        checks[0] += 1
        if report is not None:
            report("bound", dual)
        if dual > moved[1] + 1e-6 * abs(moved[1]):
            moved[0], moved[1] = nodes, dual
        if checks[0] >= most_checks:
            stop[0] = "stopped: work limit"
        elif effort.stall_nodes is not None and nodes - moved[0] >= effort.stall_nodes:
            stop[0] = "stopped: stalled"
        if stop[0]:
            event.data_in.user_interrupt = True

    def improved(event: Any) -> None:
        moved[0] = int(event.data_out.mip_node_count)
        if report is not None:
            values = event.data_out.mip_solution
            report("plan", [max(cols, key=lambda d: values[cols[d]]) for cols in model.x])

    h.cbMipInterrupt += progress
    h.cbMipImprovingSolution += improved
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    assign = model.read(h) if info.primal_solution_status == 2 else None
    text = stop[0] if status == highspy.HighsModelStatus.kInterrupt and stop[0] else h.modelStatusToString(status)
    return _Run(
        text,
        status == highspy.HighsModelStatus.kInfeasible,
        status == highspy.HighsModelStatus.kOptimal,
        float(info.mip_dual_bound),
        assign,
        int(info.mip_node_count),
        status == highspy.HighsModelStatus.kTimeLimit,
        int(info.simplex_iteration_count),
        checks[0],
    )


def _run(
    model: _Model,
    objective: Sequence[float],
    effort: Effort,
    work: Work,
    start: Sequence[int] | None,
    stage2_ns: float | None = None,
) -> _Run:
    """Run HiGHS with `effort`, in a forked child process that is killed at
    the request's deadline: HiGHS's own time limit is not checked in every
    phase (densenet121 with two 9 MB GPUs spent 9 s of a 4.5 s limit after
    its root LP, calling no callback). The child streams its dual bound and
    each improving plan as it goes, so a run the deadline ends still gives
    the last of each (for `on_timeout: "best"`; otherwise the deadline is a
    SolverTimeout)."""
    if not hasattr(os, "fork"):  # no fork on this platform: in process, HiGHS's limit only
        run = _run_here(model, objective, effort, work.seconds_left(), start, stage2_ns)
        if run.clock:
            work.stopped_by_clock("highs")
        return run
    # os.fork, not multiprocessing: plans run in daemonic pool workers, which
    # multiprocessing forbids to have children.
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, report through the pipe, exit at once
        os.close(read_fd)
        send = Connection(write_fd, readable=False)
        last = [0.0]

        def report(kind: str, value: Any) -> None:
            # Bounds at most every 50 ms: only a run the deadline ends reads them.
            now = time.monotonic()
            if kind == "plan" or now - last[0] > 0.05:
                if kind == "bound":
                    last[0] = now
                send.send((kind, value))

        try:
            send.send(("done", _run_here(model, objective, effort, None, start, stage2_ns, report)))
        finally:
            os._exit(0)  # no atexit handlers or inherited finalisers in the child
    os.close(write_fd)
    receive = Connection(read_fd, writable=False)
    dual = -math.inf
    plan: list[int] | None = None  # the last improving plan the child reported
    result: _Run | None = None
    try:
        while result is None:
            # The request's deadline, on its own clock, is the only stop from outside.
            if work.deadline.expired():
                break
            if not receive.poll(min(max(work.seconds_left(), 0.001), 0.05)):
                continue
            try:
                kind, value = receive.recv()
            except EOFError:
                break
            if kind == "bound":
                dual = max(dual, value)
            elif kind == "plan":
                plan = value
            else:
                result = value
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        receive.close()
    if result is None or result.clock:
        log.info("HiGHS stopped at the request's time limit (last bound %s)", dual)
        work.stopped_by_clock("highs")
        if result is not None:
            return result
        return _Run("stopped at the time limit", False, False, dual, plan, clock=True)
    return result


def milp_columns(problem: Problem) -> int:
    """The columns of the problem's MILP (`_Model`), counted without building
    it: a binary per class and allowed device, a copy variable per edge and
    pair of its ends' devices, and the resident weights of each budget."""
    allowed = problem.allowed
    return (
        sum(len(ok) for ok in allowed)
        + sum(len(allowed[u]) * len(allowed[v]) for u, v, _b, _uses in problem.edges)
        + len(problem.budgets)
    )


def milp_solve(
    problem: Problem,
    weights: Weights,
    start: Sequence[int] | None,
    effort: Effort,
    work: Work,
    ties: bool = True,
) -> MilpResult:
    """Solve the problem's MILP with `effort` (stage 1, then with `ties`
    stage 2 with at most 0.3 of it), warm-started by `start` when given;
    the nodes both stages explored count against `work`."""
    size = milp_columns(problem)
    if size > effort.columns:
        # Decided before the model is built: building it walks every step of
        # the memory rule, which on a large problem outlasts the search
        # (a 10,000-operator DAG with two 1 MB GPUs: 145,000 columns, 20 s).
        log.info("HiGHS skipped: %d columns, more than %d", size, effort.columns)
        return MilpResult(None, problem.fixed_ns, False, False, False, "skipped: too large")
    groups = identical_devices(problem)
    model = _Model(problem, weights, groups)
    nonzeros = len(model.row_index)
    if nonzeros > effort.nonzeros:
        log.info("HiGHS skipped: %d nonzeros, more than %d", nonzeros, effort.nonzeros)
        return MilpResult(None, problem.fixed_ns, False, False, False, "skipped: too large")
    effort = dataclasses.replace(effort, nodes=max(1, min(effort.nodes, work.left())))
    first = _run(model, model.cost, effort, work, start)
    work.spend(first.nodes + 1, "highs")
    text = first.status
    if first.infeasible:
        return MilpResult(None, 0, False, False, True, text, first.nodes, nonzeros)
    bound = _bound(first.dual, problem.fixed_ns)
    assign = first.assign
    if assign is not None and not feasible_plan(problem, assign):
        log.info("HiGHS plan violates the problem at integer precision; dropped")
        assign = None
    if assign is None:
        return MilpResult(None, bound, False, False, False, text, first.nodes, nonzeros)
    assign = relabel(problem, weights, assign, groups)
    ns = evaluate(problem, weights, assign)[1]
    bound = min(bound, ns)
    ns_proven = bound >= ns
    proven = False
    nodes = first.nodes
    log.info(
        "HiGHS stage 1: %s in %d nodes, %d checks, %d iterations (%d columns, %d rows, %d nonzeros), "
        "run time %d ns, bound %d ns",
        text, first.nodes, first.checks, first.iterations, len(model.cost), len(model.row_lo), nonzeros, ns, bound,
    )
    if ties and ns_proven and not work.cut_short:
        # Stage 2: the tie-breaks among plans of run time <= ns, with at most
        # 0.3 of the checks stage 1 made: proving the tie-breaks must not double the work.
        columns = len(model.cost)
        tie_effort = Effort(
            max(1, int(0.3 * effort.nodes)), columns * max(STAGE2_CHECKS, int(0.3 * first.checks)), None, columns
        )
        second_run = _run(model, model.tie, tie_effort, work, assign, float(ns - problem.fixed_ns) + 0.5)
        work.spend(second_run.nodes + 1, "highs")
        nodes += second_run.nodes
        second = second_run.assign
        if second is not None and feasible_plan(problem, second):
            second = relabel(problem, weights, second, groups)
            # Proven only when HiGHS's optimum is no worse than the plan we had
            # at integer precision (otherwise its tolerances decided).
            if evaluate(problem, weights, second)[0] <= evaluate(problem, weights, assign)[0]:
                assign = second
                proven = second_run.optimal
        text = f"{text}; ties {second_run.status}"
        log.info(
            "HiGHS stage 2: %s in %d nodes, %d checks, %d iterations",
            text, second_run.nodes, second_run.checks, second_run.iterations,
        )
    return MilpResult(assign, bound, ns_proven, proven, False, text, nodes, nonzeros)
