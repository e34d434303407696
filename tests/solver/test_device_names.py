"""`cuda:0` names the device reports call `cuda` in every per-device field.

Each case plans the same request twice, once with the report name (`cuda`) and
once with the explicit id (`cuda:0`), and checks the two planned modules are
the same; a third plan without the field shows the field has an effect, so the
equality is not vacuous.
"""

from __future__ import annotations

from typing import Any

import pytest

import relay
import solver
from service.cli import main
from service.examples import BIG_HEAD, SMALL_CNN

from ._lexical import operator_devices

DEVICES = ("cpu", "cuda", "cuda:1")


def _plan(text: str, **fields: Any) -> solver.PlanResult:
    module = relay.parse_text(text)
    config = solver.PlanConfig(virtual_devices=DEVICES, mode="optimize", z3_check=True, **fields)
    return solver.plan(module, config)


def _text(result: solver.PlanResult) -> str:
    return relay.print_text(result.module)


def _placements(text: str) -> list[tuple[str, str]]:
    """(operator name, device) of every operator call, read back from the planned text."""
    out = []
    for call, device in operator_devices(relay.parse_text(text)):
        assert isinstance(call.op, relay.Op)
        out.append((call.op.name, device))
    return out


def _same_with_zero_id(field: str, value_for: Any, text: str = BIG_HEAD) -> tuple[str, str]:
    plain = _text(_plan(text, **{field: value_for("cuda")}))
    zero = _text(_plan(text, **{field: value_for("cuda:0")}))
    assert zero == plain
    return plain, _text(_plan(text))


def test_op_support_accepts_cuda_0() -> None:
    planned, unconstrained = _same_with_zero_id("op_support", lambda d: {d: {"unsupported": ["nn.dense"]}})
    assert planned != unconstrained
    devices = _placements(planned)
    assert "nn.dense" in {op for op, _ in devices}
    assert all(device != "cuda" for op, device in devices if op == "nn.dense")


def test_memory_budget_accepts_cuda_0() -> None:
    planned, unconstrained = _same_with_zero_id("device_profiles", lambda d: {d: {"memory_bytes": 8 * 2**20}})
    assert planned != unconstrained


def test_links_accept_cuda_0() -> None:
    # A very slow cpu->cuda link keeps the cpu-pinned head's consumers off cuda.
    pins = ({"select": {"op": "nn.relu", "index": 0}, "device": "cpu"},)

    def slow(dst: str) -> dict[str, Any]:
        return {f"cpu->{dst}": {"gbps": 1e-6, "latency_us": 1e6}}

    plain = _text(_plan(SMALL_CNN, constraints=pins, links=slow("cuda")))
    zero = _text(_plan(SMALL_CNN, constraints=pins, links=slow("cuda:0")))
    assert zero == plain
    assert plain != _text(_plan(SMALL_CNN, constraints=pins))


def test_pin_accepts_cuda_0() -> None:
    pins = ({"select": {"op": "nn.softmax"}, "device": "cuda:0"},)
    planned = _text(_plan(BIG_HEAD, default_device="cpu", constraints=pins))
    assert ("nn.softmax", "cuda") in _placements(planned)


@pytest.mark.parametrize("field", ["op_support", "device_profiles"])
def test_two_names_for_one_device_are_refused(field: str) -> None:
    value = {"unsupported": ["nn.dense"]} if field == "op_support" else {"memory_bytes": 2**20}
    with pytest.raises(solver.PlanConfigError, match="name the same device"):
        solver.PlanConfig(**{field: {"cuda": value, "cuda:0": value}})


def test_other_ids_keep_their_names() -> None:
    config = solver.PlanConfig(device_profiles={"cuda:1": {"memory_bytes": 1}, "cpu:0": {"memory_bytes": 2}})
    assert dict(config.device_profiles) == {"cuda:1": {"memory_bytes": 1}, "cpu": {"memory_bytes": 2}}


def test_cli_memory_budget_accepts_cuda_0(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "head.relay"
    path.write_text(BIG_HEAD)
    outputs = []
    for name in ("cuda", "cuda:0"):
        code = main(["plan", str(path), "--mode", "optimize", "--memory-budget", f"{name}=8MiB"])
        out, err = capsys.readouterr()
        assert code == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1]
