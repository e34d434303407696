"""The placement picture: SVG structure against the plan, collapsing,
the 503 without Graphviz, the CLI flags, why over HTTP."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import relay
import solver
from relay.ast import Call, Module, Op
from service import picture as picture_mod
from service.examples import CPU_ANNOTATION, PLAIN
from service.picture import build_picture, render_svg
from service.planning import RelaySource, plan_record
from solver.selectors import node_ids

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
CONFIG = solver.PlanConfig(default_device="cuda", host_device="cpu")
SVG = "{http://www.w3.org/2000/svg}"
needs_dot = pytest.mark.skipif(picture_mod.dot_path() is None, reason="Graphviz dot is not installed")
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found")


def _read(name: str) -> Module:
    return relay.parse_text((CORPUS / name).read_text())


def plan_op_counts(module: Module, result: solver.PlanResult) -> Counter[str]:
    """Operator calls per device, from the planner's own record (not the picture)."""
    assert result.constraints is not None
    devices = result.constraints.devices
    out: Counter[str] = Counter()
    for i, n in enumerate(node_ids(module)):
        is_op = isinstance(n, Call) and isinstance(n.op, Op) and n.op.name not in ("on_device", "device_copy")
        if is_op and i in devices:
            out[devices[i]] += 1
    return out


def svg_structure(svg: str) -> tuple[Counter[str], int, int]:
    """(operators per device counting collapsed runs, copy edges, collapsed nodes) read from the SVG."""
    root = ET.fromstring(svg)
    legend: dict[str, str] = {}
    for g in root.iter(f"{SVG}g"):
        classes = (g.get("class") or "").split()
        if "legend-entry" in classes:
            dev = next((c for c in classes if c.startswith("dev-")), None)
            text = g.find(f"{SVG}text")
            if dev is not None and text is not None and text.text:
                legend[dev] = text.text
    ops: Counter[str] = Counter()
    copies = collapsed = 0
    for g in root.iter(f"{SVG}g"):
        classes = (g.get("class") or "").split()
        if "edge" in classes and "copy" in classes:
            copies += 1
        if "node" not in classes or "op" not in classes:
            continue
        dev = next(c for c in classes if c.startswith("dev-"))
        count = next((int(c[6:]) for c in classes if c.startswith("count-")), 1)
        collapsed += "collapsed" in classes
        ops[legend[dev]] += count
    return ops, copies, collapsed


def _picture(module: Module, config: solver.PlanConfig = CONFIG, **kw: Any) -> tuple[solver.PlanResult, str]:
    record = plan_record(RelaySource(module), config)
    pic = build_picture(record, **kw)
    return record.result, render_svg(pic.dot)


@needs_dot
@needs_corpus
@pytest.mark.parametrize(
    "name", ["mlp.annotated.relay", "resnet18.annotated.relay", "lstm.annotated.relay", "mobilenet.anf.relay"]
)
def test_svg_operators_and_copies_match_the_plan(name: str) -> None:
    module = _read(name)
    result, svg = _picture(module)
    ops, copies, _ = svg_structure(svg)
    assert ops == plan_op_counts(module, result)
    assert copies == len(result.copies)


@needs_dot
@needs_corpus
def test_big_graphs_collapse_runs_with_their_counts() -> None:
    module = _read("resnet50.relay")
    result, svg = _picture(module, max_nodes=50)
    ops, copies, collapsed = svg_structure(svg)
    assert collapsed > 10
    assert ops == plan_op_counts(module, result)
    assert copies == 0
    # Expanding a run draws its operators one by one.
    root = ET.fromstring(svg)
    group = next(g for g in root.iter(f"{SVG}g") if "collapsed" in (g.get("class") or "").split())
    title = next(a for a in group.iter(f"{SVG}a")).get("{http://www.w3.org/1999/xlink}title") or ""
    members = [int(x) for x in title.split(":")[1].split(";")[0].split()]
    _, svg2 = _picture(module, max_nodes=50, expand=members)
    ids = {g.get("id") for g in ET.fromstring(svg2).iter(f"{SVG}g")}
    assert {f"n{m}" for m in members} <= ids


@needs_dot
def test_pins_are_outlined_and_copies_carry_bytes() -> None:
    module = relay.parse_text(PLAIN)
    add = next(i for i, n in enumerate(node_ids(module)) if isinstance(n, Call) and n.op == relay.op("add"))
    config = dataclasses.replace(CONFIG, constraints=({"select": {"node": add}, "device": "cpu"},))
    result, svg = _picture(module, config)
    root = ET.fromstring(svg)
    pinned = [g.get("id") for g in root.iter(f"{SVG}g") if "pinned" in (g.get("class") or "").split()]
    assert pinned == [f"n{add}"]
    (copy,) = [g for g in root.iter(f"{SVG}g") if "copy" in (g.get("class") or "").split()]
    labels = [t.text for t in copy.iter(f"{SVG}text")]
    assert any(label and "16 B" in label for label in labels), labels  # 2x2 float32
    assert len(result.copies) == 1


def test_picture_route_without_dot_is_503(make_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("service.picture.shutil.which", lambda name: None)
    with make_client(pool_kind="thread", pool_size=1) as client:
        r = client.post("/plan/picture", json={"module": PLAIN})
    assert r.status_code == 503
    assert r.json()["type"].endswith("/picture-unavailable")


@needs_dot
def test_picture_route_returns_svg(make_client: Any) -> None:
    request = {"module": CPU_ANNOTATION, "virtual_devices": ["cpu", "cuda"]}
    with make_client(pool_kind="thread", pool_size=1) as client:
        r = client.post("/plan/picture", json=request)
        bad = client.post("/plan/picture", json={"module": "def @main( {"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    ops, copies, _ = svg_structure(r.text)
    assert ops == Counter({"cpu": 1, "cuda": 1}) and copies == 1
    assert bad.status_code == 400


def test_why_over_http(make_client: Any) -> None:
    request = {"module": CPU_ANNOTATION, "virtual_devices": ["cpu", "cuda"], "why": [{"at": "3:8"}]}
    with make_client(pool_kind="thread", pool_size=1) as client:
        r = client.post("/plan", json=request)
        as_json = relay.dump_json(relay.parse_text(PLAIN))
        j = client.post("/plan", json={"module": as_json, "why": [{"at": "3:8"}]})
        by_node = client.post("/plan", json={"module": as_json, "why": [{"node": 4}]})
    assert r.status_code == 200, r.text
    (res,) = r.json()["why"]
    (answer,) = res["answers"]
    assert (answer["node"], answer["device"], answer["reason"]) == (5, "cpu", "annotation")
    assert answer["chain"][-1]["line"] == 4
    assert j.status_code == 422 and "text input" in j.json()["detail"]
    assert by_node.status_code == 200
    (answer,) = by_node.json()["why"][0]["answers"]
    assert (answer["expression"], answer["device"], answer["reason"]) == ("add(%x, %y)", "cuda", "default")


def _cli(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "service.cli", "plan", "-", *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120, check=False)


def test_cli_why_text_and_json(tmp_path: Path) -> None:
    flags = ["--virtual-devices", '["cpu", "cuda"]', "--why", '{"at": "3:8"}', "--why", '{"op": "exp"}']
    text = _cli(*flags, stdin=CPU_ANNOTATION)
    assert text.returncode == 0, text.stderr
    assert "device_copy" in text.stdout  # the planned module still goes to stdout
    blocks = text.stderr.strip().split("\n\n")
    assert len(blocks) == 2
    assert re.search(r"node 5 multiply\(%x, %y\) at 3:8: on cpu", blocks[0])
    assert "decided by annotation" in blocks[0] and "decided by default" in blocks[1]
    as_json = _cli(*flags, "--why-format", "json", stdin=CPU_ANNOTATION)
    results = json.loads(as_json.stderr)
    assert [r["answers"][0]["device"] for r in results] == ["cpu", "cuda"]
    bad = _cli("--why", '{"node": -1}', stdin=CPU_ANNOTATION)
    assert bad.returncode == 1 and "--why" in bad.stderr


@needs_dot
def test_cli_picture(tmp_path: Path) -> None:
    out = tmp_path / "plan.svg"
    done = _cli("--virtual-devices", '["cpu", "cuda"]', "--picture", str(out), stdin=CPU_ANNOTATION)
    assert done.returncode == 0, done.stderr
    ops, copies, _ = svg_structure(out.read_text())
    assert ops == Counter({"cpu": 1, "cuda": 1}) and copies == 1


@needs_dot
def test_optimize_mode_picture_matches_the_cost_report() -> None:
    from service.examples import HEAD_PINS, SMALL_CNN

    module = relay.parse_text(SMALL_CNN)
    config = solver.PlanConfig(
        default_device="cuda", host_device="cpu", mode="optimize", constraints=tuple(HEAD_PINS)
    )
    result, svg = _picture(module, config)
    assert result.cost is not None
    ops, copies, _ = svg_structure(svg)
    assert ops == plan_op_counts(module, result)
    report = {name: d.operators for name, d in result.cost.per_device.items() if d.operators}
    assert ops == Counter(report) and set(ops) == {"cpu", "cuda"}
    assert copies == len(result.copies) >= 1
