"""Every corpus module converts between text and TVM JSON with structural equality."""

from __future__ import annotations

from pathlib import Path

import pytest

import relay

from .conftest import CORPUS, corpus_files

JSON_FILES = [p for p in corpus_files("*.json") if not p.name.endswith(".meta.json")]
SMALL_TEXT = corpus_files("random/*.relay")[:60] + corpus_files("constructs/*.relay")


@pytest.mark.skipif(not JSON_FILES, reason=f"corpus folder {CORPUS} is absent")
@pytest.mark.parametrize("json_path", JSON_FILES, ids=[p.name for p in JSON_FILES])
def test_text_and_json_agree(json_path: Path) -> None:
    from_json = relay.load_json(json_path.read_text())
    relay.verify(from_json)
    text_path = json_path.with_suffix(".relay")
    if text_path.exists():
        from_text = relay.parse_text(text_path.read_text(), name=text_path.name)
        assert relay.structural_equal(from_text, from_json)
        assert relay.structural_equal(from_text, relay.load_json(relay.dump_json(from_text)))
    assert relay.structural_equal(from_json, relay.parse_text(relay.print_text(from_json)))
    assert relay.structural_equal(from_json, relay.load_json(relay.dump_json(from_json)))


@pytest.mark.skipif(not SMALL_TEXT, reason=f"corpus folder {CORPUS} is absent")
@pytest.mark.parametrize("path", SMALL_TEXT, ids=[str(p.relative_to(CORPUS)) for p in SMALL_TEXT])
def test_text_through_json(path: Path) -> None:
    module = relay.parse_text(path.read_text(), name=path.name)
    again = relay.load_json(relay.dump_json(module))
    relay.verify(again)
    assert relay.structural_equal(module, again)
    assert relay.structural_equal(module, relay.parse_text(relay.print_text(again)))
