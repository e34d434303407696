"""Optimize mode on every construct and random program of the corpus: it
plans or explains a conflict, its output verifies, carries exactly the copies
it predicted, and is a fixed point of the TVM mode."""

from __future__ import annotations

from pathlib import Path

import pytest

import relay
import solver
from solver.optimize.run import evaluate_planned

from ._corpus import CORPUS

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")


def _inputs(folder: str) -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in (CORPUS / folder).glob("*.relay") if ".planned" not in p.name)


def _check(path: Path) -> bool | None:
    """None on a conflict, else whether the output is a TVM-mode fixed point."""
    module = relay.parse_text(path.read_text(), name=str(path))
    try:
        result = solver.plan(module, solver.PlanConfig(mode="optimize", z3_check=True, overlap=False))
    except solver.PlanningConflict as err:
        assert err.constraints and all(c.kind for c in err.constraints)
        return None
    relay.verify(result.module)
    cost = result.cost
    assert cost is not None and cost.optimal
    assert len(result.copies) == cost.copies
    shares = (d.predicted_ms - d.overlap_hidden_ms for d in cost.per_device.values())
    assert sum(shares) == pytest.approx(cost.predicted_ms, abs=1e-5)
    if cost.tvm_mode_predicted_ms is not None:
        # The prediction prices exactly the plan the TVM mode writes.
        tvm = solver.plan(module, solver.PlanConfig())
        priced = evaluate_planned(tvm.module, solver.PlanConfig(mode="optimize"))
        assert priced.predicted_ms == pytest.approx(cost.tvm_mode_predicted_ms, abs=1e-5)
        # (No "optimize <= TVM" here: TVM's conflicting-inputs pre-pass may copy a
        # variable away from an annotation that pins it, which optimize mode keeps hard.)
    try:
        again = solver.plan(result.module, solver.PlanConfig())
    except solver.PlanningConflict:
        return False
    return relay.structural_equal(again.module, result.module)


@pytest.mark.parametrize("path", _inputs("constructs"), ids=lambda p: p.stem)
def test_constructs(path: Path) -> None:
    assert _check(path) in (None, True)


@pytest.mark.slow
def test_random_programs() -> None:
    verdicts = [_check(path) for path in _inputs("random")]
    planned = [v for v in verdicts if v is not None]
    assert len(planned) >= 250
    # Known exception (docs/optimize.md, section 10): a variable passed to a
    # call whose result is elsewhere makes TVM's conflicting-inputs pre-pass
    # copy it on re-planning. It stays rare.
    assert sum(planned) >= 0.98 * len(planned)
