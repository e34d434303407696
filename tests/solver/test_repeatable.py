"""Repeatable answers: the optimize search stops on counted work
(`solver.work.Work`), never on the clock, so the same request gives the same
answer on an idle and on a busy machine; the time limit only ends a request
that has not finished (a SolverTimeout), or with `on_timeout: "best"` cuts
the search short and marks the answer so (docs/optimize.md, section 7a)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import relay
import solver
from solver.deadline import Deadline
from solver.errors import SolverTimeout
from solver.optimize import Weights, budget_violations, evaluate
from solver.optimize import run as optimize_run
from solver.optimize.strategies import solve
from solver.work import Work
from tests._service import run_devplan

from .test_optimize_search import random_problem

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_part_counts_against_the_whole_and_stops_at_its_own_allowance() -> None:
    whole = Work(10)
    part = whole.part(4)
    assert [part.spend(2) for _ in range(3)] == [True, True, False]
    assert whole.spent == 6 and whole.left() == 4
    assert whole.part(100).left() == 4  # never more than the whole has left
    assert whole.spend(4) and not whole.more()


def test_the_deadline_fails_a_search_unless_the_best_plan_was_asked_for() -> None:
    clock = Clock()
    failing = Work(100, Deadline(1_000, clock))
    assert failing.spend(1)
    clock.now = 2.0
    with pytest.raises(SolverTimeout):
        failing.part(10).spend(1)
    clock.now = 0.0
    best = Work(100, Deadline(1_000, clock), best=True)
    part = best.part(50)
    assert part.more() and not best.cut_short
    clock.now = 2.0
    assert not part.spend(1) and not best.more() and best.cut_short and best.left() == 0


@pytest.mark.parametrize("seed", range(4))
def test_the_same_problem_gets_the_same_plan_whatever_the_clock_says(seed: int) -> None:
    # Two solves of one problem, one under a clock that never moves and one
    # whose clock is read far more often: the same plan, bound and method.
    problem = random_problem(40 + seed, 3, 30, budgets=True)
    weights = Weights.of(problem)
    calls = [0]

    def busy() -> float:
        calls[0] += 1
        return calls[0] * 1e-6  # a microsecond a reading: time passes, far from the limit

    first = solve(problem, weights, Work(1 << 62, Deadline(10**9, lambda: 0.0)))
    second = solve(problem, weights, Work(1 << 62, Deadline(10**9, busy)))
    assert calls[0] > 0
    assert first == second


def test_on_timeout_best_returns_the_best_plan_so_far_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    # The search's clock has passed its limit when the search starts (the
    # request's own limit has not): "fail" is a SolverTimeout, "best" a plan
    # within the budgets marked as stopped at the time limit.
    model = CORPUS / "squeezenet.relay"
    if not model.is_file():
        pytest.skip(f"corpus not found ({model})")

    def expired(config: solver.PlanConfig, deadline: Deadline) -> Work:
        ticks = iter([0.0])  # the clock reads 0 when the deadline is set, then far past it
        return Work(1 << 62, Deadline(1, lambda: next(ticks, 1e9)), best=config.on_timeout == "best")

    monkeypatch.setattr(optimize_run, "search_work", expired)
    module = relay.parse_text(model.read_text())
    fields: dict[str, Any] = {
        "mode": "optimize",
        "virtual_devices": ("cpu", "cuda", "cuda:1"),
        "device_profiles": {"cuda": {"memory_bytes": 8_000_000}},
    }
    with pytest.raises(SolverTimeout):
        optimize_run.optimize(module, solver.PlanConfig(**fields))
    got = optimize_run.optimize(module, solver.PlanConfig(**fields, on_timeout="best"))
    cost = got.result.cost
    assert cost is not None and cost.time_limit_reached
    assert cost.method.endswith("(stopped at the time limit)")
    assert cost.to_json()["time_limit_reached"] is True
    assert cost.tvm_mode_predicted_ms is None and cost.tvm_mode_reason is not None
    assert not budget_violations(got.problem, got.solution.assign)
    assert evaluate(got.problem, got.weights, got.solution.assign)[0] == got.solution.objective


# ---------------------------------------------------------------------------
# End to end: the CLI twice, the second run beside a process burning a CPU.

TIMINGS = (("solver", "time_ms"), ("cost", "solver_ms"))


def _answer(run: subprocess.CompletedProcess[str], report: Path) -> tuple[str, str]:
    """The planned module and the report, less the fields that time the run."""
    assert run.returncode == 0, run.stderr
    data = json.loads(report.read_text())
    for section, field in TIMINGS:
        assert field in data[section]
        del data[section][field]
    return run.stdout, json.dumps(data, sort_keys=True)


@contextmanager
def cpu_burner() -> Iterator[subprocess.Popen[bytes]]:
    """A process spinning on a CPU until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _plan_twice(tmp_path: Path, *argv: str) -> None:
    first_report, second_report = tmp_path / "first.json", tmp_path / "second.json"
    first = _answer(run_devplan("plan", *argv, "--report", str(first_report)), first_report)
    with cpu_burner() as burner:
        second_run = run_devplan("plan", *argv, "--report", str(second_report))
        assert burner.poll() is None  # it was burning all along
    second = _answer(second_run, second_report)
    assert first[0] == second[0]
    assert first[1] == second[1]


def test_one_request_twice_beside_a_cpu_burner_gives_the_same_answer(tmp_path: Path) -> None:
    model = CORPUS / "squeezenet.relay"
    if not model.is_file():
        pytest.skip(f"corpus not found ({model})")
    _plan_twice(
        tmp_path,
        str(model),
        "--mode",
        "optimize",
        "--virtual-devices",
        '["cpu", "cuda", "cuda:1"]',
        "--memory-budget",
        "cuda=8MB",
        "--timeout-ms",
        "120000",
    )


@pytest.mark.slow
@pytest.mark.tvm
def test_mobilenet_under_a_one_megabyte_gpu_gives_the_same_answer_twice(tmp_path: Path) -> None:
    model = CORPUS / "relax" / "tv_mobilenet_v3_small.json"
    if not model.is_file():
        pytest.skip(f"corpus not found ({model})")
    _plan_twice(
        tmp_path, str(model), "--mode", "optimize", "--memory-budget", "cuda=1MB", "--timeout-ms", "120000"
    )
