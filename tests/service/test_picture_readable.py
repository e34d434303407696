"""Readable pictures by default: weights and constants fold into their
consumer with their ids kept, runs collapse above 60 operators with counts and
predicted times, copies and pins never collapse, the legend explains every mark."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import relay
import solver
from relay.ast import Call, Op, Var
from service import picture as picture_mod
from service.picture import MAX_NODES, build_picture, render_svg
from service.planning import RelaySource, plan_record

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}title"
needs_dot = pytest.mark.skipif(picture_mod.dot_path() is None, reason="Graphviz dot is not installed")
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found")
DENSE_ON_CPU = {"select": {"op": "nn.dense"}, "device": "cpu"}


def draw(
    name: str, *constraints: dict[str, Any], mode: str = "tvm", **kw: Any
) -> tuple[relay.Module, Any, ET.Element]:
    module = relay.parse_text((CORPUS / name).read_text())
    config = solver.PlanConfig(constraints=constraints, mode=mode)
    pic = build_picture(plan_record(RelaySource(module), config), **kw)
    return module, pic, ET.fromstring(render_svg(pic.dot))


def classes(g: ET.Element) -> list[str]:
    return (g.get("class") or "").split()


def nodes(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if "node" in classes(g) and "legend-entry" not in classes(g)]


def title(g: ET.Element) -> str:
    a = next(g.iter(f"{SVG}a"), None)
    return (a.get(XLINK) or "") if a is not None else ""


def text(g: ET.Element) -> str:
    return " ".join(t.text or "" for t in g.iter(f"{SVG}text"))


def test_default_max_nodes_is_60() -> None:
    assert MAX_NODES == 60


@needs_dot
@needs_corpus
def test_weights_fold_into_their_consumer_with_their_ids() -> None:
    module, pic, root = draw("mobilenet.relay", max_nodes=1000)
    ids = solver.node_ids(module)
    params = {i for i, n in enumerate(ids) if isinstance(n, Var) and n in module.functions[0][1].params}
    drawn = {g.get("id") for g in nodes(root)}
    folded: dict[int, str] = {}
    for g in nodes(root):
        for c in classes(g):
            if c.startswith("fold-"):
                folded[int(c[5:])] = g.get("id") or ""
    # Every weight is folded into exactly one operator; only %data stays a node.
    data = next(i for i in params if ids[i].name == "data")  # type: ignore[attr-defined]
    assert set(folded) == params - {data}
    assert f"n{data}" in drawn and not any(f"n{i}" in drawn for i in folded)
    assert pic.folded == len(folded)
    for i, key in folded.items():
        g = next(g for g in nodes(root) if g.get("id") == key)
        consumer = ids[int(key[1:])]
        assert isinstance(consumer, Call) and any(a is ids[i] for a in consumer.args[1:])
        assert f"%{ids[i].name} #{i}" in title(g)  # type: ignore[attr-defined]
        assert "weight" in text(g)
    # Much smaller than the 228 nodes it used to draw.
    assert len(nodes(root)) < 100


@needs_dot
@needs_corpus
def test_runs_collapse_above_60_with_counts_and_predicted_time() -> None:
    _, pic, root = draw("resnet18.relay")
    collapsed = [g for g in nodes(root) if "collapsed" in classes(g)]
    assert collapsed and pic.collapsed == len(collapsed)
    for g in collapsed:
        count = next(int(c[6:]) for c in classes(g) if c.startswith("count-"))
        assert f"{count} ops on cuda" in text(g)
        assert " ms" in text(g)
    _, small, _ = draw("mlp.annotated.relay")
    assert small.collapsed == 0


@needs_dot
@needs_corpus
def test_copies_and_pins_never_collapse() -> None:
    module, pic, root = draw("mobilenet.relay", DENSE_ON_CPU, mode="optimize")
    dense = next(
        i
        for i, n in enumerate(solver.node_ids(module))
        if isinstance(n, Call) and n.op == relay.op("nn.dense")
    )
    pinned = [g for g in nodes(root) if "pinned" in classes(g)]
    assert [g.get("id") for g in pinned] == [f"n{dense}"]
    assert all("collapsed" not in classes(g) for g in pinned)
    copies = [g for g in root.iter(f"{SVG}g") if "copy" in classes(g)]
    assert copies and pic.copies == len(copies)
    for g in copies:
        assert "copy" in text(g) and "B" in text(g)
        path = next(g.iter(f"{SVG}path"))
        assert path.get("stroke") == "#c0392b"  # red


@needs_dot
@needs_corpus
def test_legend_explains_every_mark() -> None:
    _, _, root = draw("mobilenet.relay", DENSE_ON_CPU, mode="optimize")
    legend = {g.get("id"): text(g) for g in root.iter(f"{SVG}g") if "legend-entry" in classes(g)}
    assert {"legend-cpu", "legend-cuda"} <= set(legend)
    for mark in ("copy", "pinned", "collapsed", "folded", "param", "result"):
        assert f"legend-{mark}" in legend, mark
    assert "bytes" in legend["legend-copy"] and "click to expand" in legend["legend-collapsed"]
    # Every mark in the picture has its entry.
    used = {c for g in nodes(root) for c in classes(g)}
    for mark in ("pinned", "collapsed", "folded", "param", "result"):
        if mark in used:
            assert f"legend-{mark}" in legend


def test_operator_ids_are_priced_on_their_device() -> None:
    """The record prices each operator on its device (a cpu is slower than a cuda here)."""
    module = relay.parse_text(
        '#[version = "0.0.5"]\ndef @main(%x: Tensor[(1024, 1024), float32]) {\n  %0 = exp(%x);\n  negative(%0)\n}\n'
    )
    times = {}
    for device in ("cpu", "cuda"):
        record = plan_record(RelaySource(module), solver.PlanConfig(default_device=device))
        times[device] = {p.node: p.predicted_ms for p in record.placements if p.kind == "operator"}
        assert {p.device for p in record.placements if p.kind == "operator"} == {device}
    ops = [i for i, n in enumerate(solver.node_ids(module)) if isinstance(n, Call) and isinstance(n.op, Op)]
    assert set(times["cpu"]) == set(times["cuda"]) == set(ops)
    assert all(times["cpu"][i] > times["cuda"][i] > 0 for i in ops)  # type: ignore[operator]
