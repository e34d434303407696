"""Budgets count the weights of the entry function whatever its name
(`relax.frontend.nn` calls it `forward`)."""

from __future__ import annotations

import pytest

import relay
import solver

MODULE = """#[version = "0.0.5"]
def @{name}(%x: Tensor[(64, 1024), float32], %w: Tensor[(1024, 1024), float32]) {{
  nn.dense(%x, %w)
}}
"""


@pytest.mark.parametrize("name", ["main", "forward"])
def test_entry_weights_count_against_the_budget(name: str) -> None:
    module = relay.parse_text(MODULE.format(name=name))
    free = solver.plan(module, solver.PlanConfig(mode="optimize"))
    assert free.functions[name]["params"][1] == "cuda"  # without a budget the dense runs on the GPU
    # The 4 MiB weight does not fit a 1 MiB GPU: the dense reads it on the cpu.
    config = solver.PlanConfig(mode="optimize", device_profiles={"cuda": {"memory_bytes": 1 << 20}})
    result = solver.plan(module, config)
    assert result.functions[name]["params"][1] == "cpu"
    assert result.cost is not None and "cuda" not in result.cost.per_device  # nothing left there
