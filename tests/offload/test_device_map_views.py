"""The device map in a Relax plan's views: `include: ["placements"]`,
the report (and its schema), `--explain`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from service.planning import PlanJob, plan_report
from service.report import load_schema

pytestmark = pytest.mark.tvm

OFFLOAD = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "relax" / "offload"
needs_corpus = pytest.mark.skipif(not OFFLOAD.is_dir(), reason="corpus not found (../shared/corpus/relax/offload)")

# Bytes of the public model's weight parameters (accelerate's 622,924,032 also
# counts the rotary embedding's buffers, inv_freq and original_inv_freq: 256 bytes).
PARAM_BYTES = 622924032 - 256
MODULES = ["model.embed_tokens", *(f"model.layers.{i}" for i in range(8)), "model.norm", "lm_head"]


@pytest.fixture(scope="module")
def planned() -> tuple[Any, dict[str, Any]]:
    text = (OFFLOAD / "llama_h1024_l8.json").read_text()
    pin = {"select": {"param": "@main:p_model_layers_3_*"}, "device": "cpu"}
    job = PlanJob(text, input_format="json", language="relax", explain=True, constraints=(pin,))
    return plan_report(job)


@needs_corpus
def test_device_map_groups_the_public_model(planned: tuple[Any, dict[str, Any]]) -> None:
    outcome, _ = planned
    groups = {g["module"]: g for g in outcome.device_map}
    assert list(groups) == MODULES
    assert sum(g["parameter_bytes"] for g in groups.values()) == PARAM_BYTES
    assert groups["model.layers.0"]["parameter_bytes"] == 45096960
    # Every operator is counted once, in at most one group.
    operators = [p for p in outcome.placements if p["kind"] == "operator"]
    counted = sum(n for g in groups.values() for n in g["operators"].values())
    assert 0 < counted <= len(operators)


@needs_corpus
def test_pinned_layer_reads_its_weights_on_the_cpu(planned: tuple[Any, dict[str, Any]]) -> None:
    outcome, _ = planned
    groups = {g["module"]: g for g in outcome.device_map}
    by_node = {p["node"]: p for p in outcome.placements}
    layer3 = {p["node"] for p in outcome.placements
              if p["kind"] == "parameter" and p["name"].startswith("p_model_layers_3_")}
    readers = [p for p in outcome.placements if p["kind"] == "operator" and layer3 & set(p["inputs"])]
    assert len(readers) == 9  # seven linear layers and two norm weights
    assert all(p["device"] == "cpu" for p in readers)
    assert all(by_node[n]["device"] == "cpu" for n in layer3)
    assert groups["model.layers.3"]["operators"]["cpu"] >= len(readers)


@needs_corpus
def test_report_carries_the_device_map_and_validates(planned: tuple[Any, dict[str, Any]]) -> None:
    outcome, report = planned
    jsonschema.Draft202012Validator(load_schema()).validate(report)
    assert report["device_map"] == outcome.device_map
    assert json.loads(json.dumps(report["device_map"])) == outcome.device_map


@needs_corpus
def test_explain_prints_the_device_map_table(planned: tuple[Any, dict[str, Any]]) -> None:
    outcome, _ = planned
    lines = outcome.explanation
    start = lines.index("device map (module names: inferred):")
    table = lines[start + 1 : start + 2 + len(MODULES)]
    assert table[0].split()[:2] == ["module", "device"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert list(rows) == MODULES
    assert rows["lm_head"][-1] == "131.1"  # parameter MB
    assert rows["model.layers.3"][1] in ("cpu", "split")
