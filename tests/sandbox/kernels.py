"""Relax modules with their own kernel: `k` adds one to 4 floats and is called
through `R.call_tir`, optionally after an attack, on one device or on two.

The text is what TVM 0.27 prints for such modules (`T.prim_func` with plain loops, or
`s_tir=True` with `T.sblock`, and `T.evaluate(T.call_extern(...))`): ordinary TVMScript.
"""

from __future__ import annotations

import re

# One statement (or loop) of TIR in front of the kernel's work, 8 spaces in. Each would
# harm the server if it ran unconfined: make files, open network connections, fork, or
# hold memory or a CPU forever.
ATTACKS: dict[str, str] = {
    # {path}: where `system` would create a file (outside the child's directory)
    "system": 'T.evaluate(T.call_extern("int32", "system", "touch {path}"))',
    "fopen": 'T.evaluate(T.call_extern("handle", "fopen", "{path}", "w"))',
    "socket": 'T.evaluate(T.call_extern("int32", "socket", 2, 1, 0))',
    # A registered global function named by a string: TVM's own module loader (dlopen)
    "load-module": 'T.evaluate(T.call_packed("ffi.ModuleLoadFromFile", "/tmp/devplan-no-such.so"))',
    "fork": 'for j in range(1000000):\n    T.evaluate(T.call_extern("int32", "fork"))',
    # TVM's own workspace allocator (LLVM cannot drop an allocation it does not know), each
    # block written so it is resident: it grows until the data limit. A millisecond's pause
    # a MiB lets the parent's memory samples (every 20 ms) see it climb, so the test does
    # not depend on when they fall; a faster climb may end as "the run crashed (SIGSEGV)".
    "alloc": (
        f"for j in range(T.int64({1 << 40})):\n"
        '    T.evaluate(T.call_extern("handle", "memset", T.call_extern("handle", '
        '"TVMBackendAllocWorkspace", 1, 0, T.uint64(1048576), 2, 8), 1, T.uint64(1048576)))\n'
        '    T.evaluate(T.call_extern("int32", "usleep", 1000))'
    ),
    "busy": f"for j in range(T.int64({1 << 62})):\n    y[0] = y[0] + T.float32(1)",
    "sleep": 'T.evaluate(T.call_extern("int32", "sleep", 100000))',
}

_PLAIN = """    @T.prim_func
    def k(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
{attack}        for i in {loop}(4):
            y[i] = x[i] + T.float32({add})
"""

_SBLOCK = """    @T.prim_func(s_tir=True)
    def k(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("add"):
                vi = T.axis.spatial(4, i)
                T.reads(x[vi])
                T.writes(y[vi])
                y[vi] = x[vi] + T.float32(1)
"""

_ONE = """@I.ir_module
class Module:
{kernel}
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Module
        y = R.call_tir(cls.k, (x,), out_ty=R.Tensor((4,), "float32"))
        return y
"""

# The kernel on two devices: its first call where the parameter is (device 0), the
# second after an explicit copy to `second`.
_TWO = """@I.ir_module
class Module:
    I.module_global_infos({{"vdevice": [I.vdevice("llvm", 0), I.vdevice({kind!r}, {index})]}})

{kernel}
    @R.function
    def main(x: R.Tensor((4,), "float32", vdevice="llvm:0")) -> R.Tensor((4,), "float32"):
        cls = Module
        a = R.call_tir(cls.k, (x,), out_ty=R.Tensor((4,), "float32"))
        b = R.to_vdevice(a, "{second}")
        c = R.call_tir(cls.k, (b,), out_ty=R.Tensor((4,), "float32"))
        return c
"""


def attack_lines(name: str, **fields: str) -> str:
    """The attack `name` as kernel lines (8 spaces in), its fields filled in."""
    text = ATTACKS[name].format(**fields) if fields else ATTACKS[name]
    return "".join(f"        {line}\n" for line in text.splitlines())


def kernel(attack: str = "", *, sblock: bool = False, parallel: bool = False, add: int = 1) -> str:
    """The kernel `k`: plain loops (optionally T.parallel) after `attack`, or T.sblock;
    it adds `add` (a fresh value makes a fresh module: no cache hit)."""
    if sblock:
        return _SBLOCK
    return _PLAIN.format(attack=attack, loop="T.parallel" if parallel else "range", add=add)


def one_device(attack: str = "", *, sblock: bool = False, parallel: bool = False, add: int = 1) -> str:
    """A module whose main calls `k` once (the device is the planner's)."""
    return _ONE.format(kernel=kernel(attack, sblock=sblock, parallel=parallel, add=add))


def two_devices(second: str = "llvm:1", attack: str = "", *, sblock: bool = False) -> str:
    """A module whose main calls `k` on llvm:0, copies the result to `second` ("llvm:1",
    "cuda:0") and calls `k` there again."""
    kind, index = second.split(":")
    return _TWO.format(kind=kind, index=int(index), second=second, kernel=kernel(attack, sblock=sblock))


def def_line(text: str, name: str = "k") -> int:
    """The line of `def name(` in `text` (1-based)."""
    found = re.search(rf"^\s*def {name}\(", text, re.MULTILINE)
    assert found is not None
    return text.count("\n", 0, found.start()) + 1


# What each attack ends as under the attack tests' limits (tests/sandbox/test_attacks*.py):
# the problem kind and the start of its detail after "the run check ...".
CPU_S = 10
MEMORY_BYTES = 512 << 20
WALL_S = 8  # only where the wall clock is meant to be hit (the sleep); elsewhere 600 s
# More escapes, each a system call outside the allowlist (SIGSYS). {mark} is a file
# that must survive, {path} one that must not appear.
ESCAPES: dict[str, str] = {
    "unlink": 'T.evaluate(T.call_extern("int32", "unlink", "{mark}"))',
    "kill-parent": 'T.evaluate(T.call_extern("int32", "kill", T.call_extern("int32", "getppid"), 9))',
    "execl": 'T.evaluate(T.call_extern("int32", "execl", "/bin/sh", "sh", "-c", "touch {path}", T.int64(0)))',
    "mkdir": 'T.evaluate(T.call_extern("int32", "mkdir", "{path}", 511))',
    "open-to-read": 'T.evaluate(T.call_extern("int32", "open", "/etc/passwd", 0))',
    "chdir": 'T.evaluate(T.call_extern("int32", "chdir", "/"))',
    "unshare": 'T.evaluate(T.call_extern("int32", "unshare", 268435456))',
    "ptrace": 'T.evaluate(T.call_extern("int64", "ptrace", 0, 0, T.int64(0), T.int64(0)))',
    "write-stdout": 'T.evaluate(T.call_extern("int32", "puts", T.call_extern("handle", "getenv", "HOME")))',
    "setrlimit": (
        'T.evaluate(T.call_extern("int32", "setrlimit", 0, '
        'T.call_extern("handle", "TVMBackendAllocWorkspace", 1, 0, T.uint64(16), 2, 8)))'
    ),
}


def escape_lines(name: str, **fields: str) -> str:
    """The escape `name` as kernel lines (8 spaces in), its fields filled in."""
    return f"        {ESCAPES[name].format(**fields)}\n"


EXPECTED: dict[str, tuple[str, str]] = {
    "system": ("run-check-failed", "seccomp (SIGSYS)"),
    "fopen": ("run-check-failed", "seccomp (SIGSYS)"),
    "socket": ("run-check-failed", "seccomp (SIGSYS)"),
    "load-module": ("run-check-failed", "seccomp (SIGSYS)"),
    "fork": ("run-check-failed", "seccomp (SIGSYS)"),
    "alloc": ("run-check-failed", "memory limit 512 MiB"),
    "busy": ("run-check-failed", f"cpu limit {CPU_S} s"),
    "sleep": ("compile-timeout", f"wall-clock limit {WALL_S} s"),
}
