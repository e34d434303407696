"""The SMT-LIB encoding of an optimize problem for Z3, reading a model back,
and the Z3 check of a plan found without it (`z3_check`).

One Bool `b<c>_<d>` per (class, allowed device), exactly one per class; soft
clauses for every cost term; budgets as linear constraints over the Bools.
"""

from __future__ import annotations

import re
from typing import Any

import z3

from ..errors import SolverTimeout
from .problem import Problem, Solution, Weights

_MODEL_RE = re.compile(r"\(define-fun (b\d+_\d+) \(\) Bool\s+(true|false)\)")


def encode(
    problem: Problem, weights: Weights, track: bool
) -> tuple[list[str], list[str], dict[str, Any], int]:
    """SMT-LIB for Z3: one Bool per (class, allowed device), exactly one per
    class; soft clauses for every cost term; budgets as linear constraints.
    With `track`, pins, support rules and budgets are guarded by literals
    (for an unsat core) instead of being hard."""
    lines: list[str] = []
    soft: list[str] = []
    guards: dict[str, Any] = {}
    nvars = 0
    k = len(problem.devices)

    def lit(c: int, d: int) -> str:
        return f"b{c}_{d}"

    domain: list[list[int]] = []
    for c, ok in enumerate(problem.allowed):
        dom = list(range(k)) if track else ok
        domain.append(dom)
        for d in dom:
            lines.append(f"(declare-const {lit(c, d)} Bool)")
            nvars += 1
        if len(dom) == 1:
            lines.append(f"(assert {lit(c, dom[0])})")
        else:
            ones = " ".join("1" for _ in dom)
            lines.append(f"(assert ((_ pbeq 1 {ones}) {' '.join(lit(c, d) for d in dom)}))")
        if track and len(ok) < k:
            g = f"g_allow{c}"
            guards[g] = ("allow", c)
            lines.append(f"(declare-const {g} Bool)")
            lines.append(f"(assert (=> {g} (or {' '.join(lit(c, d) for d in ok) or 'false'})))")
        for d in dom:
            cost = problem.unary[c][d] * weights.per_ns + (0 if d == problem.pref[c] else 1)
            if cost > 0 and len(dom) > 1:
                soft.append(f"(assert-soft (not {lit(c, d)}) :weight {cost})")
    for u, v, b, uses in problem.edges:
        for dv in domain[v]:
            for du in domain[u]:
                if du == dv:
                    continue
                cost = problem.edge_ns(b, dv, du, uses) * weights.per_ns + uses * weights.per_copy
                soft.append(f"(assert-soft (not (and {lit(v, dv)} {lit(u, du)})) :weight {cost})")
    for d, budget in problem.budgets.items():
        terms = []
        for c in range(len(problem.allowed)):
            if d in domain[c] and problem.weight_bytes[c]:
                terms.append(f"(ite {lit(c, d)} {problem.weight_bytes[c]} 0)")
        for u, v, b, uses in problem.edges:
            if d in domain[u]:
                away = [lit(v, e) for e in domain[v] if e != d]
                if away:
                    cond = away[0] if len(away) == 1 else f"(or {' '.join(away)})"
                    terms.append(f"(ite (and {lit(u, d)} {cond}) {b * uses} 0)")
        m = f"m{d}"
        lines.append(f"(declare-const {m} Int)")
        lines.append(f"(assert (>= {m} 0))")
        for c in range(len(problem.allowed)):
            if d in domain[c] and problem.largest[c]:
                lines.append(f"(assert (=> {lit(c, d)} (>= {m} {problem.largest[c]})))")
        fixed = problem.fixed_copy_bytes.get(d, 0)
        total = f"(+ {m} {fixed} {' '.join(terms)})" if terms else f"(+ {m} {fixed})"
        rule = f"(<= {total} {budget})"
        if track:
            g = f"g_budget{d}"
            guards[g] = ("budget", d)
            lines.append(f"(declare-const {g} Bool)")
            lines.append(f"(assert (=> {g} {rule}))")
        else:
            lines.append(f"(assert {rule})")
    return lines, soft, guards, nvars


def read_assignment(model_text: str, problem: Problem) -> list[int]:
    assign = [ok[0] for ok in problem.allowed]
    for name, value in _MODEL_RE.findall(model_text):
        if value == "true":
            c, d = name[1:].split("_")
            assign[int(c)] = int(d)
    return assign


def z3_confirm(problem: Problem, weights: Weights, solution: Solution, timeout_ms: int) -> int:
    """Z3 checks a plan found without it (`z3_check`): the assignment meets
    every hard constraint and budget of the encoding, and Z3's value of the
    objective equals ours. (Proving a cut minimal is the flow's job: Z3 alone
    cannot refute a better plan on a few hundred classes in reasonable time.)
    Returns the number of Z3 variables."""
    lines, soft, _, nvars = encode(problem, weights, track=False)
    terms = []
    for line in soft:
        clause = line[len("(assert-soft ") : line.rindex(" :weight")]
        weight = line[line.rindex(":weight ") + len(":weight ") : -1]
        terms.append(f"(ite {clause} 0 {weight})")
    ctx = z3.Context()
    checker = z3.Solver(ctx=ctx)
    checker.set("timeout", max(1, timeout_ms))
    checker.from_string(
        "\n".join([*lines, "(declare-const obj Int)", f"(assert (= obj (+ 0 {' '.join(terms)})))"])
    )
    for c, d in enumerate(solution.assign):
        if len(problem.allowed[c]) > 1:
            checker.add(z3.Bool(f"b{c}_{d}", ctx))
    result = checker.check()
    if result == z3.unknown:
        raise SolverTimeout(f"Z3 gave no answer checking the plan ({checker.reason_unknown()})")
    if result == z3.unsat:
        raise RuntimeError("internal error: Z3 finds the optimize plan inconsistent")
    constant = problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy
    for c, ok in enumerate(problem.allowed):
        if len(ok) == 1:
            constant += problem.unary[c][ok[0]] * weights.per_ns + (0 if ok[0] == problem.pref[c] else 1)
    value = checker.model().eval(z3.Int("obj", ctx)).as_long()
    if value + constant != solution.objective:
        raise RuntimeError(
            f"internal error: Z3 values the plan at {value + constant}, not {solution.objective}"
        )
    return nvars
