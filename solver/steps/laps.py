"""Wall time per planning step."""

from __future__ import annotations

import time

from ..deadline import Deadline


class Laps:
    """Wall time per step in ms (`times`); each lap also checks the deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.times: dict[str, float] = {}
        self._clock = time.perf_counter()

    def __call__(self, phase: str) -> None:
        now = time.perf_counter()
        self.times[phase] = round((now - self._clock) * 1000, 3)
        self._clock = now
        self.deadline.check(phase)
