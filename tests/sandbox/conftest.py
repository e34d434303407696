"""The sandbox tests build and run kernels: they need TVM."""

from __future__ import annotations

import importlib.util

import pytest

HAS_TVM = importlib.util.find_spec("tvm") is not None
# Without TVM (pip install -e '.[tvm]') only the tests that build nothing are collected.
collect_ignore_glob = [] if HAS_TVM else ["test_kernels.py", "test_layers.py", "test_attacks*.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/sandbox" in str(item.fspath).replace("\\", "/") and HAS_TVM:
            item.add_marker(pytest.mark.tvm)
