"""The plan diff: matching by data flow, the --fail-on rules and the renderers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import relay
import solver
from service import diff
from service.planning import PlanJob, plan_report

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")

DENSE_ON_CPU = {"select": {"op": "nn.dense"}, "device": "cpu"}
SIGMOID_ON_CPU = {"select": {"op": "sigmoid"}, "device": "cpu"}

# Two functions, a branch, two devices (sigmoid pinned to the cpu by the request).
BASE = """\
#[version = "0.0.5"]
def @f(%a: Tensor[(1024, 1024), float32]) -> Tensor[(1024, 1024), float32] {
  %0 = exp(%a);
  negative(%0)
}
def @main(%x: Tensor[(1024, 1024), float32], %y: Tensor[(1024, 1024), float32], %c: bool) {
  %1 = @f(%x);
  %2 = tanh(%y);
  %3 = sigmoid(%1);
  %4 = add(%3, %2);
  if (%c) {
    nn.relu(%4)
  } else {
    abs(%4)
  }
}
"""

# An operator inserted in the earlier function: every id of @main shifts.
INSERTED_IN_F = BASE.replace(
    "  %0 = exp(%a);\n  negative(%0)", "  %0 = exp(%a);\n  %9 = sqrt(%0);\n  negative(%9)"
)
# An operator inserted in a branch.
INSERTED_IN_BRANCH = BASE.replace("    nn.relu(%4)", "    %8 = nn.relu(%4);\n    erf(%8)")
# Independent bindings reordered (the same data flow), lines added above, a variable renamed.
REORDERED = BASE.replace(
    "  %1 = @f(%x);\n  %2 = tanh(%y);\n  %3 = sigmoid(%1);\n  %4 = add(%3, %2);",
    "  %1 = tanh(%y);\n  %2 = @f(%x);\n  %3 = sigmoid(%2);\n  %4 = add(%3, %1);",
)
RENAMED = BASE.replace("%x", "%input").replace('#[version = "0.0.5"]\n', '#[version = "0.0.5"]\n\n\n')


def report(text: str, *constraints: dict[str, Any], mode: str = "tvm") -> dict[str, Any]:
    _, rep = plan_report(PlanJob(module=text, constraints=tuple(constraints), mode=mode))
    return rep


def moved_names(d: dict[str, Any]) -> list[str]:
    return [m["after"]["name"] for m in d["moved"]]


def test_self_diff_is_empty() -> None:
    rep = report(BASE, SIGMOID_ON_CPU)
    d = diff.diff_reports(rep, rep)
    assert not d["changed"]
    assert d["moved"] == d["added"] == d["removed"] == d["copies_added"] == d["copies_removed"] == []
    assert d["matched"] == len(rep["placements"])
    assert d["predicted_ms"]["delta"] == 0


@pytest.mark.parametrize(
    ("edited", "inserted"),
    [(INSERTED_IN_F, ["sqrt"]), (INSERTED_IN_BRANCH, ["erf"]), (REORDERED, []), (RENAMED, [])],
    ids=["operator-in-earlier-function", "operator-in-branch", "reordered-bindings", "renamed-and-shifted"],
)
def test_edits_that_shift_ids_move_nothing(edited: str, inserted: list[str]) -> None:
    before, after = report(BASE, SIGMOID_ON_CPU), report(edited, SIGMOID_ON_CPU)
    ids_before = {p["name"]: p["node"] for p in before["placements"]}
    ids_after = {p["name"]: p["node"] for p in after["placements"]}
    if edited is not RENAMED:
        assert ids_before["add"] != ids_after["add"] or edited is REORDERED or inserted == ["erf"]
    d = diff.diff_reports(before, after)
    assert d["moved"] == []
    assert d["removed"] == []
    assert [p["name"] for p in d["added"]] == inserted
    assert d["copies_added"] == d["copies_removed"] == []
    assert d["matched"] == len(before["placements"])


def test_every_node_of_an_edit_keeps_its_partner() -> None:
    """Matched pairs are the same computation: same function, operator, device."""
    before, after = report(BASE, SIGMOID_ON_CPU), report(INSERTED_IN_F, SIGMOID_ON_CPU)
    m = diff.match(before["placements"], after["placements"])
    a = {p["node"]: p for p in before["placements"]}
    b = {p["node"]: p for p in after["placements"]}
    for x, y in m.forward.items():
        assert (a[x]["function"], a[x]["kind"], a[x]["device"]) == (
            b[y]["function"],
            b[y]["kind"],
            b[y]["device"],
        )
        if a[x]["kind"] != "parameter":
            assert a[x]["name"] == b[y]["name"]
        assert a[x]["line"] <= b[y]["line"]  # the insertion only pushes lines down


@needs_corpus
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_one_extra_pin_shows_exactly_what_moved_and_the_copies(mode: str) -> None:
    text = (CORPUS / "mobilenet.relay").read_text()
    before, after = report(text, mode=mode), report(text, DENSE_ON_CPU, mode=mode)
    # The expected moves from the planner's own record (same module: same node ids).
    module = relay.parse_text(text)
    devices = []
    for constraints in ((), (DENSE_ON_CPU,)):
        config = solver.PlanConfig(constraints=constraints, mode=mode)
        result = solver.plan(module, config, record_constraints=True)
        assert result.constraints is not None
        devices.append(result.constraints.devices)
        if constraints:
            expected_copies = len(result.copies)
    placed = {p["node"] for p in before["placements"]}
    expected = {i for i in placed if devices[0].get(i) != devices[1].get(i)}
    d = diff.diff_reports(before, after)
    assert {m["before"]["node"] for m in d["moved"]} == expected
    assert all(m["before"]["node"] == m["after"]["node"] for m in d["moved"])
    assert "nn.dense" in moved_names(d)
    assert all(m["after"]["device"] == "cpu" for m in d["moved"])
    assert d["added"] == d["removed"] == d["copies_removed"] == []
    assert len(d["copies_added"]) == expected_copies == len(after["copies"]) > 0
    assert all(c["bytes"] and c["bytes"] > 0 for c in d["copies_added"])


# ---------------------------------------------------------------------------
# --fail-on


@pytest.fixture(scope="module")
def cases() -> dict[str, dict[str, Any]]:
    """Diffs built for each rule: `self` (nothing), `pin` (sigmoid moved to the
    cpu: a move, a copy, a slower prediction), `insert` (an operator added, no
    move, no copy)."""
    base = report(BASE)
    pinned = report(BASE, SIGMOID_ON_CPU)
    inserted = report(INSERTED_IN_F)
    return {
        "self": diff.diff_reports(base, base),
        "pin": diff.diff_reports(base, pinned),
        "insert": diff.diff_reports(base, inserted),
    }


@pytest.mark.parametrize(
    ("rule", "fires_on"),
    [
        ("copies-added", {"pin"}),
        ("moved-to:cpu", {"pin"}),
        ("moved-to:cuda:0", set()),  # cuda:0 is cuda: nothing moved there
        ("predicted-regression:5%", {"pin", "insert"}),
        ("any-change", {"pin", "insert"}),
    ],
)
def test_each_rule_fires_on_its_case_only(
    cases: dict[str, dict[str, Any]], rule: str, fires_on: set[str]
) -> None:
    (parsed,) = diff.parse_rules([rule])
    fired = {name for name, d in cases.items() if diff.check_rules(d, [parsed])[0].hit}
    assert fired == fires_on


def test_predicted_regression_threshold(cases: dict[str, dict[str, Any]]) -> None:
    pm = cases["pin"]["predicted_ms"]
    assert pm["after"] > pm["before"]
    percent = (pm["after"] / pm["before"] - 1) * 100
    below, above = diff.parse_rules(
        [f"predicted-regression:{percent * 0.9:.4f}%", f"predicted-regression:{percent * 1.1:.4f}"]
    )
    hits = [r.hit for r in diff.check_rules(cases["pin"], [below, above])]
    assert hits == [True, False]


@pytest.mark.parametrize("bad", ["copies-removed", "moved-to:", "predicted-regression:lots", "any-change:x"])
def test_unknown_rules_are_usage_errors(bad: str) -> None:
    with pytest.raises(diff.RuleError, match="unknown rule"):
        diff.parse_rules([bad])


def test_junit_has_one_case_per_rule(cases: dict[str, dict[str, Any]]) -> None:
    rules = diff.parse_rules(
        ["copies-added,moved-to:cpu", "predicted-regression:5%", "any-change", "moved-to:cuda"]
    )
    results = diff.check_rules(cases["pin"], rules)
    root = ET.fromstring(diff.render_junit(cases["pin"], results))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    tests = suite.findall("testcase")
    assert [t.get("name") for t in tests] == [r.text for r in rules]
    failed = [t.get("name") for t in tests if t.find("failure") is not None]
    assert failed == ["copies-added", "moved-to:cpu", "predicted-regression:5%", "any-change"]
    assert suite.get("tests") == "5" and suite.get("failures") == "4"


def test_renderers(cases: dict[str, dict[str, Any]]) -> None:
    d = cases["pin"]
    results = diff.check_rules(d, diff.parse_rules(["copies-added"]))
    text = diff.render_text(d, results)
    assert "moved   sigmoid" in text and "copy added" in text and "FAIL copies-added" in text
    md = diff.render_markdown(d, results)
    assert md.startswith("### Placement diff: **regression**")
    assert "| moved | sigmoid" in md and "| copy |" in md
    data = json.loads(diff.render_json(d, results))
    assert data["failed"] is True and data["rules"][0]["rule"] == "copies-added"
    assert diff.render_text(cases["self"]).startswith("no placement changed")


@needs_corpus
@pytest.mark.parametrize("name", ["resnet18.relay", "inception_v3.relay"])
def test_an_operator_inserted_mid_model_is_the_only_change(name: str) -> None:
    """A `negative` inserted before the middle operator of a real model (every
    later id and line shifts): it is the one addition, nothing moved or removed."""
    import dataclasses

    from relay.ast import Call, Function, Op
    from relay.traverse import rewrite

    module = relay.parse_text((CORPUS / name).read_text())
    ops = [n for n in solver.node_ids(module) if isinstance(n, Call) and isinstance(n.op, Op)]
    target = ops[len(ops) // 2]

    def visit(original: Any, rebuilt: Any) -> Any:
        if original is target:
            return dataclasses.replace(
                rebuilt, args=(Call(relay.op("negative"), (rebuilt.args[0],)), *rebuilt.args[1:])
            )
        return rebuilt

    gv, main = module.functions[0]
    assert isinstance(main, Function)
    edited = dataclasses.replace(module, functions=((gv, rewrite(main, visit)),))
    text = relay.print_text(edited)
    before = report((CORPUS / name).read_text(), DENSE_ON_CPU)
    after = report(text, DENSE_ON_CPU)
    d = diff.diff_reports(before, after)
    assert [p["name"] for p in d["added"]] == ["negative"]
    assert d["moved"] == d["removed"] == d["copies_added"] == d["copies_removed"] == []
    assert d["matched"] == len(before["placements"])
