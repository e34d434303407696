"""A caller's kernels cannot put code into the library (tvm_bridge/kernel_guard.py): TVM
links `pragma_import_llvm` IR into it and prints strings, symbols and names into C source
unescaped; both ran the caller's code when the run check loaded the library, before its
seccomp filter. Each is a 400 at the kernel's `def` line, from TVMScript and from JSON;
every kernel TVM itself makes of the corpus passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tvm
from tvm import relax

import relay
import tvm_bridge
from relay.span import ParseError
from tests._service import thread_client
from tests.sandbox.kernels import one_device
from tvm_bridge import TargetError
from tvm_bridge.kernel_guard import check_kernels
from tvm_bridge.relax_plan import read_relax, strip_devices

pytestmark = pytest.mark.tvm

ROOT = Path(__file__).resolve().parents[2]
LLVM_ONLY: dict[str | int, str] = {"cpu": "llvm", "cuda": "llvm"}

# LLVM IR whose constructor calls abort(): a library with it dies as it is loaded.
_CTOR_IR = (
    "@llvm.global_ctors = appending global [1 x { i32, void ()*, i8* }] "
    "[{ i32, void ()*, i8* } { i32 65535, void ()* @abort, i8* null }]\\ndeclare void @abort()\\n"
)


def _kernel(*lines: str) -> str:
    """tests/sandbox/kernels.py's module: main calls the kernel `k`, `lines` first in it."""
    return one_device("".join(f"        {line}\n" for line in lines))


def _module_with_ctor(pragma: str) -> str:
    """The kernel's loop under `pragma` = the constructor IR (llvm's import pragma)."""
    return _kernel().replace(
        "        for i in range(4):\n            y[i]",
        f'        with T.attr(0, "{pragma}", "{_CTOR_IR}"):\n            for i in range(4):\n                y[i]',
    )


ATTACKS: dict[str, tuple[str, str]] = {
    "import-llvm": (_module_with_ctor("pragma_import_llvm"), "`pragma_import_llvm` is not accepted"),
    "import-c": (_module_with_ctor("pragma_import_c"), "`pragma_import_c` is not accepted"),
    "import-llvm-annotation": (
        _kernel().replace(
            "for i in range(4):", f'for i in T.serial(4, annotations={{"pragma_import_llvm": "{_CTOR_IR}"}}):'
        ),
        "`pragma_import_llvm` is not accepted",
    ),
    "quote-in-string": (_kernel('T.evaluate(T.call_extern("int32", "puts", "x\\"); }"))'), "holds a '\"'"),
    "backslash-in-string": (_kernel('T.evaluate(T.call_extern("int32", "puts", "a\\\\"))'), "holds a '\\\\'"),
    "newline-in-string": (
        _kernel('T.evaluate(T.call_extern("int32", "puts", "\\n#include \\"/etc/passwd\\""))'),
        "control character '\\n'",
    ),
    "newline-in-extern-name": (_kernel('T.evaluate(T.call_extern("int32", "f\\n#define x"))'), "control character"),
    "symbol-not-an-identifier": (_kernel('T.func_attr({"global_symbol": "k(void); int x"})'), "not a C identifier"),
}


def _located(text: str) -> tuple[str, int, int]:
    with pytest.raises(ParseError) as info:
        read_relax(text)
    err = info.value
    assert err.line is not None and err.column is not None
    return err.message, err.line, err.column


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_attack_is_refused_at_the_kernel(name: str) -> None:
    text, says = ATTACKS[name]
    message, line, column = _located(text)
    assert message.startswith("kernel 'k': ") and says in message, message
    assert (line, column) == (4, 5)  # `def k(` in the module


def test_the_constructor_would_run_when_the_library_is_loaded(tmp_path: Path) -> None:
    """The premise, in a child process: TVM links the pragma's IR into the library built
    for the default llvm target, and loading it runs the constructor (abort)."""
    from tvm.script.parser import ir as script_ir
    from tvm.script.parser import relax as script_relax
    from tvm.script.parser import tirx as script_tir

    text = _module_with_ctor("pragma_import_llvm")
    mod = tvm.script.from_source(text, extra_vars={"I": script_ir, "R": script_relax, "T": script_tir})
    library = tmp_path / "ctor.so"
    tvm.compile(mod, target="llvm").export_library(str(library))
    done = subprocess.run(
        [sys.executable, "-c", f"import tvm; tvm.runtime.load_module({str(library)!r})"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == -6  # SIGABRT, from the library's constructor


def test_the_same_in_json_is_refused_naming_the_kernel() -> None:
    """JSON has no lines: the refusal names the kernel; a variable whose name is C code is
    refused too (TVMScript cannot write one, JSON can)."""
    from tvm.script.parser import ir as script_ir
    from tvm.script.parser import relax as script_relax
    from tvm.script.parser import tirx as script_tir

    extra = {"I": script_ir, "R": script_relax, "T": script_tir}
    text = tvm.ir.save_json(tvm.script.from_source(ATTACKS["import-llvm"][0], extra_vars=extra))
    with pytest.raises(ParseError, match="kernel 'k': `pragma_import_llvm` is not accepted"):
        read_relax(text, "json")
    graph: dict[str, Any] = json.loads(tvm.ir.save_json(read_relax(_kernel())[0]))
    index = next(i for i, n in enumerate(graph["nodes"]) if n["type"] == "ffi.String" and n["data"] == "i")
    graph["nodes"][index]["data"] = "i; } int pwn() { return 0"
    with pytest.raises(ParseError, match="kernel 'k': the name .* is not word characters and dots"):
        read_relax(json.dumps(graph), "json")


def test_c_targets_are_refused_for_compiles() -> None:
    mod, _ = read_relax(_kernel())
    with pytest.raises(TargetError, match="target kind 'c' is not accepted"):
        tvm_bridge.compile(strip_devices(mod), {"cpu": "c"})
    for target in ('T.target("c")', 'T.target({"kind": "llvm", "host": "c"})'):
        with pytest.raises(ParseError, match="target kind 'c' is not accepted"):
            read_relax(_kernel(f'T.func_attr({{"target": {target}}})'))


def test_a_c_target_over_http_is_a_422() -> None:
    body = {"module": _kernel(), "default_device": "cpu", "targets": {"cpu": "c"}, "run_check": True}
    with thread_client() as client:
        response = client.post("/compile", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["type"].endswith("/invalid-target")


def test_kernels_tvm_makes_pass(corpus_dir: Path) -> None:
    """TVM's own kernels: legalized corpus models (Relax, and a lowered Relay model),
    and the sandbox's kernels (plain loops, s_tir blocks, extern calls)."""
    from tests.sandbox.kernels import ATTACKS as KERNEL_ATTACKS
    from tests.sandbox.kernels import attack_lines, two_devices

    checked = 0
    for name in ("tv_resnet18.json", "hf_bert.json"):
        legal = relax.transform.LegalizeOps()(tvm.ir.load_json((corpus_dir / "relax" / name).read_text()))
        check_kernels(legal)
        checked += sum(isinstance(f, tvm.tirx.PrimFunc) for f in legal.functions.values())
    lowered = tvm_bridge.to_relax(relay.parse_text((corpus_dir / "lstm.relay").read_text(), name="lstm"), LLVM_ONLY)
    check_kernels(relax.transform.LegalizeOps()(lowered))
    texts = [one_device(sblock=True), two_devices(), one_device(parallel=True)]
    texts += [one_device(attack_lines(a, path="/nonexistent/x")) for a in KERNEL_ATTACKS if "{path}" in KERNEL_ATTACKS[a]]
    texts += [one_device(attack_lines(a)) for a in KERNEL_ATTACKS if "{path}" not in KERNEL_ATTACKS[a]]
    for text in texts:
        read_relax(text)
    assert checked > 50


@pytest.mark.slow
def test_every_kernel_tvm_makes_of_the_corpus_passes(corpus_dir: Path) -> None:
    """All 2400-odd kernels LegalizeOps makes of the Relax corpus and of the bridge's
    lowering of every Relay corpus model."""
    checked = 0
    for path in sorted((corpus_dir / "relax").glob("*.json")):
        legal = relax.transform.LegalizeOps()(tvm.ir.load_json(path.read_text()))
        check_kernels(legal)
        checked += sum(isinstance(f, tvm.tirx.PrimFunc) for f in legal.functions.values())
    for path in sorted(corpus_dir.glob("*.relay")):
        lowered = tvm_bridge.to_relax(relay.parse_text(path.read_text(), name=path.name), LLVM_ONLY)
        legal = relax.transform.LegalizeOps()(lowered)
        check_kernels(legal)
        checked += sum(isinstance(f, tvm.tirx.PrimFunc) for f in legal.functions.values())
    assert checked > 2000
