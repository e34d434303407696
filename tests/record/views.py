"""Every view of one plan, read back and compared: the `/plan`
summary, `--explain`, the report, the diff against a plan without copies, the
picture's DOT. Each reader parses a view's own output; `check_views` says
that they all give the same copies at the same locations between the same
placements, and the same placements on the same devices."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from service import diff
from service.planning import PlanJob, PlanOutcome, plan_report
from service.record import copy_ends, placement_head
from service.report import load_schema
from service.units import bytes_text
from tests.explain_table import device_rows

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
RELAX = CORPUS / "relax"
NO_COLLAPSE = {"max_nodes": 1_000_000}

_COPY_EDGE = re.compile(r'^\s*"(?P<a>[^"]+)" -> "(?P<b>[^"]+)" \[id="copy(?P<k>\d+)", class="copy".*label=" copy (?P<bytes>[^"]*)"\];$')
_NODE = re.compile(r'^\s*"(?P<key>[nr]\d+)" \[id="(?P=key)", class="(?P<classes>[^"]*)"')
_LABEL = re.compile(r'label="(?P<label>(?:[^"\\]|\\.)*)"')
_LEGEND = re.compile(r'\[id="legend-(?P<name>[^"]+)", class="legend-entry legend-device dev-(?P<index>\d+)"')


def schema_errors(report: dict[str, Any]) -> list[str]:
    """The report's JSON Schema violations (empty when it validates)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(load_schema())
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(report)]


def plan_views(job: PlanJob) -> tuple[PlanOutcome, dict[str, Any]]:
    """One plan with every view: explanation, picture (nothing collapsed) and report."""
    import dataclasses

    return plan_report(dataclasses.replace(job, explain=True, picture=dict(NO_COLLAPSE)))


def picture_copies(dot: str) -> list[tuple[str, str, int, str]]:
    """(from key, to key, copy index, bytes label) of each copy edge of a picture's DOT."""
    out = []
    for line in dot.splitlines():
        found = _COPY_EDGE.match(line)
        if found:
            out.append((found["a"], found["b"], int(found["k"]), found["bytes"]))
    return sorted(out, key=lambda e: e[2])


def picture_devices(dot: str) -> dict[int, str]:
    """node id -> device name of each placement drawn on its own (legend colors read back)."""
    legend = {m["index"]: m["name"] for m in _LEGEND.finditer(dot)}
    out: dict[int, str] = {}
    for line in dot.splitlines():
        found = _NODE.match(line)
        if found is None or not found["key"].startswith("n"):
            continue
        classes = found["classes"].split()
        if "collapsed" in classes:
            continue
        dev = next(c[4:] for c in classes if c.startswith("dev-"))
        out[int(found["key"][1:])] = legend[dev]
    return out


def panel_rows(report: dict[str, Any]) -> list[list[str]]:
    """The rows /explore's copies panel should show for a plan, from its report:
    where, devices, and the consumers the report's `to` names (or the result)."""
    by_node = {p["node"]: p for p in report["placements"]}
    rows = []
    for c in report["copies"]:
        ends = []
        for n in c["to"]:
            p = by_node[n]
            where = f" {p['line']}:{p['column']}" if p["line"] is not None else f" #{n}"
            ends.append(placement_head(p) + where)
        if not ends and c["into_result"]:
            ends.append(f"result of {c['into_result']}")
        at = f"{c['line']}:{c['column']}" if c["line"] is not None else "?"
        rows.append([at, f"{c['src']} \u2192 {c['dst']}", ", ".join(ends) or "?"])
    return rows


def _drawn_placements(dot: str) -> list[tuple[int, str]]:
    """(node id, DOT line) of each placement drawn on its own (not in a collapsed run)."""
    out = []
    for line in dot.splitlines():
        found = _NODE.match(line)
        if found is not None and found["key"].startswith("n") and "collapsed" not in found["classes"].split():
            out.append((int(found["key"][1:]), line))
    return out


def picture_labels(dot: str) -> dict[int, str]:
    """node id -> the first line of the label of each placement drawn on its own."""
    out: dict[int, str] = {}
    for node, line in _drawn_placements(dot):
        label = _LABEL.search(line)
        assert label is not None, line
        first = label["label"].split("\\n", 1)[0]
        out[node] = first.replace('\\"', '"').replace("\\\\", "\\")
    return out


def ms_text(ms: float) -> str:
    """A time as the picture writes it."""
    return f"{ms:.3f} ms" if ms < 10 else f"{ms:.1f} ms"


_TIP = re.compile(r'tooltip="(?P<tip>(?:[^"\\]|\\.)*)"')


def picture_tips(dot: str) -> dict[int, str]:
    """node id -> the tooltip of each placement drawn on its own."""
    return {node: tip["tip"] for node, line in _drawn_placements(dot) if (tip := _TIP.search(line))}


def picture_copy_tips(dot: str) -> dict[int, str]:
    """copy index -> the tooltip of its edge."""
    out: dict[int, str] = {}
    for line in dot.splitlines():
        found = _COPY_EDGE.match(line)
        tip = _TIP.search(line) if found else None
        if found and tip:
            out[int(found["k"])] = tip["tip"]
    return out


def explained_copies(lines: list[str], word: str) -> list[str]:
    """The copy lines of `--explain` (`device_copy at 4:8: cpu -> cuda (...)`;
    `R.to_vdevice: ...` without a location, from TVM JSON)."""
    return [line for line in lines if line.startswith((f"{word} at ", f"{word}: "))]


def check_views(outcome: PlanOutcome, report: dict[str, Any], before: dict[str, Any] | None) -> None:
    """All views of one plan agree (module docstring). `before`: the report of
    a plan of the same module without copies, for the diff (None: no diff)."""
    assert not schema_errors(report), schema_errors(report)[:5]
    copies = report["copies"]
    by_node = {p["node"]: p for p in report["placements"]}
    # The planned module itself (Relay text): one device_copy per copy.
    if outcome.format == "text" and not any(p.get("binding") for p in report["placements"]):
        assert outcome.module.count("device_copy(") == len(copies)
    # The response summary (what /explore's copies panel lists) and the report: the same
    # copies at the same places into the same consumers, named and located as the report's.
    summary = outcome.summary["device_copies"]
    assert [(c["line"], c["column"], c["src"], c["dst"]) for c in summary] == [
        (c["line"], c["column"], c["src"], c["dst"]) for c in copies
    ]
    for mine, c in zip(summary, copies):
        assert [t["node"] for t in mine["to"]] == c["to"] and mine["into_result"] == c["into_result"]
        for t in mine["to"]:
            p = by_node[t["node"]]
            assert (t["name"], t["binding"], t["line"], t["column"]) == (p["name"], p["binding"], p["line"], p["column"])
    # --explain: one line per copy, at the same place, naming the same placements.
    word = "R.to_vdevice" if any(p.get("binding") for p in report["placements"]) else "device_copy"
    assert outcome.explanation is not None
    lines = explained_copies(outcome.explanation, word)
    expected = []
    for c in copies:
        where = f" at {c['line']}:{c['column']}" if c["line"] is not None else ""
        cost = bytes_text(c["bytes"]) + (f", {c['predicted_ms']:.3f} ms" if c["predicted_ms"] is not None else "")
        expected.append(f"{word}{where}: {c['src']} -> {c['dst']} ({copy_ends(c, by_node)}): {cost}")
    assert lines == expected
    # Times: every operator priced; the report's per-device sums and --explain's line are the placements'.
    operators = [p for p in report["placements"] if p["kind"] == "operator"]
    assert all(p["predicted_ms"] is not None for p in operators), [p for p in operators if p["predicted_ms"] is None][:3]
    assert all(p["predicted_ms"] is None for p in report["placements"] if p["kind"] != "operator")
    for device, entry in report["prediction"]["per_device"].items():
        mine = [p["predicted_ms"] for p in operators if p["device"] == device]
        assert entry["operator_calls"] == len(mine) and entry["kernel_ms"] == pytest.approx(sum(mine), abs=1e-6)
    # --explain's per-device table: the cost model's figures (optimize: `cost.per_device`, TVM mode: the
    # record's, each copy on the device it copies into); kernels + copies = a row's total, the rows add up.
    table = device_rows(outcome.explanation)
    totals = table.pop("total")
    for device, entry in report["prediction"]["per_device"].items():
        assert float(table[device]["kernels ms"]) == pytest.approx(entry["kernel_ms"], abs=2e-3), (device, table)
    for device, row in table.items():
        share = float(row["kernels ms"]) + float(row["copies ms"]) - float(row.get("hidden ms", 0.0))
        assert share == pytest.approx(float(row["total ms"]), abs=2e-3)
    assert sum(float(row["total ms"]) for row in table.values()) == pytest.approx(
        float(totals["total ms"]), abs=1e-3 * len(table)
    )
    if outcome.cost is not None:
        assert totals["total ms"] == f"{outcome.cost['predicted_ms']:.3f}"
        for device, d in outcome.cost["per_device"].items():
            assert table[device]["total ms"] == f"{d['predicted_ms'] - d['overlap_hidden_ms']:.3f}", (device, table)
            assert table[device]["copies ms"] == f"{d['copy_ms']:.3f}", (device, table)
    else:
        total = sum(p["predicted_ms"] for p in operators) + sum(c["predicted_ms"] or 0 for c in copies)
        assert totals["total ms"] == f"{total:.3f}", (totals, total)
    # Every copy has a producer, and its location is the producer's (where the text has one).
    for c in copies:
        assert c["from"], c
        sources = [by_node[n] for n in c["from"]]
        assert all(p["device"] == c["src"] for p in sources), c
        assert all(by_node[n]["device"] == c["dst"] for n in c["to"]), c
        # At the producer: the source placement itself, or a value made from it that is
        # no placement (a tuple projection `%states.0`), never another placement's place.
        at = (c["line"], c["column"])
        if len(sources) == 1 and sources[0]["line"] is not None and at != (sources[0]["line"], sources[0]["column"]):
            assert all((p["line"], p["column"]) != at for p in report["placements"]), (c, sources[0])
    # The picture: one red edge per copy, between the copy's own ends, with its bytes.
    assert outcome.picture is not None
    dot = outcome.picture["dot"]
    edges = picture_copies(dot)
    assert [k for _, _, k, _ in edges] == list(range(len(copies)))
    tips = picture_copy_tips(dot)
    for a, b, k, label in edges:
        c = copies[k]
        if c["predicted_ms"] is not None:
            assert tips[k].endswith(f", {ms_text(c['predicted_ms'])}"), (tips[k], c)
        assert int(a[1:]) in c["from"], (a, c)
        assert (
            (b.startswith("n") and int(b[1:]) in c["to"])
            or (b.startswith("r") and c["into_result"])
            or (b == f"u{k}" and not c["to"] and not c["into_result"])  # into a reference
        ), (b, c)
        assert label == bytes_text(c["bytes"])
    # The picture's devices and names are the report's (Relax: `lv41 = R.matmul`, `lv3 = cls.f`).
    drawn = picture_devices(dot)
    for node, device in drawn.items():
        if node in by_node:
            assert by_node[node]["device"] == device, (node, device)
    labels = picture_labels(dot)
    assert all(node in labels for node in drawn if node in by_node)
    for node, label in labels.items():
        if node in by_node:
            assert label == placement_head(by_node[node]), (label, by_node[node])
    # An operator's tooltip gives its time: the record's.
    for node, tip in picture_tips(dot).items():
        p = by_node.get(node)
        if p is not None and p["kind"] == "operator":
            own = tip.split("; folded: ")[0]
            assert own.endswith(f" on {p['device']}, {ms_text(p['predicted_ms'])}"), (tip, p)
    # The diff: against itself nothing; against a plan without copies, exactly these copies added.
    same = diff.diff_reports(report, report)
    assert not same["changed"] and same["matched"] == len(report["placements"])
    if before is not None:
        assert not before["copies"]
        delta = diff.diff_reports(before, report)
        assert not delta["copies_removed"]
        keys = ("src", "dst", "bytes", "line", "column", "from", "to", "into_result")
        assert Counter(tuple(map(str, (c[k] for k in keys))) for c in delta["copies_added"]) == Counter(
            tuple(map(str, (c[k] for k in keys))) for c in copies
        )
        for c in delta["copies_added"]:
            assert c["ends"] == copy_ends(c, by_node)


def written_copies(job: PlanJob) -> tuple[int, int]:
    """The copies a Relax plan's output has: (the `R.to_vdevice` bindings the
    plan adds, `RelaxPlan.copies`; the input's own, which the output keeps),
    planned along the request path's own steps."""
    from service.planning import build_config, plan_record, read_source
    from service.relax_planning import RelaxSource, write_plan

    source = read_source(job)
    assert isinstance(source, RelaxSource)
    record = plan_record(source, source.configure(build_config(job)))
    kept = sum(1 for b in source.translation.bindings.values() if b.kind == "copy")
    return write_plan(source.translation, record.result).copies, kept
