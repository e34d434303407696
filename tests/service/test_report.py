"""The placement report: schema, one placement per operator call with
the device the plan gives it, the same `decided_by` as why-answers, a predicted time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import relay
import solver
from relay.ast import Call, Function, Op
from relay.traverse import children
from service.planning import PlanJob, plan_report
from service.report import REPORT_VERSION, load_schema

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")

MODELS = (
    sorted(p.name for p in CORPUS.glob("*.relay") if ".planned." not in p.name) if CORPUS.is_dir() else []
)
FAST = ["mlp.annotated.relay", "resnet18.fused.relay", "lstm.annotated.relay", "squeezenet.bound.relay"]
VALIDATOR = jsonschema.Draft202012Validator(load_schema())


def planned_operator_calls(module: relay.Module) -> list[int]:
    """Node ids of operator calls outside primitive functions (not wrappers), the
    calls of primitive functions included: what the planner places one by one."""
    ids = solver.node_ids(module)
    inside: set[int] = set()
    for n in ids:
        if isinstance(n, Function) and n.is_primitive:
            stack = [n.body, *n.params]
            while stack:
                e = stack.pop()
                if id(e) not in inside:
                    inside.add(id(e))
                    stack.extend(children(e))
    out = []
    for i, n in enumerate(ids):
        if not isinstance(n, Call) or id(n) in inside:
            continue
        is_op = isinstance(n.op, Op) and n.op.name not in ("on_device", "device_copy")
        if is_op or (isinstance(n.op, Function) and n.op.is_primitive):
            out.append(i)
    return out


def check_report(name: str, mode: str, constraints: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    text = (CORPUS / name).read_text()
    _, rep = plan_report(PlanJob(module=text, name=name, mode=mode, constraints=constraints))
    errors = sorted(VALIDATOR.iter_errors(rep), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert rep["report_version"] == REPORT_VERSION and rep["mode"] == mode
    assert "module" not in rep
    # Every operator call exactly once, on the device the planner recorded.
    module = relay.parse_text(text)
    result = solver.plan(
        module, solver.PlanConfig(mode=mode, constraints=constraints), record_constraints=True
    )
    assert result.constraints is not None
    devices = result.constraints.devices
    ops = [p["node"] for p in rep["placements"] if p["kind"] == "operator"]
    assert Counter(ops) == Counter(planned_operator_calls(module))
    for p in rep["placements"]:
        assert p["device"] == devices[p["node"]], p
    # The prediction is always there; in optimize mode it is the optimizer's.
    predicted = rep["prediction"]["predicted_ms"]
    assert predicted is not None and predicted >= 0
    assert predicted > 0  # a call of a primitive (fused) function costs one kernel
    if mode == "optimize":
        assert rep["prediction"]["predicted_ms"] == rep["cost"]["predicted_ms"]
    counts = {d: v["operator_calls"] for d, v in rep["prediction"]["per_device"].items()}
    assert counts == dict(Counter(devices[i] for i in ops))
    assert len(rep["copies"]) == len(rep["summary"]["device_copies"])
    return rep


@needs_corpus
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
@pytest.mark.parametrize("name", FAST)
def test_reports_of_small_models(name: str, mode: str) -> None:
    check_report(name, mode)


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
@pytest.mark.parametrize("name", [m for m in MODELS if m not in FAST])
def test_reports_of_every_corpus_model(name: str, mode: str) -> None:
    check_report(name, mode)


@needs_corpus
def test_decided_by_is_the_why_answers_reason() -> None:
    """Annotation, request pin and default in one plan, each the why-answer's reason."""
    name = "mlp.annotated.relay"
    pin = {"select": {"op": "nn.softmax"}, "device": "cpu"}
    rep = check_report(name, "tvm", (pin,))
    module = relay.parse_text((CORPUS / name).read_text())
    why = [{"node": p["node"]} for p in rep["placements"]]
    result = solver.plan(module, solver.PlanConfig(constraints=(pin,)), why=why)
    reasons = {w.answers[0].node: w.answers[0].reason for w in result.why}
    assert {p["node"]: p["decided_by"] for p in rep["placements"]} == reasons
    assert {"annotation", "request pin"} <= set(reasons.values())


@needs_corpus
def test_copies_name_their_ends_and_bytes() -> None:
    rep = check_report("mlp.annotated.relay", "tvm")
    by_node = {p["node"]: p for p in rep["placements"]}
    assert rep["copies"], "mlp.annotated has a cpu -> cuda copy"
    for c in rep["copies"]:
        assert c["from"] and all(by_node[n]["device"] == c["src"] for n in c["from"])
        assert all(by_node[n]["device"] == c["dst"] for n in c["to"])
        assert c["bytes"] and c["bytes"] > 0
    assert rep["prediction"]["bytes_copied"] == sum(c["bytes"] for c in rep["copies"])


@needs_corpus
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_report_from_a_worker_response_is_the_same_report(mode: str) -> None:
    """The service path (a worker plans with include: ["placements"], the report
    is built from the response body) gives the CLI's report."""
    import dataclasses

    from service.planning import run_plan_safely
    from service.report import report_from_response

    text = (CORPUS / "mlp.annotated.relay").read_text()
    pin = {"select": {"op": "nn.softmax"}, "device": "cpu"}
    job = PlanJob(module=text, mode=mode, constraints=(pin,), why=({"op": "nn.dense"},))
    _, direct = plan_report(job)
    response = run_plan_safely(dataclasses.replace(job, include=("placements",)))["ok"]
    served = report_from_response(response, mode)
    assert VALIDATOR.is_valid(served)
    for rep in (direct, served):
        rep["solver"].pop("time_ms")
        rep.pop("cost", None)  # solver_ms differs
    assert served == direct
    assert len(served["why"]) == 1
