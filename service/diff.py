"""Compare two plans: which placements moved, were added or removed,
which copies appeared or went, and how the predicted time changed; plus the
`--fail-on` rules a CI job gates on and the text/json/markdown/JUnit renderings.

Both sides are placement reports (`service.report`). Nodes are matched by what
they compute, never by node ids or line numbers:

1. *Identity.* A placement is identified by its global function, its kind
   (operator call, call of a function, parameter), its operator (or callee) and
   its position in the data flow: the identities of its inputs, in argument
   order. A parameter's identity is its function and position in the parameter
   list, so renaming a variable (parameter or let-bound) changes nothing.
   Operator attributes are not part of the identity: a conv whose strides
   changed is the same node. Two placements with the same identity on the same
   side are told apart by their Relax binding (`lv41`) where both have one, then
   by the identities of their consumers, then by their order of evaluation.
2. *Exact pass.* Placements whose whole upstream cone is identical match.
   Reordering independent bindings, adding lines above, or an edit in another
   function or branch that shifts node ids moves nothing.
3. *Propagation.* An unmatched placement matches an unmatched one on the other
   side with the same function, kind and operator whose inputs lead to the same
   matched placements, looking through unmatched ones: so an operator inserted
   between `a` and `b` is "added" and `b` still matches `b`. Then one pass by
   consumers: an unmatched input of a matched pair matches the unmatched input
   in the same argument position on the other side when function, kind and
   operator agree.

What is left unmatched is "added" (after) or "removed" (before). A matched pair
on different devices "moved". A copy is identified by the matches of the
placements it copies from and into (or the function result it feeds) and its two
devices; copies with no counterpart are "added" or "removed".
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree as ET

import relay
from service.record import copy_ends, placement_label
from service.units import bytes_text

DIFF_VERSION = 2
"""Version 2: a copy's `from`/`to` are node ids, as in reports (1 had display strings, now `ends`)."""
EXIT_RULE_HIT = 6
"""`devplan diff` exits 6 when a --fail-on rule is hit (5 is pytest's "no tests" for .ci/run)."""

FORMATS = ("text", "json", "markdown", "junit")


class RuleError(ValueError):
    """A fail-on rule that is not one of the known forms (a usage error). The
    message names no flag or field: the CLI says `--fail-on`, HTTP `fail_on[i]`
    (`index`: the position of the value holding it)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


# ---------------------------------------------------------------------------
# Matching


Placement = Mapping[str, Any]


def _key(p: Placement) -> tuple[Any, ...]:
    """What must agree for two placements to be the same node (inputs aside)."""
    index = p.get("index") if p["kind"] == "parameter" else None
    return (p["function"], p["kind"], "" if p["kind"] == "parameter" else p["name"], index)


class _Side:
    """One report's placements, their identities and consumers."""

    def __init__(self, placements: Sequence[Placement], intern: dict[tuple[Any, ...], int]) -> None:
        self.by_node: dict[int, Placement] = {p["node"]: p for p in placements}
        self.order = sorted(self.by_node)  # evaluation (post-) order: inputs first
        self.pos = {n: i for i, n in enumerate(self.order)}
        self.consumers: dict[int, list[tuple[int, int]]] = {n: [] for n in self.order}
        for n in self.order:
            for k, src in enumerate(self.by_node[n]["inputs"]):
                if src in self.consumers:
                    self.consumers[src].append((n, k))
        # Deep identity: the key and the identities of the inputs (interned to ints).
        self.sig: dict[int, int] = {}
        for n in self.order:
            p = self.by_node[n]
            ins = tuple(self.sig.get(i, -1) for i in p["inputs"])
            self.sig[n] = intern.setdefault((_key(p), ins), len(intern))
        # Second identity: the deep identity plus the consumers' (to split duplicates).
        self.sig2: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {
            n: (self.sig[n], tuple(sorted((self.sig[c], k) for c, k in self.consumers[n])))
            for n in self.order
        }


MAX_CANDIDATES = 64
"""Free placements with the same function, kind and operator that one placement is compared with
in the propagation step (the first in evaluation order)."""
MAX_ANCHORS = 64
"""Matched placements an unmatched one's inputs lead to that the propagation step compares (the
first in depth-first order); both bounds keep matching near-linear in the placements."""


def _anchors(
    side: _Side, root: int, matched: Mapping[int, int], to_before: bool, cache: dict[int, tuple[int, ...]]
) -> tuple[int, ...]:
    """The matched placements `root`'s inputs lead to, looking through unmatched ones, in
    depth-first order without repeats (the first MAX_ANCHORS), as before-side ids when
    `to_before`. Built from the inputs' own answers (memoized in `cache`; `_forget` drops the
    ones a new pair changes), with an explicit stack; an input met again on the current path
    (a cycle in a hand-written report) leads nowhere."""
    found = cache.get(root)
    if found is not None:
        return found
    by_node = side.by_node
    stack: list[list[int]] = [[root, 0]]
    on_path = {root}
    while stack:
        frame = stack[-1]
        node, k = frame
        inputs = by_node[node]["inputs"]
        while k < len(inputs):
            i = inputs[k]
            k += 1
            if i in by_node and i not in matched and i not in cache and i not in on_path:
                frame[1] = k
                stack.append([i, 0])
                on_path.add(i)
                break
        else:
            stack.pop()
            on_path.discard(node)
            out: list[int] = []
            seen: set[int] = set()
            for i in inputs:
                if i not in by_node:
                    continue
                items = ((matched[i] if to_before else i),) if i in matched else cache.get(i, ())
                for item in items:
                    if item not in seen:
                        seen.add(item)
                        out.append(item)
                if len(out) >= MAX_ANCHORS:
                    break
            cache[node] = tuple(out[:MAX_ANCHORS])
    return cache[root]


def _forget(side: _Side, node: int, cache: dict[int, tuple[int, ...]]) -> None:
    """Drop the memoized anchors downstream of `node`, which was just matched. A node is
    memoized only after its unmatched inputs, so the walk stops where nothing is memoized."""
    stack = [c for c, _ in side.consumers.get(node, ())]
    while stack:
        c = stack.pop()
        if cache.pop(c, None) is not None:
            stack.extend(d for d, _ in side.consumers.get(c, ()))


@dataclass(frozen=True, slots=True)
class Matching:
    """before node id -> after node id (and back) for the matched placements."""

    forward: Mapping[int, int]
    backward: Mapping[int, int]


def match(before: Sequence[Placement], after: Sequence[Placement]) -> Matching:
    """Match the placements of two plans (the rule in this module's docstring)."""
    intern: dict[tuple[Any, ...], int] = {}
    a, b = _Side(before, intern), _Side(after, intern)
    fwd: dict[int, int] = {}
    bwd: dict[int, int] = {}

    def pair(x: int, y: int) -> None:
        fwd[x] = y
        bwd[y] = x

    # 2. Exact pass: same deep identity; split duplicates by binding (Relax),
    # then by consumers, then by order.
    def bound(side: _Side) -> dict[int, Any]:
        return {n: (side.sig2[n], p["binding"]) for n, p in side.by_node.items() if p.get("binding")}

    tables = (
        (bound(a), bound(b)),
        (a.sig2, b.sig2),
        (a.sig, b.sig),
    )
    for table_a, table_b in tables:
        groups_a: dict[Any, list[int]] = {}
        groups_b: dict[Any, list[int]] = {}
        for n in a.order:
            if n not in fwd and n in table_a:
                groups_a.setdefault(table_a[n], []).append(n)
        for n in b.order:
            if n not in bwd and n in table_b:
                groups_b.setdefault(table_b[n], []).append(n)
        for s, xs in groups_a.items():
            for x, y in zip(xs, groups_b.get(s, ())):
                pair(x, y)

    # 3. Propagation: same key, inputs leading to the same matched placements.
    # Anchors are memoized per side and forgotten downstream of each new pair, and a
    # placement looks at most MAX_CANDIDATES free ones with its key: near-linear work.
    cache_a: dict[int, tuple[int, ...]] = {}
    cache_b: dict[int, tuple[int, ...]] = {}
    free_a: dict[tuple[Any, ...], dict[int, None]] = {}
    for n in a.order:
        if n not in fwd:
            free_a.setdefault(_key(a.by_node[n]), {})[n] = None

    def pair_free(x: int, y: int) -> None:
        pair(x, y)
        free_a[_key(a.by_node[x])].pop(x, None)
        _forget(a, x, cache_a)
        _forget(b, y, cache_b)

    for n in b.order:
        if n in bwd:
            continue
        candidates = list(itertools.islice(free_a.get(_key(b.by_node[n]), {}), MAX_CANDIDATES))
        if not candidates:
            continue
        want = _anchors(b, n, bwd, True, cache_b)
        if not want and b.by_node[n]["inputs"]:
            continue
        found = next((x for x in candidates if _anchors(a, x, fwd, False, cache_a) == want), None)
        if found is None and want:
            # Loosest: the most shared anchors, at least one.
            wanted = set(want)
            scored = [
                (len(wanted.intersection(_anchors(a, x, fwd, False, cache_a))), -a.pos[x], x)
                for x in candidates
            ]
            best = max(scored)
            if best[0] > 0 and sum(1 for s in scored if s[0] == best[0]) == 1:
                found = best[2]
        if found is not None:
            pair_free(found, n)

    # 3b. By consumers: unmatched inputs in the same argument position of a matched pair.
    for y in reversed(b.order):
        x_of = bwd.get(y)
        if x_of is None:
            continue
        ins_a = a.by_node[x_of]["inputs"]
        ins_b = b.by_node[y]["inputs"]
        for i, j in zip(ins_a, ins_b):
            if i in fwd or j in bwd or i not in a.by_node or j not in b.by_node:
                continue
            if _key(a.by_node[i]) == _key(b.by_node[j]):
                pair(i, j)
    return Matching(fwd, bwd)


# ---------------------------------------------------------------------------
# The diff


def _ref(p: Placement) -> dict[str, Any]:
    return {
        "node": p["node"],
        "kind": p["kind"],
        "name": p["name"],
        "binding": p.get("binding"),
        "function": p["function"],
        "line": p.get("line"),
        "column": p.get("column"),
        "device": p["device"],
        "decided_by": p.get("decided_by"),
    }


def _copy_key(c: Mapping[str, Any], to_before: Mapping[int, int] | None) -> tuple[Any, ...]:
    def ends(nodes: Iterable[int]) -> tuple[Any, ...]:
        if to_before is None:
            return tuple(sorted(nodes))
        return tuple(sorted(to_before.get(n, -1 - n) for n in nodes))  # unmatched: never equal

    return (ends(c["from"]), ends(c["to"]), c.get("into_result"), c["src"], c["dst"])


def _copy_ref(c: Mapping[str, Any], by_node: Mapping[int, Placement]) -> dict[str, Any]:
    """A copy as its report has it (node ids of its side), with `ends` naming them."""
    return {
        "src": c["src"],
        "dst": c["dst"],
        "bytes": c.get("bytes"),
        "line": c.get("line"),
        "column": c.get("column"),
        "from": list(c["from"]),
        "to": list(c["to"]),
        "into_result": c.get("into_result"),
        "ends": copy_ends(c, by_node),
    }


def _operator_counts(placements: Sequence[Placement]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in placements:
        if p["kind"] == "operator":
            out[p["device"]] = out.get(p["device"], 0) + 1
    return out


def diff_reports(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The diff JSON of two placement reports (before -> after)."""
    pa: Sequence[Placement] = before["placements"]
    pb: Sequence[Placement] = after["placements"]
    m = match(pa, pb)
    a_by = {p["node"]: p for p in pa}
    b_by = {p["node"]: p for p in pb}
    moved = [
        {"before": _ref(a_by[x]), "after": _ref(b_by[y])}
        for x, y in sorted(m.forward.items())
        if a_by[x]["device"] != b_by[y]["device"]
    ]
    added = [_ref(p) for p in pb if p["node"] not in m.backward]
    removed = [_ref(p) for p in pa if p["node"] not in m.forward]
    # Copies: multiset difference by identity.
    keys_a: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for c in before.get("copies", ()):
        keys_a.setdefault(_copy_key(c, None), []).append(c)
    copies_added = []
    for c in after.get("copies", ()):
        same = keys_a.get(_copy_key(c, m.backward))
        if same:
            same.pop()
        else:
            copies_added.append(_copy_ref(c, b_by))
    copies_removed = [_copy_ref(c, a_by) for cs in keys_a.values() for c in cs]
    ms_a = (before.get("prediction") or {}).get("predicted_ms")
    ms_b = (after.get("prediction") or {}).get("predicted_ms")
    delta = ms_b - ms_a if ms_a is not None and ms_b is not None else None
    ratio = (ms_b / ms_a - 1.0) if ms_a and ms_b is not None else None
    counts_a, counts_b = _operator_counts(pa), _operator_counts(pb)
    per_device = {
        d: {
            "before": counts_a.get(d, 0),
            "after": counts_b.get(d, 0),
            "delta": counts_b.get(d, 0) - counts_a.get(d, 0),
        }
        for d in sorted(set(counts_a) | set(counts_b), key=lambda d: (d != "cpu", d))
    }
    changed = bool(moved or added or removed or copies_added or copies_removed)
    return {
        "diff_version": DIFF_VERSION,
        "changed": changed,
        "matched": len(m.forward),
        "moved": moved,
        "added": added,
        "removed": removed,
        "copies_added": copies_added,
        "copies_removed": copies_removed,
        "copies": {
            "before": len(before.get("copies", ())),
            "after": len(after.get("copies", ())),
            "bytes_added": sum(c["bytes"] or 0 for c in copies_added),
            "bytes_removed": sum(c["bytes"] or 0 for c in copies_removed),
        },
        "predicted_ms": {
            "before": ms_a,
            "after": ms_b,
            "delta": delta,
            "change": ratio,
        },
        "per_device": per_device,
    }


@dataclass(frozen=True, slots=True)
class DiffJob:
    """A diff for a planning worker (`service.pool`): both reports, the fail-on rule texts
    (already checked by `parse_rules`), the time limit it runs under and the request id."""

    before: Mapping[str, Any]
    after: Mapping[str, Any]
    rules: tuple[str, ...] = ()
    timeout_ms: int = 10_000
    request_id: str | None = None


def diff_json(job: DiffJob) -> bytes:
    """The diff of a job as the JSON body of POST /plan/diff (`rules` and `failed` with rules)."""
    result = diff_reports(job.before, job.after)
    rules = parse_rules(job.rules)
    if rules:
        checked = check_rules(result, rules)
        result["rules"] = [r.to_json() for r in checked]
        result["failed"] = any(r.hit for r in checked)
    return json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------
# --fail-on rules


@dataclass(frozen=True, slots=True)
class Rule:
    """One --fail-on rule: `copies-added`, `moved-to:DEVICE`,
    `predicted-regression:PERCENT%`, `any-change`."""

    text: str
    kind: str
    device: str | None = None
    percent: float | None = None


_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$")


def parse_rules(texts: Iterable[str]) -> list[Rule]:
    """Rules from fail-on values (each may be a comma-separated list); raises RuleError."""
    out: list[Rule] = []
    for index, text in enumerate(texts):
        for item in (t.strip() for t in text.split(",")):
            if not item:
                continue
            head, sep, arg = item.partition(":")
            if head in ("copies-added", "any-change") and not sep:
                out.append(Rule(item, head))
            elif head == "moved-to" and arg.strip():
                out.append(Rule(item, head, device=relay.canonical_device_name(arg.strip())))
            elif head == "predicted-regression" and _PERCENT.match(arg):
                found = _PERCENT.match(arg)
                assert found is not None
                out.append(Rule(item, head, percent=float(found.group(1))))
            else:
                raise RuleError(
                    f"unknown rule {item!r} (copies-added, moved-to:DEVICE, "
                    "predicted-regression:PERCENT%, any-change)",
                    index,
                )
    return out


@dataclass(frozen=True, slots=True)
class RuleResult:
    rule: Rule
    hit: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule.text, "hit": self.hit, "message": self.message}


def check_rules(diff: Mapping[str, Any], rules: Sequence[Rule]) -> list[RuleResult]:
    """Each rule against a diff: hit or not, and why."""
    out = []
    for r in rules:
        if r.kind == "copies-added":
            n = len(diff["copies_added"])
            nbytes = diff["copies"]["bytes_added"]
            noun = "copy" if n == 1 else "copies"
            out.append(RuleResult(r, n > 0, f"{n} {noun} added ({nbytes} bytes)" if n else "no copy added"))
        elif r.kind == "moved-to":
            assert r.device is not None
            hits = [m for m in diff["moved"] if _is_device(m["after"]["device"], r.device)]
            text = ", ".join(_node_text(m["after"]) for m in hits[:10])
            more = f" and {len(hits) - 10} more" if len(hits) > 10 else ""
            msg = f"{len(hits)} moved to {r.device}: {text}{more}" if hits else f"nothing moved to {r.device}"
            out.append(RuleResult(r, bool(hits), msg))
        elif r.kind == "predicted-regression":
            pm = diff["predicted_ms"]
            assert r.percent is not None
            if pm["before"] is None or pm["after"] is None:
                out.append(RuleResult(r, False, "no predicted time on one side: not checked"))
                continue
            change = (pm["after"] - pm["before"]) / pm["before"] * 100 if pm["before"] else 0.0
            hit = pm["after"] > pm["before"] * (1 + r.percent / 100) and not math.isclose(
                pm["after"], pm["before"] * (1 + r.percent / 100)
            )
            msg = f"predicted {pm['before']:.3f} ms -> {pm['after']:.3f} ms ({change:+.1f}%, limit +{r.percent:g}%)"
            out.append(RuleResult(r, hit, msg))
        else:
            n = sum(len(diff[k]) for k in ("moved", "added", "removed", "copies_added", "copies_removed"))
            out.append(
                RuleResult(r, bool(diff["changed"]), f"{n} changes" if diff["changed"] else "no change")
            )
    return out


def _is_device(name: str, wanted: str) -> bool:
    """Whether the device named `name` in a report is the rule's `wanted`: the
    same name, or `wanted` with details (`cpu (target llvm -mtriple=...)` is a
    `cpu`; a rule naming details matches them exactly)."""
    return name == wanted or ("(" not in wanted and name.partition(" (")[0] == wanted)


# ---------------------------------------------------------------------------
# Renderers


def _node_text(ref: Mapping[str, Any]) -> str:
    where = f" at {ref['line']}:{ref['column']}" if ref.get("line") is not None else ""
    return f"{placement_label(ref)}{where} ({ref['function']})"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f} ms"


def _copy_text(c: Mapping[str, Any]) -> str:
    where = f" at {c['line']}:{c['column']}" if c.get("line") is not None else ""
    return f"{c['src']} -> {c['dst']} {bytes_text(c.get('bytes'))}{where}: {c['ends']}"


def _prediction_line(diff: Mapping[str, Any]) -> str:
    pm = diff["predicted_ms"]
    change = f" ({pm['change'] * 100:+.1f}%)" if pm.get("change") is not None else ""
    return f"predicted time: {_ms(pm['before'])} -> {_ms(pm['after'])}{change}"


def render_text(diff: Mapping[str, Any], results: Sequence[RuleResult] = ()) -> str:
    """A terminal-readable diff."""
    lines = []
    if not diff["changed"]:
        lines.append(f"no placement changed ({diff['matched']} placements matched)")
    for m in diff["moved"]:
        lines.append(f"moved   {_node_text(m['after'])}: {m['before']['device']} -> {m['after']['device']}")
    for p in diff["added"]:
        lines.append(f"added   {_node_text(p)} on {p['device']}")
    for p in diff["removed"]:
        lines.append(f"removed {_node_text(p)} (was on {p['device']})")
    for c in diff["copies_added"]:
        lines.append(f"copy added   {_copy_text(c)}")
    for c in diff["copies_removed"]:
        lines.append(f"copy removed {_copy_text(c)}")
    lines.append(_prediction_line(diff))
    counts = ", ".join(
        f"{d} {v['before']} -> {v['after']}" for d, v in diff["per_device"].items() if v["delta"]
    )
    if counts:
        lines.append(f"operator calls per device: {counts}")
    for r in results:
        lines.append(f"{'FAIL' if r.hit else 'ok  '} {r.rule.text}: {r.message}")
    return "\n".join(lines) + "\n"


def render_json(diff: Mapping[str, Any], results: Sequence[RuleResult] = ()) -> str:
    """The diff JSON (with `rules` when rules were given)."""
    out = dict(diff)
    if results:
        out["rules"] = [r.to_json() for r in results]
        out["failed"] = any(r.hit for r in results)
    return json.dumps(out, indent=2) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(diff: Mapping[str, Any], results: Sequence[RuleResult] = ()) -> str:
    """A CI comment or step summary."""
    failed = any(r.hit for r in results)
    head = "Placement diff: " + (
        "**regression**" if failed else "changed" if diff["changed"] else "no change"
    )
    lines = [f"### {head}", "", f"- {_prediction_line(diff)}"]
    cb, ca = diff["copies"]["before"], diff["copies"]["after"]
    lines.append(f"- copies: {cb} -> {ca}")
    if diff["per_device"]:
        lines.append(
            "- operator calls per device: "
            + ", ".join(f"{d} {v['before']} -> {v['after']}" for d, v in diff["per_device"].items())
        )
    if results:
        lines += ["", "| rule | result | detail |", "| --- | --- | --- |"]
        for r in results:
            lines.append(f"| `{_md(r.rule.text)}` | {'❌ hit' if r.hit else '✅ ok'} | {_md(r.message)} |")
    rows: list[tuple[str, str, str, str]] = []
    for m in diff["moved"]:
        rows.append(("moved", _node_text(m["after"]), m["before"]["device"], m["after"]["device"]))
    for p in diff["added"]:
        rows.append(("added", _node_text(p), "", p["device"]))
    for p in diff["removed"]:
        rows.append(("removed", _node_text(p), p["device"], ""))
    if rows:
        lines += ["", "| change | node | before | after |", "| --- | --- | --- | --- |"]
        lines += [f"| {a} | {_md(b)} | {c} | {d} |" for a, b, c, d in rows[:200]]
        if len(rows) > 200:
            lines.append(f"\n{len(rows) - 200} more rows in the JSON diff")
    copies = [("added", c) for c in diff["copies_added"]] + [("removed", c) for c in diff["copies_removed"]]
    if copies:
        lines += ["", "| copy | devices | bytes | from -> to |", "| --- | --- | --- | --- |"]
        for what, c in copies:
            lines.append(
                f"| {what} | {c['src']} -> {c['dst']} | {bytes_text(c.get('bytes'))} | {_md(c['ends'])} |"
            )
    return "\n".join(lines) + "\n"


def render_junit(diff: Mapping[str, Any], results: Sequence[RuleResult] = ()) -> str:
    """JUnit XML: one test case per rule (a rule that is hit is a failure)."""
    suite = ET.Element(
        "testsuite",
        name="devplan diff",
        tests=str(len(results)),
        failures=str(sum(1 for r in results if r.hit)),
        errors="0",
        skipped="0",
    )
    for r in results:
        case = ET.SubElement(suite, "testcase", classname="devplan.diff", name=r.rule.text)
        if r.hit:
            failure = ET.SubElement(case, "failure", message=r.message, type="placement-regression")
            lines = render_text(diff).splitlines()
            more = [f"... {len(lines) - 60} more lines in the JSON diff"] if len(lines) > 60 else []
            failure.text = "\n".join(lines[:60] + more)
        else:
            out = ET.SubElement(case, "system-out")
            out.text = r.message
    root = ET.Element(
        "testsuites", name="devplan", tests=suite.get("tests", "0"), failures=suite.get("failures", "0")
    )
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown, "junit": render_junit}


def render(diff: Mapping[str, Any], fmt: str, results: Sequence[RuleResult] = ()) -> str:
    """The diff in one of FORMATS."""
    return RENDERERS[fmt](diff, results)
