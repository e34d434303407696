"""The checked-in table of each Relax operator's attributes type (tvm_bridge/op_attrs_table.py)
is what the installed TVM's constructors build: regenerate it with scripts/gen_op_attrs.py
when TVM changes. Every corpus module's calls carry the attributes the table says."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.tvm

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> object:
    spec = importlib.util.spec_from_file_location("gen_op_attrs", ROOT / "scripts" / "gen_op_attrs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_is_what_the_installed_tvm_builds() -> None:
    from tvm_bridge.op_attrs_table import OP_ATTRS

    learned = _generator().learn()  # type: ignore[attr-defined]
    assert learned == OP_ATTRS, "regenerate: .venv/bin/python scripts/gen_op_attrs.py"
    assert OP_ATTRS["relax.matmul"] == "relax.attrs.MatmulAttrs" and OP_ATTRS["relax.exp"] is None


def test_every_corpus_call_passes_the_guard(corpus_dir: Path) -> None:
    from tvm_bridge.json_guard import check_json_graph

    files = sorted((corpus_dir / "relax").glob("*.json"))
    assert files
    for path in files:
        text = path.read_text()
        assert '"ir.Call"' in text.replace(" ", "")
        json.loads(check_json_graph(text))  # refused calls would raise ParseError
