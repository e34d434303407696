"""POST /compile and GET /artifacts/{id}: plan (if needed), lower to Relax, compile with TVM.

`tvm_bridge` (and so TVM) is imported only inside the compile worker, a
fresh process per compile (spawned, so a TVM crash or an overrun kills
only that process): the service starts, and /plan works, without TVM.
Compiles run at most `compile_workers` at a time, each within
`compile_timeout_s`. Libraries are stored under `Settings.artifact_dir` by
the SHA-256 of their bytes; an identical request (same module, options,
targets, TVM version) reuses the stored artifact.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import multiprocessing
import os
import re
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from service.api.deps import SettingsDep
from service.models import PlanRequest, constraint_to_plain, optimize_to_plain, spec_to_plain
from service.planning import KIND_INTERNAL, PlanFailure, PlanJob
from service.problems import (
    COMPILE_BUSY,
    COMPILE_FAILED,
    COMPILE_KINDS,
    COMPILE_TIMEOUT,
    INTERNAL_ERROR,
    INVALID_CONFIG,
    INVALID_TARGET,
    MALFORMED_MODULE,
    NOT_FOUND,
    PLANNING_CONFLICT,
    SOLVER_TIMEOUT,
    TVM_UNAVAILABLE,
    UNSUPPORTED_MODULE,
    VALIDATION_ERROR,
    ProblemError,
    failure_to_problem,
    problem_responses,
)

# `router` is what service/main.py includes today; it stays empty until the
# lead wires `compile_router` in (with openapi.yaml regenerated and the
# service tests' list of operation ids updated), so main stays green.
router = APIRouter(tags=["compile"])
compile_router = APIRouter(tags=["compile"])
log = logging.getLogger("devplan.service")

KIND_UNSUPPORTED = "unsupported-construct"
KIND_TARGET = "invalid-target"
KIND_COMPILE = "compile-failed"
_KINDS = {KIND_UNSUPPORTED: UNSUPPORTED_MODULE, KIND_TARGET: INVALID_TARGET, KIND_COMPILE: COMPILE_FAILED}

ARTIFACT_ID = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_COMPILE_TIMEOUT_S = 300.0
DEFAULT_COMPILE_WORKERS = 1
QUEUE_TIMEOUT_S = 60.0
CACHE_VERSION = "devplan-compile-1"

TargetValue = Annotated[str, Field(min_length=1, max_length=4096)] | dict[str, Any]

COMPILE_EXAMPLE = {
    "summary": "Plan with two CPU devices, compile for llvm, check the result",
    "value": {
        "module": '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {\n"
        "  %0 = nn.relu(%x);\n"
        "  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0]);\n"
        "  nn.dense(%1, %w, units=4)\n"
        "}\n",
        "virtual_devices": ["cpu:0", "cpu:1"],
        "default_device": "cpu:1",
        "host_device": "cpu:0",
        "targets": {"cpu": "llvm"},
        "run_check": True,
    },
}


class CompileRequest(PlanRequest):
    """A Relay module, the planning options of /plan, and the compilation targets."""

    model_config = ConfigDict(extra="forbid", strict=True)

    targets: dict[str, TargetValue] | None = Field(
        None,
        description='Target per device type for virtual devices without one: `{"cpu": "llvm", "cuda": '
        '"cuda -arch=sm_90"}`. Relay-era strings and TVM 0.27 JSON dicts are both accepted.',
        examples=[{"cpu": "llvm -mcpu=skylake", "cuda": {"kind": "cuda", "arch": "sm_90"}}],
    )
    cuda_arch: str | None = Field(
        None,
        pattern=r"^sm_\d+[a-z]?$",
        description="CUDA arch for cuda targets that name none (default: the server's, sm_75).",
    )
    run_check: bool = Field(
        False,
        description="Run the library on random inputs and compare with a single-CPU build of the "
        "unannotated module (only where every device of the plan exists on the server).",
    )


class CompileCheck(BaseModel):
    max_abs_error: float | None = Field(None, description="Largest difference from the single-CPU build.")
    skipped: str | None = Field(None, description="Why the check did not run (e.g. no GPU on the server).")


class CompileReport(BaseModel):
    planned: bool = Field(
        ..., description="True when the server planned the module (it was not yet planned)."
    )
    devices: list[str] = Field(
        ..., description='The plan\'s virtual devices as vdevices ("llvm:0", "cuda:0").'
    )
    functions_per_device: dict[str, int] = Field(
        ..., description="Operator calls (compiled kernels invoked) per virtual device."
    )
    device_copies: int = Field(
        ..., description="Copies between devices (R.to_vdevice) in the lowered module."
    )
    plan_ms: float = Field(..., description="Planning time (0 when the module came planned).")
    lower_ms: float = Field(..., description="tvm_bridge.to_relax time.")
    compile_ms: float = Field(..., description="Legalize, schedule and tvm.compile time.")
    check: CompileCheck | None = None


class CompileResponse(BaseModel):
    artifact_id: str = Field(
        ..., description="SHA-256 of the library; GET /artifacts/{artifact_id} returns it."
    )
    sha256: str
    size_bytes: int
    download: str = Field(..., description="Path of the library.")
    cache_hit: bool = Field(..., description="True when an identical earlier request produced the artifact.")
    report: CompileReport


# --------------------------------------------------------------------------
# The worker (runs in a spawned process; everything in and out is plain data)


def _operator_counts(mod: Any) -> tuple[dict[str, int], int]:
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


def compile_request(job: dict[str, Any]) -> dict[str, Any]:
    """Plan if needed, lower, compile, export, optionally check: the worker's job.

    Raises PlanFailure for every expected failure (kinds of /plan plus
    unsupported-construct, invalid-target, compile-failed).
    """
    import relay
    import tvm_bridge
    from service.planning import parse_module, run_plan
    from tvm_bridge.check import is_planned, max_abs_error, random_inputs, strip_devices

    plan_job = PlanJob(**job["plan"])
    module = parse_module(plan_job)
    planned = not is_planned(module)
    plan_ms = 0.0
    if planned:
        start = time.perf_counter()
        outcome = run_plan(plan_job)
        module = relay.parse_text(outcome.module, name=plan_job.name)
        plan_ms = (time.perf_counter() - start) * 1000
    try:
        start = time.perf_counter()
        lowered = tvm_bridge.to_relax(module, job["targets"], cuda_arch=job["cuda_arch"])
        lower_ms = (time.perf_counter() - start) * 1000
    except tvm_bridge.TargetError as err:
        raise _bridge_failure(KIND_TARGET, err) from None
    except tvm_bridge.BridgeError as err:
        raise _bridge_failure(KIND_UNSUPPORTED, err) from None
    try:
        start = time.perf_counter()
        compiled = tvm_bridge.compile(lowered, job["targets"], cuda_arch=job["cuda_arch"])
        compile_ms = (time.perf_counter() - start) * 1000
    except tvm_bridge.TargetError as err:
        raise _bridge_failure(KIND_TARGET, err) from None
    except tvm_bridge.BridgeError as err:
        raise _bridge_failure(KIND_COMPILE, err) from None
    counts, copies = _operator_counts(lowered)
    devices = [f"{v.target.kind.name}:{int(v.vdevice_id)}" for v in tvm_bridge.vdevices_of(lowered)]

    out_dir = Path(job["artifact_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"tmp-{uuid.uuid4().hex}.so"
    compiled.export_library(tmp)
    data = tmp.read_bytes()

    check: dict[str, Any] | None = None
    if job["run_check"]:
        missing = [str(d) for d in compiled.devices if not d.exist]
        if missing:
            check = {"skipped": f"device(s) {', '.join(missing)} not present on the server"}
        else:
            inputs = random_inputs(module["main"])
            result = tvm_bridge.run(compiled, inputs)
            reference = tvm_bridge.run(tvm_bridge.compile(tvm_bridge.to_relax(strip_devices(module))), inputs)
            check = {"max_abs_error": max_abs_error(result, reference)}
    return {
        "library": str(tmp),
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


def _bridge_failure(kind: str, err: Any) -> PlanFailure:
    span = getattr(err, "span", None)
    locations: tuple[dict[str, Any], ...] = ()
    if span is not None:
        locations = ({"line": span.line, "column": span.column, "message": err.message},)
    return PlanFailure(kind, getattr(err, "message", str(err)), str(err), locations)


def _worker_main(job: dict[str, Any], conn: Any) -> None:
    try:
        result: dict[str, Any] = {"ok": compile_request(job)}
    except PlanFailure as failure:
        result = {"error": failure.as_dict()}
    except Exception as exc:
        logging.getLogger("devplan.compile").exception("compile worker failed")
        message = f"{type(exc).__name__}: {exc}"
        result = {"error": PlanFailure(KIND_INTERNAL, message, f"error: {message}").as_dict()}
    conn.send(result)
    conn.close()


def _run_worker(job: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
    """Run one compile in a fresh process; None when it overran (it is killed)."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker_main, args=(job, sender), daemon=True, name="devplan-compile")
    proc.start()
    sender.close()
    try:
        if not receiver.poll(timeout_s):
            proc.kill()
            return None
        try:
            result: dict[str, Any] = receiver.recv()
        except EOFError:
            message = f"the compiler process died (exit code {proc.exitcode})"
            result = {"error": PlanFailure(KIND_INTERNAL, message, f"error: {message}").as_dict()}
        return result
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
        receiver.close()


# --------------------------------------------------------------------------
# Routes


def _semaphore(request: Request, size: int) -> asyncio.Semaphore:
    sem = getattr(request.app.state, "compile_slots", None)
    if sem is None:
        sem = asyncio.Semaphore(size)
        request.app.state.compile_slots = sem
    return sem


def _cache_key(body: CompileRequest) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        tvm_version = version("apache-tvm")
    except PackageNotFoundError:
        tvm_version = "unknown"
    text = json.dumps([CACHE_VERSION, tvm_version, body.model_dump(mode="json")], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _store(artifact_dir: Path, key: str, result: dict[str, Any]) -> CompileResponse:
    sha = result["sha256"]
    final = artifact_dir / f"{sha}.so"
    tmp = Path(result["library"])
    if final.exists():
        tmp.unlink(missing_ok=True)
    else:
        os.replace(tmp, final)
    response = CompileResponse(
        artifact_id=sha,
        sha256=sha,
        size_bytes=result["size_bytes"],
        download=f"/artifacts/{sha}",
        cache_hit=False,
        report=CompileReport.model_validate(result["report"]),
    )
    index = artifact_dir / "requests"
    index.mkdir(exist_ok=True)
    entry = index / f"{key}.json"
    tmp_entry = index / f"{key}.{uuid.uuid4().hex}.tmp"
    tmp_entry.write_text(response.model_dump_json())
    os.replace(tmp_entry, entry)
    return response


def _cached(artifact_dir: Path, key: str) -> CompileResponse | None:
    entry = artifact_dir / "requests" / f"{key}.json"
    try:
        response = CompileResponse.model_validate_json(entry.read_text())
    except (OSError, ValueError):
        return None
    if not (artifact_dir / f"{response.artifact_id}.so").exists():
        return None
    return response.model_copy(update={"cache_hit": True})


@compile_router.post(
    "/compile",
    operation_id="compile",
    summary="Plan, lower to TVM Relax and compile a Relay module",
    description="Plans the module unless it is already planned (every parameter and function result "
    "has a device), lowers it to Relax with one vdevice per virtual device (`device_copy` -> "
    "`R.to_vdevice`), compiles it with TVM 0.27 for each device's target and stores the library. "
    "Identical requests reuse the stored artifact (`cache_hit`).",
    response_model=CompileResponse,
    response_model_exclude_none=True,
    responses=problem_responses(
        MALFORMED_MODULE,
        PLANNING_CONFLICT,
        INVALID_CONFIG,
        VALIDATION_ERROR,
        *COMPILE_KINDS,
        SOLVER_TIMEOUT,
        INTERNAL_ERROR,
    ),
)
async def compile_module(
    request: Request,
    body: Annotated[CompileRequest, Body(openapi_examples={"two-cpus": COMPILE_EXAMPLE})],
    settings: SettingsDep,
) -> CompileResponse:
    if importlib.util.find_spec("tvm") is None:
        raise ProblemError(TVM_UNAVAILABLE, "apache-tvm is not installed; install the tvm extra")
    artifact_dir = Path(settings.artifact_dir).resolve()
    key = _cache_key(body)
    cached = _cached(artifact_dir, key)
    if cached is not None:
        return cached
    timeout_ms = min(body.timeout_ms or settings.default_timeout_ms, settings.max_timeout_ms)
    job = {
        "plan": {
            "module": body.module,
            "input_format": body.format,
            "virtual_devices": tuple(spec_to_plain(s) for s in body.virtual_devices),
            "default_device": spec_to_plain(body.default_device),
            "host_device": spec_to_plain(body.host_device),
            "constraints": tuple(constraint_to_plain(c) for c in body.constraints),
            "timeout_ms": timeout_ms,
            **optimize_to_plain(body),
            "name": "<request>",
        },
        "targets": body.targets,
        "cuda_arch": body.cuda_arch,
        "run_check": body.run_check,
        "artifact_dir": str(artifact_dir),
    }
    timeout_s = float(getattr(settings, "compile_timeout_s", DEFAULT_COMPILE_TIMEOUT_S))
    slots = _semaphore(request, int(getattr(settings, "compile_workers", DEFAULT_COMPILE_WORKERS)))
    try:
        await asyncio.wait_for(slots.acquire(), QUEUE_TIMEOUT_S)
    except TimeoutError:
        raise ProblemError(COMPILE_BUSY, "all compile slots stayed busy; retry later") from None
    try:
        result = await asyncio.get_running_loop().run_in_executor(None, _run_worker, job, timeout_s)
    finally:
        slots.release()
    if result is None:
        raise ProblemError(COMPILE_TIMEOUT, f"compiling did not finish within {timeout_s:g} s")
    if "error" in result:
        failure = PlanFailure.from_dict(result["error"])
        kind = _KINDS.get(failure.kind)
        if kind is not None:
            raise ProblemError(kind, failure.message, locations=list(failure.locations))
        raise failure_to_problem(failure)
    return _store(artifact_dir, key, result["ok"])


@compile_router.get(
    "/artifacts/{artifact_id}",
    operation_id="get_artifact",
    summary="Download a compiled library",
    description="The shared library a /compile produced (load it with `tvm.runtime.load_module` and "
    "run it on `tvm.relax.VirtualMachine` with the plan's devices).",
    response_class=FileResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The library."},
        **problem_responses(NOT_FOUND),
    },
)
async def get_artifact(artifact_id: str, settings: SettingsDep) -> FileResponse:
    if not ARTIFACT_ID.fullmatch(artifact_id):
        raise ProblemError(NOT_FOUND, "artifact ids are 64 lowercase hex digits")
    path = Path(settings.artifact_dir).resolve() / f"{artifact_id}.so"
    if not path.is_file():
        raise ProblemError(NOT_FOUND, f"no artifact {artifact_id}")
    return FileResponse(path, media_type="application/octet-stream", filename=f"{artifact_id}.so")
