"""The compile process's resident set is watched as the planning workers' is: past the
compile memory limit it is killed and the answer is module-too-large, whatever kind of
memory it holds (shared mappings, which its data-segment rlimit does not count)."""

from __future__ import annotations

import asyncio
import mmap
import multiprocessing.connection
import time
from pathlib import Path

import solver
from service import sandbox
from service.compile_workers import CompileJob, CompileRun
from service.config import Settings
from service.planning import PlanJob

LIMIT = 256 << 20


def hog(job: CompileJob, conn: multiprocessing.connection.Connection) -> None:
    """A compile that touches shared memory without end and never answers."""
    held = []
    while True:
        block = mmap.mmap(-1, 16 << 20)  # MAP_SHARED: outside RLIMIT_DATA
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1
        held.append(block)
        time.sleep(0.01)


def test_a_compile_over_its_memory_is_killed_and_answered_module_too_large(tmp_path: Path) -> None:
    config = sandbox.config_from(Settings(compile_memory_bytes=LIMIT), sandbox.Detected(None, None))
    job = CompileJob(
        plan=PlanJob(module="", options=solver.PlanOptions(timeout_ms=120_000)),
        targets=None,
        cuda_arch=None,
        run_check=False,
        library=str(tmp_path / "lib.so"),
        sandbox=config,
    )
    run = CompileRun(job, hog)
    try:
        answer = asyncio.run(run.wait(600))
    finally:
        run.stop()
    assert answer is not None
    assert answer["error"]["kind"] == "module-too-large"
    assert answer["error"]["message"] == "compiling hit its memory limit 256 MiB"
    assert not run.proc.is_alive()
