"""Fused modules are costed: a call of a `Primitive` function is one
kernel, with its body's FLOPs, its own inputs and output, and one launch.

resnet18.fused.relay is resnet18 after TVM's FuseOps; fusing saves launches
and intermediate traffic, not the arithmetic, so on the same request it
predicts no more than the unfused model and at least half of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import relay
import solver
from relay.ast import Call, Module, Op
from relay.traverse import not_primitive, post_order
from solver.optimize.problem import kernel_ops, kernel_work, primitive_function
from solver.optimize.run import optimize
from solver.optimize.sizes import Sizes

CORPUS = (Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus").resolve()
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"model corpus not found at {CORPUS}")

REQUESTS: list[dict[str, Any]] = [
    {"default_device": "cuda", "host_device": "cpu", "virtual_devices": ("cpu", "cuda")},
    {"default_device": "cpu", "host_device": "cpu", "virtual_devices": ("cpu",)},
    {"default_device": "cuda", "host_device": "cuda", "virtual_devices": ("cuda",)},
]


def _load(name: str) -> Module:
    path = CORPUS / f"{name}.relay"
    return relay.parse_text(path.read_text(), name=path.name)


def _primitive_calls(module: Module) -> list[Call]:
    return [
        n
        for _, f in module.functions
        for n in post_order(f, enter=not_primitive)
        if isinstance(n, Call) and primitive_function(n) is not None
    ]


@needs_corpus
@pytest.mark.parametrize("request_fields", REQUESTS, ids=["cpu+cuda", "cpu", "cuda"])
def test_fused_resnet18_costs_between_half_and_all_of_the_unfused(request_fields: dict[str, Any]) -> None:
    config = solver.PlanConfig(mode="optimize", **request_fields)
    fused = optimize(_load("resnet18.fused"), config)
    plain = optimize(_load("resnet18"), config)
    fused_cost, plain_cost = fused.result.cost, plain.result.cost
    assert fused_cost is not None and plain_cost is not None
    assert 0.5 * plain_cost.predicted_ms <= fused_cost.predicted_ms <= plain_cost.predicted_ms
    assert not fused_cost.estimates
    # Every fused call is a kernel of the plan, and none is free.
    kernels = len(_primitive_calls(_load("resnet18.fused")))
    assert kernels > 40
    assert sum(d.operators for d in fused_cost.per_device.values()) == kernels
    problem = fused.problem
    for c, ops in enumerate(problem.ops):
        if ops:
            for d in problem.allowed[c]:
                launch_ns = problem.profiles[d].launch_us * 1000
                assert problem.unary[c][d] > ops * launch_ns, (c, d)
    # A fused kernel computes with its inputs on its own device: no plan
    # splits a fused call from its arguments without a copy.
    assert fused_cost.copies == len(fused.result.copies)


@needs_corpus
def test_each_fused_kernel_has_its_body_arithmetic_and_its_own_bytes() -> None:
    module = _load("resnet18.fused")
    type_of, _ = solver.module_types(module)
    sizes = Sizes(type_of, 1)
    sizes.run([f for _, f in module.functions])
    calls = _primitive_calls(module)
    convs = 0
    for call in calls:
        fn = primitive_function(call)
        assert fn is not None
        work = kernel_work(call, sizes, 1)
        body_ops = [n for n in post_order([fn.body]) if isinstance(n, Call) and isinstance(n.op, Op)]
        assert len(work.parts) == len(body_ops) == len(kernel_ops(call))
        # Arithmetic unless the kernel only moves data (a flatten).
        assert sum(p.flops for p in work.parts) > 0 or {p.op_class for p in work.parts} == {"data movement"}
        assert work.bytes_moved > 0
        # Bytes: the call's arguments and result only (no intermediates).
        assert work.bytes_moved == sizes.of(call) + sum(sizes.of(a) for a in call.args)
        convs += any(p.op_class == "conv" for p in work.parts)
    assert convs == 21  # resnet18's convolutions, each in one fused kernel


@needs_corpus
def test_a_fused_kernel_needs_support_for_every_body_operator() -> None:
    config = solver.PlanConfig(
        mode="optimize",
        default_device="cuda",
        host_device="cpu",
        virtual_devices=("cpu", "cuda"),
        op_support={"cuda": {"unsupported": ["sqrt"]}},
    )
    result = optimize(_load("resnet18.fused"), config).result
    cost = result.cost
    assert cost is not None
    # sqrt sits inside the batch-norm kernels, which reach every convolution:
    # nothing of the fused graph may run on cuda.
    assert cost.per_device.get("cuda") is None or cost.per_device["cuda"].operators == 0
    assert cost.per_device["cpu"].operators == len(_primitive_calls(_load("resnet18.fused")))
    # TVM's plan (all on cuda) is refused, naming the operator where it is.
    assert cost.tvm_mode_reason is not None and "sqrt is not supported on cuda" in cost.tvm_mode_reason
