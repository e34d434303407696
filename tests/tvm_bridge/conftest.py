"""Bridge tests need TVM; `gpu` tests need a visible CUDA device."""

from __future__ import annotations

import importlib.util

import pytest

# Without TVM (pip install -e '.[tvm]') the bridge's tests are not collected at all.
HAS_TVM = importlib.util.find_spec("tvm") is not None
collect_ignore_glob = [] if HAS_TVM else ["test_*.py"]


def _has_gpu() -> bool:
    import tvm

    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001 - no CUDA runtime in this TVM build
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = None
    for item in items:
        if "tests/tvm_bridge" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.tvm)
        if item.get_closest_marker("gpu") is not None:
            if gpu is None:
                gpu = _has_gpu()
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="no CUDA GPU visible"))
