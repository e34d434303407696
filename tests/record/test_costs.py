"""Costs in the placement record: each operator's predicted kernel
time and each copy's time are priced once, into the record, and the report,
the picture and `--explain` show those numbers. For a Relay plan they add up
to the report's `prediction` in both modes (the optimizer's objective in
optimize mode, the cost model's price of the TVM plan in TVM mode)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import relay
import solver
from service.picture import build_picture
from service.planning import PlanJob, RelaySource, plan_record, plan_report
from tests.explain_table import device_rows
from tests.record.views import CORPUS, ms_text

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")
MODES: tuple[solver.Mode, ...] = ("tvm", "optimize")
_COLLAPSED = re.compile(
    r'\[id="g\d+", class="[^"]*collapsed count-(?P<count>\d+)[^"]*", label="(?P<label>(?:[^"\\]|\\.)*)"'
    r'.*tooltip="click to expand: (?P<ids>[\d ]+)'
)


def _pins(name: str) -> tuple[dict[str, Any], ...]:
    """A pin that makes copies: the first dense or conv2d on the cpu (none for annotated models)."""
    text = (CORPUS / name).read_text()
    op = next((o for o in ("nn.conv2d", "nn.dense") if f"{o}(" in text), None)
    return ({"select": {"op": op, "index": 0}, "device": "cpu"},) if op and ".annotated." not in name else ()


def _check_sums(name: str, mode: str) -> dict[str, Any]:
    job = PlanJob(module=(CORPUS / name).read_text(), name=name, mode=mode, constraints=_pins(name))
    _, report = plan_report(job)
    kernels = [p["predicted_ms"] for p in report["placements"] if p["kind"] == "operator"]
    copies = [c["predicted_ms"] for c in report["copies"]]
    assert None not in kernels and None not in copies
    predicted = report["prediction"]["predicted_ms"]
    assert predicted is not None, report["prediction"]
    # ns_to_ms rounds each entry to the nanosecond: the sum may be off by one per entry.
    assert sum(kernels) + sum(copies) == pytest.approx(predicted, abs=1e-6 * (len(kernels) + len(copies) + 1))
    return report


@needs_corpus
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["mlp.relay", "lstm.relay", "mobilenet.relay"])
def test_the_record_adds_up_to_the_prediction(name: str, mode: str) -> None:
    report = _check_sums(name, mode)
    assert report["copies"] or name == "mlp.relay"


@needs_corpus
@pytest.mark.parametrize("mode", MODES)
def test_the_collapsed_chains_time_is_the_sum_of_the_records_entries(mode: solver.Mode) -> None:
    """resnet50 collapses (over 60 operators): each run's time is its operators' in the record."""
    module = relay.parse_text((CORPUS / "resnet50.relay").read_text())
    config = solver.PlanConfig(mode=mode, constraints=_pins("resnet50.relay"))
    record = plan_record(RelaySource(module), config)
    times = {p.node: p.predicted_ms for p in record.placements}
    runs = [m for m in map(_COLLAPSED.search, build_picture(record).dot.splitlines()) if m]
    assert len(runs) > 10
    for run in runs:
        ids = [int(i) for i in run["ids"].split()]
        assert len(ids) == int(run["count"])
        total = sum(times[i] or 0.0 for i in ids)
        assert all(times[i] is not None for i in ids)
        assert run["label"].split("\\n")[1] == ms_text(total), (run["label"], total)


@needs_corpus
def test_the_picture_prices_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawn from the record alone: with the cost model gone, the times are still the record's."""
    module = relay.parse_text((CORPUS / "mlp.relay").read_text())
    record = plan_record(RelaySource(module), solver.PlanConfig(constraints=_pins("mlp.relay")))

    def gone(*_: Any, **__: Any) -> Any:
        raise AssertionError("the picture priced an operator")

    monkeypatch.setattr(solver, "kernel_costs", gone)
    monkeypatch.setattr(solver, "copy_ns", gone)
    dot = build_picture(record, max_nodes=1_000).dot
    for p in record.placements:
        if p.kind == "operator":
            assert p.predicted_ms is not None and ms_text(p.predicted_ms) in dot


@needs_corpus
@pytest.mark.parametrize("mode", MODES)
def test_the_reports_numbers_are_the_records(mode: solver.Mode) -> None:
    """The report, --explain and the record built on its own give each placement and copy the same time."""
    name = "lstm.relay"
    text = (CORPUS / name).read_text()
    config = solver.PlanConfig(mode=mode, constraints=_pins(name))
    record = plan_record(RelaySource(relay.parse_text(text, name=name)), config)
    outcome, report = plan_report(PlanJob(module=text, name=name, mode=mode, constraints=_pins(name), explain=True))
    assert {p["node"]: p["predicted_ms"] for p in report["placements"]} == {
        p.node: p.predicted_ms for p in record.placements
    }
    assert [c["predicted_ms"] for c in report["copies"]] == [c.predicted_ms for c in record.copies]
    assert record.copies and all(c.predicted_ms for c in record.copies)
    assert outcome.explanation is not None
    copy_lines = [line for line in outcome.explanation if line.startswith("device_copy at ")]
    assert [line.rsplit(", ", 1)[1] for line in copy_lines] == [f"{c.predicted_ms:.3f} ms" for c in record.copies]


def test_a_plan_without_views_is_not_priced() -> None:
    """Plain /plan (no report, picture or --explain) skips pricing; any of them prices once."""
    from service.planning import run_plan

    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  negative(%x)\n}\n'
    module = relay.parse_text(text)
    bare = plan_record(RelaySource(module), solver.PlanConfig(), priced=False)
    assert all(p.predicted_ms is None for p in bare.placements) and bare.device_times() == {}
    priced = plan_record(RelaySource(module), solver.PlanConfig())
    assert [p.predicted_ms is not None for p in priced.placements] == [p.kind == "operator" for p in priced.placements]
    explained = run_plan(PlanJob(module=text, explain=True)).explanation
    assert explained is not None and device_rows(explained)["total"]["total ms"] == f"{sum(ms for _, ms in priced.device_times().values()):.3f}"


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in CORPUS.glob("*.relay") if ".planned." not in p.name and ".annotated." not in p.name)
    if CORPUS.is_dir()
    else [],
)
def test_every_relay_model_adds_up(name: str, mode: str) -> None:
    _check_sums(name, mode)
