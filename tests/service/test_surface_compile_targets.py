"""`summary.compile_targets` says what /compile would build for each device,
by the TVM bridge's own rules (checked against the bridge where TVM is installed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.compile_targets import DEFAULT_CUDA_ARCH, compile_target, compile_targets

TVM019_CUDA = "cuda -keys=cuda,gpu -thread_warp_size=32 -max_num_threads=1024 -arch=sm_50"
CASES = [
    (None, "cpu"),
    (None, "cuda"),
    ("llvm -keys=cpu -mtriple=", "cpu"),
    (TVM019_CUDA, "cuda"),
    ("cuda -arch=sm_90", "cuda"),
    ("cuda", "cuda"),
    ("llvm -mcpu=skylake", "cpu"),
]


def test_the_planned_module_keeps_tvm_text_and_the_summary_says_the_compile_arch() -> None:
    built = compile_target(TVM019_CUDA, "cuda")
    assert built is not None and built.startswith("cuda ") and "-keys" not in built
    assert compile_target(None, "cuda") == f"cuda -arch={DEFAULT_CUDA_ARCH}"
    assert compile_target(None, "cpu") == "llvm"
    assert compile_target(None, "hexagon") is None


def test_compile_targets_by_device_name() -> None:
    devices = [
        {"device_type": "cpu", "virtual_device_id": 0, "target": "llvm -keys=cpu -mtriple="},
        {"device_type": "cuda", "virtual_device_id": 0, "target": TVM019_CUDA},
        {"device_type": "cuda", "virtual_device_id": 1, "target": "cuda -arch=sm_90"},
    ]
    out = compile_targets(devices, ["cpu", "cuda", "cuda:1"])
    assert set(out) == {"cpu", "cuda", "cuda:1"}
    assert out["cpu"] == "llvm -mtriple="
    assert "-max_num_threads=1024" in out["cuda"]
    assert compile_targets([], ["cuda"]) == {"cuda": f"cuda -arch={DEFAULT_CUDA_ARCH}"}


@pytest.mark.tvm
@pytest.mark.parametrize(("target", "device_type"), CASES)
def test_the_rules_are_the_bridges(target: str | None, device_type: str) -> None:
    """What the summary says, read by the bridge, is the target the bridge builds."""
    import tvm_bridge

    built = compile_target(target, device_type)
    assert built is not None
    expected: dict[str, Any] = (
        tvm_bridge.target_dict(target) if target is not None else tvm_bridge.target_map()[device_type]
    )
    assert tvm_bridge.target_dict(built) == expected


def test_the_nvcc_answer_is_kept_between_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking nvcc costs every `devplan plan` a third of a second; the answer is cached by
    nvcc's path, size and mtime."""
    import json

    from service import compile_targets as ct

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text("#!/bin/sh\necho compute_80 compute_90\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ct._nvcc_archs.cache_clear()
    try:
        assert ct._nvcc_archs() == (80, 90)
        cached = tmp_path / "cache" / "devplan" / "nvcc-archs.json"
        stored = json.loads(cached.read_text())
        cached.write_text(json.dumps({**stored, "archs": [86]}))  # what a later process finds
        ct._nvcc_archs.cache_clear()
        assert ct._nvcc_archs() == (86,)
        assert compile_target("cuda -arch=sm_80", "cuda") == f"cuda -arch={ct.DEFAULT_CUDA_ARCH}"
        assert compile_target("cuda -arch=sm_86", "cuda") == "cuda -arch=sm_86"
    finally:
        ct._nvcc_archs.cache_clear()
