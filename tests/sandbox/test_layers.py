"""Each layer of the run-check sandbox on its own, through `run_programs` with
small kernels built here: the seccomp filter (also in TVM's pool threads), the CPU and
memory rlimits, the wall clock, bubblewrap's read-only file system; and that a clean
kernel, threaded too, runs under all of them.

Limits are small so that each attack ends fast, and chosen so that no attack can be
mistaken for another: the wall clock (except in its own test) is far above what the CPU
limit allows even on a loaded machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import tvm_bridge
from service import sandbox
from tvm_bridge.relax_plan import read_relax

from .kernels import attack_lines, one_device

X = np.arange(4, dtype="float32")
LIMITS = sandbox.Limits(cpu_s=10, wall_s=600, memory_bytes=512 << 20, file_bytes=1 << 20)
FOUND = sandbox.detect()
HAS_SECCOMP = FOUND.seccomp is None
HAS_BWRAP = FOUND.bubblewrap is None
needs_seccomp = pytest.mark.skipif(not HAS_SECCOMP, reason=f"seccomp unavailable here: {FOUND.seccomp}")
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason=f"bubblewrap unavailable here: {FOUND.bubblewrap}")


@pytest.fixture()
def directory() -> Iterator[Path]:
    with sandbox.private_dir() as path:
        yield path


def _ran(text: str, directory: Path, *, seccomp: bool = True, bubblewrap: bool = False,
         limits: sandbox.Limits = LIMITS) -> sandbox.Ran:
    """Build `text` for the cpu into `directory` and run its main on X in the sandbox."""
    mod, _ = read_relax(text)
    tvm_bridge.compile(mod).export_library(directory / "built.so")
    config = sandbox.SandboxConfig(limits=limits, seccomp=seccomp, bubblewrap=bubblewrap)
    program = sandbox.Program("built.so", ((1, 0),), (0,))
    return sandbox.run_programs(config, directory, [program], [X])


def _run(text: str, directory: Path, **options: object) -> list[object]:
    return _ran(text, directory, **options).outputs  # type: ignore[arg-type]


@pytest.mark.parametrize("bubblewrap", [False, pytest.param(True, marks=needs_bwrap)], ids=["plain", "bubblewrap"])
def test_the_child_memory_is_its_own_not_its_parents(directory: Path, bubblewrap: bool) -> None:
    # This process holds 1 GiB more than the child can use; the child's reported peak is
    # its own (a child's rusage would start at this process's peak).
    held = np.ones(1 << 28, dtype="float32")
    ran = _ran(one_device(), directory, seccomp=HAS_SECCOMP, bubblewrap=bubblewrap)
    np.testing.assert_array_equal(ran.outputs[0], X + 1)
    assert 0 < ran.peak_bytes < LIMITS.memory_bytes < held.nbytes
    assert 0 < ran.cpu_s < LIMITS.cpu_s


@pytest.mark.parametrize(
    "bubblewrap", [False, pytest.param(True, marks=needs_bwrap)], ids=["seccomp", "seccomp+bubblewrap"]
)
@needs_seccomp
def test_clean_kernel_runs_under_the_filter(directory: Path, bubblewrap: bool) -> None:
    (out,) = _run(one_device(), directory, bubblewrap=bubblewrap)
    np.testing.assert_array_equal(out, X + 1)


@needs_seccomp
def test_a_kernel_without_pidfd_support_is_waited_for_too(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where pidfd_open is refused (an old kernel, a container's seccomp profile).
    monkeypatch.setattr(sandbox, "_pidfd", lambda pid: None)
    (out,) = _run(one_device(), directory)
    np.testing.assert_array_equal(out, X + 1)


@needs_seccomp
def test_threaded_kernel_runs_under_the_filter(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two TVM threads even on a small machine: the pool's worker is made before the filter.
    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    (out,) = _run(one_device(parallel=True), directory)
    np.testing.assert_array_equal(out, X + 1)


@needs_seccomp
def test_seccomp_kills_system_and_nothing_is_created(directory: Path, tmp_path: Path) -> None:
    target = tmp_path / "escaped"
    with pytest.raises(sandbox.SandboxFailure) as caught:
        _run(one_device(attack_lines("system", path=str(target))), directory)
    assert caught.value.limit == "seccomp"
    assert caught.value.detail.startswith("seccomp (SIGSYS)")
    assert not target.exists()


@needs_seccomp
def test_seccomp_holds_in_the_pool_threads(directory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The attack in the last iteration of a parallel loop of two tasks: TVM's worker
    # thread runs it, not the main thread that installed the filter (TSYNC covers it).
    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    target = tmp_path / "escaped"
    text = one_device(parallel=True).replace(
        "            y[i] = x[i] + T.float32(1)\n",
        "            if i == 3:\n"
        f'                T.evaluate(T.call_extern("int32", "system", "touch {target}"))\n'
        "            y[i] = x[i] + T.float32(1)\n",
    )
    with pytest.raises(sandbox.SandboxFailure) as caught:
        _run(text, directory)
    assert caught.value.limit == "seccomp"
    assert not target.exists()


def test_cpu_limit_ends_a_busy_loop(directory: Path) -> None:
    # 4 s of CPU: more than a clean child's start and run (under 2 s), so the loop is what hits it.
    limits = sandbox.Limits(cpu_s=4, wall_s=600, memory_bytes=512 << 20, file_bytes=1 << 20)
    with pytest.raises(sandbox.SandboxFailure) as caught:
        _run(one_device(attack_lines("busy")), directory, seccomp=HAS_SECCOMP, limits=limits)
    assert caught.value.limit == "cpu"
    assert caught.value.detail.startswith("cpu limit 4 s")


def test_memory_limit_ends_endless_allocation(directory: Path) -> None:
    with pytest.raises(sandbox.SandboxFailure) as caught:
        _run(one_device(attack_lines("alloc")), directory, seccomp=HAS_SECCOMP)
    assert caught.value.limit == "memory"
    assert caught.value.detail.startswith("memory limit 512 MiB")


def test_wall_clock_ends_a_sleep(directory: Path) -> None:
    # Sleeping uses no CPU: only the parent's clock ends it (by design this test waits it out).
    limits = sandbox.Limits(cpu_s=10, wall_s=4, memory_bytes=512 << 20, file_bytes=1 << 20)
    with pytest.raises(sandbox.SandboxFailure) as caught:
        _run(one_device(attack_lines("sleep")), directory, seccomp=HAS_SECCOMP, limits=limits)
    assert caught.value.limit == "wall-clock"
    assert caught.value.detail == "wall-clock limit 4 s"


@needs_bwrap
def test_bubblewrap_alone_keeps_the_file_system_read_only(directory: Path, tmp_path: Path) -> None:
    # Without the filter, system() runs, but the sandbox sees / read-only and /tmp empty.
    repo_target = Path(__file__).resolve().parent / "escaped-by-sandbox-test"
    target = tmp_path / "escaped"
    attack = attack_lines("system", path=f"{target}; touch {repo_target}")
    try:
        (out,) = _run(one_device(attack), directory, seccomp=False, bubblewrap=True)
        np.testing.assert_array_equal(out, X + 1)
        assert not target.exists()
        assert not repo_target.exists()
    finally:
        repo_target.unlink(missing_ok=True)
