"""Process-wide tables in relay/ stay bounded however many distinct requests a
long-lived worker sees (no cache whose bytes grow with traffic)."""

from __future__ import annotations

import pytest

import relay
from relay import ast


def test_operator_table_is_bounded_over_made_up_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # A private table for this test, so that the shared one of the session stays as it was.
    monkeypatch.setattr(ast, "_OPS", {})
    relu = relay.op("nn.relu")
    before = len(ast._OPS)
    for i in range(ast._MAX_SHARED_OPS + 500):
        module = relay.parse_text(f"def @main(%x: Tensor[(2), float32]) {{ made_up_op_{i}(%x) }}")
        call = module.functions[0][1].body
        assert isinstance(call, ast.Call) and isinstance(call.op, ast.Op)
        assert call.op.name == f"made_up_op_{i}"
    assert before <= len(ast._OPS) <= ast._MAX_SHARED_OPS
    assert relay.op("nn.relu") is relu  # what was shared before the table filled stays shared


def test_target_kind_cache_is_bounded() -> None:
    from relay import device

    for i in range(300):
        vd = relay.VirtualDevice(device_type=7, target=relay.Target(kind=f"madeup{i}"))
        assert device.device_name(vd)
    info = device._standard_attrs.cache_info()
    assert info.misses >= 300 and info.currsize <= 64
