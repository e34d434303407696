"""A bounded pool that runs plans off the event loop and enforces each one's time and memory limits.

Planning is CPU-bound Python, so the default pool is worker processes (real
parallelism, and the event loop keeps answering /healthz). A worker whose plan
overruns its deadline, or its resident memory limit, is killed and replaced;
that is the only way to stop Python code mid-flight. The thread kind is for
debugging and embedding: there the solver's own time limit is the only brake
and there is no memory limit.

The pool heals: an idle worker found dead is replaced before it is handed a
request, and a slot whose replacement cannot start is retried in the background
while `status()` reports it lost (the effective size drops below the configured
one, which makes /readyz answer 503).

Memory is limited with a watchdog on the worker's resident set (read from
/proc while the web process waits for the answer), not an address-space
rlimit: measured, importing numpy (OpenBLAS) adds 120 MiB of address space
on a 2-core machine for 12 MiB resident, and Z3's timer thread and glibc's
per-thread arenas reserve more, growing with the core count, so an address
space limit would fail small plans on big machines.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from service.diff import DiffJob, diff_json
from service.logs import note_worker_drops, queue_size
from service.planning import (
    KIND_INTERNAL,
    KIND_TIMEOUT,
    KIND_TOO_LARGE,
    TINY_MODULE,
    PlanFailure,
    PlanJob,
    detect_format,
    run_plan_safely,
    timeout_failure,
    too_large_failure,
)

log = logging.getLogger("devplan.pool")


_START_TIMEOUT_S = 120.0
# How often the web process reads a busy worker's resident set: one small /proc read;
# the overshoot past the limit is what the worker allocates in this time.
_MEMORY_POLL_S = 0.01
# TVM JSON takes about a sixth of the memory per input byte of text (measured: 7 vs 41 B/B
# over the warm worker for the same chain module), since it spells every node out.
_JSON_MEMORY_RATIO = 1 / 6
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class PoolBusy(Exception):
    """No planning slot became free within the queue timeout."""


Job = PlanJob | DiffJob
"""What a worker runs: a plan, or the matching of two plans' reports (`POST /plan/diff`)."""


def _timeout_result(job: Job) -> dict[str, Any]:
    if isinstance(job, DiffJob):
        message = (
            f"matching the two plans did not finish within the plan time limit of {job.timeout_ms} ms "
            "(DEVPLAN_DEFAULT_TIMEOUT_MS)"
        )
        return {"error": PlanFailure.plain(KIND_TIMEOUT, message).as_dict()}
    return {"error": timeout_failure(job.timeout_ms).as_dict()}


def run_job_safely(job: Job) -> dict[str, Any]:
    """A plan (`run_plan_safely`) or a diff: never raises; {"ok": ...} or {"error": failure}.
    A diff's "ok" is its JSON text (bytes), built here so the web process only sends it."""
    if not isinstance(job, DiffJob):
        return run_plan_safely(job)
    try:
        return {"ok": diff_json(job)}
    except MemoryError:
        return {"error": too_large_failure(None).as_dict()}
    except Exception as err:
        log.exception("diff failed unexpectedly")
        return _internal_result(f"internal error while matching the plans: {type(err).__name__}")


def _internal_result(message: str) -> dict[str, Any]:
    return {"error": PlanFailure.plain(KIND_INTERNAL, message).as_dict()}


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


def resident_bytes(pid: int) -> int | None:
    """A process's resident set size from /proc; None where /proc is not there."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


# The key of a worker's answer that carries its dropped log records to the web process.
LOG_DROPS_KEY = "log_records_dropped"


def _worker_main(conn: multiprocessing.connection.Connection, log_level: str, log_queue_size: int) -> None:
    """A worker process: receive jobs (plans, diffs), answer run_job_safely's dicts, until EOF.

    After a MemoryError the worker answers and exits, so the pool replaces it
    with a fresh process rather than trust a heap that ran dry. Its logging goes
    through its own bounded queue (it never blocks on stderr); each answer carries
    the records it dropped since the last one, for the web process's metric.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server handles Ctrl-C and kills us
    tune_malloc()
    from service.logs import configure, reset_request_id, set_request_id, take_unreported_drops

    configure(log_level, log_queue_size)
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
        start = time.perf_counter()
        try:
            result = run_job_safely(job)
            log.debug(
                "plan answered in %.1f ms",
                (time.perf_counter() - start) * 1000,
                extra={"outcome": result["error"]["kind"] if "error" in result else "planned"},
            )
        finally:
            reset_request_id(token)
        dropped = take_unreported_drops()
        if dropped:
            result[LOG_DROPS_KEY] = dropped
        conn.send(result)
        if "error" in result and result["error"]["kind"] == KIND_TOO_LARGE:
            return


class _Worker:
    def __init__(self, ctx: Any, log_level: str, log_queue_size: int) -> None:
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child, log_level, log_queue_size), daemon=True, name="devplan-plan"
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
        self.baseline_bytes = resident_bytes(self.proc.pid) or 0

    def alive(self) -> bool:
        """Running, and its pipe holds nothing: an idle worker's pipe is readable only at EOF."""
        try:
            return self.proc.is_alive() and not self.conn.poll(0)
        except (OSError, ValueError):
            return False

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(5)
        finally:
            self.conn.close()


class _Overrun(Exception):
    pass


class _OverMemory(Exception):
    def __init__(self, rss: int) -> None:
        super().__init__(rss)
        self.rss = rss


class _NotDelivered(Exception):
    """The job could not be sent: the worker died before it got it, so another may take it."""


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """A snapshot for /readyz and the metrics."""

    kind: str
    configured: int  # slots asked for
    effective: int  # slots that have (or are starting) a worker: configured minus lost ones
    busy: int  # slots running a plan now
    alive: int  # worker processes alive now (process kind), busy ones included

    @property
    def healthy(self) -> bool:
        return self.effective == self.configured


class PlanPool:
    """`await pool.submit(job, deadline_s)` -> run_job_safely's dict, never raising for the job's sake."""

    def __init__(
        self,
        size: int,
        kind: str = "process",
        queue_timeout_s: float = 60.0,
        log_level: str = "info",
        memory_limit_bytes: int = 0,
        memory_per_input_byte: float = 0.0,
        respawn_backoff_max_s: float = 30.0,
    ) -> None:
        self.size = size
        self.kind = kind
        self.queue_timeout_s = queue_timeout_s
        self.log_level = log_level
        self.log_queue_size = queue_size()  # workers hold as many log records as this process
        self.memory_limit_bytes = memory_limit_bytes if kind == "process" else 0
        self.memory_per_input_byte = memory_per_input_byte
        self.respawn_backoff_max_s = respawn_backoff_max_s
        self._threads = ThreadPoolExecutor(max_workers=size + 2, thread_name_prefix="devplan-plan")
        self._ctx = multiprocessing.get_context("spawn")
        self._idle: asyncio.Queue[_Worker] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._busy = 0
        self._lost = 0
        self._baseline_bytes = 0
        self._closed = False
        # Tests swap this to make respawns fail; it builds one started worker or raises RuntimeError.
        self.worker_factory: Callable[[], _Worker] = lambda: _Worker(
            self._ctx, self.log_level, self.log_queue_size
        )

    def describe(self) -> str:
        return f"{self.kind} x {self.size}"

    # ------------------------------------------------------------------ state

    def status(self) -> PoolStatus:
        with self._lock:
            alive = sum(1 for w in self._all if w.proc.is_alive()) if self.kind == "process" else self.size
            return PoolStatus(self.kind, self.size, self.size - self._lost, self._busy, alive)

    def wait_until(self, predicate: Callable[[PoolStatus], bool], timeout_s: float) -> bool:
        """Block (a test's or tool's thread, never the event loop) until the pool's state satisfies it."""
        deadline = time.monotonic() + timeout_s
        while True:
            if predicate(self.status()):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._changed:
                self._changed.wait(min(remaining, 0.5))  # state changes notify; the cap rechecks liveness

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _set_busy(self, delta: int) -> None:
        with self._changed:
            self._busy += delta
            self._changed.notify_all()

    # ------------------------------------------------------------------ lifecycle

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
        self._baseline_bytes = max(w.baseline_bytes for w in workers)
        for w in workers:
            self._idle.put_nowait(w)

    def _spawn(self) -> _Worker:
        worker = self.worker_factory()
        with self._lock:
            self._all.add(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()

    def _respawn_in_background(self, worker: _Worker | None, loop: asyncio.AbstractEventLoop) -> None:
        """Kill `worker` (if any) and start its replacement off the event loop, retrying forever.

        The first failed start marks the slot lost until a later attempt succeeds.
        """
        assert self._idle is not None
        idle = self._idle
        if worker is not None:
            worker.proc.kill()

        def respawn() -> None:
            if worker is not None:
                self._retire(worker)
            attempt = 0
            lost = False
            while not self._closed:
                try:
                    fresh = self._spawn()
                except RuntimeError:
                    attempt += 1
                    log.exception("could not start a replacement planning worker (attempt %d)", attempt)
                    if not lost:
                        lost = True
                        with self._changed:
                            self._lost += 1
                            self._changed.notify_all()
                        log.error("planning pool runs %d of %d slots", self.status().effective, self.size)
                    time.sleep(min(2.0 ** (attempt - 1), self.respawn_backoff_max_s))
                    continue
                if self._closed:
                    self._retire(fresh)
                    return
                if lost:
                    with self._changed:
                        self._lost -= 1
                        self._changed.notify_all()
                    log.info("planning pool slot restored after %d failed starts", attempt)
                try:
                    loop.call_soon_threadsafe(idle.put_nowait, fresh)
                except RuntimeError:  # the loop is gone (shutdown)
                    self._retire(fresh)
                return

        self._threads.submit(respawn)

    def check_idle(self) -> int:
        """Replace idle workers that died (in the background); returns how many were found dead.

        Runs on the event loop: taking every idle worker and putting the live ones back
        involves no await, so no request sees the queue half-scanned.
        """
        if self._idle is None:
            return 0
        loop = asyncio.get_running_loop()
        live: list[_Worker] = []
        dead: list[_Worker] = []
        while not self._idle.empty():
            w = self._idle.get_nowait()
            (live if w.alive() else dead).append(w)
        for w in live:
            self._idle.put_nowait(w)
        for w in dead:
            log.warning(
                "idle planning worker %s died (exit code %s); replacing it", w.proc.pid, w.proc.exitcode
            )
            self._respawn_in_background(w, loop)
        return len(dead)

    # ------------------------------------------------------------------ planning

    def too_large(self, job: Job) -> dict[str, Any] | None:
        """An immediate module-too-large answer when the estimate says the module cannot fit."""
        if isinstance(job, DiffJob) or not self.memory_limit_bytes or not self.memory_per_input_byte:
            return None
        per_byte = self.memory_per_input_byte
        if (job.input_format or detect_format(job.module)) == "json":
            per_byte *= _JSON_MEMORY_RATIO
        estimate = self._baseline_bytes + len(job.module) * per_byte
        if estimate <= self.memory_limit_bytes:
            return None
        log.warning(
            "module of %d bytes rejected: estimated %d MiB > worker limit %d MiB",
            len(job.module),
            estimate // 2**20,
            self.memory_limit_bytes // 2**20,
        )
        return {"error": too_large_failure(self.memory_limit_bytes).as_dict()}

    async def _acquire(self, deadline: float) -> _Worker:
        """An idle worker that is alive, replacing dead ones first; PoolBusy at the deadline."""
        assert self._idle is not None, "PlanPool.start() was not awaited"
        loop = asyncio.get_running_loop()
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise PoolBusy
            try:
                worker = await asyncio.wait_for(self._idle.get(), remaining)
            except TimeoutError:
                raise PoolBusy from None
            if worker.alive():
                return worker
            log.warning(
                "idle planning worker %s died (exit code %s); replacing it before use",
                worker.proc.pid,
                worker.proc.exitcode,
            )
            self._retire(worker)
            try:
                return await loop.run_in_executor(self._threads, self._spawn)
            except RuntimeError:
                log.exception("could not start a replacement planning worker")
                self._respawn_in_background(None, loop)  # keeps trying; the slot counts as lost
                # and this request waits for another worker

    async def submit(self, job: Job, deadline_s: float) -> dict[str, Any]:
        rejected = self.too_large(job)
        if rejected is not None:
            return rejected
        if self.kind == "thread":
            return await self._submit_thread(job, deadline_s)
        loop = asyncio.get_running_loop()
        queue_deadline = loop.time() + self.queue_timeout_s
        while True:
            worker = await self._acquire(queue_deadline)
            try:
                return await self._run_on(worker, job, deadline_s, loop)
            except _NotDelivered:
                log.warning("planning worker %s died before taking a job; trying another", worker.proc.pid)

    async def _run_on(
        self, worker: _Worker, job: Job, deadline_s: float, loop: asyncio.AbstractEventLoop
    ) -> dict[str, Any]:
        assert self._idle is not None
        healthy = False
        self._set_busy(+1)
        try:
            result = await loop.run_in_executor(self._threads, self._exchange, worker, job, deadline_s)
            error = result.get("error")
            healthy = not (error and error.get("kind") == KIND_TOO_LARGE)  # that worker exits
            return result
        except _Overrun:
            log.warning("plan overran its deadline of %.3f s; worker %s killed", deadline_s, worker.proc.pid)
            return _timeout_result(job)
        except _OverMemory as err:
            log.warning(
                "plan used %d MiB, over the worker limit of %d MiB; worker %s killed",
                err.rss // 2**20,
                self.memory_limit_bytes // 2**20,
                worker.proc.pid,
            )
            return {"error": too_large_failure(self.memory_limit_bytes).as_dict()}
        except (EOFError, OSError) as err:
            log.error("planning worker %s died (%s)", worker.proc.pid, type(err).__name__)
            return _internal_result("the planning worker died while planning this module")
        finally:
            self._set_busy(-1)
            if healthy:
                self._idle.put_nowait(worker)
            elif not self._closed:
                # Kill and respawn in the background so the answer is not delayed (also on cancel).
                self._respawn_in_background(worker, loop)

    def _exchange(self, worker: _Worker, job: Job, deadline_s: float) -> dict[str, Any]:
        try:
            worker.conn.send(job)
        except (BrokenPipeError, ConnectionResetError):
            raise _NotDelivered from None
        limit = self.memory_limit_bytes
        end = time.monotonic() + deadline_s
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise _Overrun
            if worker.conn.poll(min(remaining, _MEMORY_POLL_S) if limit else remaining):
                result: dict[str, Any] = worker.conn.recv()
                note_worker_drops("planning", result.pop(LOG_DROPS_KEY, 0))
                return result
            if limit:
                rss = resident_bytes(worker.proc.pid)
                if rss is not None and rss > limit:
                    worker.proc.kill()  # now, not after the answer is on its way
                    raise _OverMemory(rss)

    async def _submit_thread(self, job: Job, deadline_s: float) -> dict[str, Any]:
        assert self._slots is not None, "PlanPool.start() was not awaited"
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
        except TimeoutError:
            raise PoolBusy from None
        loop = asyncio.get_running_loop()
        self._set_busy(+1)
        future = loop.run_in_executor(self._threads, run_job_safely, job)

        def done(_f: Any) -> None:
            # The slot is released when the thread really finishes, so the bound holds.
            self._set_busy(-1)
            if self._slots is not None:
                self._slots.release()

        future.add_done_callback(done)
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
        self._notify()
