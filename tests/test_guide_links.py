"""Every relative link of the guide (README.md, docs/, the READMEs of examples/
and docker/) resolves inside the repository, anchors included."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.guide_text import ROOT, anchors, links, pages


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or ROOT not in (resolved, *resolved.parents):
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, broken


def test_the_guide_has_pages_and_links() -> None:
    """The reader above sees the pages' links (it would pass vacuously on none)."""
    readme_links = links(ROOT / "README.md")
    assert any(link.startswith("docs/") for link in readme_links), readme_links
    assert (ROOT / "docs" / "planning.md") in pages() and (ROOT / "docs" / "architecture.md") in pages()


def test_readme_is_a_first_hour_guide() -> None:
    """At most 250 lines; the quick start is the two commands CI also runs:
    `scripts/serve.sh` (set up and serve) and `scripts/test.sh` (set up and test)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    start = text.index("## Quick start")
    block = re.search(r"\n\n((?:    .*\n)+)", text[start:])
    assert block is not None
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["scripts/serve.sh", "scripts/test.sh"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^stage .*scripts/test\.sh$", ci, re.MULTILINE), "CI runs the README's test command"
