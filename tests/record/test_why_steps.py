"""A why chain names each step once: no two steps with the same
kind, message, line, column and node. `mlp.relay` node 12's chain began with
the same `nn.dense` step twice (the operator's rule links the weight to the
result and the result to the data: two edges of one constraint)."""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import Any

import pytest

from service.planning import PlanJob, run_plan
from tests.record.views import CORPUS, RELAX
from tests.solver._corpus import corpus_cases

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")
FAST = ("mlp.relay", "mlp.annotated.relay", "lstm.annotated.relay", "resnet18.fused.relay")


def _repeats(answer: dict[str, Any]) -> list[tuple[Any, ...]]:
    keys = Counter((s["kind"], s["message"], s["line"], s["column"], s["node"]) for s in answer["chain"])
    return [k for k, n in keys.items() if n > 1]


def _first_answers(text: str, name: str, mode: str = "tvm") -> list[dict[str, Any]]:
    """The first why-answer of each kind of selector: the first operator call,
    the first parameter of @main, node 12 where the module has one."""
    outcome = run_plan(PlanJob(module=text, name=name, mode=mode, include=("placements",)))
    assert outcome.placements is not None
    first_op = next(p for p in outcome.placements if p["kind"] == "operator")
    first_param = next(p for p in outcome.placements if p["kind"] == "parameter")
    selectors = [{"node": first_op["node"]}, {"node": first_param["node"]}]
    if any(p["node"] == 12 for p in outcome.placements):
        selectors.append({"node": 12})
    asked = run_plan(PlanJob(module=text, name=name, mode=mode, why=tuple(selectors)))
    assert asked.why is not None
    return [r["answers"][0] for r in asked.why]


@needs_corpus
def test_mlp_node_12_chain_has_no_repeated_step() -> None:
    outcome = run_plan(PlanJob(module=(CORPUS / "mlp.relay").read_text(), why=({"node": 12},)))
    assert outcome.why is not None
    (answer,) = outcome.why[0]["answers"]
    assert not _repeats(answer), answer["chain"]
    # The dense that links the weight is still the first step, once.
    first, second = answer["chain"][:2]
    assert (first["kind"], first["line"], first["column"], first["node"]) == ("operator", 7, 8, 13)
    assert second["node"] != 13


@needs_corpus
@pytest.mark.parametrize("name", FAST)
def test_first_answers_of_small_models_have_no_repeated_step(name: str) -> None:
    for answer in _first_answers((CORPUS / name).read_text(), name):
        assert not _repeats(answer), (name, answer["node"], answer["chain"])


def _models() -> list[str]:
    if not CORPUS.is_dir():
        return []
    top = [p.name for p in CORPUS.glob("*.relay") if ".planned." not in p.name]
    constructs = [f"{case}.relay" for case, _ in corpus_cases("planned") if case.startswith("constructs/")]
    return sorted(n for n in top + constructs if n not in FAST)


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
@pytest.mark.parametrize("name", _models())
def test_first_answers_of_every_corpus_model_have_no_repeated_step(name: str, mode: str) -> None:
    for answer in _first_answers((CORPUS / name).read_text(), name, mode):
        assert not _repeats(answer), (name, answer["node"], answer["chain"])


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="Relax needs apache-tvm")
@pytest.mark.parametrize(
    "name", ["tv_resnet18", "tv_mobilenet_v3_small", "tv_convnext_tiny", "tv_swin_t", "tv_vit_b_16", "hf_bert", "hf_gpt2"]
)
def test_first_answers_of_every_relax_model_have_no_repeated_step(name: str) -> None:
    path = RELAX / f"{name}.json"
    if not path.exists():
        pytest.skip("Relax corpus not found")
    for answer in _first_answers(path.read_text(), path.name):
        assert not _repeats(answer), (name, answer["node"], answer["chain"])
