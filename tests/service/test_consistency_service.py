"""Never a wrong 200, through POST /plan and `devplan plan`:
ill-typed modules, unknown operators, empty input, divergences, unchecked
operators, notices, op_support in TVM mode, and a planner bug as a 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.problems import ALL_KINDS, PROBLEM_MEDIA_TYPE

PROBLEM_TYPES = {k.slug: k.type for k in ALL_KINDS}
ROOT = Path(__file__).resolve().parents[2]
DIVERGENCES = ROOT / "tests" / "data" / "divergences"
T4 = "Tensor[(4), float32]"
ILL_TYPED = f"def @main(%x: {T4}, %y: Tensor[(5), float32]) {{\n  add(%x, %y)\n}}\n"
TYPO = f"def @main(%x: {T4}) {{\n  negatve(%x)\n}}\n"


@pytest.fixture(scope="module")
def client(make_client: Any) -> Iterator[Any]:
    with make_client(pool_kind="thread", pool_size=1) as c:
        yield c


def _problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text[:2000]
    assert response.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    body: dict[str, Any] = response.json()
    assert body["type"] == PROBLEM_TYPES[slug]
    return body


def test_ill_typed_module_is_a_400_type_error_with_its_location(client: Any) -> None:
    body = _problem(client.post("/plan", json={"module": ILL_TYPED}), 400, "type-error")
    assert body["locations"][0]["line"] == 2 and body["locations"][0]["column"] == 3
    assert "(4)" in body["detail"] and "(5)" in body["detail"]


def test_check_types_false_plans_the_ill_typed_module(client: Any) -> None:
    response = client.post("/plan", json={"module": ILL_TYPED, "check_types": False})
    assert response.status_code == 200, response.text


def test_unknown_operator_is_a_400_malformed_module(client: Any) -> None:
    body = _problem(client.post("/plan", json={"module": TYPO}), 400, "malformed-module")
    assert "negatve" in body["detail"]
    assert body["locations"][0]["line"] == 2
    # Not skipped by check_types: false (TVM's parser rejects the name).
    _problem(client.post("/plan", json={"module": TYPO, "check_types": False}), 400, "malformed-module")


@pytest.mark.parametrize("text", ["", "  \n\t"])
def test_empty_module_is_a_400(client: Any, text: str) -> None:
    _problem(client.post("/plan", json={"module": text}), 400, "malformed-module")


def test_divergences_are_listed_and_counted_as_copies(client: Any) -> None:
    text = (DIVERGENCES / "od_of_od.relay").read_text()
    response = client.post("/plan", json={"module": text, "virtual_devices": ["cpu", "cuda"]})
    assert response.status_code == 200, response.text
    body = response.json()
    # At the copied value, `negative(%x)` (a copy is located at its
    # producer in every view, not at the annotation around it).
    assert [(c["line"], c["column"], c["src"], c["dst"]) for c in body["summary"]["device_copies"]] == [
        (3, 8, "cpu", "cuda")
    ]
    (divergence,) = body["divergences"]
    assert (divergence["line"], divergence["column"], divergence["src"], divergence["dst"]) == (
        3,
        8,
        "cpu",
        "cuda",
    )
    assert "TVM 0.19" in divergence["reason"]


def test_a_plain_plan_has_no_divergences_notices_or_unchecked_ops(client: Any) -> None:
    body = client.post("/plan", json={"module": f"def @main(%x: {T4}) {{ negative(%x) }}"}).json()
    assert body["divergences"] == [] and body["notices"] == [] and body["unchecked_ops"] == []


def test_module_without_main_says_so(client: Any) -> None:
    text = f"def @f(%x: {T4}) {{ negative(%x) }}"
    body = client.post("/plan", json={"module": text}).json()
    assert any("no @main" in n for n in body["notices"])


def test_unchecked_operators_are_listed(client: Any) -> None:
    from relay.infer.relations import RELATIONS
    from solver.steps.tvm_ops import TVM_019_OPERATORS

    name = min(n for n in TVM_019_OPERATORS - set(RELATIONS) if n.startswith("nn."))
    text = f"def @main(%x: {T4}) {{ exp({name}(%x)) }}"
    response = client.post("/plan", json={"module": text})
    assert response.status_code == 200, response.text
    assert response.json()["unchecked_ops"] == [name]


def test_op_support_in_tvm_mode_is_a_conflict_suggesting_optimize(client: Any) -> None:
    text = "def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(3, 4), float32]) {\n  nn.dense(%x, %w)\n}\n"
    request = {"module": text, "op_support": {"cuda": {"unsupported": ["nn.dense"]}}}
    body = _problem(client.post("/plan", json=request), 422, "planning-conflict")
    assert 'mode: "optimize"' in body["detail"]
    assert [(c["kind"], c["line"]) for c in body["constraints"]] == [("operator support", 2)]
    ok = client.post("/plan", json={**request, "mode": "optimize"})
    assert ok.status_code == 200, ok.text


def test_an_inconsistent_plan_is_a_500_never_a_200(make_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planner bug (here: the rewrite made to forget the copies TVM drops)
    must be caught by the always-on check and answered 500 with a request id."""
    from solver.rewrite import Rewriter

    monkeypatch.setattr(Rewriter, "_divergent_copy", lambda self, value, have, want, where: value)
    text = (DIVERGENCES / "od_of_od.relay").read_text()
    with make_client(pool_kind="thread", pool_size=1) as c:
        response = c.post("/plan", json={"module": text, "virtual_devices": ["cpu", "cuda"]})
    body = _problem(response, 500, "internal-error")
    assert body["request_id"] == response.headers["x-request-id"]


def test_cli_type_error_exits_2_and_no_check_types_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ill.relay"
    path.write_text(ILL_TYPED)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "do not broadcast" in err and ":2:3" in err
    assert main(["plan", str(path), "--no-check-types"]) == 0


def test_cli_unknown_operator_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "typo.relay"
    path.write_text(TYPO)
    assert main(["plan", str(path)]) == 2
    assert "negatve" in capsys.readouterr().err
