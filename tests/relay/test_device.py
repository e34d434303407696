"""Virtual devices and targets: parsing target strings once, short device names."""

from __future__ import annotations

import pytest

import relay
from relay import Target, VirtualDevice, device_name, parse_target, target_options


def test_target_options_split_kind_and_options() -> None:
    kind, options = target_options("cuda -arch=sm_90 -keys=cuda,gpu -fast-math")
    assert kind == "cuda"
    assert options == (("arch", "sm_90"), ("keys", "cuda,gpu"), ("fast-math", None))


@pytest.mark.parametrize("text", ["", "   ", "cuda arch=sm_90", "llvm -", "llvm -=1"])
def test_target_options_reject_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        target_options(text)


def test_parse_target_fills_tvm_defaults() -> None:
    cuda = parse_target("cuda -arch=sm_90 -max_num_threads=512")
    assert cuda.kind == "cuda"
    assert cuda.keys == ("cuda", "gpu")
    assert cuda.attr_dict == {"thread_warp_size": 32, "max_num_threads": 512, "arch": "sm_90"}
    # The host TVM 0.19 gives a device target is a complete llvm target, like
    # the one `parse_target("llvm")` gives (with TVM's empty mtriple).
    assert cuda.host == parse_target("llvm")
    assert parse_target("llvm").attr_dict == {"mtriple": ""}
    assert parse_target("llvm").host is None


def test_parse_target_partial_keeps_only_what_is_written() -> None:
    target = parse_target("cuda -arch=sm_80", complete=False)
    assert target == Target("cuda", (), (("arch", "sm_80"),))
    assert parse_target("cuda -arch=sm_80").agrees_with(target)
    assert not parse_target("cuda").agrees_with(target)


def test_parse_target_rejects_bare_flags() -> None:
    with pytest.raises(ValueError, match="-fast-math"):
        parse_target("llvm -fast-math")


def test_device_names() -> None:
    cpu = VirtualDevice(1, 0, parse_target("llvm"))
    assert device_name(cpu) == "cpu"
    assert relay.device_name is device_name
    assert device_name(VirtualDevice(2, 1, parse_target("cuda"))) == "cuda:1"
    assert device_name(VirtualDevice(2, 0, parse_target("cuda"), "global")) == "cuda (scope global)"
    assert device_name(VirtualDevice(2, 0, parse_target("cuda -arch=sm_90"))) == (
        "cuda (target cuda -thread_warp_size=32 -max_num_threads=1024 -arch=sm_90)"
    )
    # A target of an unusual kind for the device type is named too.
    assert device_name(VirtualDevice(1, 0, parse_target("c"))) == "cpu (target c)"
    # Only the target known: the type comes from it.
    assert device_name(VirtualDevice(None, None, parse_target("cuda"))) == "cuda"
    assert device_name(VirtualDevice()) == "?"
    assert device_name(VirtualDevice(2, 3, None, "global.texture")) == "cuda:3 (scope global.texture)"


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("cuda:0", "cuda"),
        ("cpu:0", "cpu"),
        ("cuda", "cuda"),
        ("cuda:1", "cuda:1"),
        ("cuda:10", "cuda:10"),
        ("cuda:0 (scope global.texture)", "cuda (scope global.texture)"),
    ],
)
def test_canonical_device_name(written: str, canonical: str) -> None:
    assert relay.canonical_device_name(written) == canonical


def test_canonical_device_name_agrees_with_device_name() -> None:
    # the name written with an explicit id 0 is the one device_name gives the device
    for code, kind in ((1, "cpu"), (2, "cuda")):
        vd = VirtualDevice(device_type=code, virtual_device_id=0)
        assert relay.canonical_device_name(f"{kind}:0") == relay.device_name(vd)
