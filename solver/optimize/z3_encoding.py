"""The Z3 encoding of an optimize problem (Z3's Python API), reading a
model back, and the Z3 check of a plan found without it (`z3_check`).

`Encoding` is the one encoding that Z3 Optimize (`strategies._z3_optimize`),
`z3_confirm` and the budget conflict's unsat core share:

- one Bool `b<c>_<d>` per (class, device of its domain); exactly one per
  class as a pseudo-Boolean equality (`PbEq`);
- with `track`, every device is in the domain and support is an implication
  guarded by `g_allow<c>`, each budget by `g_budget<d>` (unsat cores);
- each budget is the memory rule by liveness (`memory`), one
  pseudo-Boolean constraint (`PbLe`) per step of the order: the weight bytes
  of the classes on d, and at that step the values live on d, the step's
  largest result when its class is on d and the bytes copied into it (a Bool
  per edge that can copy into d, implied by its consumer on d and its
  producer elsewhere);
- the objective: one soft term per cost (kernel on a non-free device, copy
  between two devices), `objective()` as an integer sum, so a bound
  `objective < incumbent` can be added.

It replaced SMT-LIB text assembled by hand and read back with a regular
expression (the first form of the encoding); now no caller goes through text (the budget
conflict printed it and parsed it back into a new context). Measured cost
(2-core box under load, resnet50 with cpu and two 60 MB GPUs, 436 classes):
building the encoding takes about 0.45 s of Python API calls, and
`z3_confirm` 0.7 s against 0.12 s for the old text (`z3_check` is opt-in;
the solving paths no longer use Z3 on model-sized problems).
"""

from __future__ import annotations

from typing import Any

import z3

from ..errors import SolverTimeout
from .problem import Problem, Solution, Weights


class Encoding:
    """The problem's constraints and objective over Z3 Bools, in `ctx`."""

    def __init__(
        self, problem: Problem, weights: Weights, track: bool, ctx: z3.Context | None = None
    ) -> None:
        self.problem = problem
        self.ctx = ctx if ctx is not None else z3.Context()
        self.hard: list[Any] = []
        self.guarded: dict[str, Any] = {}  # guard name -> the constraint it guards
        self.guards: dict[str, tuple[str, int]] = {}  # guard name -> ("allow", class) or ("budget", device)
        self.soft: list[tuple[Any, int]] = []  # (Bool that costs `weight` when true, weight)
        self.lits: list[dict[int, Any]] = []
        ctx_ = self.ctx
        k = len(problem.devices)
        for c, ok in enumerate(problem.allowed):
            dom = list(range(k)) if track else list(ok)
            lits = {d: z3.Bool(f"b{c}_{d}", ctx_) for d in dom}
            self.lits.append(lits)
            if len(dom) == 1:
                self.hard.append(lits[dom[0]])
            else:
                self.hard.append(z3.PbEq([(lit, 1) for lit in lits.values()], 1))
            if track and len(ok) < k:
                name = f"g_allow{c}"
                self.guards[name] = ("allow", c)
                self.guarded[name] = z3.Or([lits[d] for d in ok], ctx_) if ok else z3.BoolVal(False, ctx_)
            if len(dom) > 1:
                for d in dom:
                    cost = problem.unary[c][d] * weights.per_ns + (0 if d == problem.pref[c] else 1)
                    if cost > 0:
                        self.soft.append((lits[d], cost))
        for u, v, b, uses in problem.edges:
            for dv, lv in self.lits[v].items():
                for du, lu in self.lits[u].items():
                    if du != dv:
                        cost = problem.edge_ns(b, dv, du, uses) * weights.per_ns + uses * weights.per_copy
                        self.soft.append((z3.And(lv, lu), cost))
        live = problem.liveness
        for d, budget in problem.budgets.items():
            # The memory rule by liveness (`memory`): resident weights, and at
            # each step live activations, the largest result and copies in.
            resident: list[tuple[Any, int]] = []
            implied: list[Any] = []
            for c, lits in enumerate(self.lits):
                if d in lits and problem.weight_bytes[c]:
                    resident.append((lits[d], problem.weight_bytes[c]))
            at: list[list[tuple[Any, int]]] = [[] for _ in live.order]
            for c, lits in enumerate(self.lits):
                if d not in lits:
                    continue
                k = live.pos[c]
                if problem.largest[c]:
                    at[k].append((lits[d], problem.largest[c]))
                if not live.weight[c] and live.value[c]:
                    for j in range(k + 1, live.last[c] + 1):
                        at[j].append((lits[d], live.value[c]))
            for e, (u, v, b, uses) in enumerate(problem.edges):
                if b and d in self.lits[u] and any(x != d for x in self.lits[v]):
                    into = z3.Bool(f"i{d}_{e}", ctx_)
                    here = self.lits[v].get(d)
                    implied.append(
                        z3.Implies(z3.And(self.lits[u][d], z3.Not(here)), into)
                        if here is not None
                        else z3.Implies(self.lits[u][d], into)
                    )
                    at[live.pos[u]].append((into, b * uses))
            room = budget
            rows = [resident, *(resident + step for step in at if step)]
            parts = [*implied, *(z3.PbLe(row, room) if row else z3.BoolVal(room >= 0, ctx_) for row in rows)]
            rule = parts[0] if len(parts) == 1 else z3.And(*parts)
            if track:
                name = f"g_budget{d}"
                self.guards[name] = ("budget", d)
                self.guarded[name] = rule
            else:
                self.hard.append(rule)
        self.variables = sum(len(lits) for lits in self.lits)

    def guard(self, name: str) -> Any:
        """The guard literal `name` (for check assumptions and unsat cores)."""
        return z3.Bool(name, self.ctx)

    def constraints(self) -> list[Any]:
        """Every hard constraint, guarded ones as `guard => constraint`."""
        return [*self.hard, *(z3.Implies(self.guard(g), rule) for g, rule in self.guarded.items())]

    def solver(self, timeout_ms: int) -> Any:
        """A fresh `z3.Solver` in this context with every constraint and a time limit."""
        checker = z3.Solver(ctx=self.ctx)
        checker.set("timeout", max(1, timeout_ms))
        checker.add(*self.constraints())
        return checker

    def objective(self) -> Any:
        """The objective's variable part as an integer term (soft costs that hold)."""
        if not self.soft:
            return z3.IntVal(0, self.ctx)
        return z3.Sum([z3.If(lit, z3.IntVal(w, self.ctx), z3.IntVal(0, self.ctx)) for lit, w in self.soft])

    def constant(self, weights: Weights) -> int:
        """The objective's part no Bool decides: fixed copies and single-choice classes."""
        problem = self.problem
        total = problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy
        for c, lits in enumerate(self.lits):
            if len(lits) == 1:
                (d,) = lits
                total += problem.unary[c][d] * weights.per_ns + (0 if d == problem.pref[c] else 1)
        return total

    def read(self, model: Any) -> list[int]:
        """The device of each class in a Z3 model."""
        out = []
        for c, lits in enumerate(self.lits):
            chosen = next((d for d, lit in lits.items() if z3.is_true(model.eval(lit))), None)
            out.append(chosen if chosen is not None else self.problem.allowed[c][0])
        return out


def z3_confirm(problem: Problem, weights: Weights, solution: Solution, timeout_ms: int) -> int:
    """Z3 checks a plan found without it (`z3_check`): the assignment meets
    every hard constraint and budget of the encoding, and Z3's value of the
    objective equals ours. (Proving a plan minimal is the flow's or HiGHS's
    job: Z3 alone cannot refute a better plan on a few hundred classes in
    reasonable time.) Returns the number of Z3 variables."""
    enc = Encoding(problem, weights, track=False)
    checker = enc.solver(timeout_ms)
    obj = z3.Int("obj", enc.ctx)
    checker.add(obj == enc.objective())
    for c, d in enumerate(solution.assign):
        if len(enc.lits[c]) > 1:
            lit = enc.lits[c].get(d)
            if lit is None:
                raise RuntimeError(f"internal error: class {c} placed outside its devices")
            checker.add(lit)
    result = checker.check()
    if result == z3.unknown:
        raise SolverTimeout(f"Z3 gave no answer checking the plan ({checker.reason_unknown()})")
    if result == z3.unsat:
        raise RuntimeError("internal error: Z3 finds the optimize plan inconsistent")
    value = checker.model().eval(obj).as_long() + enc.constant(weights)
    if value != solution.objective:
        raise RuntimeError(f"internal error: Z3 values the plan at {value}, not {solution.objective}")
    return enc.variables
