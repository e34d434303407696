"""Optimize mode against exhaustive search on 100 seeded random programs.

Each program is a small DAG of tensor operators with random request pins,
operator-support tables and (sometimes) a memory budget, over two or three
devices. The optimizer's objective must equal the minimum over every
assignment of its classes; its output must carry exactly the copies it
predicted and be a fixed point of the TVM mode.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any

import pytest

import relay
import solver
from solver.optimize import Problem, budget_violations, evaluate
from solver.optimize.run import Optimized, optimize

UNARY = ("exp", "negative", "nn.relu", "sigmoid", "tanh")
BINARY = ("add", "multiply", "subtract")
SHAPES = ("(8, 8)", "(128, 128)", "(512, 512)", "(1024, 1024)")


@dataclass(frozen=True)
class Case:
    seed: int
    text: str
    config: solver.PlanConfig
    devices: int


def _program(rng: random.Random, n_ops: int, shape: str) -> tuple[str, list[str]]:
    """A random DAG: parameters, operator bindings, sometimes a let, a result."""
    n_params = rng.randint(1, 3)
    values = [f"%p{i}" for i in range(n_params)]
    params = ", ".join(f"%p{i}: Tensor[{shape}, float32]" for i in range(n_params))
    lines = []
    ops: list[str] = []
    for i in range(n_ops):
        if rng.random() < 0.5:
            op = rng.choice(UNARY)
            args = [rng.choice(values)]
        else:
            op = rng.choice(BINARY)
            args = [rng.choice(values), rng.choice(values)]
        ops.append(op)
        if rng.random() < 0.2:
            lines.append(f"  let %v{i} = {op}({', '.join(args)});")
            values.append(f"%v{i}")
        else:
            lines.append(f"  %{i} = {op}({', '.join(args)});")
            values.append(f"%{i}")
    used = {a for line in lines for a in line.split("(", 1)[1].rstrip(");").split(", ")}
    sinks = [v for v in values[n_params:] if v not in used]
    # Every operator is reachable: the result holds every value nothing uses.
    result = sinks[0] if len(sinks) == 1 else f"({', '.join(sinks)})"
    text = f'#[version = "0.0.5"]\ndef @main({params}) {{\n' + "\n".join(lines) + f"\n  {result}\n}}\n"
    return text, ops


def _case(seed: int) -> Case:
    rng = random.Random(seed)
    devices = 3 if seed % 3 == 2 else 2
    names = ["cpu", "cuda", "cuda:1"][:devices]
    n_ops = rng.randint(2, 7 if devices == 2 else 5)
    shape = rng.choice(SHAPES)
    text, ops = _program(rng, n_ops, shape)
    counts: dict[str, int] = {}
    indexed = []
    for op in ops:
        indexed.append((op, counts.get(op, 0)))
        counts[op] = counts.get(op, 0) + 1
    pins = tuple(
        {"select": {"op": op, "index": k}, "device": rng.choice(names)}
        for op, k in indexed
        if rng.random() < 0.25
    )
    support: dict[str, list[str]] = {}
    for name in names:
        banned = [op for op in sorted(set(ops)) if rng.random() < 0.15]
        if banned:
            support[name] = banned
    profiles: dict[str, dict[str, Any]] = {}
    if rng.random() < 0.3:
        rows, cols = (int(x) for x in shape.strip("()").split(", "))
        # A few tensors' worth: the budget binds often.
        profiles[rng.choice(names)] = {
            "memory_bytes": int(rows * cols * 4 * rng.choice([1.5, 2.5, 3.5, 5.5]))
        }
    if rng.random() < 0.3:
        profiles.setdefault("cpu", {})["peak_gflops"] = rng.choice([5.0, 500.0, 50_000.0])
    config = solver.PlanConfig(
        mode="optimize",
        virtual_devices=tuple(names),
        default_device=rng.choice(names),
        host_device="cpu",
        constraints=pins,
        op_support=support,
        device_profiles=profiles,
        timeout_ms=20_000,
        z3_check=True,
        overlap=False,  # the brute force prices the synchronous objective
    )
    return Case(seed, text, config, devices)


def _brute_force(problem: Problem, weights: solver.optimize.Weights) -> int | None:
    best = None
    for assign in itertools.product(*problem.allowed):
        if problem.budgets and budget_violations(problem, assign):
            continue
        value = evaluate(problem, weights, assign)[0]
        best = value if best is None else min(best, value)
    return best


def _free(problem: Problem) -> int:
    return sum(1 for ok in problem.allowed if len(ok) > 1)


def _cases() -> list[Case]:
    out: list[Case] = []
    seed = 0
    while len(out) < 100:
        out.append(_case(seed))
        seed += 1
    return out


@pytest.mark.parametrize("case", _cases(), ids=lambda c: f"seed{c.seed}")
def test_objective_equals_brute_force(case: Case) -> None:
    module = relay.parse_text(case.text)
    try:
        found: Optimized = optimize(module, case.config)
    except solver.PlanningConflict as err:
        # Then no assignment of the classes may satisfy pins, support and budgets.
        assert err.constraints
        assert all(c.kind for c in err.constraints)
        return
    problem = found.problem
    assert _free(problem) <= (10 if case.devices == 2 else 7), "generator keeps brute force small"
    best = _brute_force(problem, found.weights)
    assert best is not None
    assert found.solution.objective == best, (found.solution.method, case.text)
    assert found.result.cost is not None and found.result.cost.optimal
    # The output carries exactly the copies the objective counted, and the
    # per-device times (copies at their destination) add up to the total.
    cost = found.result.cost
    assert len(found.result.copies) == cost.copies
    shares = (d.predicted_ms - d.overlap_hidden_ms for d in cost.per_device.values())
    assert sum(shares) == pytest.approx(cost.predicted_ms, abs=1e-5)
    # Fixed point: the TVM mode accepts the output unchanged.
    again = solver.plan(
        found.result.module,
        solver.PlanConfig(default_device=case.config.default_device, host_device="cpu", z3_check=True),
    )
    assert relay.structural_equal(again.module, found.result.module), relay.print_text(found.result.module)
