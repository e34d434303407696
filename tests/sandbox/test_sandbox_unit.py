"""The sandbox's parent side without TVM: how a child's end is named, how its
answer is read (never trusted), and that a missing libseccomp is reported, not fatal."""

from __future__ import annotations

import json
import os
import resource
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service import sandbox
from service.compile_workers import check_failure, died
from service.config import Settings

LIMITS = sandbox.Limits(cpu_s=60, wall_s=120, memory_bytes=4 << 30, file_bytes=1 << 20)


def _ending(status: int, cpu_s: float = 0.0, peak_data: int = 0, data: bytes = b"") -> sandbox.Ending:
    return sandbox.Ending(data=data, status=status, cpu_s=cpu_s, peak_data=peak_data)


def _killed(sig: int) -> int:
    return sig  # a wait status: killed by `sig`


def _exited(code: int) -> int:
    return code << 8


@pytest.mark.parametrize("bubblewrap", [False, True])
def test_signals_name_their_limit(bubblewrap: bool) -> None:
    config = sandbox.SandboxConfig(limits=LIMITS, bubblewrap=bubblewrap)

    def status(sig: int) -> int:  # bwrap reports its child's signal N as exit 128+N
        return _exited(128 + sig) if bubblewrap else _killed(sig)

    seccomp = sandbox._classify(_ending(status(signal.SIGSYS)), config)
    assert seccomp is not None and seccomp.limit == "seccomp" and seccomp.detail.startswith("seccomp (SIGSYS)")
    cpu = sandbox._classify(_ending(status(signal.SIGXCPU), 60.2), config)
    assert cpu is not None and cpu.detail.startswith("cpu limit 60 s")
    hard = sandbox._classify(_ending(status(signal.SIGKILL), 61.0), config)
    assert hard is not None and hard.limit == "cpu"
    memory = sandbox._classify(_ending(status(signal.SIGSEGV), 1.0, 3 << 30), config)
    assert memory is not None and memory.detail.startswith("memory limit 4 GiB (data segment seen at 3 GiB)")
    crash = sandbox._classify(_ending(status(signal.SIGSEGV), 1.0, 100 << 20), config)
    assert crash is not None and crash.limit == "crash" and "SIGSEGV" in crash.detail
    size = sandbox._classify(_ending(status(signal.SIGXFSZ)), config)
    assert size is not None and size.detail == "file size limit 1 MiB"
    assert sandbox._classify(_ending(_exited(0)), config) is None


def test_a_run_error_is_reported_and_an_allocation_error_is_the_memory_limit() -> None:
    config = sandbox.SandboxConfig(limits=LIMITS)
    error = json.dumps({"error": "TVMError: shape mismatch"}).encode()
    failure = sandbox._classify(_ending(_exited(1), data=error), config)
    assert failure is not None and failure.limit == "error" and failure.detail == "the run failed: TVMError: shape mismatch"
    oom = json.dumps({"error": "RuntimeError: std::bad_alloc"}).encode()
    failure = sandbox._classify(_ending(_exited(1), data=oom), config)
    assert failure is not None and failure.limit == "memory"


def test_memory_samples_read_proc_status() -> None:
    sampler = sandbox._MemorySampler(os.getpid(), bubblewrap=False)
    sampler.sample()
    assert sampler.resident > 0 and sampler.data > 0
    gone = sandbox._MemorySampler(2**22 + 1, bubblewrap=True)  # no such process: nothing read
    gone.sample()
    assert (gone.resident, gone.data, gone.target) == (0, 0, None)


def _answer(header: Any, blob: bytes = b"") -> bytes:
    return json.dumps(header).encode() + b"\n" + blob


def test_answer_round_trip() -> None:
    a = np.arange(6, dtype="float32").reshape(2, 3)
    b = np.array([True, False])
    out = sandbox._read_answer(sandbox._encode([a, (b, a)]))
    np.testing.assert_array_equal(out[0], a)
    assert isinstance(out[1], tuple)
    np.testing.assert_array_equal(out[1][0], b)
    np.testing.assert_array_equal(out[1][1], a)


@pytest.mark.parametrize(
    "data",
    [
        b"not json\n",
        _answer({"outputs": "x"}),
        _answer({"outputs": [{"dtype": "object", "shape": [1], "offset": 0}]}, b"\0" * 8),
        _answer({"outputs": [{"dtype": "float32", "shape": [4], "offset": 0}]}, b"\0" * 8),  # short
        _answer({"outputs": [{"dtype": "float32", "shape": [-1], "offset": 0}]}),
        _answer({"outputs": [{"dtype": "float32", "shape": [1], "offset": -4}]}, b"\0" * 8),
        _answer({"outputs": [{"tuple": "x"}]}),
        _answer({"outputs": [7]}),
    ],
    ids=["not-json", "outputs-not-a-list", "object-dtype", "short-blob", "negative-shape", "negative-offset",
         "tuple-not-a-list", "leaf-not-an-object"],
)
def test_a_malformed_answer_is_refused(data: bytes) -> None:
    with pytest.raises(sandbox.SandboxFailure) as caught:
        sandbox._read_answer(data)
    assert caught.value.limit == "answer"


def test_failures_map_to_problem_kinds() -> None:
    wall = check_failure(sandbox.SandboxFailure("wall-clock", "wall-clock limit 120 s"))
    assert wall.kind == "compile-timeout" and "wall-clock limit 120 s" in wall.message
    seccomp = check_failure(sandbox.SandboxFailure("seccomp", "seccomp (SIGSYS): x"))
    assert seccomp.kind == "run-check-failed" and "seccomp (SIGSYS)" in seccomp.message
    assert check_failure(sandbox.SandboxFailure("start", "no bwrap")).kind == "internal-error"


def test_a_compile_process_killed_by_its_rlimits_is_named() -> None:
    config = sandbox.config_from(Settings(compile_timeout_s=90), sandbox.Detected(None, None))
    cpu = died(-signal.SIGXCPU, config)
    assert cpu.kind == "compile-timeout" and cpu.message == "compiling hit its cpu limit 90 s"
    assert died(-signal.SIGXFSZ, config).kind == "compile-failed"
    assert died(-signal.SIGSEGV, config).kind == "internal-error"


class _Conn:
    """A pipe end that keeps what the compile process sends."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, value: Any) -> None:
        self.sent.append(value)

    def close(self) -> None:
        pass


def test_a_compile_out_of_memory_is_module_too_large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import solver
    from service import compile_workers
    from service.planning import PlanJob

    def exhausted(job: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(compile_workers, "compile_request", exhausted)
    config = sandbox.config_from(Settings(compile_memory_bytes="2GiB"), sandbox.Detected(None, None))
    job = compile_workers.CompileJob(
        plan=PlanJob(module="", options=solver.PlanOptions()), targets=None, cuda_arch=None, run_check=False,
        library=str(tmp_path / "lib.so"), sandbox=config,
    )
    conn = _Conn()
    compile_workers.worker_main(job, conn)  # type: ignore[arg-type]
    (answer,) = conn.sent
    assert answer["error"]["kind"] == "module-too-large"
    assert answer["error"]["message"] == "compiling hit its memory limit 2 GiB"


def test_child_limits_never_exceed_the_compile_process_hard_limits() -> None:
    # limit_process holds a request above the current hard limit to it (a hard limit cannot rise).
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    assert sandbox._fit(resource.RLIMIT_CORE, 0, 0) == (0, 0)
    if hard != resource.RLIM_INFINITY:
        assert sandbox._fit(resource.RLIMIT_CORE, hard + 1, hard + 1) == (hard, hard)
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_CORE)


def test_off_mode_has_no_layers_and_probes_nothing() -> None:
    config = sandbox.config_from(Settings(compile_sandbox="off"))
    assert not config.enabled and config.layers == ()


def test_missing_libseccomp_is_reported_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pyseccomp that cannot find libseccomp.so.2 fails at import, as the real one does.
    (tmp_path / "pyseccomp.py").write_text('raise RuntimeError("Unable to find libseccomp")\n')
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{Path(__file__).resolve().parents[2]}")
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)  # and no bwrap: the plain probe
    found = sandbox.detect.__wrapped__()
    assert found.seccomp == "RuntimeError: Unable to find libseccomp"
    assert found.bubblewrap == "bwrap is not installed"
    config = sandbox.config_from(Settings(), found)
    assert config.layers == ("rlimits", "wall-clock")
    assert dict(config.unavailable) == {
        "seccomp": "RuntimeError: Unable to find libseccomp",
        "bubblewrap": "bwrap is not installed",
    }


def test_the_check_directory_is_beside_the_library_and_removed(tmp_path: Path) -> None:
    library = tmp_path / "tmp-abc.so"
    with sandbox.private_dir(beside=library) as directory:
        assert directory == sandbox.check_dir_of(library) == tmp_path / "tmp-abc.so.check"
        assert directory.is_dir() and directory.stat().st_mode & 0o777 == 0o700
    assert not directory.exists()


def test_a_noexec_file_system_is_avoided_or_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    library = tmp_path / "tmp-abc.so"
    monkeypatch.setattr(sandbox, "_executable_mappings", lambda path: path != tmp_path)
    with sandbox.private_dir(beside=library) as directory:  # the store's file system is noexec
        assert directory.parent != tmp_path and directory.name.startswith("devplan-check-")
    monkeypatch.setattr(sandbox, "_executable_mappings", lambda path: False)
    with pytest.raises(sandbox.SandboxFailure) as caught, sandbox.private_dir(beside=library):
        pass
    assert caught.value.limit == "start" and "noexec" in caught.value.detail


def test_the_check_limits_are_held_to_the_compile_process() -> None:
    # The child inherits the compile process's hard rlimits: a larger limit would be named
    # but never reached.
    from service.compile_workers import _within_compile

    config = sandbox.config_from(
        Settings(compile_timeout_s=120, run_check_cpu_s=600, compile_memory_bytes="1GiB"), sandbox.Detected(None, None)
    )
    held = _within_compile(config)
    assert (held.cpu_s, held.memory_bytes, held.file_bytes) == (600, 1 << 30, config.limits.file_bytes)


def test_the_compile_process_leaves_its_child_a_free_cpu_limit() -> None:
    # In a child process: its soft CPU limit set, no hard one, so a run check may use its own.
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        soft, hard = pool.apply(_limited_cpu, (90.0,))
    assert soft == 90 and hard == resource.RLIM_INFINITY


def _limited_cpu(cpu_s: float) -> tuple[int, int]:
    sandbox.limit_process(sandbox.Limits(cpu_s=cpu_s, memory_bytes=64 << 30, file_bytes=1 << 40), hard_cpu=False)
    return resource.getrlimit(resource.RLIMIT_CPU)
