"""Corpus models end to end: two-CPU plans against the single-device build,
llvm+cuda plans compiled (CUDA kernels checked with nvcc), GPU runs where
a GPU exists. mlp and dqn (convolutions) run by default, resnet18 and the rest under `slow`
(the two-CPU plans of the rest in tests/sandbox/test_corpus_checks.py); the operators
resnet18 adds (batch norm, pooling, softmax) are compiled and checked by test_ops.py."""

from __future__ import annotations

import numpy as np
import pytest

import tvm_bridge
from relay import ast

from .helpers import CORPUS, CPU0, CUDA0, load_corpus, random_inputs, retarget, split_plan

DEFAULT_MODELS = ["mlp", "dqn", "mlp.bound"]
OTHER_MODELS = [
    "resnet18",
    "resnet50",
    "resnet3d_18",
    "mobilenet",
    "mobilenet.anf",
    "squeezenet",
    "vgg16",
    "inception_v3",
    "densenet121",
    "dcgan",
    "lstm",
    "synthetic",
    "resnet18.fused",
    "squeezenet.bound",
]
PLANNED = ["mlp.annotated.planned", "dqn.planned"]
OTHER_PLANNED = ["resnet18.annotated.planned"] + [
    f"{m}.planned"
    for m in ["mlp", "resnet18", "lstm", "squeezenet", "mobilenet", "dcgan", "resnet3d_18"]
] + ["lstm.annotated.planned", "mobilenet.anf.planned", "resnet18.fused.planned", "mlp.bound.planned"]


def _max_error(a: object, b: object) -> float:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        return max((_max_error(x, y) for x, y in zip(a, b)), default=0.0)
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def _prefix_length(module: ast.Module) -> int:
    """Up to and including the first convolution or dense (at least 2 nodes)."""
    from relay.traverse import post_order

    count = 0
    for node in post_order(module["main"].body):
        if isinstance(node, (ast.Call, ast.Tuple, ast.TupleGetItem)):
            count += 1
            if isinstance(node, ast.Call) and getattr(node.op, "name", "") in (
                "nn.conv2d",
                "nn.conv3d",
                "nn.dense",
            ):
                break
    return max(count, 2)


# The slow models' same two-CPU pair is built, run (in the sandbox) and checked the same way
# by tests/sandbox/test_corpus_checks.py, once per slow stage.
@pytest.mark.parametrize("model", DEFAULT_MODELS)
def test_two_cpu_plan_matches_single_device_build(model: str) -> None:
    module = load_corpus(f"{model}.relay")
    planned = split_plan(module, _prefix_length(module))
    lowered = tvm_bridge.to_relax(planned)
    assert len(tvm_bridge.vdevices_of(lowered)) == 2
    assert "R.to_vdevice(" in lowered["main"].script(show_meta=False)
    hetero = tvm_bridge.compile(lowered)
    single = tvm_bridge.compile(tvm_bridge.to_relax(module))
    inputs = random_inputs(module["main"])
    expected = tvm_bridge.run(single, inputs)
    result = tvm_bridge.run(hetero, inputs)
    scale = max(
        1.0, float(np.max(np.abs(np.asarray(expected if not isinstance(expected, tuple) else expected[0]))))
    )
    assert _max_error(result, expected) <= 1e-5 * scale


def test_solver_plan_on_two_cpus_matches_single_device_build() -> None:
    solver = pytest.importorskip("solver")
    import dataclasses

    from relay.traverse import rewrite

    module = load_corpus("mlp.relay")
    first: list[ast.Expr] = []

    def pin_first_dense(original: ast.Expr, rebuilt: ast.Expr) -> ast.Expr:
        if isinstance(rebuilt, ast.Call) and getattr(rebuilt.op, "name", "") == "nn.dense" and not first:
            first.append(rebuilt)
            return ast.on_device(rebuilt, CPU0)
        return rebuilt

    main = module["main"]
    annotated = ast.Module(
        ((module.functions[0][0], dataclasses.replace(main, body=rewrite(main.body, pin_first_dense))),),
        (),
        {"VirtualDevice": [CPU0]},
    )
    config = solver.PlanConfig(
        virtual_devices=("cpu:0", "cpu:1"), default_device="cpu:1", host_device="cpu:0"
    )
    planned = solver.plan(annotated, config).module
    compiled = tvm_bridge.compile(tvm_bridge.to_relax(planned))
    assert len(compiled.devices) == 2
    inputs = random_inputs(main)
    expected = tvm_bridge.run(tvm_bridge.compile(tvm_bridge.to_relax(module)), inputs)
    assert _max_error(tvm_bridge.run(compiled, inputs), expected) <= 1e-6


def _compile_cuda_plan(name: str) -> tvm_bridge.Compiled:
    module = load_corpus(f"{name}.relay")
    lowered = tvm_bridge.to_relax(module)
    kinds = {str(v.target.kind.name) for v in tvm_bridge.vdevices_of(lowered)}
    assert "cuda" in kinds
    compiled = tvm_bridge.compile(lowered)
    assert any(d.dlpack_device_type() == 2 for d in compiled.devices)
    return compiled


@pytest.mark.parametrize("name", PLANNED + [pytest.param(n, marks=pytest.mark.slow) for n in OTHER_PLANNED])
def test_llvm_cuda_plan_compiles(name: str, tmp_path: object) -> None:
    compiled = _compile_cuda_plan(name)
    from pathlib import Path

    path = Path(str(tmp_path)) / f"{name}.so"
    compiled.export_library(path)
    assert path.stat().st_size > 0
    if tvm_bridge.build._cuda_modules(compiled.executable) and __import__("shutil").which("nvcc"):
        report = tvm_bridge.nvcc_check(compiled)
        assert report["kernels_bytes"] > 0


def test_exported_library_loads_and_runs(tmp_path: object) -> None:
    from pathlib import Path

    module = load_corpus("mlp.relay")
    planned = split_plan(module, 3)
    compiled = tvm_bridge.compile(tvm_bridge.to_relax(planned))
    path = tvm_bridge.export_library(compiled, Path(str(tmp_path)) / "mlp.so")
    lib = tvm_bridge.load_library(path)
    inputs = random_inputs(module["main"])
    from_file = tvm_bridge.run(lib, inputs, compiled.devices, input_devices=compiled.input_devices["main"])
    np.testing.assert_allclose(from_file, tvm_bridge.run(compiled, inputs), rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["mlp.annotated.planned", "resnet18.annotated.planned", "resnet18.planned"])
def test_gpu_plan_matches_cpu(name: str) -> None:
    module = load_corpus(f"{name}.relay")
    compiled = tvm_bridge.compile(tvm_bridge.to_relax(module))
    cpu_only = retarget(module, None)
    inputs = random_inputs(module["main"])
    expected = tvm_bridge.run(tvm_bridge.compile(tvm_bridge.to_relax(cpu_only)), inputs)
    assert _max_error(tvm_bridge.run(compiled, inputs), expected) <= 1e-3


@pytest.mark.gpu
def test_gpu_split_plan_runs() -> None:
    module = load_corpus("resnet18.relay")
    planned = split_plan(module, _prefix_length(module), CPU0, CUDA0)
    compiled = tvm_bridge.compile(tvm_bridge.to_relax(planned))
    inputs = random_inputs(module["main"])
    expected = tvm_bridge.run(tvm_bridge.compile(tvm_bridge.to_relax(module)), inputs)
    assert _max_error(tvm_bridge.run(compiled, inputs), expected) <= 1e-3


def test_corpus_present() -> None:
    if not CORPUS.exists():
        pytest.skip("corpus not found")
    assert (CORPUS / "resnet18.relay").exists()


def test_unplanned_module_compiles_for_one_cuda_target() -> None:
    module = load_corpus("mlp.relay")
    compiled = tvm_bridge.compile(tvm_bridge.to_relax(module), target="cuda -arch=sm_80")
    assert compiled.cuda_arch == "sm_80"
    assert [d.dlpack_device_type() for d in compiled.devices] == [2]
    if __import__("shutil").which("nvcc"):
        assert tvm_bridge.nvcc_check(compiled)["kernels_bytes"] > 0
