"""Relax through every CLI view: `--report`, `--why` on an `R.`
operator, `--picture` and `devplan diff` of two plans (before and after a
pin), conflicts in Relax terms, a diff matched by binding, and a planning
user's stderr without TVM's CUDA warnings. The seven public models run in
the slow stage (TVMScript: their placements carry lines); the default stage
runs a small module and tv_resnet18's JSON."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.diff import EXIT_RULE_HIT
from service.planning import PlanFailure, PlanJob, run_plan
from tests.record.views import RELAX, schema_errors

pytestmark = pytest.mark.tvm
pytest.importorskip("tvm")

DEVICES = '    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("cuda", 0)]})\n'
SMALL = (
    "@I.ir_module\nclass Module:\n"
    + DEVICES
    + """
    @R.function
    def main(x: R.Tensor((8, 8), "float32"), w: R.Tensor((8, 8), "float32")) -> R.Tensor((8, 8), "float32"):
        with R.dataflow():
            lv = R.matmul(x, w)
            lv1 = R.exp(lv)
            lv2 = R.add(lv1, x)
            R.output(lv2)
        return lv2
"""
)
PUBLIC = ("tv_resnet18", "tv_mobilenet_v3_small", "tv_convnext_tiny", "tv_swin_t", "tv_vit_b_16", "hf_bert", "hf_gpt2")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _first_op(report: dict[str, Any]) -> str:
    return next(p["name"] for p in report["placements"] if p["kind"] == "operator" and p["name"] != "R.reshape")


def check_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path, module: Path, text_input: bool) -> None:
    """--report, --why, --picture and diff (before/after a pin) of one Relax module."""
    before = tmp_path / "before.json"
    code, _, err = run(capsys, "plan", str(module), "--report", str(before), "-o", str(tmp_path / "p.out"))
    assert code == 0, err
    report = json.loads(before.read_text())
    assert not schema_errors(report), schema_errors(report)[:3]
    ops = [p for p in report["placements"] if p["kind"] == "operator"]
    assert ops and all(p["name"].startswith("R.") and p["binding"] for p in ops)
    if text_input:  # TVMScript: every operator call carries its line
        lines = module.read_text().splitlines()
        for p in ops:
            assert p["line"] is not None and p["binding"] in lines[p["line"] - 1], p
    else:
        assert all(p["line"] is None for p in ops)
    op = _first_op(report)
    # --why on an R. operator: answers name it as TVMScript does.
    code, _, err = run(
        capsys, "plan", str(module), "-o", str(tmp_path / "p2.out"), "--why", json.dumps({"op": op, "index": 0}),
        "--why-format", "json",
    )
    assert code == 0, err
    (result,) = json.loads(err)
    (answer,) = result["answers"]
    assert answer["expression"].split(" = ")[1].startswith(op + "("), answer
    # --picture: the operators drawn with their TVMScript names.
    svg = tmp_path / "plan.svg"
    code, _, err = run(capsys, "plan", str(module), "-o", str(tmp_path / "p3.out"), "--picture", str(svg))
    assert code == 0, err
    assert "R." in svg.read_text()
    # devplan diff: the module against itself with its first operator pinned to the cpu.
    pin = json.dumps({"select": {"op": op, "index": 0}, "device": "cpu"})
    after = tmp_path / "after.json"
    code, _, err = run(capsys, "plan", str(module), "--constraint", pin, "--report", str(after), "-o", str(tmp_path / "p4.out"))
    assert code == 0, err
    code, out, err = run(capsys, "diff", str(before), str(after), "--format", "json", "--fail-on", "moved-to:cpu")
    diff = json.loads(out)
    assert diff["matched"] == len(report["placements"]) and not diff["added"] and not diff["removed"]
    moved = [m for m in diff["moved"] if m["after"]["name"] == op]
    assert moved and all(m["before"]["binding"] == m["after"]["binding"] for m in diff["moved"])
    assert code == EXIT_RULE_HIT and "moved-to:cpu" in err


def test_small_relax_module_through_the_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    module = tmp_path / "small.py"
    module.write_text(SMALL)
    check_cli(capsys, tmp_path, module, text_input=True)


def test_relax_json_model_through_the_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = RELAX / "tv_resnet18.json"
    if not path.exists():
        pytest.skip("Relax corpus not found")
    check_cli(capsys, tmp_path, path, text_input=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_relax_model_from_tvmscript(name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = RELAX / f"{name}.py"
    if not path.exists():
        pytest.skip("Relax corpus not found")
    check_cli(capsys, tmp_path, path, text_input=True)


CONFLICT = (
    "@I.ir_module\nclass Module:\n"
    + DEVICES
    + """
    @R.function
    def main(x: R.Tensor((4, 4), "float32"), y: R.Tensor((4, 4), "float32")) -> R.Tensor((4, 4), "float32"):
        with R.dataflow():
            a = R.hint_on_device(x, R.device(1, 0))
            b = R.hint_on_device(y, R.device(2, 0))
            c = R.add(a, b)
            R.output(c)
        return c
"""
)


def _conflict_lines() -> dict[str, tuple[int, int]]:
    """binding -> (line, column) of its value in CONFLICT."""
    out = {}
    for i, t in enumerate(CONFLICT.splitlines(), 1):
        for b in ("a", "b", "c"):
            if t.strip().startswith(f"{b} = "):
                out[b] = (i, t.index(f"{b} = ") + 5)
    return out


def _speaks_relax(text: str) -> None:
    """The issue's two conflicting hints, in Relax terms: bindings, R.hint_on_device, vdevices."""
    at = _conflict_lines()
    assert f'cpu (vdevice 0 "llvm:0") (a = R.hint_on_device at {at["a"][0]}:{at["a"][1]})' in text, text
    assert f'cuda (vdevice 1 "cuda:0") (b = R.hint_on_device at {at["b"][0]}:{at["b"][1]})' in text, text
    assert f"linked through c = R.add at {at['c'][0]}:{at['c'][1]}" in text, text
    assert "on_device(" not in text.replace("R.hint_on_device(", "") and "%x" not in text and "%y" not in text
    assert "scope" not in text and "annotation at" not in text and "operator at" not in text


def test_a_relax_conflict_speaks_relax(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    module = tmp_path / "hints.py"
    module.write_text(CONFLICT)
    code, _, err = run(capsys, "plan", str(module))
    assert code == 3, err
    at = _conflict_lines()
    assert f"{module}:{at['a'][0]}:{at['a'][1]}:" in err and f"{module}:{at['b'][0]}:" in err and "<relax>" not in err
    assert "a = R.hint_on_device(x)" in err and "binding c = R.add(a, b) shares one device" in err
    assert 'R.hint_on_device puts y on cuda (vdevice 1 "cuda:0")' in err
    _speaks_relax(err)


def test_a_relax_conflict_speaks_relax_over_http() -> None:
    """The same conflict over POST /plan: a located planning-conflict problem in the same terms."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from service.config import Settings
    from service.errors import PLANNING_CONFLICT
    from service.main import create_app

    with TestClient(create_app(Settings(pool_kind="thread", pool_size=1)), raise_server_exceptions=False) as client:
        response = client.post("/plan", json={"module": CONFLICT})
    assert response.status_code == PLANNING_CONFLICT.status == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    _speaks_relax(body["detail"])
    at = _conflict_lines()
    assert [(c["line"], c["column"]) for c in body["constraints"]] == [at["a"], at["c"], at["b"]]
    assert {(loc["line"], loc["column"]) for loc in body["locations"]} == {at["a"], at["b"], at["c"]}
    assert [c["devices"] for c in body["constraints"]] == [["cpu"], [], ["cuda"]]
    assert "vdevice 1" in body["constraints"][2]["description"]


TWINS = """
    @R.function
    def main(x: R.Tensor((4, 4), "float32")) -> R.Tuple(R.Tensor((4, 4), "float32"), R.Tensor((4, 4), "float32")):
        with R.dataflow():
            FIRST = R.exp(x)
            SECOND = R.exp(x)
            t = (FIRST, SECOND)
            R.output(t)
        return t
"""


def test_a_relax_syntax_error_names_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    module = tmp_path / "broken.py"
    module.write_text(SMALL.replace("R.exp(lv)", "R.exp(lv"))
    code, _, err = run(capsys, "plan", str(module))
    line = next(i for i, t in enumerate(SMALL.splitlines(), 1) if "R.exp(lv)" in t)
    assert code == 2 and f"--> {module}:{line}:" in err and "<relax>" not in err, err


def test_relax_diff_matches_twins_by_binding() -> None:
    """Two identical bindings (`u` and `v`, both `R.exp(x)`) swapped in order
    (and in the tuple that uses them): the diff pairs each with its own
    binding, not by evaluation order."""
    from service.diff import match
    from service.planning import plan_report

    head = "@I.ir_module\nclass Module:\n" + DEVICES
    before = head + TWINS.replace("FIRST", "u").replace("SECOND", "v")
    after = head + TWINS.replace("FIRST", "v").replace("SECOND", "u")
    _, a = plan_report(PlanJob(module=before))
    _, b = plan_report(PlanJob(module=after))
    by_a = {p["node"]: p for p in a["placements"]}
    by_b = {p["node"]: p for p in b["placements"]}
    pairs = match(a["placements"], b["placements"]).forward
    assert len(pairs) == len(a["placements"])
    exps = [(by_a[x]["binding"], by_b[y]["binding"]) for x, y in pairs.items() if by_a[x]["name"] == "R.exp"]
    assert sorted(exps) == [("u", "u"), ("v", "v")]
    # By order alone they would cross: u first before, v first after.
    assert [p["binding"] for p in a["placements"] if p["name"] == "R.exp"] == ["u", "v"]
    assert [p["binding"] for p in b["placements"] if p["name"] == "R.exp"] == ["v", "u"]


def test_planning_says_nothing_about_cuda_arch(tmp_path: Path) -> None:
    """A planning user's stderr: neither TVM's native CUDA-version warning nor
    our arch replacement; both go to the debug log."""
    module = tmp_path / "small.py"
    module.write_text(SMALL)
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "plan", str(module), "-o", str(tmp_path / "out.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Unable to detect CUDA version" not in done.stderr and "not supported by the installed nvcc" not in done.stderr
    assert done.stderr == ""


def test_tvm_native_warning_goes_to_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="tvm_bridge.targets"):
        run_plan(PlanJob(module=SMALL))
    assert any("Unable to detect CUDA version" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)


def test_an_unreplaceable_arch_is_a_warning_only_for_a_compile(caplog: pytest.LogCaptureFixture) -> None:
    from tvm_bridge.targets import supported_cuda_archs, target_dict

    if not supported_cuda_archs() or 50 in supported_cuda_archs():
        pytest.skip("needs an nvcc that cannot build sm_50")
    with caplog.at_level(logging.DEBUG, logger="tvm_bridge.targets"):
        target_dict("cuda -arch=sm_50")
        target_dict("cuda -arch=sm_50", for_compile=True)
    levels = [r.levelno for r in caplog.records if "sm_50" in r.getMessage()]
    assert levels == [logging.DEBUG, logging.WARNING]


def test_relax_errors_are_failures_not_crashes() -> None:
    with pytest.raises(PlanFailure) as info:
        run_plan(PlanJob(module=SMALL, why=({"op": "R.nn.conv2d"},)))
    assert info.value.kind == "invalid-config" and "matches no operator call" in info.value.message
