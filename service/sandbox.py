"""The run check's sandbox: a child process that can compute and nothing else.

A module that a caller sends may carry its own kernels (`T.prim_func` called through
`R.call_tir`), and a kernel can call any C function (`T.call_extern("int32", "system",
...)`), so running a built module means running the caller's code. `run_programs` runs
the built library and its reference in one child process, and only there:

- **rlimits** (always): CPU seconds (`RLIMIT_CPU`: SIGXCPU), the data segment
  (`RLIMIT_DATA`: private writable memory, so CUDA's large PROT_NONE reservations are
  not counted, as they would be with `RLIMIT_AS`), file size (`RLIMIT_FSIZE`), no core
  files. `RLIMIT_NPROC` is not used: it counts every process of the user and root
  ignores it; the seccomp filter stops forks instead.
- **wall-clock** (always): the parent kills the child's process group past the limit;
  a sleeping kernel never reaches a CPU limit.
- **seccomp** (where libseccomp loads and the kernel takes a filter): a default-deny
  allowlist (`SYSCALLS`) whose action kills the process, installed after the libraries
  are loaded and the devices initialised, before the first kernel runs. With an error
  return instead, `system()` or `fopen()` would just fail, the kernel carry on and the
  check pass. The parent reports the resulting SIGSYS as "seccomp (SIGSYS)".
- **bubblewrap** (where `bwrap` can start, e.g. not under Docker's default seccomp
  profile): private network, IPC and UTS namespaces, the file system read-only, a
  minimal /dev, /tmp empty but for the child's own directory.

The child's working directory is a private temporary directory (its libraries, inputs
and the spec); results come back over a pipe it inherited, as one JSON header line and
the raw array bytes, parsed without pickle. Compilation runs in its own process under
the rlimits and the wall clock but not the filter (`limit_process`): it turns the
caller's IR into code and executes none of it.

Run as `python -m service.sandbox DIRECTORY FD` for the child, or with `--probe` for the
start-up check of which layers work here (`detect`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import logging
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

log = logging.getLogger("devplan.sandbox")

LAYERS = ("rlimits", "wall-clock", "seccomp", "bubblewrap")
SPEC_FILE = "check.json"
_GIB = 1 << 30

# The answer's arrays: plain numeric dtypes only (np.frombuffer, never pickle).
_DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
    + ["float16", "float32", "float64"]
)
# How long the start-up probe may take (a Python start and a filter).
_PROBE_TIMEOUT_S = 30.0
# The stderr tail of a failed child that goes to the log (never to the client).
_STDERR_TAIL = 2000

# --------------------------------------------------------------------------------------------
# The seccomp allowlist: what running a loaded TVM module on the CPU needs, found by running
# every corpus model's check under the filter (tests/sandbox) and by reading TVM's runtime.
# Everything else kills the process: open/openat (files), socket/connect (network),
# fork/vfork/execve and clone without CLONE_THREAD (processes), kill of others, ioctl, ...
SYSCALLS: tuple[tuple[str, str], ...] = (
    # memory: allocators (glibc malloc, TVM's pooled allocator, numpy) and thread stacks
    ("brk", "the heap"),
    ("mmap", "large allocations, thread stacks"),
    ("munmap", "freeing them"),
    ("mremap", "realloc of large blocks"),
    ("mprotect", "guard pages of new thread stacks"),
    ("madvise", "glibc returning freed memory, thread exit"),
    # threads: TVM's pool is created before the filter; these keep a thread-creating
    # runtime (and glibc's thread exit) working. clone is allowed with CLONE_THREAD only.
    ("futex", "locks, condition variables, the pool's queues"),
    ("sched_yield", "TVM's pool spins with yield"),
    ("set_robust_list", "every new thread"),
    ("rseq", "every new thread (glibc >= 2.35)"),
    ("gettid", "glibc, TVM's logging"),
    ("getpid", "glibc, abort()"),
    ("rt_sigprocmask", "pthread_create and abort() mask signals"),
    ("rt_sigreturn", "return from a signal handler"),
    # time: harmless, and a kernel that sleeps is what the wall clock is for
    ("clock_gettime", "timers (when the vDSO is not used)"),
    ("clock_getres", "timers"),
    ("gettimeofday", "timers"),
    ("clock_nanosleep", "sleeps (bounded by the wall clock)"),
    ("nanosleep", "sleeps (bounded by the wall clock)"),
    # ending
    ("exit", "a thread ends"),
    ("exit_group", "the process ends (os._exit)"),
)
# A GPU run (CUDA): the driver talks to its device files and its own event descriptors,
# opened when the device was initialised, before the filter. Not verified on a GPU machine
# in this version (none was available); see docs/security.md.
GPU_SYSCALLS: tuple[tuple[str, str], ...] = (
    ("ioctl", "the CUDA driver's requests on /dev/nvidia*"),
    ("read", "the driver's event descriptors"),
    ("write", "the driver waking its threads through event descriptors (any open descriptor)"),
    ("poll", "the driver's worker threads"),
    ("ppoll", "the driver's worker threads"),
    ("close", "the driver's descriptors"),
    ("sched_getaffinity", "the driver's thread placement"),
)
_CLONE_THREAD = 0x00010000
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Limits:
    """What one sandboxed child may use (the DEVPLAN_RUN_CHECK_* settings). The defaults
    let every corpus model's check pass, Relay and Relax, with at least twice what it used
    on a shared 2-core machine (benchmarks/compile_results.md, "Default limits"): the most
    CPU and time, torchvision's vit_b_16 (194 s of CPU, 208 s), the largest data segment,
    the offload Llama decoder's (2.2 GiB; vgg16 2.2 GiB resident)."""

    cpu_s: float = 600.0
    wall_s: float = 900.0
    memory_bytes: int = 8 * _GIB
    file_bytes: int = 64 << 20


# The default DEVPLAN_COMPILE_TIMEOUT_S, which bounds a whole compile with its run check
# (the check's wall clock gets what is left of it): sized with Limits, from the same
# measurements. vit_b_16's /compile for the cpu with its check took 220 s on an idle
# 2-core machine and 351 s on a loaded one.
COMPILE_TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Whether run checks are sandboxed, with which limits and layers.

    `seccomp` and `bubblewrap` say whether those layers are used (what `detect` found
    where the web process or worker started); `enabled=False`
    (DEVPLAN_COMPILE_SANDBOX=off) runs checks in the compile process itself, for
    benchmarks and debugging.
    """

    enabled: bool = True
    limits: Limits = Limits()
    seccomp: bool = True
    bubblewrap: bool = False
    # The compile process's own rlimits (its wall clock is the compile time limit).
    compile_limits: Limits | None = None
    # (layer, why it is not used here) for each optional layer that could not start.
    unavailable: tuple[tuple[str, str], ...] = ()

    @property
    def layers(self) -> tuple[str, ...]:
        """The active layers, in LAYERS order (none when the sandbox is off)."""
        if not self.enabled:
            return ()
        use = {"rlimits": True, "wall-clock": True, "seccomp": self.seccomp, "bubblewrap": self.bubblewrap}
        return tuple(layer for layer in LAYERS if use[layer])


@dataclass(frozen=True, slots=True)
class Detected:
    """What `detect` found: for each optional layer, None when it works here, else why not."""

    seccomp: str | None
    bubblewrap: str | None


@dataclass(frozen=True, slots=True)
class Program:
    """One library to run in the child: its file name in the child's directory, the
    runtime devices (DLPack type, index) in the module's vdevice order, the device index
    of each input, and the function to call."""

    library: str
    devices: tuple[tuple[int, int], ...]
    input_devices: tuple[int, ...]
    func: str = "main"


@dataclass(frozen=True, slots=True)
class Ran:
    """What a sandboxed run gave: each program's outputs, and what the child used (for the
    compile report, so operators can size the limits)."""

    outputs: list[Any]
    cpu_s: float
    peak_bytes: int
    wall_s: float
    peak_data_bytes: int = 0  # the largest data segment seen: what RUN_CHECK_MEMORY_BYTES limits


class SandboxFailure(Exception):
    """The child broke a limit or a rule, or its run failed.

    `limit` is what ended it: "seccomp", "cpu", "memory", "file", "wall-clock", "crash"
    (another signal), "error" (the run raised), "answer" (an answer that does not
    parse), "start" (the sandbox itself could not start: the server's fault).
    `detail` names it for the caller ("seccomp (SIGSYS)", "cpu limit 60 s", ...).
    """

    def __init__(self, limit: str, detail: str) -> None:
        super().__init__(detail)
        self.limit = limit
        self.detail = detail


def _seconds(value: float) -> str:
    return f"{value:g} s"


def size_text(n: int) -> str:
    """`4 GiB`, `64 MiB`, `1.5 GiB`: a limit as the settings spell it."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B"


# --------------------------------------------------------------------------------------------
# Start-up detection.


def _bwrap_command(directory: Path, gpu: bool) -> list[str]:
    """bwrap's arguments for a child working in `directory` (read-only, like everything)."""
    command = [
        "bwrap",
        "--die-with-parent",
        "--unshare-user-try",
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        str(directory),
        str(directory),
        "--chdir",
        str(directory),
    ]
    # No PID namespace: bwrap's init would reap the child, and its resource use (the CPU
    # seconds that name a CPU limit) would not reach the parent, as measured; with
    # --as-pid-1 the kernel drops the signals a namespace's init does not handle, SIGXCPU
    # among them. The filter lets the child signal nobody but itself anyway.
    if gpu:
        for node in sorted(Path("/dev").glob("nvidia*")):
            command += ["--dev-bind", str(node), str(node)]
    return command + ["--"]


def _child_env(directory: Path) -> dict[str, str]:
    """The child's environment: nothing of the server's secrets, only what Python, TVM
    and a GPU driver need."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(directory),
        "TMPDIR": str(directory),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        # TVM asks the kernel for the CPU count at every parallel launch (an open of
        # /sys/devices/system/cpu/online) unless this says it; its pool is made before
        # the filter (see _child).
        "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS") or str(_tvm_threads()),
    }
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "TVM_LIBRARY_PATH"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    # The CUDA driver's compile cache is files in HOME: no file can be opened once the
    # filter is on (and HOME is read-only).
    env["CUDA_CACHE_DISABLE"] = "1"
    return env


def _tvm_threads() -> int:
    """TVM's own default: the usable CPUs, halved on x86 for hyper-threading."""
    count = len(os.sched_getaffinity(0))
    if os.uname().machine in ("x86_64", "AMD64"):
        count //= 2
    return max(1, count)


def _probe(command: list[str], directory: Path) -> str | None:
    """Run the probe child with `command` in front: None when it answered "ok", else why not."""
    try:
        done = subprocess.run(
            [*command, sys.executable, "-m", "service.sandbox", "--probe"],
            cwd=directory,
            env=_child_env(directory),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{type(err).__name__}: {err}"
    if done.returncode == 0 and done.stdout.strip() == b"ok":
        return None
    why = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
    return why[-1] if why else f"exit status {done.returncode}"


@functools.lru_cache(maxsize=1)
def detect() -> Detected:
    """Which optional layers work on this machine (once per process): the probe child
    installs the filter, first under bubblewrap (where `bwrap` is installed), else plain."""
    try:
        with tempfile.TemporaryDirectory(prefix="devplan-probe-") as tmp:
            directory = Path(tmp)
            bwrap_why: str | None = "bwrap is not installed"
            if shutil.which("bwrap") is not None:
                bwrap_why = _probe(_bwrap_command(directory, gpu=False), directory)
                if bwrap_why is None:
                    return Detected(seccomp=None, bubblewrap=None)
            return Detected(seccomp=_probe([], directory), bubblewrap=bwrap_why)
    except OSError as err:  # no writable temporary directory: no child can run here at all
        why = f"the probe could not run: {err}"
        return Detected(seccomp=why, bubblewrap=why)


def config_from(settings: Any, detected: Detected | None = None) -> SandboxConfig:
    """The sandbox of `settings` (service.config.Settings), with the layers `detected`
    (default: `detect()` in this process; nothing is probed when the sandbox is off)."""
    limits = Limits(
        cpu_s=float(settings.run_check_cpu_s),
        wall_s=float(settings.run_check_wall_s),
        memory_bytes=int(settings.run_check_memory_bytes),
        file_bytes=int(settings.run_check_file_bytes),
    )
    if settings.compile_sandbox == "off":
        return SandboxConfig(enabled=False, limits=limits, seccomp=False, bubblewrap=False)
    found = detected if detected is not None else detect()
    compile_limits = Limits(
        cpu_s=float(settings.compile_timeout_s),
        wall_s=float(settings.compile_timeout_s),
        memory_bytes=int(settings.compile_memory_bytes),
        file_bytes=int(settings.compile_file_bytes),
    )
    unavailable = tuple(
        (layer, why) for layer, why in (("seccomp", found.seccomp), ("bubblewrap", found.bubblewrap)) if why
    )
    return SandboxConfig(
        enabled=True,
        limits=limits,
        seccomp=found.seccomp is None,
        bubblewrap=found.bubblewrap is None,
        compile_limits=compile_limits,
        unavailable=unavailable,
    )


def startup(settings: Any, where: str) -> SandboxConfig:
    """The sandbox of `settings` with the layers that work here, said in the log: what
    the web process and `devplan worker` do when they start."""
    config = config_from(settings)
    if not config.enabled:
        log.warning(
            "%s: compile sandbox off (DEVPLAN_COMPILE_SANDBOX=off): run checks and compiles run unconfined",
            where,
        )
        return config
    log.info(
        "%s: run checks sandboxed with layers %s%s",
        where,
        ", ".join(config.layers),
        "".join(f"; {layer} unavailable: {why}" for layer, why in config.unavailable),
        extra={"sandbox_layers": list(config.layers)},
    )
    return config


# --------------------------------------------------------------------------------------------
# The parent.


def check_dir_of(library: str | os.PathLike[str]) -> Path:
    """The private directory of the run check of `library` (beside it, so that whoever
    removes a dead compile's library removes this too: CompileRun.stop, remove_scratch)."""
    return Path(f"{os.fspath(library)}.check")


def _executable_mappings(path: Path) -> bool:
    """False when `path`'s file system is mounted noexec (a tmpfs often is), where the
    child could not map the libraries it loads."""
    try:
        return not os.statvfs(path).f_flag & os.ST_NOEXEC
    except OSError:
        return False


@contextlib.contextmanager
def private_dir(beside: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """A fresh directory (mode 0700) for one child, removed afterwards: `check_dir_of(beside)`
    where that file system lets libraries be mapped executable, else one in the temporary
    directory. SandboxFailure("start") when neither does (the server's configuration)."""
    if beside is not None and _executable_mappings(Path(beside).parent):
        path = check_dir_of(beside)
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(mode=0o700)
    elif _executable_mappings(Path(tempfile.gettempdir())):
        path = Path(tempfile.mkdtemp(prefix="devplan-check-"))
    else:
        where = Path(beside).parent if beside is not None else "the artifact store"
        raise SandboxFailure(
            "start",
            f"the run check needs a directory that allows executable mappings: {where} and "
            f"{tempfile.gettempdir()} are mounted noexec",
        )
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def limit_process(limits: Limits, *, hard_cpu: bool = True) -> None:
    """Apply `limits`' rlimits to this process (and what it starts): CPU, data, file size,
    no core files. The compile process calls it on itself (`hard_cpu=False`: SIGXCPU at its
    limit, but no hard CPU limit for its run-check child to inherit); the child too, where
    a limit above the compile process's is held to that one (a hard limit cannot rise)."""
    cpu = max(1, math.ceil(limits.cpu_s))
    # SIGXCPU at the soft limit; the kernel's SIGKILL one second later if it is ignored.
    _set(resource.RLIMIT_CPU, cpu, cpu + 1 if hard_cpu else resource.RLIM_INFINITY)
    _set(resource.RLIMIT_DATA, limits.memory_bytes, limits.memory_bytes)
    _set(resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes)
    _set(resource.RLIMIT_CORE, 0, 0)


def _set(which: int, soft: int, hard: int) -> None:
    resource.setrlimit(which, _fit(which, soft, hard))


def _fit(which: int, soft: int, hard: int) -> tuple[int, int]:
    """(soft, hard) held to this process's current hard limit of `which`."""
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY:
        soft = min(soft, current)
        hard = current if hard == resource.RLIM_INFINITY else min(hard, current)
    return soft, hard


def run_programs(
    config: SandboxConfig,
    directory: Path,
    programs: Sequence[Program],
    inputs: Sequence[Any],
    expected: Any = None,
) -> Ran:
    """Run each program's function on `inputs` in one sandboxed child working in
    `directory` (which holds the programs' libraries): their outputs (numpy arrays,
    tuples for tuple results), in order, and the child's use. Raises SandboxFailure.

    `expected` (see `_read_answer`) is what every program must return; the answer is
    read up to what that can weigh (`answer_cap`) and parsed against it."""
    import numpy as np

    names = []
    for i, value in enumerate(inputs):
        name = f"input{i}.npy"
        np.save(directory / name, np.asarray(value), allow_pickle=False)
        names.append(name)
    gpu = any(device_type != 1 for program in programs for device_type, _ in program.devices)
    spec = {
        "programs": [dataclasses.asdict(p) for p in programs],
        "inputs": names,
        "limits": dataclasses.asdict(config.limits),
        "seccomp": config.seccomp,
        "gpu": gpu,
    }
    (directory / SPEC_FILE).write_text(json.dumps(spec))
    prefix = _bwrap_command(directory, gpu) if config.bubblewrap else []
    cap = answer_cap(expected, len(programs), config.limits)
    ending = _run_child(prefix, directory, config.limits, cap)
    if ending.timed_out:
        raise SandboxFailure("wall-clock", f"wall-clock limit {_seconds(config.limits.wall_s)}")
    if ending.overflow:
        raise SandboxFailure(
            "answer", f"the run's answer was larger than its outputs can be ({size_text(cap)}); reading stopped there"
        )
    failure = _classify(ending, config)
    if failure is not None:
        raise failure
    return Ran(
        _read_answer(ending.data, expected, len(programs)),
        round(ending.cpu_s, 3),
        ending.peak_resident,
        round(ending.wall_s, 3),
        ending.peak_data,
    )


@dataclass(frozen=True, slots=True)
class Ending:
    """How a child ended: its answer bytes, wait status, CPU seconds (its rusage), the
    largest resident set and data segment seen in its samples, its time, and whether
    the wall clock ended it."""

    data: bytes
    status: int
    cpu_s: float
    peak_resident: int = 0
    peak_data: int = 0
    wall_s: float = 0.0
    timed_out: bool = False
    overflow: bool = False  # the answer passed its cap: reading stopped, the child was killed


class _MemorySampler:
    """The sandboxed Python's resident set and data segment, read from /proc while the
    parent waits (as service/pool.py watches planning workers). rusage cannot give them:
    a child's `ru_maxrss` starts at its parent's peak (exec records the old address space's
    high-water mark), here the compile process's. Under bwrap the Python is bwrap's child."""

    def __init__(self, pid: int, bubblewrap: bool) -> None:
        self.pid = pid
        self.target: int | None = None if bubblewrap else pid
        self.resident = 0
        self.data = 0

    def sample(self) -> None:
        if self.target is None:
            try:
                children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
            except OSError:
                return
            if not children:
                return
            self.target = int(children[0])
        try:
            status = Path(f"/proc/{self.target}/status").read_text()
        except OSError:
            return
        for line in status.splitlines():
            name, _, value = line.partition(":")
            if name in ("VmHWM", "VmData"):
                amount = int(value.split()[0]) * 1024
                if name == "VmHWM":
                    self.resident = max(self.resident, amount)
                else:
                    self.data = max(self.data, amount)


# How often the parent samples the child's memory while it waits.
_MEMORY_SAMPLE_S = 0.02


def _run_child(prefix: list[str], directory: Path, limits: Limits, cap: int) -> Ending:
    """Start the child, collect its answer until it exits (at most the wall-clock limit,
    then its process group is killed; at most `cap` bytes, then it is killed too) while
    sampling its memory, and reap it."""
    read_end, write_end = os.pipe()
    parent = "0" if prefix else str(os.getpid())
    stderr_path = directory / "stderr"  # written through the descriptor only (read-only in bwrap)
    start = time.monotonic()
    with open(stderr_path, "wb") as stderr:
        try:
            proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", "service.sandbox", str(directory), str(write_end), parent],
                cwd=directory,
                env=_child_env(directory),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(write_end,),
                process_group=0,
            )
        except OSError as err:
            os.close(read_end)
            os.close(write_end)
            raise SandboxFailure("start", f"the sandbox could not start: {err}") from None
    os.close(write_end)
    deadline = start + limits.wall_s
    memory = _MemorySampler(proc.pid, bool(prefix))
    chunks: list[bytes] = []
    size = 0
    timed_out = overflow = False
    pidfd = _pidfd(proc.pid)
    try:
        eof = exited = False
        while not (eof and exited):
            memory.sample()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            wait_s = min(remaining, _MEMORY_SAMPLE_S)
            if pidfd is None and eof:  # no pidfd (an old kernel, a container's profile): poll
                exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                if not exited:
                    time.sleep(wait_s)
                continue
            waiting = ([] if eof else [read_end]) + ([] if exited or pidfd is None else [pidfd])
            ready, _, _ = select.select(waiting, [], [], wait_s)
            if read_end in ready:
                chunk = os.read(read_end, min(1 << 20, cap + 1 - size))
                if not chunk:
                    eof = True
                size += len(chunk)
                chunks.append(chunk)
                if size > cap:
                    overflow = True
                    break  # an answer larger than it can be: killed below, refused
            if pidfd is not None and pidfd in ready:
                exited = True
                _kill_group(proc.pid)  # whatever it left behind holds the pipe open
    finally:
        _kill_group(proc.pid)
        if pidfd is not None:
            os.close(pidfd)
        os.close(read_end)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = -1  # reaped here (with its rusage); Popen must not wait again
    tail = stderr_path.read_bytes()[-_STDERR_TAIL:].decode(errors="replace").strip()
    if tail and (status != 0 or timed_out):
        log.info("run-check child (status %d) said: %s", status, tail)
    return Ending(
        data=b"".join(chunks),
        status=status,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_resident=memory.resident,
        peak_data=memory.data,
        wall_s=time.monotonic() - start,
        timed_out=timed_out,
        overflow=overflow,
    )


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits, where the kernel has them."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _signal_of(status: int, bubblewrap: bool) -> int | None:
    """The signal that ended the child: bwrap reports its child's signal N as exit 128+N."""
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
    if bubblewrap and code > 128:
        return code - 128
    return None


def _classify(ending: Ending, config: SandboxConfig) -> SandboxFailure | None:
    """What ended the child, when it did not end well (None: it exited 0)."""
    limits = config.limits
    status = ending.status
    sig = _signal_of(status, config.bubblewrap)
    error = _error_of(ending.data)
    if sig == signal.SIGSYS:
        return SandboxFailure(
            "seccomp", "seccomp (SIGSYS): the run made a system call that the sandbox does not allow"
        )
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and ending.cpu_s >= limits.cpu_s):
        return SandboxFailure(
            "cpu", f"cpu limit {_seconds(limits.cpu_s)}: the run used {ending.cpu_s:.1f} s of CPU"
        )
    if sig == signal.SIGXFSZ:
        return SandboxFailure("file", f"file size limit {size_text(limits.file_bytes)}")
    if sig is None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return None
    # A failed allocation shows as a crash (a kernel writing through NULL) or an error
    # (TVM's allocator): it is the memory limit when the samples saw the data segment
    # come near it, or the run said so.
    memory_words = ("memory", "alloc", "bad_alloc")
    near = ending.peak_data >= limits.memory_bytes // 2
    if near or (error is not None and any(w in error.lower() for w in memory_words)):
        return SandboxFailure(
            "memory",
            f"memory limit {size_text(limits.memory_bytes)} (data segment seen at "
            f"{size_text(ending.peak_data)})",
        )
    if sig is not None:
        return SandboxFailure("crash", f"the run crashed ({signal.Signals(sig).name})")
    if error is not None:
        return SandboxFailure("error", f"the run failed: {error}")
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    if config.bubblewrap and code == 1 and not ending.data:
        return SandboxFailure("start", "the sandbox (bubblewrap) could not start the run")
    return SandboxFailure("crash", f"the run ended with exit status {code}")


def _error_of(data: bytes) -> str | None:
    """The child's error message, when its answer is one."""
    header, _, _ = data[: ANSWER_HEADER_BYTES + 1].partition(b"\n")
    if _header_depth(header) > ANSWER_MAX_DEPTH:
        return None  # not an error report (the answer's own check refuses it)
    try:
        message = json.loads(header)
    except (ValueError, RecursionError):
        return None
    if isinstance(message, dict) and isinstance(message.get("error"), str):
        return str(message["error"])[:2000]
    return None


# The answer's header line: at most this long and this deeply nested (an output is a tensor
# or a tuple, as deep as the module's result type; the checks below bound it again).
ANSWER_HEADER_BYTES = 1 << 20
ANSWER_MAX_DEPTH = 32
# Dimensions of one output (TVM's tensors have at most 32 in practice; 70 is an attack).
ANSWER_MAX_NDIM = 32


def answer_cap(expected: Any, programs: int, limits: Limits) -> int:
    """The most bytes an answer can hold: the header and each program's outputs as
    `expected` says (static shapes), else the memory the child may hold."""
    need = _spec_bytes(expected) if expected is not None else None
    body = need * programs if need is not None else limits.memory_bytes
    return ANSWER_HEADER_BYTES + min(body, limits.memory_bytes)


def _spec_bytes(spec: Any) -> int | None:
    """The bytes of an expected output tree; None when a shape is not static."""
    import numpy as np

    total = 0
    work = [spec]
    while work:
        node = work.pop()
        if "tuple" in node:
            work.extend(node["tuple"])
            continue
        shape = node.get("shape")
        if shape is None or any(d is None for d in shape) or node.get("dtype") not in _DTYPES:
            return None
        total += math.prod(shape) * np.dtype(node["dtype"]).itemsize
    return total


def _header_depth(header: bytes) -> int:
    """How deeply the header's brackets nest (strings included: only an over-count)."""
    depth = deepest = 0
    for byte in header:
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _read_answer(data: bytes, expected: Any = None, programs: int | None = None) -> list[Any]:
    """The outputs of an answer (header line + blob), checked field by field against
    `expected` (each program's output tree: `{"tuple": [...]}` or `{"dtype": str, "shape":
    [int | None, ...] | None}`; None: any tensors or tuples). The child runs the caller's
    kernels, which can forge it: a header too long or too deep, a dtype, rank or shape
    other than the module's, an offset past the data is a SandboxFailure("answer") that
    says what was wrong."""
    end = data.find(b"\n", 0, ANSWER_HEADER_BYTES + 1)
    if end < 0:
        raise SandboxFailure("answer", f"the run's answer has no header line within {size_text(ANSWER_HEADER_BYTES)}")
    header, blob = data[:end], memoryview(data)[end + 1 :]
    if _header_depth(header) > ANSWER_MAX_DEPTH:
        raise SandboxFailure("answer", f"the run's answer nests deeper than {ANSWER_MAX_DEPTH} levels")
    try:
        message = json.loads(header)
    except (ValueError, RecursionError):
        raise SandboxFailure("answer", "the run's answer is not JSON") from None
    outputs = message.get("outputs") if isinstance(message, dict) else None
    if not isinstance(outputs, list):
        raise SandboxFailure("answer", "the run's answer has no list of outputs")
    if programs is not None and len(outputs) != programs:
        raise SandboxFailure("answer", f"the run's answer has {len(outputs)} results for {programs} programs")
    return [_answer_output(node, expected, blob, f"result {n}") for n, node in enumerate(outputs)]


def _answer_output(node: Any, spec: Any, blob: memoryview, at: str) -> Any:
    """One output tree checked against `spec`. Recursive: `_read_answer` bounded the
    header's nesting to ANSWER_MAX_DEPTH first."""
    import numpy as np

    def bad(what: str) -> SandboxFailure:
        return SandboxFailure("answer", f"the run's answer, {at}: {what}")

    if not isinstance(node, dict):
        raise bad("an output is a tensor or a tuple")
    if "tuple" in node:
        items = node["tuple"]
        if not isinstance(items, list):
            raise bad("a tuple lists its fields")
        if spec is not None and "tuple" not in spec:
            raise bad("a tuple where the module returns a tensor")
        if spec is not None and len(items) != len(spec["tuple"]):
            raise bad(f"a tuple of {len(items)} fields where the module returns {len(spec['tuple'])}")
        return tuple(
            _answer_output(field, spec["tuple"][k] if spec is not None else None, blob, f"{at}.{k}")
            for k, field in enumerate(items)
        )
    if spec is not None and "tuple" in spec:
        raise bad("a tensor where the module returns a tuple")
    dtype, shape, offset = node.get("dtype"), node.get("shape"), node.get("offset")
    if dtype not in _DTYPES:
        raise bad(f"the run check cannot compare outputs of dtype {str(dtype)[:40]!r}")
    if spec is not None and spec.get("dtype") not in (None, dtype):
        raise bad(f"dtype {dtype} where the module returns {spec['dtype']}")
    if not isinstance(shape, list) or len(shape) > ANSWER_MAX_NDIM:
        raise bad(f"a shape is a list of at most {ANSWER_MAX_NDIM} dimensions")
    if not all(type(d) is int and d >= 0 for d in shape):
        raise bad("dimensions are non-negative integers")
    want = spec.get("shape") if spec is not None else None
    if want is not None and (len(want) != len(shape) or any(w is not None and w != d for w, d in zip(want, shape))):
        shown = "(" + ", ".join("?" if w is None else str(w) for w in want) + ")"
        raise bad(f"shape {tuple(shape)} where the module returns {shown}")
    if type(offset) is not int or offset < 0:
        raise bad("an offset is a non-negative integer")
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size > len(blob) or offset > len(blob) - size:
        raise bad(f"{size} bytes at offset {offset} lie past the answer's {len(blob)} bytes")
    return np.frombuffer(blob, dtype=dtype, count=math.prod(shape), offset=offset).reshape(shape)


# --------------------------------------------------------------------------------------------
# The child.


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (a killed compile process), and end now
    if that already happened (`parent`: the pid it was started by; 0 under bubblewrap,
    whose --die-with-parent does the same once the child runs, though not while bwrap
    sets up its namespaces: a child whose bwrap died then has another parent now)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    orphaned = os.getppid() != parent if parent else not _parent_is_bubblewrap()
    if orphaned:
        os._exit(1)


def _parent_is_bubblewrap() -> bool:
    try:
        return Path(f"/proc/{os.getppid()}/comm").read_text().strip() == "bwrap"
    except OSError:
        return False


def _make_filter(result_fd: int, gpu: bool) -> Any:
    """The seccomp filter (not yet loaded): SYSCALLS (+ GPU_SYSCALLS), `write` only to
    the answer pipe and stderr, `clone` only for threads, `tgkill` only to this process
    (abort()), `clone3` answered ENOSYS so that glibc falls back to `clone`, whose flags a
    filter can read; anything else kills the whole process (KILL_PROCESS, all threads:
    TSYNC puts every thread of the process, TVM's pool among them, under it)."""
    import errno

    import pyseccomp as seccomp

    flt = seccomp.SyscallFilter(seccomp.KILL_PROCESS)
    flt.set_attr(seccomp.Attr.CTL_TSYNC, 1)
    for name, _why in SYSCALLS + (GPU_SYSCALLS if gpu else ()):
        flt.add_rule(seccomp.ALLOW, name)
    for fd in (result_fd, 2):
        flt.add_rule(seccomp.ALLOW, "write", seccomp.Arg(0, seccomp.EQ, fd))
    flt.add_rule(seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, _CLONE_THREAD))
    flt.add_rule(seccomp.ALLOW, "tgkill", seccomp.Arg(0, seccomp.EQ, os.getpid()))
    flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return flt


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _encode(outputs: Sequence[Any]) -> bytes:
    """The answer: a JSON header line describing each output, then their bytes."""
    import numpy as np

    blobs: list[bytes] = []
    offset = 0

    def node(value: Any) -> Any:
        nonlocal offset
        if isinstance(value, tuple):
            return {"tuple": [node(v) for v in value]}
        array = np.ascontiguousarray(value)
        entry = {"dtype": str(array.dtype), "shape": list(array.shape), "offset": offset}
        data = array.tobytes()
        blobs.append(data)
        offset += len(data)
        return entry

    header = json.dumps({"outputs": [node(o) for o in outputs]}).encode()
    return header + b"\n" + b"".join(blobs)


def _child(directory: Path, result_fd: int, parent: int) -> NoReturn:
    """The run-check child: limits, load, filter, run, answer; it never returns."""
    try:
        die_with_parent(parent)
        spec = json.loads((directory / SPEC_FILE).read_text())
        limit_process(Limits(**spec["limits"]))
        os.chdir(directory)
        flt = _make_filter(result_fd, bool(spec["gpu"])) if spec["seccomp"] else None
        import numpy as np

        inputs = [np.load(directory / name, allow_pickle=False) for name in spec["inputs"]]
        import tvm

        from tvm_bridge.build import prepare_run

        # TVM makes a thread's pool at its first parallel launch (threads, their CPU
        # affinity, /sys reads): make the main thread's now, before the filter.
        tvm.get_global_func("runtime.config_threadpool")(1, 0)
        runs: list[Callable[[], Any]] = []
        for program in spec["programs"]:
            library = tvm.runtime.load_module(str(directory / program["library"]))
            devices = [tvm.device(int(kind), int(index)) for kind, index in program["devices"]]
            runs.append(prepare_run(library, inputs, devices, program["input_devices"], program["func"]))
        if flt is not None:
            flt.load()
        # From here on the caller's kernels run: no file, socket or process can be made.
        answer = _encode([run() for run in runs])
    except BaseException as exc:  # noqa: BLE001 - the child reports everything, then ends
        # No traceback: formatting one reads source files, which the filter forbids.
        answer = json.dumps({"error": f"{type(exc).__name__}: {_first_lines(str(exc))}"}).encode()
        with contextlib.suppress(OSError):
            _write_all(result_fd, answer)
        os._exit(1)
    _write_all(result_fd, answer)
    os._exit(0)


def _first_lines(text: str) -> str:
    """An error's message without TVM's long backtrace: its first non-empty line and the last."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= 2:
        return " ".join(lines)
    return f"{lines[0]} ... {lines[-1]}"


def _probe_child() -> NoReturn:
    """`--probe`: install a filter (the same rlimits and library as a run check) and say ok."""
    try:
        limit_process(Limits())
        _make_filter(1, gpu=False).load()
        _write_all(1, b"ok\n")
    except BaseException as exc:  # noqa: BLE001 - the probe reports everything
        with contextlib.suppress(OSError):
            _write_all(2, f"{type(exc).__name__}: {exc}\n".encode())
        os._exit(1)
    os._exit(0)


def main(argv: Sequence[str]) -> NoReturn:
    """`python -m service.sandbox DIRECTORY FD PARENT` (a run) or `--probe`."""
    if list(argv) == ["--probe"]:
        _probe_child()
    directory, fd, parent = argv
    _child(Path(directory), int(fd), int(parent))


if __name__ == "__main__":
    main(sys.argv[1:])
