"""Tests of PyTorch-exported Relax models (../shared/corpus/relax).
They need TVM (the `tvm` marker); without it they are not collected."""

from __future__ import annotations

import importlib.util

import pytest

HAS_TVM = importlib.util.find_spec("tvm") is not None
collect_ignore_glob = [] if HAS_TVM else ["test_*.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/relax" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.tvm)
