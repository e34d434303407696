"""One plan, every view, one story: the summary, `--explain`, the
report, the diff, the picture (and so `/explore`, which shows the summary's
copies and the picture) give the same copies at the same locations between
the same placements, for Relay and Relax, in both modes.

The default stage runs a representative few; the `slow` stage every corpus
model, each with a pin on its first heavy operator so that it has copies."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from service.planning import PlanJob
from tests.record.views import CORPUS, RELAX, check_views, picture_labels, plan_views, written_copies
from tests.solver._corpus import corpus_cases

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")
needs_tvm = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="Relax needs apache-tvm")
MODES = ("tvm", "optimize")
DIVERGENCES = Path(__file__).resolve().parents[1] / "data" / "divergences"


def _first_heavy_op(text: str) -> str | None:
    """The first conv2d or dense a Relay model calls (a pin on it makes copies)."""
    for name in ("nn.conv2d", "nn.conv3d", "nn.dense", "nn.conv2d_transpose"):
        if f"{name}(" in text:
            return name
    return None


def _check(text: str, name: str, mode: str, pins: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    job = PlanJob(module=text, name=name, mode=mode, constraints=pins)
    outcome, report = plan_views(job)
    # The diff's "before": everything on the cpu (annotations and pins to the cpu hold), no copy.
    _, before = plan_views(dataclasses.replace(job, mode="tvm", default_device="cpu"))
    check_views(outcome, report, before if not before["copies"] else None)
    if any(p["binding"] for p in report["placements"]):
        # Relax: the copies the output writes, and the input's own where they still
        # cross devices (one the plan made a same-device copy is no copy of the record).
        added, kept = written_copies(job)
        assert added <= len(report["copies"]) <= added + kept
    return report


@needs_corpus
@pytest.mark.parametrize("mode", MODES)
def test_mlp_annotated_copy_is_at_the_dense_in_every_view(mode: str) -> None:
    """The issue's case: the copy is the dense's value at 4:8 (not the annotation at 5:8)."""
    report = _check((CORPUS / "mlp.annotated.relay").read_text(), "mlp.annotated.relay", mode)
    if mode == "tvm":
        (copy,) = report["copies"]
        assert (copy["line"], copy["column"]) == (4, 8)
        (dense,) = [report_p for report_p in report["placements"] if report_p["node"] in copy["from"]]
        assert dense["name"] == "nn.dense" and (dense["line"], dense["column"]) == (4, 8)


@needs_corpus
def test_the_same_module_as_json_has_the_same_copies() -> None:
    """TVM's JSON of the same module: the same copies between the same placements."""
    _, from_text = plan_views(PlanJob(module=(CORPUS / "mlp.annotated.relay").read_text()))
    outcome, from_json = plan_views(PlanJob(module=(CORPUS / "mlp.annotated.json").read_text()))
    check_views(outcome, from_json, None)
    strip = ("line", "column")
    assert [{k: v for k, v in c.items() if k not in strip} for c in from_json["copies"]] == [
        {k: v for k, v in c.items() if k not in strip} for c in from_text["copies"]
    ]


@needs_corpus
def test_a_divergence_is_located_with_its_copy() -> None:
    path = DIVERGENCES / "od_of_od.relay"
    if not path.exists():
        pytest.skip("tests/data/divergences not found")
    outcome, report = plan_views(PlanJob(module=path.read_text(), virtual_devices=("cpu", "cuda")))
    check_views(outcome, report, None)
    ((div_line, div_col),) = [(d["line"], d["column"]) for d in outcome.divergences]
    assert [(c["line"], c["column"]) for c in report["copies"]] == [(div_line, div_col)]


RELAX_HINTS = """@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("cuda", 0)]})

    @R.function
    def main(x: R.Tensor((4, 4), "float32"), y: R.Tensor((4, 4), "float32")) -> R.Tensor((4, 4), "float32"):
        with R.dataflow():
            a = R.hint_on_device(x, R.device(1, 0))
            b = R.add(a, y)
            c = R.exp(b)
            e = R.to_vdevice(c, "cuda:0")
            d = R.multiply(e, e)
            f = R.add(d, e)
            R.output(f)
        return f
"""
RELAX_PIN = {"select": {"op": "R.add", "index": 1}, "device": "cuda"}


@needs_tvm
@pytest.mark.parametrize("mode", MODES)
def test_relax_views_agree_with_tvmscript_lines(mode: str) -> None:
    report = _check(RELAX_HINTS, "hints.py", mode, (RELAX_PIN,))
    # One copy of `c` to cuda, read by the multiply (twice) and the last add: as
    # the written module has it (one R.to_vdevice per value and device).
    lines = RELAX_HINTS.splitlines()
    for p in report["placements"]:
        if p["kind"] == "operator":
            assert p["name"].startswith("R.") and p["binding"]
            assert lines[p["line"] - 1].strip().startswith(f"{p['binding']} = {p['name']}("), p
    if mode == "tvm":  # the optimizer may move the copy earlier
        (copy,) = report["copies"]
        (exp,) = [p for p in report["placements"] if p["node"] in copy["from"]]
        assert exp["name"] == "R.exp" and (copy["line"], copy["column"]) == (exp["line"], exp["column"])
        assert sorted(p["binding"] for p in report["placements"] if p["node"] in copy["to"]) == ["d", "f"]


RELAX_CALLS = """@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("cuda", 0)]})

    @R.function
    def double(a: R.Tensor((4, 4), "float32")) -> R.Tensor((4, 4), "float32"):
        with R.dataflow():
            b = R.add(a, a)
            R.output(b)
        return b

    @R.function
    def main(x: R.Tensor((4, 4), "float32")) -> R.Tensor((4, 4), "float32"):
        cls = Module
        with R.dataflow():
            y = R.exp(x)
            z = cls.double(y)
            w = R.multiply(z, y)
            R.output(w)
        return w
"""


@needs_tvm
@pytest.mark.parametrize("mode", MODES)
def test_relax_call_of_a_function_is_named_as_tvmscript_writes_it(mode: str) -> None:
    """A call of a function is `z = cls.double` in the report, the picture and --explain alike."""
    pin = {"select": {"op": "R.exp", "index": 0}, "device": "cuda"}
    job = PlanJob(module=RELAX_CALLS, name="calls.py", mode=mode, constraints=(pin,))
    outcome, report = plan_views(job)
    check_views(outcome, report, None)
    (call,) = [p for p in report["placements"] if p["kind"] == "call"]
    assert (call["name"], call["binding"]) == ("cls.double", "z")
    assert outcome.picture is not None and "@double\\n" not in outcome.picture["dot"]
    assert picture_labels(outcome.picture["dot"])[call["node"]] == "z = cls.double"


@needs_tvm
@pytest.mark.parametrize("mode", MODES)
def test_relax_json_model_views_agree(mode: str) -> None:
    path = RELAX / "tv_resnet18.json"
    if not path.exists():
        pytest.skip("Relax corpus not found")
    pin = {"select": {"op": "R.nn.conv2d", "index": 0}, "device": "cpu"}
    report = _check(path.read_text(), path.name, mode, (pin,))
    assert report["copies"]
    assert all(p["line"] is None and p["binding"] for p in report["placements"])


# ---------------------------------------------------------------------------
# The slow stage: every corpus model


def _relay_models() -> list[str]:
    if not CORPUS.is_dir():
        return []
    return sorted(p.name for p in CORPUS.glob("*.relay") if ".planned." not in p.name)


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", _relay_models())
def test_every_relay_corpus_model(name: str, mode: str) -> None:
    text = (CORPUS / name).read_text()
    op = _first_heavy_op(text)
    pins = ({"select": {"op": op, "index": 0}, "device": "cpu"},) if op and ".annotated." not in name else ()
    _check(text, name, mode, pins)


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("case", [c for c, _ in corpus_cases("planned") if c.startswith("constructs/")])
def test_every_construct(case: str) -> None:
    path = CORPUS / f"{case}.relay"
    _check(path.read_text(), path.name, "tvm")


RELAX_MODELS = ("tv_resnet18", "tv_mobilenet_v3_small", "tv_convnext_tiny", "tv_swin_t", "tv_vit_b_16", "hf_bert", "hf_gpt2")


@pytest.mark.slow
@needs_tvm
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", RELAX_MODELS)
def test_every_public_relax_model(name: str, mode: str) -> None:
    path = RELAX / f"{name}.json"
    if not path.exists():
        pytest.skip("Relax corpus not found")
    op = "R.nn.conv2d" if name.startswith(("tv_resnet", "tv_mobilenet", "tv_convnext")) else "R.matmul"
    _check(path.read_text(), path.name, mode, ({"select": {"op": op, "index": 0}, "device": "cpu"},))
