"""The optimize search's stopping rule: counted work, never seconds.

Every search step that may run long (the expansion's cuts, the segment
descent, single-class moves, the offload program's points, HiGHS's nodes,
Z3's resource count) is given an allowance of work units and stops when it
has spent them, so the same request makes the same moves and returns the
same plan, bound and figures on an idle or a busy machine
(docs/optimize.md, "When the search stops").

The request's time limit (`Deadline`) is not a stopping rule: it only ends
a request that has not finished. By default that is a `SolverTimeout` (the
service's 504). With `best=True` (the request's `on_timeout: "best"`) the
work that is running winds down instead: every `Work` of the request then
reports itself spent, the search returns the best plan it has, and
`cut_short` tells the caller to mark the answer as stopped by the clock.

A `Work` is a counter, not a frozen dataclass: it is created per search and
never shared between requests. `part(units)` gives a step its own allowance
whose spending also counts against the whole; the deadline and its policy
are shared by all parts.
"""

from __future__ import annotations

from .deadline import Deadline


class _Clock:
    """The deadline and what to do at it, shared by every part of one search."""

    __slots__ = ("best", "cut_short", "deadline")
    deadline: Deadline
    best: bool
    cut_short: bool

    def __init__(self, deadline: Deadline, best: bool) -> None:
        self.deadline = deadline
        self.best = best
        self.cut_short = False


class Work:
    """An allowance of work units for one search step, and the request's deadline."""

    __slots__ = ("_clock", "_parent", "spent", "units")
    _clock: _Clock

    def __init__(
        self, units: int, deadline: Deadline | None = None, *, best: bool = False, _parent: Work | None = None
    ) -> None:
        self.units = max(0, int(units))
        self.spent = 0
        self._parent = _parent
        clock: _Clock = (
            _parent._clock
            if _parent is not None
            else _Clock(deadline if deadline is not None else Deadline.never(), best)
        )
        self._clock = clock

    @property
    def deadline(self) -> Deadline:
        """The request's deadline (the limit past which the request ends)."""
        return self._clock.deadline

    @property
    def best(self) -> bool:
        """Whether the request asked for the best plan so far at its time limit."""
        return self._clock.best

    @property
    def cut_short(self) -> bool:
        """True once the time limit stopped the search (only with `best`)."""
        return self._clock.cut_short

    def left(self) -> int:
        """Units this step may still spend (0 once the deadline cut the search short)."""
        if self._clock.cut_short:
            return 0
        own = self.units - self.spent
        if self._parent is not None:
            own = min(own, self._parent.left())
        return max(0, own)

    def part(self, units: int) -> Work:
        """A sub-step's allowance: at most `units`, and at most what is left here."""
        return Work(min(int(units), self.left()), _parent=self)

    def _count(self, units: int) -> None:
        self.spent += units
        if self._parent is not None:
            self._parent._count(units)

    def spend(self, units: int = 1, step: str = "optimize") -> bool:
        """Count `units`; True while the allowance was not used up before
        them. At the request's deadline: SolverTimeout, or with `best` False
        from then on (the search winds down with the plan it has)."""
        if self.expired(step):
            return False
        ok = self.left() > 0
        self._count(units)
        return ok

    def more(self, step: str = "optimize") -> bool:
        """Whether units are left (and the deadline has not cut the search short)."""
        return not self.expired(step) and self.left() > 0

    def expired(self, step: str = "optimize") -> bool:
        """Check the deadline: SolverTimeout past it, or with `best` True
        (and `cut_short` set)."""
        clock = self._clock
        if clock.cut_short:
            return True
        if clock.deadline.expired():
            if not clock.best:
                clock.deadline.check(step)
            clock.cut_short = True
            return True
        return False

    def seconds_left(self) -> float:
        """Seconds until the deadline: only to bound a child solver as a kill
        switch (HiGHS, Z3), never to size its work."""
        return self._clock.deadline.remaining_ms() / 1000.0

    def stopped_by_clock(self, step: str) -> None:
        """A child solver was stopped by the deadline: SolverTimeout, or with
        `best` mark the search cut short."""
        if not self._clock.best:
            self._clock.deadline.fail(step)
        self._clock.cut_short = True
