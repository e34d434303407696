"""Compiling runs none of the caller's code: only the run check runs kernels, in its
sandbox. TVM's FoldConstant builds a kernel whose inputs are all constant and calls it in
the compiling process; the default pipeline of a single GPU target runs it (a run
check's reference, built for the request's `cpu` target, is one), so the bridge never
lets it run. The kernel here would create a file if it ran."""

from __future__ import annotations

from pathlib import Path

import pytest
import tvm
from tvm import relax

import tvm_bridge
from tests._service import thread_client
from tvm_bridge import BridgeError
from tvm_bridge.build import NEVER_RUN_PASSES
from tvm_bridge.relax_plan import read_relax, strip_devices

pytestmark = pytest.mark.tvm


def _folded_kernel(marker: Path) -> str:
    """A kernel marked scheduled (so no GPU schedule replaces it) that calls `system`,
    called on a constant: what FoldConstant would build for llvm and run."""
    return f'''@I.ir_module
class Module:
    @T.prim_func
    def k(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        T.func_attr({{"tirx.is_scheduled": True}})
        T.evaluate(T.call_extern("int32", "system", "touch {marker}"))
        for i in range(4):
            y[i] = x[i] + T.float32(1)

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Module
        c = R.const([1.0, 2.0, 3.0, 4.0], "float32")
        y = R.call_tir(cls.k, (c,), out_ty=R.Tensor((4,), "float32"))
        z = R.add(x, y)
        return z
'''


def test_tvms_constant_folding_would_run_the_kernel(tmp_path: Path) -> None:
    """The premise: FoldConstant itself runs the caller's kernel (here, in this test)."""
    marker = tmp_path / "folded"
    mod, _ = read_relax(_folded_kernel(marker))
    relax.transform.FoldConstant()(mod)
    assert marker.exists()
    assert "FoldConstant" in NEVER_RUN_PASSES


def test_a_single_gpu_target_build_does_not_fold_the_kernel(tmp_path: Path) -> None:
    marker = tmp_path / "built"
    mod, _ = read_relax(_folded_kernel(marker))
    try:
        tvm_bridge.compile(strip_devices(mod), {"cpu": "cuda"}, cuda_arch="sm_80")
    except BridgeError:
        pass  # no CUDA compiler here: the passes before codegen ran all the same
    assert not marker.exists()


def test_the_run_checks_reference_for_a_gpu_cpu_target_runs_nothing(tmp_path: Path) -> None:
    """The request that ran `system` in the compile process before: the reference of the
    run check built for `targets.cpu = cuda`."""
    marker = tmp_path / "compiled"
    body = {
        "module": _folded_kernel(marker),
        "default_device": "cpu",
        "targets": {"cpu": "cuda"},
        "cuda_arch": "sm_80",
        "run_check": True,
    }
    with thread_client() as client:
        response = client.post("/compile", json=body)
    assert response.status_code in (200, 422), response.text
    assert not marker.exists()


def test_default_cpu_pipelines_leave_constants_as_they_were() -> None:
    """Disabling the pass changes no CPU build: TVM's default CPU pipeline has no
    FoldConstant (the compiled module computes the same)."""
    import numpy as np

    text = _folded_kernel(Path("/nonexistent/never")).replace(
        '        T.evaluate(T.call_extern("int32", "system", "touch /nonexistent/never"))\n', ""
    )
    mod, _ = read_relax(text)
    built = tvm_bridge.compile(strip_devices(mod))
    x = np.arange(4, dtype="float32")
    out = tvm_bridge.run(built, [x])
    assert np.allclose(np.asarray(out), x + np.array([2.0, 3.0, 4.0, 5.0], dtype="float32"))


_PROBE = "devplan.test.named_by_the_module"


def _naming_module() -> str:
    """A module whose main and whose kernel call the global function _PROBE by name."""
    return f'''@I.ir_module
class Module:
    @T.prim_func
    def k(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        T.evaluate(T.call_packed("{_PROBE}", 1))
        for i in range(4):
            y[i] = x[i] + T.float32(1)

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Module
        a = R.call_pure_packed("{_PROBE}", x, ty_args=R.Tensor((4,), "float32"))
        y = R.call_tir(cls.k, (a,), out_ty=R.Tensor((4,), "float32"))
        return y
'''


def test_planning_and_compiling_call_no_function_the_module_names() -> None:
    """Planning (over HTTP, in this process) and compiling call none of the global
    functions the module names; running the compiled module calls them (so the probe
    would have seen a call)."""
    calls: list[str] = []

    def probe(*args: object) -> object:
        calls.append("called")
        return args[0]

    tvm.register_global_func(_PROBE, probe, override=True)
    text = _naming_module()
    with thread_client() as client:
        planned = client.post("/plan", json={"module": text, "default_device": "cpu"})
    assert planned.status_code == 200, planned.text
    mod, _ = read_relax(text)
    built = tvm_bridge.compile(strip_devices(mod))
    assert calls == []
    import numpy as np

    tvm_bridge.run(built, [np.zeros(4, dtype="float32")])
    assert calls == ["called", "called"]
