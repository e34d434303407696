"""docs/python.md runs: every Python block, in order, in one namespace, from a directory with
`../shared` beside it (as the repository has). The default stage runs all but the block that
compiles the model with TVM (half a minute); the slow stage runs every block."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests._service import ROOT
from tests.python_api.common import RELAX, corpus_file

pytestmark = pytest.mark.tvm
pytest.importorskip("tvm")

PAGE = ROOT / "docs" / "python.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks() -> list[tuple[str, str]]:
    """(section title, code) of every Python block of the page, in order."""
    text = PAGE.read_text()
    out = []
    for match in _BLOCK.finditer(text):
        heads = re.findall(r"^## (.+)$", text[: match.start()], re.MULTILINE)
        out.append((heads[-1] if heads else "", match.group(1)))
    return out


def _compiles(code: str) -> bool:
    return "tvm.compile(" in code


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, everything: bool) -> dict[str, object]:
    corpus_file(RELAX / "tv_mobilenet_v3_small.json")
    # The page's paths are the repository's: `../shared/corpus/...`, pictures in the working directory.
    work = tmp_path / "repo"
    work.mkdir()
    (tmp_path / "shared").symlink_to((ROOT / ".." / "shared").resolve())
    monkeypatch.chdir(work)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    ran = 0
    for title, code in blocks():
        if not everything and _compiles(code):
            continue
        exec(compile(code, f"{PAGE.name} ({title})", "exec"), namespace)  # noqa: S102 - our own page
        ran += 1
    assert ran >= 4
    return namespace


def test_the_page_has_both_sections() -> None:
    titles = {title for title, _ in blocks()}
    assert {"From PyTorch", "In Python"} <= titles
    assert any(_compiles(code) and "devplan.PlanDevices" in code for _, code in blocks())
    assert "../shared/corpus/relax/" in PAGE.read_text()


def test_the_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = _run(tmp_path, monkeypatch, everything=False)
    out = capsys.readouterr().out
    first = namespace["plan"].device_map[0]["module"]  # type: ignore[attr-defined]
    assert " ms predicted, optimal: " in out and f"{first} -> " in out, out
    assert "9:17: annotation: R.hint_on_device puts x on cpu" in out, out  # line 9 of the string
    assert (tmp_path / "repo" / "mobilenet.dot").read_text().startswith("digraph")
    assert namespace["plan"] is not None and os.getcwd() == str(tmp_path / "repo")


@pytest.mark.slow
def test_every_python_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, monkeypatch, everything=True)
    assert "(1, 1000)" in capsys.readouterr().out
