"""No 500s from a caller's numbers or nesting: sizes past int64, attribute numbers no shape can
hold, targets and reports nested past their bound. Each is a located 4xx from a real server."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer

from .web_client import HANG_GUARD_S, TINY

BIG = 9223372036854775807  # int64's largest


def _plan(server: RunningServer, body: dict[str, Any], path: str = "/plan") -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=HANG_GUARD_S)


def _module(body: str, params: str = "%x: Tensor[(1, 3, 4, 4), float32]") -> str:
    return f'#[version = "0.0.5"]\ndef @main({params}) {{\n  {body}\n}}\n'


@pytest.mark.parametrize("mode", ["tvm", "optimize"])
@pytest.mark.parametrize(
    ("module", "op", "words"),
    [
        # The example: 4 x 1e308 is no number of rows.
        (_module("nn.upsampling(%x, scale_h=1e308f, scale_w=2f)"), "nn.upsampling", "no representable"),
        # Finite but past int64.
        (_module("nn.upsampling(%x, scale_h=1e300f, scale_w=2f)"), "nn.upsampling", "outside 0.."),
        (_module(f'zeros(shape=[{BIG}, {BIG}], dtype="float32")', params=""), "zeros", "element count"),
        (
            _module("nn.relu(%x)", params=f"%x: Tensor[({BIG}, {BIG}, {BIG}), float32]"),
            "parameter %x",
            "element count",
        ),
    ],
)
def test_numbers_past_what_a_shape_holds_are_located_type_errors(
    server: RunningServer, module: str, op: str, words: str, mode: str
) -> None:
    response = _plan(server, {"module": module, "mode": mode})
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["type"].endswith("/type-error")
    assert problem["detail"].startswith(op) and words in problem["detail"]
    assert problem["locations"] and problem["locations"][0]["line"] in (2, 3)


def _nested_target_body(levels: int) -> str:
    """A request whose target nests `host` `levels` deep (written as text: no JSON encoder
    here recurses that deep)."""
    target = '{"kind": "llvm", "host": ' * levels + '"llvm"' + "}" * levels
    return (
        json.dumps({"module": TINY}).rstrip("}")
        + f', "virtual_devices": [{{"device_type": "cpu", "target": {target}}}]}}'
    )


@pytest.mark.parametrize("path", ["/plan", "/compile"])
@pytest.mark.parametrize("levels", [9, 300, 20_000])
def test_a_target_nested_past_the_bound_is_invalid_config(
    server: RunningServer, path: str, levels: int
) -> None:
    response = httpx.post(
        server.base_url + path,
        content=_nested_target_body(levels),
        headers={"content-type": "application/json"},
        timeout=HANG_GUARD_S,
    )
    assert response.status_code == 422, response.text
    if levels > 900 and response.json()["type"].endswith("/validation-error"):
        # JSON this deep is past what the JSON reader takes at all: refused as unreadable JSON.
        assert "JSON" in response.json()["detail"]
        return
    problem = response.json()
    assert problem["type"].endswith("/invalid-config")
    assert "virtual_devices.0" in problem["detail"] and "8 levels" in problem["detail"]


def test_a_target_within_the_bound_still_plans(server: RunningServer) -> None:
    body = {
        "module": TINY,
        "virtual_devices": [{"device_type": "cpu", "target": {"kind": "llvm", "host": "llvm"}}],
    }
    response = _plan(server, body)
    assert response.status_code == 200, response.text


def test_cost_numbers_at_their_bounds_plan_and_past_them_are_422(server: RunningServer) -> None:
    # The largest tensors a shape may hold, priced at the slowest rates and largest overheads
    # a request may set: every time stays a finite number (these were 500s at 1e308).
    module = _module(
        "%0 = nn.dense(%x, %w);\n  nn.relu(%0)",
        params="%x: Tensor[(3037000499, 3037000499), float32], %w: Tensor[(3037000499, 3037000499), float32]",
    )
    slowest = {"peak_gflops": 1e-6, "mem_gbps": 1e-6, "launch_us": 1e9}
    body = {
        "module": module,
        "mode": "optimize",
        "virtual_devices": ["cpu", "cuda"],
        "device_profiles": {"cpu": slowest, "cuda": slowest},
        "links": {
            "cpu->cuda": {"gbps": 1e-6, "latency_us": 1e9},
            "cuda->cpu": {"gbps": 1e-6, "latency_us": 1e9},
        },
    }
    response = _plan(server, body)
    assert response.status_code == 200, response.text
    assert response.json()["cost"]["predicted_ms"] > 1e9
    for field, value in (("launch_us", 1e308), ("mem_gbps", 1e-300)):
        past = {**body, "device_profiles": {"cuda": {field: value}}}
        refused = _plan(server, past)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"].startswith(f"body.device_profiles.cuda.{field}")
