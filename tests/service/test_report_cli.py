"""`devplan plan --report`, `-o`, `-` for stdout, `devplan diff` and its exit codes,
and the synopsis of docs/cli.md against `devplan plan --help`."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from service.cli import build_parser, main
from service.diff import EXIT_RULE_HIT
from service.report import load_schema

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
MLP = CORPUS / "mlp.annotated.relay"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found (../shared/corpus)")
SOFTMAX_ON_CPU = '{"select": {"op": "nn.softmax"}, "device": "cpu"}'


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@needs_corpus
def test_short_o_and_dash_for_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, planned, _ = run(capsys, "plan", str(MLP))
    assert code == 0
    assert run(capsys, "plan", str(MLP), "-o", "a.relay")[0] == 0
    assert run(capsys, "plan", str(MLP), "--output", "b.relay")[0] == 0
    assert (tmp_path / "a.relay").read_text() == (tmp_path / "b.relay").read_text() == planned
    code, out, _ = run(capsys, "plan", str(MLP), "--output", "-")
    assert code == 0 and out == planned
    assert not (tmp_path / "-").exists()


@needs_corpus
def test_report_to_a_file_and_to_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, planned, _ = run(capsys, "plan", str(MLP), "--report", "r.json")
    assert code == 0 and planned.startswith("#[version")
    from_file = json.loads((tmp_path / "r.json").read_text())
    code, out, _ = run(capsys, "plan", str(MLP), "-o", "p.relay", "--report", "-")
    assert code == 0
    from_stdout = json.loads(out)
    jsonschema.validate(from_stdout, load_schema())
    for rep in (from_file, from_stdout):
        rep["solver"].pop("time_ms")
    assert from_file == from_stdout
    assert (tmp_path / "p.relay").read_text() == planned


@needs_corpus
@pytest.mark.parametrize(
    "argv",
    [
        ["--report", "-"],
        ["--picture", "-"],
        ["-o", "-", "--report", "-"],
        ["-o", "x.relay", "--report", "-", "--picture", "-"],
    ],
)
def test_at_most_one_output_on_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "plan", str(MLP), *argv)
    assert code == 1 and out == ""
    assert "would all go to stdout" in err
    assert list(tmp_path.iterdir()) == []  # nothing planned, nothing written


@needs_corpus
def test_diff_exit_codes_and_formats(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "plan", str(MLP), "-o", "a.relay", "--report", "a.json")[0] == 0
    assert (
        run(capsys, "plan", str(MLP), "-o", "b.relay", "--report", "b.json", "--constraint", SOFTMAX_ON_CPU)[
            0
        ]
        == 0
    )
    # A module and its own report: nothing changed, no rule hit.
    code, out, _ = run(capsys, "diff", str(MLP), "a.json", "--fail-on", "any-change")
    assert code == 0 and out.startswith("no placement changed")
    # The pin: a module planned with the same flags on both sides vs. a report.
    code, out, err = run(capsys, "diff", "a.json", "b.json", "--fail-on", "copies-added,moved-to:cpu")
    assert code == EXIT_RULE_HIT
    assert "moved   nn.softmax" in out and "--fail-on copies-added" in err
    code, out, _ = run(capsys, "diff", "a.json", "b.json", "--fail-on", "moved-to:cuda", "--format", "junit")
    assert code == 0
    assert [t.get("name") for t in ET.fromstring(out).iter("testcase")] == ["moved-to:cuda"]
    code, out, _ = run(capsys, "diff", "a.json", "b.json", "--format", "json", "-o", "d.json")
    assert code == 0 and out == ""
    assert json.loads((tmp_path / "d.json").read_text())["moved"]
    code, out, _ = run(
        capsys, "diff", str(MLP), str(MLP), "--constraint", SOFTMAX_ON_CPU, "--format", "markdown"
    )
    assert code == 0 and out.startswith("### Placement diff: no change")
    # Usage errors exit 1, a side that does not parse exits 2.
    assert run(capsys, "diff", "a.json", "b.json", "--fail-on", "copies-removed")[0] == 1
    (tmp_path / "bad.relay").write_text("def @main( {")
    assert run(capsys, "diff", "bad.relay", "a.json")[0] == 2


def _synopsis_flags() -> set[str]:
    text = (ROOT / "docs" / "cli.md").read_text()
    block = re.search(r"^    devplan plan INPUT (\[-.*?)^\S", text, re.DOTALL | re.MULTILINE)
    assert block, "docs/cli.md has no `devplan plan INPUT` synopsis"
    return set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", block.group(1)))


def test_cli_page_synopsis_names_the_flags_of_plan_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    plan = sub.choices["plan"]  # type: ignore[attr-defined]
    flags = {o for a in plan._actions for o in a.option_strings if o not in ("-h", "--help")}
    assert _synopsis_flags() == flags
