"""Relay-era target strings and dicts become targets TVM 0.27 accepts."""

from __future__ import annotations

import pytest
import tvm

import tvm_bridge
from relay.device import parse_target
from tvm_bridge.targets import supported_cuda_archs


def test_cpu_string_with_options_becomes_a_dict() -> None:
    spec = tvm_bridge.target_dict("llvm -mcpu=skylake -mattr=+avx2,+fma -num-cores=4")
    assert spec == {"kind": "llvm", "mcpu": "skylake", "mattr": ["+avx2", "+fma"], "num-cores": 4}
    target = tvm.target.Target(spec)
    assert str(target.attrs["mcpu"]) == "skylake"


def test_tvm_rejects_the_string_the_bridge_translates() -> None:
    with pytest.raises(ValueError):
        tvm.target.Target("cuda -arch=sm_90")
    spec = tvm_bridge.target_dict("cuda -arch=sm_90")
    assert spec["kind"] == "cuda" and spec["arch"] == "sm_90" and spec["host"] == {"kind": "llvm"}
    assert str(tvm_bridge.tvm_target(spec).attrs["arch"]) == "sm_90"


def test_cuda_without_arch_gets_the_default_arch() -> None:
    assert tvm_bridge.target_dict("cuda")["arch"] == tvm_bridge.DEFAULT_CUDA_ARCH
    assert tvm_bridge.target_dict({"kind": "cuda"}, cuda_arch="sm_86")["arch"] == "sm_86"


def test_an_arch_nvcc_cannot_build_is_replaced() -> None:
    if not supported_cuda_archs():
        pytest.skip("nvcc not installed")
    if 50 in supported_cuda_archs():
        pytest.skip("this nvcc still supports sm_50")
    assert tvm_bridge.target_dict("cuda -arch=sm_50")["arch"] == tvm_bridge.DEFAULT_CUDA_ARCH


def test_relay_target_values_translate() -> None:
    spec = tvm_bridge.target_dict(parse_target("cuda -arch=sm_80"))
    assert spec["kind"] == "cuda" and spec["arch"] == "sm_80"
    assert spec["host"]["kind"] == "llvm"
    assert tvm_bridge.target_dict(parse_target("llvm")) == {"kind": "llvm"}


def test_json_text_and_dict_forms_pass_through() -> None:
    assert tvm_bridge.target_dict('{"kind": "llvm", "mcpu": "znver3"}') == {"kind": "llvm", "mcpu": "znver3"}
    assert tvm_bridge.target_dict({"kind": "llvm", "keys": ["cpu"]}) == {"kind": "llvm"}


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "llvm -bogus=1",
        "nosuchkind",
        "llvm mcpu",
        "llvm -num-cores=many",
        {"mcpu": "x"},
        '{"kind": 3}',
        42,
    ],
)
def test_bad_targets_raise_target_error(bad: object) -> None:
    with pytest.raises(tvm_bridge.TargetError) as info:
        tvm_bridge.target_dict(bad)  # type: ignore[arg-type]
    assert isinstance(info.value, tvm_bridge.BridgeError)


def test_target_map_defaults_and_overrides() -> None:
    targets = tvm_bridge.target_map({"gpu": "cuda -arch=sm_80", 1: "llvm -mcpu=skylake"})
    assert targets["cuda"]["arch"] == "sm_80"
    assert targets["cpu"] == {"kind": "llvm", "mcpu": "skylake"}
    assert tvm_bridge.target_map()["cpu"] == {"kind": "llvm"}
    with pytest.raises(tvm_bridge.TargetError):
        tvm_bridge.target_map({"tpu": "llvm"})
