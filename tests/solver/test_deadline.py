"""The planner's cooperative deadline, driven by an injected clock (no sleeps,
no wall-clock asserts): `PlanConfig.timeout_ms` is checked between the steps
and inside their walks, and Z3 only gets the time that is left."""

from __future__ import annotations

import pytest
import z3

import solver
from relay import Call, Function, GlobalVar, Module, TensorType, Var, on_device, op, parse_target
from relay.device import VirtualDevice
from solver.deadline import STRIDE, Deadline

T = TensorType((4,), "float32")


class StepClock:
    """A clock that reads 0.0 for its first `free` readings, then `after` seconds.

    It also counts how often the planner reads it."""

    def __init__(self, free: int, after: float = 1e9) -> None:
        self.free = free
        self.after = after
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return 0.0 if self.reads <= self.free else self.after


def chain(n: int, *, annotated: bool = False) -> Module:
    """`add(add(...(%x, %x)...), %x)`: n nested calls (optionally one on_device)."""
    x = Var("x", T)
    e: object = x
    for _ in range(n):
        e = Call(op("add"), (e, x))  # type: ignore[arg-type]
    if annotated:
        e = on_device(e, VirtualDevice(1, 0, parse_target("llvm")), constrain_body=True)  # type: ignore[arg-type]
    return Module(functions=((GlobalVar("main"), Function((x,), e, T)),))  # type: ignore[arg-type]


def test_deadline_past_at_the_start_raises() -> None:
    clock = StepClock(free=1)  # only the deadline's own creation reads 0
    with pytest.raises(solver.SolverTimeout, match="stopped during start") as info:
        solver.plan(chain(3), solver.PlanConfig(timeout_ms=1, clock=clock))
    assert info.value.reason == "deadline"
    assert "within 1 ms" in str(info.value)


def test_a_plan_within_its_deadline_succeeds() -> None:
    clock = StepClock(free=10**9)
    result = solver.plan(chain(3), solver.PlanConfig(timeout_ms=1, clock=clock))
    assert result.functions["main"]["result"] == "cuda"


def test_walks_check_the_deadline_every_stride_nodes() -> None:
    """A small module reads the clock only between steps; a module of many
    strides also inside the walks (so a long step stops at its deadline)."""
    small, big = StepClock(free=10**9), StepClock(free=10**9)
    solver.plan(chain(10), solver.PlanConfig(clock=small))
    solver.plan(chain(8 * STRIDE), solver.PlanConfig(clock=big))
    # infer, collect, defaults and rewrite each walk the ~16 strides of nodes.
    assert big.reads >= small.reads + 4 * 8


@pytest.mark.parametrize(
    ("annotated", "steps"),
    [(False, {"infer", "collect", "defaults", "presolve", "rewrite"}), (True, {"conflicting inputs"})],
)
def test_expiry_inside_a_step_names_it(annotated: bool, steps: set[str]) -> None:
    """Expire the deadline at each successive clock reading: the planner stops
    inside the walks (not only between steps), and names where."""
    module = chain(2 * STRIDE, annotated=annotated)
    total = StepClock(free=10**9)
    solver.plan(module, solver.PlanConfig(clock=total))
    seen: set[str] = set()
    for free in range(1, total.reads):
        with pytest.raises(solver.SolverTimeout) as info:
            solver.plan(module, solver.PlanConfig(clock=StepClock(free=free)))
        seen.add(str(info.value).rsplit("stopped during ", 1)[1].rstrip(")"))
        if steps <= seen:
            break
    assert steps <= seen


def test_z3_gets_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TVM-mode Z3 check runs with the remaining time as its timeout."""
    timeouts: list[object] = []
    original = z3.Solver.set

    def record(self: z3.Solver, *args: object, **kwargs: object) -> None:
        if args and args[0] == "timeout":
            timeouts.append(args[1])
        original(self, *args, **kwargs)

    monkeypatch.setattr(z3.Solver, "set", record)
    readings = iter([0.0] + [0.25] * 1000)
    solver.plan(chain(3), solver.PlanConfig(timeout_ms=1000, z3_check=True, clock=lambda: next(readings)))
    assert timeouts == [750]


def test_deadline_arithmetic() -> None:
    now = [100.0]
    deadline = Deadline(2000, lambda: now[0])
    assert deadline.remaining_ms() == 2000
    now[0] = 101.5
    assert deadline.remaining_ms() == 500
    deadline.check("step")
    now[0] = 102.0
    assert deadline.remaining_ms() == 1  # never 0: Z3 reads 0 as "no limit"
    with pytest.raises(solver.SolverTimeout, match="stopped during step"):
        deadline.check("step")
    deadline.every(1, "walk")  # not a multiple of the stride: no check
    with pytest.raises(solver.SolverTimeout):
        deadline.every(STRIDE, "walk")
