"""The optimize plans carried for scripts/gpu_check.py equal fresh plans of
their requests (so a GPU machine without z3 runs what the optimizer says)."""

from __future__ import annotations

import json

import pytest

from .._scripts import load_script

GEN = load_script("scripts/gen_gpu_plans.py", "gen_gpu_plans")
NAMES = sorted(GEN.load_specs())


def test_there_are_two_or_three_carried_plans() -> None:
    assert 2 <= len(NAMES) <= 3
    for name in NAMES:
        assert (GEN.PLANS_DIR / f"{name}.relay").is_file(), f"run scripts/gen_gpu_plans.py {name}"


@pytest.mark.parametrize("name", NAMES)
def test_carried_plan_equals_a_fresh_plan(name: str) -> None:
    spec = GEN.load_specs()[name]
    if not (GEN.CORPUS / f"{spec['model']}.relay").is_file():
        pytest.skip(f"corpus not found at {GEN.CORPUS}")
    text, cost = GEN.make_plan(spec)
    assert (GEN.PLANS_DIR / f"{name}.relay").read_text() == text
    assert json.loads((GEN.PLANS_DIR / f"{name}.cost.json").read_text()) == cost
    assert cost["copies"] >= 1 and cost["predicted_ms"] > 0
