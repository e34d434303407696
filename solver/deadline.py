"""The planner's time limit: a deadline its walks check cooperatively.

`PlanConfig.timeout_ms` becomes a `Deadline` when `plan` starts. The steps
check it between themselves and every `STRIDE` nodes inside their walks, and
child solvers (HiGHS, Z3) are stopped at it, so a time limit is an
ordinary `SolverTimeout` raised from planner code (never an exception thrown
in from a signal handler, which a `finally`, `__del__` or GC callback can
swallow). The clock is injectable so tests can expire a deadline
deterministically.

The deadline ends a request; it never decides where a search stops. The
optimize search counts work instead (`solver.work.Work`), so its answer does
not depend on how busy the machine is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NoReturn

from .errors import SolverTimeout

Clock = Callable[[], float]
"""Seconds on a monotonic scale (`time.monotonic` unless a test injects one)."""

STRIDE = 4096
"""Walks check the deadline once per this many nodes (a power of two)."""
MASK = STRIDE - 1
"""`if not count & MASK: deadline.check(step)` is the inline form of `every`."""


class Deadline:
    """The time by which one planning run must finish.

    Not a frozen dataclass: it is a clock reading plus a running check, created
    per `plan` call and never shared between runs.
    """

    __slots__ = ("_at", "_clock", "timeout_ms")

    def __init__(self, timeout_ms: int, clock: Clock = time.monotonic) -> None:
        self.timeout_ms = timeout_ms
        self._clock = clock
        self._at = clock() + timeout_ms / 1000.0

    @classmethod
    def never(cls) -> Deadline:
        """A deadline that does not expire (for steps run outside `plan`)."""
        return cls(10**12)

    def remaining_ms(self) -> int:
        """Milliseconds left, at least 1 (Z3 treats a timeout of 0 as none)."""
        return max(1, int((self._at - self._clock()) * 1000.0))

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self._clock() >= self._at

    def check(self, step: str) -> None:
        """Raise SolverTimeout when the deadline has passed."""
        if self.expired():
            self.fail(step)

    def fail(self, step: str) -> NoReturn:
        """Raise the SolverTimeout of this deadline (a child solver the clock stopped)."""
        raise SolverTimeout(
            f"planning did not finish within {self.timeout_ms} ms (stopped during {step})",
            reason="deadline",
        )

    def every(self, count: int, step: str) -> None:
        """`check` once per `STRIDE` values of a node counter: cheap in a walk's loop."""
        if not count & MASK:
            self.check(step)
