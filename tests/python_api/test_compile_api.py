"""`devplan.compile`: POST /compile's compile path from Python (the compiles run in the slow stage)."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from service.models import CompileRequest
from tests.python_api.common import WITH_KERNEL, script
from tests.python_api.test_compile_cli import _leftovers, _random, _run_library, _unplanned

# Two hints that cannot both hold (`c = R.add(a, b)` needs one device for both).
from tests.record.test_relax_cli import CONFLICT

pytestmark = pytest.mark.tvm
pytest.importorskip("tvm")

import devplan


def test_the_keywords_are_the_compile_request_fields(tmp_path: Path) -> None:
    params = inspect.signature(devplan.compile).parameters
    assert list(params)[:2] == ["module", "output"]
    assert set(params) - {"module", "output"} == set(CompileRequest.model_fields) - {"module"}
    with pytest.raises(TypeError, match="unexpected keyword argument 'target'"):
        devplan.compile(WITH_KERNEL, tmp_path / "k.so", target="llvm")
    with pytest.raises(TypeError, match="run_check"):
        devplan.compile(WITH_KERNEL, tmp_path / "k.so", run_check="yes")
    with pytest.raises(devplan.ConfigError):
        devplan.compile(WITH_KERNEL, tmp_path / "k.so", cuda_arch="75")
    assert _leftovers(tmp_path, set()) == []


@pytest.mark.slow
def test_an_ir_module_with_its_kernel_compiles_runs_and_matches(tmp_path: Path) -> None:
    mod = script(WITH_KERNEL)
    out = tmp_path / "k.so"
    answer = devplan.compile(mod, out, default_device="cpu", run_check=True)
    assert answer["path"] == str(out) and answer["report"]["check"]["max_abs_error"] == 0.0
    inputs = _random(mod, np.random.default_rng(2))
    np.testing.assert_allclose(_run_library(out, inputs), _unplanned(mod, inputs), rtol=1e-6)


@pytest.mark.slow
def test_compile_errors_are_devplan_errors_and_leave_nothing(tmp_path: Path) -> None:
    with pytest.raises(devplan.ConflictError) as conflict:
        devplan.compile(CONFLICT, tmp_path / "c.so")
    assert conflict.value.problem["locations"][0]["line"] == 8
    plain = WITH_KERNEL.replace("@T.prim_func(s_tir=True)", "@T.prim_func").replace(
        '            with T.sblock("b"):\n                vi = T.axis.spatial(8, i)\n'
        "                T.reads(a[vi])\n                T.writes(b[vi])\n                b[vi] = a[vi] * T.float32(2)\n",
        "            b[i] = a[i] * T.float32(2)\n",
    )
    with pytest.raises(devplan.CompileError) as failed:
        devplan.compile(plain, tmp_path / "p.so", default_device="cpu")
    assert failed.value.problem["type"].endswith("/compile-failed")
    assert _leftovers(tmp_path, set()) == []
