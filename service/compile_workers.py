"""The compile worker of POST /compile: one spawned process per compile.

`tvm_bridge` (and so TVM) is imported only inside the worker, so the service
starts, and /plan works, without TVM; a TVM crash or an overrun kills only that
process. `CompileRun` owns the process: the route waits on it and, whatever
happens (result, error, time limit, the request cancelled), `stop()` kills it
if it is still running and removes its temporary library unless it was moved
into the store. Everything crossing the process boundary is plain data.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from relay.span import SourceText
from service import sandbox
from service.config import get_settings
from service.errors import (
    COMPILE_FAILED,
    COMPILE_TIMEOUT,
    INTERNAL_ERROR,
    INVALID_CHECK,
    INVALID_TARGET,
    MODULE_TOO_LARGE,
    RUN_CHECK_FAILED,
    UNSUPPORTED_MODULE,
)
from service.planning import PlanFailure, PlanJob
from service.sandbox import SandboxConfig

log = logging.getLogger("devplan.compile")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CompileJob:
    """What one compile needs: the planning job, targets, and where to write the library."""

    plan: PlanJob
    targets: Mapping[str | int, Any] | None  # device type -> target (string or TVM JSON dict)
    cuda_arch: str | None
    run_check: bool
    library: str  # the temporary path the worker writes (the parent removes it on failure)
    # The sandbox of the run check and the compile's own limits; None: from the
    # environment's settings, with the layers this process finds.
    sandbox: SandboxConfig | None = None
    # When the caller stops waiting (Unix time, the compile time limit): the run check's wall
    # clock ends before it, so that its kill is the one named.
    deadline: float | None = None


def _operator_counts(mod: Any) -> tuple[dict[str, int], int]:
    """Relax operator calls per vdevice ("llvm:0") and `to_vdevice` copies."""
    from tvm import relax

    counts: dict[str, int] = {}
    copies = 0
    skip = {"relax.to_vdevice", "relax.hint_on_device"}

    def visit(expr: Any) -> None:
        nonlocal copies
        if isinstance(expr, relax.VarBinding) or not isinstance(expr, relax.Call):
            return
        name = getattr(expr.op, "name", "")
        if name == "relax.to_vdevice":
            copies += 1
        if not name.startswith("relax.") or name in skip:
            return
        vd = getattr(getattr(expr, "ty", None), "vdevice", None)
        if vd is None:
            for arg in expr.args:
                vd = getattr(getattr(arg, "ty", None), "vdevice", None)
                if vd is not None:
                    break
        key = f"{vd.target.kind.name}:{int(vd.vdevice_id)}" if vd is not None else "default"
        counts[key] = counts.get(key, 0) + 1

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return counts, copies


def _bridge_step(step: Callable[[], T], kind: str) -> tuple[T, float]:
    """Run one tvm_bridge step: its result and milliseconds; a bad target is
    invalid-target, any other bridge error the step's own `kind`."""
    import tvm_bridge

    start = time.perf_counter()
    try:
        out = step()
    except tvm_bridge.TargetError as err:
        raise PlanFailure.from_relay_error(INVALID_TARGET.slug, err) from None
    except tvm_bridge.BridgeError as err:
        raise PlanFailure.from_relay_error(kind, err) from None
    return out, (time.perf_counter() - start) * 1000


def compile_request(job: CompileJob) -> dict[str, Any]:
    """Plan if needed, lower, compile, export to `job.library`, optionally check.

    The one compile entry point: /compile, /jobs/compile, the queue worker and the CLI
    all come here (through `CompileRun` where a process is wanted), so every guard of
    what a caller sends is here: the module's size against the compile process's memory
    (`/plan`'s estimate) and the run check's data against `run_check_max_bytes`; target
    options by allowlist (the request's, then every vdevice's and kernel's in
    `tvm_bridge.compile`); the run check's answer parsed against the module's outputs.
    In a compile process, `PLANNED` is told once reading and planning are done:
    `CompileRun` holds those phases to the request's `timeout_ms`.

    Raises PlanFailure for every expected failure (kinds of /plan plus
    unsupported-construct, invalid-target, compile-failed, invalid-check,
    module-too-large, run-check-failed). Returns the library's SHA-256, size and the report.
    """
    import relay
    import tvm_bridge
    from service.planning import job_language, parse_module, run_plan
    from tvm_bridge.check import is_planned, relay_widest_tuple, strip_devices

    _refuse_large_text(job)
    # The request's targets, checked (allowlist) before minutes of planning and compiling.
    _bridge_step(lambda: tvm_bridge.target_map(job.targets, cuda_arch=job.cuda_arch), INVALID_TARGET.slug)
    if job_language(job.plan) == "relax":
        return _compile_relax(job)
    module = parse_module(job.plan)
    # A run-check mistake is found before minutes of compiling.
    main = module["main"] if any(gv.name == "main" for gv, _ in module.functions) else None
    inputs = _check_inputs(main, "@main") if job.run_check else None
    needs_plan = not is_planned(module)
    plan_ms = 0.0
    if needs_plan:
        start = time.perf_counter()
        outcome = run_plan(job.plan)
        module = relay.parse_text(outcome.module, name=job.plan.name)
        plan_ms = (time.perf_counter() - start) * 1000
    _planned()
    _refuse_wide_tuples(relay_widest_tuple(module))
    lowered, lower_ms = _bridge_step(
        lambda: tvm_bridge.to_relax(module, job.targets, cuda_arch=job.cuda_arch), UNSUPPORTED_MODULE.slug
    )
    planned = module
    return _build(
        job,
        lowered,
        inputs,
        lambda: tvm_bridge.compile(tvm_bridge.to_relax(strip_devices(planned))),
        planned=needs_plan,
        plan_ms=plan_ms,
        lower_ms=lower_ms,
    )


def _compile_relax(job: CompileJob) -> dict[str, Any]:
    """`compile_request` for a Relax module: planned (always: a planned
    module re-plans unchanged), the planned IRModule compiled as it is, the run
    check against the module without its devices."""
    import tvm

    import tvm_bridge
    from service.planning import detect_format, run_plan
    from tvm_bridge import relax_plan

    start = time.perf_counter()
    outcome = run_plan(dataclasses.replace(job.plan, output_format="json", explain=False))
    # Trusted, so loaded without json_guard: the planner's own output, made in this process
    # (run_plan above) by TVM's save_json of a module TVM built from input that passed the
    # checks (the caller's TVMScript or JSON, read by read_relax). Its graph is TVM's own
    # serialisation (no forged references), and every name TVM loads by name (operators,
    # layout axes, source names) came through the check already. It never leaves this
    # process, so no caller can swap it; checking it again would only repeat the check's
    # cost for the whole model. The caller's text itself is checked again just below.
    planned = tvm.ir.load_json(outcome.module)
    plan_ms = (time.perf_counter() - start) * 1000
    original, source = relax_plan.read_relax(
        job.plan.module, job.plan.input_format or detect_format(job.plan.module)
    )
    inputs = None
    if job.run_check:
        inputs = _check_inputs(relax_plan.translate(original).functions.get("main"), "main")
    _planned()
    return _build(
        job,
        planned,
        inputs,
        lambda: tvm_bridge.compile(relax_plan.strip_devices(original), job.targets, cuda_arch=job.cuda_arch),
        planned=True,
        plan_ms=plan_ms,
        lower_ms=0.0,
        source=source,
    )


# Told (in a compile process) when the compile's reading and planning are done.
PLANNED: list[Callable[[], None]] = []


def _planned() -> None:
    for notice in PLANNED:
        notice()


def _refuse_large_text(job: CompileJob) -> None:
    """/plan's size estimate (DEVPLAN_MEMORY_PER_INPUT_BYTE per byte of module text, a
    sixth of it for TVM JSON) applied to the compile process: a module that cannot fit
    in its memory (DEVPLAN_COMPILE_MEMORY_BYTES) is refused before it is read."""
    from service.planning import detect_format

    settings = get_settings()
    per_byte = float(settings.memory_per_input_byte)
    if (job.plan.input_format or detect_format(job.plan.module)) == "json":
        per_byte /= 6
    limit = int(settings.compile_memory_bytes)
    estimate = len(job.plan.module) * per_byte
    if per_byte and estimate > limit:
        raise PlanFailure.plain(
            MODULE_TOO_LARGE.slug,
            f"the module ({len(job.plan.module)} bytes of text) needs an estimated {sandbox.size_text(int(estimate))} "
            f"to compile, more than a compile process may use ({sandbox.size_text(limit)}, "
            "DEVPLAN_COMPILE_MEMORY_BYTES); compile a smaller module or raise the limit",
        )


def _refuse_large_check(lowered: Any) -> None:
    """The run check's data (`tvm_bridge.check.run_check_bytes`: its inputs, and every tensor
    the entry function binds, once per build) held to DEVPLAN_RUN_CHECK_MAX_BYTES: past
    it, 422 module-too-large before anything is drawn, written or run."""
    from tvm_bridge.check import run_check_bytes

    _refuse_check_bytes(run_check_bytes(lowered))


def _refuse_wide_tuples(widest: int) -> None:
    """A value whose tuples flatten to more than MAX_TUPLE_TENSORS tensors (`widest`: shared
    sub-tuples count each time, as TVM's passes walk them) is module-too-large: its
    compile would not end."""
    from tvm_bridge.check import MAX_TUPLE_TENSORS

    if widest > MAX_TUPLE_TENSORS:
        raise PlanFailure.plain(
            MODULE_TOO_LARGE.slug,
            f"a value of the module is a tuple of {widest} tensors once its shared sub-tuples are "
            f"counted each time, more than a compile expands ({MAX_TUPLE_TENSORS})",
        )


def _refuse_check_bytes(need: int) -> None:
    limit = int(get_settings().run_check_max_bytes)
    if limit and need > limit:
        raise PlanFailure.plain(
            MODULE_TOO_LARGE.slug,
            f"the run check would hold an estimated {sandbox.size_text(need)} of tensors (inputs, and every "
            f"value of main in both builds), more than it may ({sandbox.size_text(limit)}, "
            "DEVPLAN_RUN_CHECK_MAX_BYTES); turn run_check off, or raise the limit",
        )


def _check_inputs(main: Any | None, name: str) -> Any:
    """Random inputs for the run check of `main` (the module's entry function,
    None when it has none): a user mistake is a 422 invalid-check."""
    from tvm_bridge.check import CheckInputError, input_bytes, random_inputs

    if main is None:
        message = f"the run check calls {name} and the module has none: add {name}, or turn run_check off"
        raise PlanFailure.plain(INVALID_CHECK.slug, message)
    # Drawn in this process and held three times (here, and in each build in the child):
    # the first part of `_refuse_large_check`'s estimate, known before anything is drawn.
    # (Past what an array can hold at all, `random_inputs` says so: an invalid check.)
    need = input_bytes(main)
    if need < 2**63:
        _refuse_check_bytes(3 * need)
    try:
        return random_inputs(main)
    except CheckInputError as err:
        raise PlanFailure.from_relay_error(INVALID_CHECK.slug, err) from None


def _build(
    job: CompileJob,
    lowered: Any,
    inputs: Any,
    reference: Callable[[], Any],
    *,
    planned: bool,
    plan_ms: float,
    lower_ms: float,
    source: SourceText | None = None,
) -> dict[str, Any]:
    """Compile `lowered` (a Relax IRModule with vdevices) for the job's targets,
    export the library to `job.library`, and, with `inputs`, run it against
    `reference()` (the same module built without devices): the library's
    SHA-256, size and the report. Shared by both input languages; `source`, the
    caller's TVMScript, locates a kernel that cannot be built."""
    import hashlib

    import tvm_bridge
    from tvm_bridge.check import output_spec, widest_tuple
    from tvm_bridge.kernel_guard import def_span

    _refuse_wide_tuples(widest_tuple(lowered))
    if inputs is not None:
        _refuse_large_check(lowered)

    def build_lowered() -> Any:
        try:
            return tvm_bridge.compile(lowered, job.targets, cuda_arch=job.cuda_arch)
        except tvm_bridge.UnscheduledKernel as err:
            raise err.located(def_span(source, err.kernel)) from None

    compiled, compile_ms = _bridge_step(build_lowered, COMPILE_FAILED.slug)
    counts, copies = _operator_counts(lowered)
    devices = [f"{v.target.kind.name}:{int(v.vdevice_id)}" for v in tvm_bridge.vdevices_of(lowered)]
    library = Path(job.library)
    compiled.export_library(library)
    data = library.read_bytes()
    check: dict[str, Any] | None = None
    if inputs is not None:
        missing = [str(d) for d in compiled.devices if not d.exist]
        if missing:
            check = {"skipped": f"device(s) {', '.join(missing)} not present on the server"}
        else:
            # The reference is the caller's module built again (without devices): it can fail
            # where the planned one did not (a kernel named like a function of the module).
            built_reference, _ = _bridge_step(reference, COMPILE_FAILED.slug)
            check = run_check(job, compiled, built_reference, inputs, output_spec(lowered))
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
        "report": {
            "planned": planned,
            "devices": devices,
            "functions_per_device": counts,
            "device_copies": copies,
            "plan_ms": round(plan_ms, 3),
            "lower_ms": round(lower_ms, 3),
            "compile_ms": round(compile_ms, 3),
            "check": check,
        },
    }


# The time a compile process needs after its run check to answer (remove the directory, send).
_ANSWER_S = 2.0


def _program(library: str, compiled: Any) -> sandbox.Program:
    """A compiled module as the sandbox runs it: its devices and its inputs' devices."""
    devices = tuple((int(d.dlpack_device_type()), int(d.index)) for d in compiled.devices)
    inputs = compiled.input_devices.get("main")
    return sandbox.Program(library, devices, tuple(inputs) if inputs is not None else ())


def run_check(job: CompileJob, compiled: Any, reference: Any, inputs: Any, expected: Any = None) -> dict[str, Any]:
    """The report's `check`: the built library and the reference run on `inputs` in the
    sandbox (the library as exported to `job.library`), or here when the sandbox is off,
    and their largest difference. The sandbox's answer is read against `expected` (the
    module's outputs, `tvm_bridge.check.output_spec`): anything else is run-check-failed."""
    import tvm_bridge
    from tvm_bridge.check import max_abs_error

    config = job.sandbox if job.sandbox is not None else sandbox.config_from(get_settings())
    if not config.enabled:
        error = max_abs_error(tvm_bridge.run(compiled, inputs), tvm_bridge.run(reference, inputs))
        return {"max_abs_error": error, "sandbox": []}
    config = dataclasses.replace(config, limits=_within_compile(config))
    shortened = False
    if job.deadline is not None:
        # What is left of the compile's time, less a moment to answer: the check's wall clock
        # fires first and names itself, rather than the caller's time limit killing us all.
        left = round(job.deadline - time.time() - _ANSWER_S, 1)
        if left < config.limits.wall_s:
            config = dataclasses.replace(config, limits=dataclasses.replace(config.limits, wall_s=max(1.0, left)))
            shortened = True
    failure: sandbox.SandboxFailure | None = None
    try:
        with sandbox.private_dir(beside=job.library) as directory:
            shutil.copyfile(job.library, directory / "built.so")
            reference.export_library(directory / "reference.so")
            programs = [_program("built.so", compiled), _program("reference.so", reference)]
            ran = sandbox.run_programs(config, directory, programs, inputs, expected)
    except sandbox.SandboxFailure as err:
        failure = err
    # (Raised out here: a PlanFailure is frozen, and a context manager's exit sets the
    # traceback of what passes through it.)
    if failure is not None:
        if failure.limit == "wall-clock" and shortened and config.compile_limits is not None:
            whole = config.compile_limits.wall_s
            failure = sandbox.SandboxFailure("wall-clock", f"{failure.detail} (the rest of the compile's {whole:g} s)")
        raise check_failure(failure)
    built, reference_out = ran.outputs
    mismatch = _mismatch(built, reference_out)
    if mismatch is not None:
        raise PlanFailure.plain(RUN_CHECK_FAILED.slug, f"the run check's answer was refused: {mismatch}")
    return {
        "max_abs_error": max_abs_error(built, reference_out),
        "sandbox": list(config.layers),
        "cpu_s": ran.cpu_s,
        "peak_bytes": ran.peak_bytes,
        "peak_data_bytes": ran.peak_data_bytes,
        "wall_s": ran.wall_s,
    }


def _mismatch(built: Any, reference: Any, at: str = "output") -> str | None:
    """Where the library's outputs and the reference's differ in structure or shape (the
    answer's shapes were checked against the module's, but a symbolic dimension can
    differ between the two), None when they can be compared element by element."""
    work = [(built, reference, at)]
    while work:
        a, b, where = work.pop()
        if isinstance(a, tuple) or isinstance(b, tuple):
            if not (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)):
                return f"{where}: the library and the reference return different tuples"
            work.extend((x, y, f"{where}.{k}") for k, (x, y) in enumerate(zip(a, b)))
        elif getattr(a, "shape", None) != getattr(b, "shape", None):
            return f"{where}: the library returns shape {getattr(a, 'shape', None)}, the reference {getattr(b, 'shape', None)}"
    return None


def _within_compile(config: SandboxConfig) -> sandbox.Limits:
    """The run check's limits held to the compile process's data and file-size limits (the
    child inherits those hard rlimits and cannot raise them), so that a limit the child
    hits is named as it is. CPU is the child's own: the compile process has no hard CPU
    limit (its wall clock bounds the check's time instead)."""
    limits, outer = config.limits, config.compile_limits
    if outer is None:
        return limits
    return dataclasses.replace(
        limits,
        memory_bytes=min(limits.memory_bytes, outer.memory_bytes),
        file_bytes=min(limits.file_bytes, outer.file_bytes),
    )


def check_failure(failure: sandbox.SandboxFailure) -> PlanFailure:
    """A sandbox failure as the compile's failure: the wall clock is a 504 compile-timeout,
    the sandbox not starting an internal error (the server's), the rest 422 run-check-failed."""
    if failure.limit == "wall-clock":
        return PlanFailure.plain(COMPILE_TIMEOUT.slug, f"the run check hit its {failure.detail}")
    if failure.limit == "start":
        return internal_failure(failure.detail)
    if failure.limit == "answer":
        return PlanFailure.plain(RUN_CHECK_FAILED.slug, f"the run check's answer was refused: {failure.detail}")
    return PlanFailure.plain(RUN_CHECK_FAILED.slug, f"the run check was stopped: {failure.detail}")


def died(exitcode: int | None, config: SandboxConfig | None) -> PlanFailure:
    """The failure of a compile process that ended without an answer: a CPU or file-size
    rlimit it hit is named; any other death is an internal error."""
    limits = config.compile_limits if config is not None else None
    if limits is not None and exitcode == -signal.SIGXCPU:
        return PlanFailure.plain(COMPILE_TIMEOUT.slug, f"compiling hit its cpu limit {limits.cpu_s:g} s")
    if limits is not None and exitcode == -signal.SIGXFSZ:
        size = sandbox.size_text(limits.file_bytes)
        return PlanFailure.plain(COMPILE_FAILED.slug, f"compiling hit its file size limit {size}")
    return internal_failure(f"the compiler process died (exit code {exitcode})")


def internal_failure(message: str) -> PlanFailure:
    """An unexpected failure; its message goes to the log, never to the client (a 500)."""
    return PlanFailure.plain(INTERNAL_ERROR.slug, message)


def worker_main(job: CompileJob, conn: multiprocessing.connection.Connection) -> None:
    """The worker process: send {"ok": result} or {"error": failure}; never raise."""
    try:
        result: dict[str, Any] = {"ok": compile_request(job)}
    except PlanFailure as failure:
        result = {"error": failure.as_dict()}
    except Exception as exc:
        limits = job.sandbox.compile_limits if job.sandbox is not None else None
        if limits is not None and (isinstance(exc, MemoryError) or "bad_alloc" in str(exc)):
            # The compile's data segment limit: the module's need, not our bug.
            size = sandbox.size_text(limits.memory_bytes)
            died_of = PlanFailure.plain(MODULE_TOO_LARGE.slug, f"compiling hit its memory limit {size}")
        else:
            log.exception("compile worker failed")
            died_of = internal_failure(f"{type(exc).__name__}: {exc}")
        result = {"error": died_of.as_dict()}
    if "error" in result:
        Path(job.library).unlink(missing_ok=True)
    send_answer(conn, result)


def send_answer(conn: multiprocessing.connection.Connection, result: dict[str, Any]) -> None:
    """Send a compile process's answer with the log records it dropped (see _process_main),
    which CompileRun.wait hands to the web process's metric; then close the pipe."""
    from service.logs import take_unreported_drops

    dropped = take_unreported_drops()
    if dropped:
        result[LOG_DROPS_KEY] = dropped
    conn.send(result)
    conn.close()


Target = Callable[[CompileJob, multiprocessing.connection.Connection], None]

# The key of a compile answer that carries the worker's dropped log records.
LOG_DROPS_KEY = "log_records_dropped"
# The key of a compile process's notice that a phase began (before its answer).
PHASE_KEY = "phase"
# How often CompileRun looks at a running compile: its resident set (the watchdog) and
# the planning deadline; the overshoot past the memory limit is what it allocates meanwhile.
_WATCH_S = 0.02


def _process_main(
    target: Target,
    job: CompileJob,
    conn: multiprocessing.connection.Connection,
    log_level: int,
    log_queue_size: int,
) -> None:
    """The compile process: the web process's JSON logging through this process's own
    bounded queue (so TVM's minutes of work never wait on a blocked stderr), its rlimits
    (CPU, memory and file size; its wall clock is the caller's), then `target`."""
    from service.logs import configure

    configure(logging.getLevelName(log_level).lower(), log_queue_size)
    config = job.sandbox if job.sandbox is not None else sandbox.config_from(get_settings())
    if config.enabled and config.compile_limits is not None:
        sandbox.limit_process(config.compile_limits, hard_cpu=False)
    # The phases CompileRun times (the request's timeout_ms): from here, once TVM is
    # imported (seconds the caller's limit should not pay), to the end of planning.
    with contextlib.suppress(ImportError):
        import tvm_bridge  # noqa: F401
    conn.send({PHASE_KEY: "reading"})
    PLANNED.append(lambda: conn.send({PHASE_KEY: "planned"}))
    target(dataclasses.replace(job, sandbox=config), conn)


class CompileRun:
    """One compile process, from start to `stop()` (which the caller always reaches)."""

    def __init__(self, job: CompileJob, target: Target = worker_main) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.job = job
        self._receiver, sender = ctx.Pipe(duplex=False)
        from service.logs import queue_size

        level = logging.getLogger("devplan").getEffectiveLevel()
        self.proc = ctx.Process(
            target=_process_main,
            args=(target, job, sender, level, queue_size()),
            daemon=True,
            name="devplan-compile",
        )
        self._poll: asyncio.Future[dict[str, Any] | None] | None = None
        self._reaping = threading.Lock()  # `_watch`'s thread and `stop` both reap the process
        self.proc.start()
        sender.close()

    async def wait(self, timeout_s: float) -> dict[str, Any] | None:
        """The worker's answer; None when it did not answer within `timeout_s`
        (the caller then stops it). Meanwhile its resident set is watched as the
        planning workers' is (over the compile memory limit: module-too-large), and
        reading and planning are held to the request's `timeout_ms` (past it:
        solver-timeout); after either the process is killed. Cancelling this leaves
        the process running until `stop()`."""
        loop = asyncio.get_running_loop()
        self._poll = loop.run_in_executor(None, self._watch, timeout_s)
        answer = await self._poll
        if answer is None:
            return None
        from service.logs import note_worker_drops

        note_worker_drops("compile", answer.pop(LOG_DROPS_KEY, 0))
        return answer

    def _watch(self, timeout_s: float) -> dict[str, Any] | None:
        """`wait`'s loop, in a thread: the answer, a failure of the watch, or None."""
        from service.planning import deadline_s, timeout_failure
        from service.pool import resident_bytes

        end = time.monotonic() + timeout_s
        plan_end: float | None = None
        memory = self._memory_limit()
        while True:
            now = time.monotonic()
            remaining = min(end, plan_end if plan_end is not None else end) - now
            if remaining <= 0:
                if plan_end is not None and now >= plan_end:
                    self.proc.kill()
                    timeout_ms = self.job.plan.timeout_ms
                    return {"error": timeout_failure(timeout_ms, "compile's reading and planning").as_dict()}
                return None
            try:
                ready = self._receiver.poll(min(remaining, _WATCH_S))
                message: dict[str, Any] | None = self._receiver.recv() if ready else None
            except (EOFError, OSError):
                with self._reaping:
                    self.proc.join(5)
                return {"error": died(self.proc.exitcode, self.job.sandbox).as_dict()}
            if message is not None:
                phase = message.get(PHASE_KEY)
                if phase == "reading":
                    plan_end = time.monotonic() + deadline_s(self.job.plan.timeout_ms)
                elif phase == "planned":
                    plan_end = None
                else:
                    return message
            if memory and self.proc.pid is not None:
                rss = resident_bytes(self.proc.pid)
                if rss is not None and rss > memory:
                    self.proc.kill()  # now, not after the answer is on its way
                    log.warning("compile used %d MiB, over its limit of %d MiB; killed", rss >> 20, memory >> 20)
                    size = sandbox.size_text(memory)
                    failure = PlanFailure.plain(MODULE_TOO_LARGE.slug, f"compiling hit its memory limit {size}")
                    return {"error": failure.as_dict()}

    def _memory_limit(self) -> int:
        """The compile process's resident-set limit: its data-segment limit (0: none)."""
        config = self.job.sandbox
        if config is not None:
            return config.compile_limits.memory_bytes if config.compile_limits is not None else 0
        return int(get_settings().compile_memory_bytes)

    def stop(self) -> None:
        """Kill the process if it still runs, reap it, and remove its temporary
        library unless it was already moved into the store."""
        if self.proc.is_alive():
            self.proc.kill()
        with self._reaping:  # one reaper: a second waitpid would find no child and leave exitcode unset
            self.proc.join()  # SIGKILL cannot be refused: it ends, however busy the machine is
        if self._poll is not None and not self._poll.done():
            # A cancelled wait's poll is still in its thread; the dead process closed
            # its end, so it returns at once: close the pipe after it, not under it.
            self._poll.add_done_callback(lambda _: self._close())
        else:
            self._close()
        Path(self.job.library).unlink(missing_ok=True)
        shutil.rmtree(sandbox.check_dir_of(self.job.library), ignore_errors=True)  # a killed run check's

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            self._receiver.close()
