"""`devplan compile`: /compile's compile path from the command line.

The default stage compiles the small module with its own kernel (seconds);
tv_mobilenet_v3_small and Ctrl-C run in the slow stage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.cli import main as cli_main
from tests._service import ROOT, run_devplan, thread_client
from tests.python_api.common import RELAX, WITH_KERNEL, corpus_file, script, without_request

# Two hints that cannot both hold (`c = R.add(a, b)` needs one device for both).
from tests.record.test_relax_cli import CONFLICT
from tests.security.attacks import ATTACKS

pytestmark = pytest.mark.tvm
tvm = pytest.importorskip("tvm")
from tvm import relax


def _compile(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_devplan("compile", *argv, timeout=1800)


def _compile_in(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m devplan compile ARGV` run from `directory` (a user's own project)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "devplan", "compile", *argv],
        capture_output=True, text=True, cwd=directory, env=env, timeout=1800, check=False,
    )


def _leftovers(directory: Path, keep: set[str]) -> list[str]:
    """Files in `directory` other than `keep` (a failed compile leaves none, hidden ones included)."""
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def _first(out: Any) -> np.ndarray:
    """A result as an array (the first field of a tuple result)."""
    while not hasattr(out, "numpy"):
        out = out[0]
    return np.asarray(out.numpy())


def _run_library(path: Path, inputs: list[np.ndarray]) -> np.ndarray:
    """Load a compiled library and run its main on the cpu."""
    lib = tvm.runtime.load_module(str(path))
    vm = relax.VirtualMachine(lib, tvm.cpu())
    return _first(vm["main"](*[tvm.runtime.tensor(a) for a in inputs]))


def _unplanned(mod: Any, inputs: list[np.ndarray]) -> np.ndarray:
    """The module as TVM builds it without any plan, run on the cpu."""
    built = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(built, tvm.cpu())
    return _first(vm["main"](*[tvm.runtime.tensor(a) for a in inputs]))


def _random(mod: Any, rng: np.random.Generator) -> list[np.ndarray]:
    inputs = []
    for param in mod["main"].params:
        shape = [int(d) for d in param.ty.shape]
        inputs.append(rng.standard_normal(shape).astype(str(param.ty.dtype)))
    return inputs


def test_a_module_with_its_own_kernel_compiles_runs_and_matches(tmp_path: Path) -> None:
    source = tmp_path / "kernel.py"
    source.write_text(WITH_KERNEL)
    out = tmp_path / "kernel.so"
    report = tmp_path / "report.json"
    # From the user's directory, with paths relative to it (the check's sandbox binds absolute ones).
    done = _compile_in(tmp_path, "kernel.py", "-o", "kernel.so", "--default-device", "cpu", "--run-check", "--report", "report.json")
    assert done.returncode == 0, done.stderr
    assert _leftovers(tmp_path, {"kernel.py", "kernel.so", "report.json"}) == []
    written = json.loads(report.read_text())
    assert written["planned"] is True and written["devices"] == ["llvm:0"]
    assert written["check"]["max_abs_error"] == 0.0
    mod = script(WITH_KERNEL)
    inputs = _random(mod, np.random.default_rng(0))
    np.testing.assert_allclose(_run_library(out, inputs), _unplanned(mod, inputs), rtol=1e-6)


@pytest.mark.slow
def test_the_report_is_compiles_report(tmp_path: Path) -> None:
    """--report equals /compile's report for the same request (but its timings and measurements)."""
    source = tmp_path / "kernel.py"
    source.write_text(WITH_KERNEL)
    report = tmp_path / "report.json"
    done = _compile(
        str(source), "-o", str(tmp_path / "k.so"), "--default-device", "cpu", "--run-check", "--report", str(report)
    )
    assert done.returncode == 0, done.stderr
    written = json.loads(report.read_text())
    with thread_client() as client:
        response = client.post(
            "/compile", json={"module": WITH_KERNEL, "default_device": "cpu", "run_check": True}
        )
    assert response.status_code == 200, response.text
    served = response.json()["report"]
    timings = ("plan_ms", "lower_ms", "compile_ms")
    volatile = ("cpu_s", "peak_bytes", "peak_data_bytes", "wall_s")
    assert {k: v for k, v in served.items() if k not in (*timings, "check")} == {
        k: v for k, v in written.items() if k not in (*timings, "check")
    }
    assert {k: v for k, v in served["check"].items() if k not in volatile} == {
        k: v for k, v in written["check"].items() if k not in volatile
    }
    assert set(served) == set(written) and set(served["check"]) == set(written["check"])


def test_a_conflict_exits_3_located_and_writes_nothing(tmp_path: Path) -> None:
    source = tmp_path / "hints.py"
    source.write_text(CONFLICT)
    done = _compile(str(source), "-o", str(tmp_path / "out.so"))
    assert done.returncode == 3, done.stderr
    assert f"{source}:8:17" in done.stderr and "R.hint_on_device" in done.stderr
    assert _leftovers(tmp_path, {"hints.py"}) == []


@pytest.mark.slow
def test_a_module_that_does_not_parse_exits_2(tmp_path: Path) -> None:
    source = tmp_path / "bad.py"
    source.write_text("@I.ir_module\nclass Module:\n    x = (\n")
    done = _compile(str(source), "-o", str(tmp_path / "out.so"))
    assert done.returncode == 2 and f"{source}:3:" in done.stderr, done.stderr
    assert _leftovers(tmp_path, {"bad.py"}) == []


def test_tvmscript_that_runs_python_is_refused_as_compile_refuses_it(tmp_path: Path) -> None:
    attack = next(a for a in ATTACKS if a.name == "issue-annotation")
    marker = tmp_path / "pwned"
    source = tmp_path / "attack.py"
    text = attack.module(marker)
    source.write_text(text)
    done = _compile(str(source), "-o", str(tmp_path / "out.so"), "--default-device", "cpu")
    line, column = attack.location(marker)
    assert done.returncode == 2, done.stderr
    assert f"{source}:{line}:{column}" in done.stderr and attack.says in done.stderr, done.stderr
    with thread_client() as client:
        response = client.post("/compile", json={"module": text, "default_device": "cpu"})
    problem = without_request(response.json())
    assert response.status_code == 400 and problem["type"].endswith("/malformed-module")
    assert problem["locations"][0]["line"] == line and problem["locations"][0]["column"] == column
    assert problem["detail"] in done.stderr
    assert not marker.exists()
    assert _leftovers(tmp_path, {"attack.py"}) == []


@pytest.mark.slow
def test_a_kernel_tvm_cannot_build_exits_7(tmp_path: Path) -> None:
    """A plain-loop kernel (no `T.sblock`) on the cpu: TVM 0.27's build refuses it."""
    text = WITH_KERNEL.replace("@T.prim_func(s_tir=True)", "@T.prim_func").replace(
        '            with T.sblock("b"):\n                vi = T.axis.spatial(8, i)\n'
        "                T.reads(a[vi])\n                T.writes(b[vi])\n                b[vi] = a[vi] * T.float32(2)\n",
        "            b[i] = a[i] * T.float32(2)\n",
    )
    source = tmp_path / "plain.py"
    source.write_text(text)
    done = _compile(str(source), "-o", str(tmp_path / "out.so"), "--default-device", "cpu")
    assert done.returncode == 7, done.stderr
    assert "error:" in done.stderr and "Traceback" not in done.stderr
    assert _leftovers(tmp_path, {"plain.py"}) == []


def test_usage_errors_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "kernel.py"
    source.write_text(WITH_KERNEL)
    for extra in (["--target", "cpu"], ["--cuda-arch", "75"], ["--target", "cpu={nope"], ["--memory-budget", "x"]):
        code = cli_main(["compile", str(source), "-o", str(tmp_path / "out.so"), *extra])
        err = capsys.readouterr().err
        assert code == 1 and "devplan: error:" in err, (extra, err)
    assert cli_main(["compile", str(source)]) == 1 and "-o" in capsys.readouterr().err
    assert cli_main(["compile", str(source), "-o", str(tmp_path / "no" / "out.so")]) == 1
    assert _leftovers(tmp_path, {"kernel.py"}) == []


def _flags(command: str) -> set[str]:
    from service.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices[command]  # type: ignore[attr-defined]
    return {o for a in parser._actions for o in a.option_strings}


def test_every_request_field_is_a_flag_of_plan_and_compile() -> None:
    """The planning flags follow the request model: a field added to /plan needs its flag (or a
    stated other way in), and `compile` has every planning flag of `plan`."""
    from service.cli import FIELD_FLAGS, FIELD_INPUT, FIELD_OUTPUT
    from service.models import PlanRequest

    fields = set(PlanRequest.model_fields)
    assert fields == set(FIELD_FLAGS) | set(FIELD_INPUT) | set(FIELD_OUTPUT)
    assert not set(FIELD_FLAGS) & (set(FIELD_INPUT) | set(FIELD_OUTPUT))
    plan, compile_ = _flags("plan"), _flags("compile")
    for field, flag in FIELD_FLAGS.items():
        assert flag in plan and flag in compile_, field
    assert {f for f in FIELD_OUTPUT.values()} <= plan
    assert plan - {*FIELD_OUTPUT.values(), "--why-format", "--picture", "-o", "--output", "--output-format"} <= compile_


def test_help_documents_the_exit_codes() -> None:
    done = run_devplan("compile", "--help")
    assert done.returncode == 0
    for code in ("2", "3", "4", "7", "8", "130"):
        assert f"\n  {code}  " in done.stdout, code
    assert "--run-check" in done.stdout and "--target NAME=TARGET" in done.stdout and "--mode" in done.stdout


@pytest.mark.slow
def test_an_all_cpu_mobilenet_compiles_runs_and_matches(tmp_path: Path) -> None:
    path = corpus_file(RELAX / "tv_mobilenet_v3_small.json")
    out = tmp_path / "mobilenet.so"
    done = _compile(str(path), "-o", str(out), "--default-device", "cpu", "--report", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "r.json").read_text())["devices"] == ["llvm:0"]
    mod = tvm.ir.load_json(path.read_text())
    inputs = _random(mod, np.random.default_rng(1))
    np.testing.assert_allclose(_run_library(out, inputs), _unplanned(mod, inputs), rtol=1e-4, atol=1e-4)


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(p) for p in path.read_text().split()]
    except OSError:
        return []


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def _interrupt(argv: list[str], started: str, sig: int = signal.SIGINT) -> tuple[int, str, list[int]]:
    """Run `devplan ARGV`, send `sig` once a process below its compile process (or that
    process itself, for `started` == "spawn_main") has `started` in its command line; its
    exit code, stderr, and the processes of the compile seen then. Its stderr goes to a
    file (a pipe nobody reads while polling would block it once full)."""
    with tempfile.TemporaryFile(mode="w+") as errors:
        # Ctrl-C as a terminal delivers it, even where the tests run with SIGINT ignored (started in
        # the background by a shell): an ignored signal stays ignored across exec, a handled one does not.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "devplan", *argv],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                text=True,
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        seen: list[int] = []
        try:
            while proc.poll() is None:  # the event: the process named `started` runs
                compile_procs = [c for c in _children(proc.pid) if "spawn_main" in _cmdline(c)]
                seen = compile_procs + [d for c in compile_procs for d in _descendants(c)]
                if any(started in _cmdline(p) for p in seen):
                    break
                time.sleep(0.02)  # polling interval, not a limit
            running = proc.poll() is None
            if running:
                os.kill(proc.pid, sig)
                proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        errors.seek(0)
        err = errors.read()
    assert running, err  # the signal must find the compile still running
    return proc.returncode, err, seen


def _gone(pids: list[int]) -> None:
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), (pid, _cmdline(pid))


@pytest.mark.slow
def test_ctrl_c_stops_the_compile_and_leaves_nothing(tmp_path: Path) -> None:
    """SIGINT once the compile process runs: exit 130, the process gone, no library, no temporary."""
    path = corpus_file(RELAX / "tv_mobilenet_v3_small.json")
    argv = ["compile", str(path), "-o", str(tmp_path / "m.so"), "--default-device", "cpu"]
    code, err, seen = _interrupt(argv, "spawn_main")
    assert code == 130 and "Traceback" not in err, err
    _gone(seen)
    assert _leftovers(tmp_path, set()) == []


# WITH_KERNEL's kernel made to run for minutes (2e9 dependent steps an element), so that the
# run check is still running when the test's SIGINT arrives, however fast the machine.
SLOW_KERNEL = WITH_KERNEL.replace(
    "                b[vi] = a[vi] * T.float32(2)\n",
    "                b[vi] = a[vi]\n"
    "                for k in range(2000000000):\n"
    "                    b[vi] = b[vi] * T.float32(0.5) + a[vi]\n",
)


# A kernel that never finishes (4e18 steps an element): the run check runs until the sandbox's
# wall clock ends it.
ENDLESS_KERNEL = SLOW_KERNEL.replace(
    "                for k in range(2000000000):\n"
    "                    b[vi] = b[vi] * T.float32(0.5) + a[vi]\n",
    "                for k in range(2000000000):\n"
    "                    for m in range(2000000000):\n"
    "                        b[vi] = b[vi] * T.float32(0.5) + a[vi]\n",
)


@pytest.mark.slow
def test_ctrl_c_during_the_run_check_stops_its_sandbox_too(tmp_path: Path) -> None:
    """SIGINT while the sandboxed run check runs: the check's processes end with the compile."""
    assert SLOW_KERNEL != WITH_KERNEL
    source = tmp_path / "kernel.py"
    source.write_text(SLOW_KERNEL)
    argv = ["compile", str(source), "-o", str(tmp_path / "k.so"), "--default-device", "cpu", "--run-check"]
    code, err, seen = _interrupt(argv, "service.sandbox")
    assert code == 130, err
    _gone(seen)
    assert _leftovers(tmp_path, {"kernel.py"}) == []


@pytest.mark.slow
def test_sigterm_during_the_run_check_stops_everything_and_leaves_nothing(tmp_path: Path) -> None:
    """SIGTERM (a CI job cancelled) while the sandboxed check runs: exit 143, the compile
    process and the check gone, no library and no temporary."""
    source = tmp_path / "kernel.py"
    source.write_text(SLOW_KERNEL)
    argv = ["compile", str(source), "-o", str(tmp_path / "k.so"), "--default-device", "cpu", "--run-check"]
    code, err, seen = _interrupt(argv, "service.sandbox", signal.SIGTERM)
    assert code == 143 and "Traceback" not in err, err
    _gone(seen)
    assert _leftovers(tmp_path, {"kernel.py"}) == []


@pytest.mark.slow
def test_a_killed_cli_takes_its_compile_process_with_it(tmp_path: Path) -> None:
    """SIGKILL of `devplan compile` (nothing of it can run): its compile process, and the
    sandboxed check under it, die with it instead of compiling on as orphans."""
    source = tmp_path / "kernel.py"
    source.write_text(ENDLESS_KERNEL)
    argv = ["compile", str(source), "-o", str(tmp_path / "k.so"), "--default-device", "cpu", "--run-check"]
    code, _, seen = _interrupt(argv, "service.sandbox", signal.SIGKILL)
    assert ENDLESS_KERNEL != SLOW_KERNEL
    assert code == -signal.SIGKILL and seen
    # The check would run until the sandbox's wall clock (15 minutes): only their parent's
    # death ends these processes now. The bound below only turns a hang into a failure.
    hang = time.monotonic() + 600
    for pid in seen:
        while Path(f"/proc/{pid}").exists() and not _zombie(pid):
            if time.monotonic() > hang:
                pytest.fail(f"{_cmdline(pid)} outlived the killed CLI")
            time.sleep(0.05)  # polling interval


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
