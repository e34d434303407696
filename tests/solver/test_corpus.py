"""TVM 0.19's own PlanDevices verdicts on the shared corpus: same plans, same conflicts."""

from __future__ import annotations

from pathlib import Path

import pytest

import relay
import solver

from ._corpus import CORPUS, SLOW_MODELS, corpus_cases

CONFIG = solver.PlanConfig(default_device="cuda", host_device="cpu", z3_check=True)

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")


def _read(base: Path, suffix: str) -> relay.Module:
    path = Path(str(base) + suffix)
    return relay.parse_text(path.read_text(), name=str(path))


def _params(kind: str) -> list:
    out = []
    for case_id, base in corpus_cases(kind):
        marks = [pytest.mark.slow] if base.name in SLOW_MODELS else []
        out.append(pytest.param(base, id=case_id, marks=marks))
    return out


@pytest.mark.parametrize("base", _params("planned"))
def test_plan_matches_tvm(base: Path) -> None:
    module = _read(base, ".relay")
    expected = _read(base, ".planned.relay")
    result = solver.plan(module, CONFIG)
    relay.verify(result.module)
    assert relay.structural_equal(result.module, expected), relay.print_text(result.module)
    # TVM's output is a fixed point of the planner.
    again = solver.plan(expected, CONFIG)
    assert relay.structural_equal(again.module, expected)


@pytest.mark.parametrize("base", _params("conflict"))
def test_conflict_matches_tvm(base: Path) -> None:
    module = _read(base, ".relay")
    with pytest.raises(solver.PlanningConflict) as info:
        solver.plan(module, CONFIG)
    err = info.value
    assert err.constraints, "a conflict names its constraints"
    assert all(c.kind for c in err.constraints)
    # Every explanation points into the input text.
    assert any(c.span is not None for c in err.constraints)


@pytest.mark.parametrize("base", _params("tvm-crash"))
def test_tvm_crash_gives_plan_or_conflict(base: Path) -> None:
    module = _read(base, ".relay")
    try:
        result = solver.plan(module, CONFIG)
    except solver.PlanningConflict as err:
        assert err.constraints
    else:
        relay.verify(result.module)


def test_corpus_counts() -> None:
    """The corpus README promises 207 random plans, 86 conflicts and 7 crashes."""
    random_planned = [c for c, _ in corpus_cases("planned") if c.startswith("random/")]
    random_conflicts = [c for c, _ in corpus_cases("conflict") if c.startswith("random/")]
    assert len(random_planned) == 207
    assert len(random_conflicts) == 86
    assert len(corpus_cases("tvm-crash")) == 7
