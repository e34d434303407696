"""Pins by parameter-name pattern on Relay modules: every matching
parameter and the operators that read it, through layout-only operators."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import relay
import solver
from tests._service import TestClient, thread_client

# Two "layers": l0 reads its weight through a transpose (as Relax's
# matmul(x, permute_dims(w)) comes out), l1 reads its weight directly.
TWO_LAYERS = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32], %p_l0_w: Tensor[(16, 8), float32], %p_l0_b: Tensor[(16), float32],
          %p_l1_w: Tensor[(8, 16), float32], %p_l10_w: Tensor[(8, 8), float32]) {
  %0 = transpose(%p_l0_w, axes=[1, 0]);
  %1 = reshape(%0, newshape=[8, 16]);
  %2 = nn.matmul(%x, %1);
  %3 = add(%2, %p_l0_b);
  %4 = nn.relu(%3);
  %5 = nn.dense(%4, %p_l1_w);
  nn.dense(%5, %p_l10_w)
}
"""

# The operator reading %p_l0_w is annotated onto the cpu.
ANNOTATED = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32], %p_l0_w: Tensor[(16, 8), float32]) {
  %0 = nn.dense(%x, %p_l0_w);
  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0], constrain_body=True);
  nn.relu(%1)
}
"""

CPU = {"device_type": "cpu"}


def _plan(text: str, *constraints: dict[str, Any], mode: str = "tvm", **kw: Any) -> solver.PlanResult:
    module = relay.parse_text(text, name="layers.relay", virtual_devices=[solver.resolve_device("cpu", [])[0]])
    config = solver.PlanConfig(constraints=constraints, mode=mode, **kw)  # type: ignore[arg-type]
    ops = sorted({n.op.name for n in relay.traverse.post_order([f for _, f in module.functions])
                  if isinstance(n, relay.ast.Call) and isinstance(n.op, relay.ast.Op)})
    return solver.plan(module, config, why=[{"op": name} for name in ops] + [{"param": "@main:*"}])


def _devices(result: solver.PlanResult) -> dict[tuple[str, int], tuple[str, str]]:
    """(operator or %param, k-th) -> (device, reason) from the why-answers."""
    out: dict[tuple[str, int], tuple[str, str]] = {}
    for w in result.why:
        for k, a in enumerate(w.answers):
            name = w.selector.get("op") or a.expression.split(":")[0]
            out[(str(name), k)] = (a.device, a.reason)
    return out


def _pinned(result: solver.PlanResult) -> set[tuple[str, int]]:
    """What a pin fixes itself: its why-chain starts at the constraint."""
    return {
        (str(w.selector.get("op") or a.expression), k)
        for w in result.why
        for k, a in enumerate(w.answers)
        if a.chain and a.chain[0].kind.startswith("constraint #")
    }


def test_pattern_pins_matching_parameters_and_their_readers() -> None:
    result = _plan(TWO_LAYERS, {"select": {"param": "@main:p_l0_*"}, "device": "cpu"})
    devices = _devices(result)
    # The weight's transpose and reshape, and the matmul behind them, and the add reading the bias.
    for key in [("transpose", 0), ("reshape", 0), ("nn.matmul", 0), ("add", 0)]:
        assert devices[key] == ("cpu", "request pin"), key
        assert key in _pinned(result), key
    # Nothing of l1 or l10 is pinned; they stay on the default device.
    assert devices[("nn.dense", 0)][0] == "cuda" and devices[("nn.dense", 1)][0] == "cuda"
    assert ("nn.dense", 0) not in _pinned(result) and ("nn.relu", 0) not in _pinned(result)
    assert result.functions["main"]["params"] == ["cpu", "cpu", "cpu", "cuda", "cuda"]
    assert len(result.copies) == 1  # relu (on cuda) reads the add's result from the cpu


def test_pattern_does_not_run_into_longer_numbers() -> None:
    # `p_l1_*` is layer 1 only, not layer 10.
    result = _plan(TWO_LAYERS, {"select": {"param": "@main:p_l1_*"}, "device": "cpu"})
    assert result.functions["main"]["params"][3:] == ["cpu", "cuda"]
    devices = _devices(result)
    assert devices[("nn.dense", 0)] == ("cpu", "request pin")
    assert devices[("nn.dense", 1)][0] == "cuda"


def test_question_mark_matches_one_character() -> None:
    result = _plan(TWO_LAYERS, {"select": {"param": "@main:p_l?_w"}, "device": "cpu"})
    pinned = _pinned(result)
    assert {("nn.matmul", 0), ("nn.dense", 0)} <= pinned
    assert ("add", 0) not in pinned and ("nn.dense", 1) not in pinned  # the bias and l10 are not matched
    assert result.functions["main"]["params"][3:] == ["cpu", "cuda"]


def test_exact_param_pin_keeps_its_meaning() -> None:
    # An exact pin pins the parameter only: the annotated reader stays on the
    # cpu and the weight is copied to it (optimize mode: TVM's rules would
    # refuse a parameter on another device than its reader).
    result = _plan(ANNOTATED, {"select": {"param": "@main:%p_l0_w"}, "device": "cuda"}, mode="optimize")
    assert result.functions["main"]["params"][1] == "cuda"
    assert _devices(result)[("nn.dense", 0)] == ("cpu", "annotation")
    assert [(src.device_type, dst.device_type) for _, src, dst in result.copies] == [(2, 1)]


@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_pattern_pin_against_an_annotation_is_a_conflict(mode: str) -> None:
    # The pattern pins the reader itself, which the annotation puts elsewhere.
    with pytest.raises(solver.PlanningConflict, match=r"nn.dense.*\(constraint #0 at 3:8\).*\(annotation at 4:8\)"):
        _plan(ANNOTATED, {"select": {"param": "@main:p_l0_*"}, "device": "cuda"}, mode=mode)


def test_pattern_matching_nothing_names_it() -> None:
    with pytest.raises(solver.PlanConfigError, match=r"constraint #1: .*p_l7_\*.* matches no parameter"):
        _plan(
            TWO_LAYERS,
            {"select": {"param": "@main:p_l0_*"}, "device": "cpu"},
            {"select": {"param": "@main:p_l7_*"}, "device": "cpu"},
        )


def test_two_patterns_pinning_one_operator_apart_are_refused() -> None:
    # `p_l1*` matches l1 and l10: both patterns pin nn.dense #0, to two devices.
    with pytest.raises(solver.PlanConfigError, match="constraints #0 and #1 pin the same call of nn.dense"):
        _plan(
            TWO_LAYERS,
            {"select": {"param": "@main:p_l1_*"}, "device": "cpu"},
            {"select": {"param": "@main:p_l1*"}, "device": "cuda"},
        )


def test_pattern_pins_in_optimize_mode() -> None:
    result = _plan(TWO_LAYERS, {"select": {"param": "@main:p_l0_*"}, "device": "cpu"}, mode="optimize")
    devices = _devices(result)
    for key in [("transpose", 0), ("reshape", 0), ("nn.matmul", 0), ("add", 0)]:
        assert devices[key][0] == "cpu", key
    assert result.functions["main"]["params"][1:3] == ["cpu", "cpu"]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with thread_client() as c:
        yield c


def test_http_unmatched_pattern_is_a_422_naming_it(client: TestClient) -> None:
    body = {"module": TWO_LAYERS, "constraints": [{"select": {"param": "@main:p_embed_*"}, "device": "cpu"}]}
    r = client.post("/plan", json=body)
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "p_embed_*" in r.json()["detail"]


def test_http_pattern_against_annotation_is_a_422_conflict(client: TestClient) -> None:
    body = {
        "module": ANNOTATED,
        "virtual_devices": [CPU],
        "constraints": [{"select": {"param": "@main:p_l0_*"}, "device": "cuda"}],
    }
    r = client.post("/plan", json=body)
    assert r.status_code == 422
    problem = r.json()
    assert problem["type"].endswith("planning-conflict")
    assert any(loc["line"] == 4 for loc in problem["locations"])
