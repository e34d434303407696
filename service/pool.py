"""A bounded pool that runs plans off the event loop and enforces each one's time limit.

Planning is CPU-bound Python, so the default pool is worker processes (real
parallelism, and the event loop keeps answering /healthz). A worker whose plan
overruns its deadline is killed and replaced; that is the only way to stop
Python code mid-flight. The thread kind is for debugging and embedding: there
the solver's own time limit is the only brake.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from service.planning import (
    KIND_INTERNAL,
    TINY_MODULE,
    PlanFailure,
    PlanJob,
    run_plan_safely,
    timeout_failure,
)

log = logging.getLogger("devplan.pool")


_START_TIMEOUT_S = 120.0


class PoolBusy(Exception):
    """No planning slot became free within the queue timeout."""


def _timeout_result(job: PlanJob) -> dict[str, Any]:
    return {"error": timeout_failure(job.timeout_ms).as_dict()}


def tune_malloc() -> None:
    """Keep glibc from handing big blocks back to the kernel after every plan.

    Each plan creates and frees a Z3 context (several MB). With glibc's default
    dynamic mmap threshold a spawned worker got those blocks from fresh mmap()s
    every time, page faults included: measured, the z3 phase of a tiny plan took
    ~23 ms in a worker against ~2.5 ms in a long-lived process. Fixed thresholds
    (the largest mmap threshold glibc accepts, 32 MiB) bring workers to the same
    speed; the cost is that a worker keeps up to 128 MiB of freed heap.
    """
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
        libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024)
        libc.mallopt(m_trim_threshold, 128 * 1024 * 1024)
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def _worker_main(conn: multiprocessing.connection.Connection, log_level: str) -> None:
    """A worker process: receive PlanJobs, answer run_plan_safely's dicts, until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server handles Ctrl-C and kills us
    tune_malloc()
    from service.logs import configure, reset_request_id, set_request_id

    configure(log_level)
    # Warm up (imports, Z3's first context) so the first real plan pays no start-up;
    # "ready" then also means this process can plan.
    warm = run_plan_safely(PlanJob(module=TINY_MODULE, timeout_ms=30_000, z3_check=True))
    conn.send("ready" if "ok" in warm else f"warm-up failed: {warm['error']['message']}")
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        token = set_request_id(job.request_id)
        try:
            result = run_plan_safely(job)
        finally:
            reset_request_id(token)
        conn.send(result)


class _Worker:
    def __init__(self, ctx: Any, log_level: str) -> None:
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child, log_level), daemon=True, name="devplan-plan"
        )
        self.proc.start()
        child.close()
        self.conn: multiprocessing.connection.Connection = parent
        try:
            ready = parent.poll(_START_TIMEOUT_S) and parent.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            raise RuntimeError(f"planning worker {self.proc.pid} did not start (see its log)")

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(5)
        finally:
            self.conn.close()


class _Overrun(Exception):
    pass


class PlanPool:
    """`await pool.submit(job, deadline_s)` -> run_plan_safely's dict, never raising for the job's sake."""

    def __init__(
        self, size: int, kind: str = "process", queue_timeout_s: float = 60.0, log_level: str = "info"
    ) -> None:
        self.size = size
        self.kind = kind
        self.queue_timeout_s = queue_timeout_s
        self.log_level = log_level
        self._threads = ThreadPoolExecutor(max_workers=size + 2, thread_name_prefix="devplan-plan")
        self._ctx = multiprocessing.get_context("spawn")
        self._idle: asyncio.Queue[_Worker] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False

    def describe(self) -> str:
        return f"{self.kind} x {self.size}"

    async def start(self) -> None:
        """Start the workers (process kind) and wait until they are up."""
        if self.kind == "thread":
            self._slots = asyncio.Semaphore(self.size)
            return
        self._idle = asyncio.Queue()
        loop = asyncio.get_running_loop()
        workers = await asyncio.gather(
            *(loop.run_in_executor(self._threads, self._spawn) for _ in range(self.size))
        )
        for w in workers:
            self._idle.put_nowait(w)

    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, self.log_level)
        with self._lock:
            self._all.add(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()

    async def submit(self, job: PlanJob, deadline_s: float) -> dict[str, Any]:
        if self.kind == "thread":
            return await self._submit_thread(job, deadline_s)
        assert self._idle is not None, "PlanPool.start() was not awaited"
        try:
            worker = await asyncio.wait_for(self._idle.get(), self.queue_timeout_s)
        except TimeoutError:
            raise PoolBusy from None
        loop = asyncio.get_running_loop()
        healthy = False
        try:
            result = await loop.run_in_executor(self._threads, self._exchange, worker, job, deadline_s)
            healthy = True
            return result
        except _Overrun:
            log.warning("plan overran its deadline of %.3f s; worker %s killed", deadline_s, worker.proc.pid)
            return _timeout_result(job)
        except (EOFError, OSError) as err:
            log.error("planning worker %s died (%s)", worker.proc.pid, type(err).__name__)
            message = "the planning worker died while planning this module"
            return {"error": PlanFailure(KIND_INTERNAL, message, f"error: {message}").as_dict()}
        finally:
            if healthy:
                self._idle.put_nowait(worker)
            elif not self._closed:
                # Kill and respawn in the background so the answer is not delayed (also on cancel).
                idle = self._idle

                def respawn() -> None:
                    self._retire(worker)
                    for attempt in range(5):
                        if self._closed:
                            return
                        try:
                            fresh = self._spawn()
                        except RuntimeError:
                            log.exception(
                                "could not start a replacement planning worker (attempt %d)", attempt + 1
                            )
                            time.sleep(2**attempt)
                            continue
                        if self._closed:
                            self._retire(fresh)
                            return
                        loop.call_soon_threadsafe(idle.put_nowait, fresh)
                        return
                    log.error("planning pool lost a worker for good; %d left", len(self._all))

                worker.proc.kill()
                self._threads.submit(respawn)

    @staticmethod
    def _exchange(worker: _Worker, job: PlanJob, deadline_s: float) -> dict[str, Any]:
        worker.conn.send(job)
        if not worker.conn.poll(deadline_s):
            raise _Overrun
        result: dict[str, Any] = worker.conn.recv()
        return result

    async def _submit_thread(self, job: PlanJob, deadline_s: float) -> dict[str, Any]:
        assert self._slots is not None, "PlanPool.start() was not awaited"
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
        except TimeoutError:
            raise PoolBusy from None
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._threads, run_plan_safely, job)
        # The slot is released when the thread really finishes, so the bound holds.
        future.add_done_callback(lambda _f: self._slots.release() if self._slots else None)
        try:
            return await asyncio.wait_for(asyncio.shield(future), deadline_s)
        except TimeoutError:
            return _timeout_result(job)

    async def close(self) -> None:
        self._closed = True
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for w in workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in workers:
            w.proc.join(2)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(2)
            w.conn.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
