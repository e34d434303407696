"""`devplan compile`: the compile of `POST /compile`, without a server.

The job is built as the route builds it (the plan job, targets, CUDA arch, run
check, the sandbox of the settings, the deadline `compile_timeout_s`) and runs
in the same compile process (`service.compile_workers.CompileRun` around
`worker_main`: the same guards, rlimits and run-check sandbox). The library is
written beside the output under a temporary name and moved into place only
when the compile succeeded; whatever else happens (a failure, the time limit,
Ctrl-C, SIGTERM) the process is killed (its sandbox child dies with it) and
nothing is left behind. A caller killed outright (SIGKILL) takes the compile
process with it (it dies with its parent), though its temporary files stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing.connection
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from service import sandbox
from service.compile_workers import CompileJob, CompileRun, worker_main
from service.config import Settings
from service.errors import COMPILE_TIMEOUT, Terminated
from service.planning import PlanFailure, PlanJob


def _worker(job: CompileJob, conn: multiprocessing.connection.Connection) -> None:
    """The compile process's work, Ctrl-C left to the parent: the terminal sends SIGINT
    to the whole process group, and the parent, not the child, decides what it stops.
    It dies with its parent (a CLI killed outright must not leave it compiling)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    sandbox.die_with_parent((parent.pid or 0) if parent is not None else 0)
    worker_main(job, conn)


@contextlib.contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """SIGTERM inside the block raises Terminated (the default action would end the
    process without stopping the compile process or removing its files)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _ctrl_c_after() -> Iterator[None]:
    """Ctrl-C inside the block takes effect at its end: the compile process then has its
    whole job (an interrupted start leaves it reading half a pickle) and the caller holds
    the run it must stop. (Only the main thread receives Python's signals.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt


def temporary_beside(output: Path) -> Path:
    """Where the compile process writes the library: beside `output` (one file system,
    so the move into place is a rename), hidden, unique, and absolute: the run check's
    private directory is made beside it and bound into the sandbox by its path."""
    output = output.absolute()
    return output.parent / f".{output.name}.{uuid.uuid4().hex[:12]}.tmp.so"


def compile_to_file(
    plan: PlanJob,
    output: Path,
    settings: Settings,
    *,
    targets: Mapping[str, Any] | None = None,
    cuda_arch: str | None = None,
    run_check: bool = False,
) -> dict[str, Any]:
    """Plan, lower and compile `plan.module` as POST /compile does and write the
    library to `output`; returns /compile's answer (`sha256`, `size_bytes`,
    `report`). Raises PlanFailure (the kinds /compile answers); KeyboardInterrupt
    (Ctrl-C) and Terminated (SIGTERM) pass through after the compile process is stopped."""
    library = temporary_beside(output)
    by_device: dict[str | int, Any] | None = None if targets is None else {k: v for k, v in targets.items()}
    job = CompileJob(
        plan=plan,
        targets=by_device,
        cuda_arch=cuda_arch,
        run_check=run_check,
        library=str(library),
        sandbox=sandbox.config_from(settings),
        deadline=time.time() + settings.compile_timeout_s,
    )
    run: CompileRun | None = None
    loop = asyncio.new_event_loop()
    try:
        with _terminate_cleanly():
            with _ctrl_c_after():
                run = CompileRun(job, target=_worker)
            result = loop.run_until_complete(run.wait(settings.compile_timeout_s))
            if result is not None and "ok" in result:
                os.replace(library, output)
    finally:
        if run is not None:
            run.stop()  # kills the process if it still runs, removes the temporary library
        library.unlink(missing_ok=True)
        loop.close()
    if result is None:
        message = f"compiling did not finish within {settings.compile_timeout_s:g} s (DEVPLAN_COMPILE_TIMEOUT_S)"
        raise PlanFailure.plain(COMPILE_TIMEOUT.slug, message)
    if "error" in result:
        raise PlanFailure.from_dict(result["error"])
    answer: dict[str, Any] = result["ok"]
    return answer

