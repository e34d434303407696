"""The one timing loop of the benchmark scripts: `repeat` calls of a function, each
timed with `time.perf_counter`, and what the last call returned.

Import it as `benchmarks.timing` (each script puts the repository first on
`sys.path`: a sibling import would let benchmarks/service.py shadow the service
package).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from time import perf_counter
from typing import TypeVar

T = TypeVar("T")


def timed_runs(fn: Callable[[], T], repeat: int, *, collect: bool = False) -> tuple[list[float], T]:
    """The wall time in seconds of each of `repeat` (at least 1) calls of `fn`, and the
    last call's value; with `collect`, a garbage collection before each call (so
    one run does not pay for the last one's garbage)."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, not {repeat}")
    times: list[float] = []
    for _ in range(repeat):
        if collect:
            gc.collect()
        start = perf_counter()
        value = fn()
        times.append(perf_counter() - start)
    return times, value


def best_s(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The fastest of `repeat` calls of `fn` in seconds, and the last call's value."""
    times, value = timed_runs(fn, repeat)
    return min(times), value


def best_ms(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """`best_s` in milliseconds."""
    seconds, value = best_s(fn, repeat)
    return seconds * 1000, value
