"""Every corpus model's run check passes in the sandbox with the default limits:
the two-CPU plan (first convolution or dense on cpu:0, the rest on cpu:1) against the
single-device build, both run in one sandboxed child, as `/compile` runs them. Slow: the
largest models take minutes of CPU (benchmarks/compile.py --run-check measures them).

For the models outside the default stage this is also the bridge's two-CPU test
(tests/tvm_bridge/test_models.py runs only the default-stage ones unsandboxed): the same
pair of builds, checked here as there (two vdevices, a copy, the results within 1e-5,
which is within that test's 1e-5 times the output's scale), so the slow stage builds and
runs each pair once, not twice."""

from __future__ import annotations

import tempfile

import pytest

import solver
import tvm_bridge
from service import sandbox
from service.compile_workers import CompileJob, run_check
from service.config import Settings
from service.planning import PlanJob
from tests.tvm_bridge.helpers import load_corpus, random_inputs, split_plan
from tests.tvm_bridge.test_models import DEFAULT_MODELS, OTHER_MODELS, _prefix_length

FOUND = sandbox.detect()


@pytest.mark.slow
@pytest.mark.parametrize("model", DEFAULT_MODELS + OTHER_MODELS)
def test_corpus_run_check_passes_in_the_sandbox(model: str) -> None:
    module = load_corpus(f"{model}.relay")
    lowered = tvm_bridge.to_relax(split_plan(module, _prefix_length(module)))
    assert len(tvm_bridge.vdevices_of(lowered)) == 2
    assert "R.to_vdevice(" in lowered["main"].script(show_meta=False)
    built = tvm_bridge.compile(lowered)
    reference = tvm_bridge.compile(tvm_bridge.to_relax(module))
    config = sandbox.config_from(Settings(), FOUND)  # the defaults, the layers that work here
    assert config.enabled
    with tempfile.TemporaryDirectory() as tmp:
        library = f"{tmp}/built.so"
        built.export_library(library)
        job = CompileJob(
            plan=PlanJob(module="", options=solver.PlanOptions()),
            targets=None,
            cuda_arch=None,
            run_check=True,
            library=library,
            sandbox=config,
        )
        check = run_check(job, built, reference, random_inputs(module["main"]))
    assert check["sandbox"] == list(config.layers)
    assert check["max_abs_error"] <= 1e-5
