"""Every model of the Relax corpus plans in both modes, from JSON and from
TVMScript, within the default time limit: the output is a fixed
point of TVM's `RealizeVDevice` and of re-planning, differs from the input
only where devices go, and optimize mode knows every type."""

from __future__ import annotations

import pytest
import tvm
from tvm import relax

from service.relax_planning import plan_relax
from solver import PlanConfig
from solver.config import Mode
from tvm_bridge.relax_plan import print_relax, read_relax, strip_devices

from .corpus import MODELS, load

MODES: tuple[Mode, ...] = ("tvm", "optimize")


def _config(mode: Mode) -> PlanConfig:
    # The default time limit (PlanConfig.timeout_ms): every model must plan within it.
    return PlanConfig(mode=mode, default_device="cuda", host_device="cpu", virtual_devices=("cpu", "cuda"))


def _check(name: str, fmt: str, mode: Mode) -> None:
    mod, source = load(name, fmt)
    planned = plan_relax(mod, _config(mode), source)
    out = planned.module
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(out), out)
    tvm.ir.assert_structural_equal(plan_relax(out, _config(mode)).module, out)
    tvm.ir.assert_structural_equal(strip_devices(out), strip_devices(mod))
    # Every tensor binding states a device, except those TVM itself types
    # without one (`R.nn.pad`, operators without tensor arguments), whose
    # users then read a copy.
    for block in out["main"].body.blocks:
        for b in block.bindings:
            ty = b.var.ty
            if isinstance(ty, relax.TensorType) and ty.vdevice is None:
                assert isinstance(b.value, relax.Call), b.var.name
                name = str(b.value.op.name)
                assert name == "relax.nn.pad" or name == "relax.arange", (b.var.name, name)
    again, _ = read_relax(print_relax(out, fmt), fmt)
    tvm.ir.assert_structural_equal(again, out)
    if mode == "optimize":
        cost = planned.result.cost
        assert cost is not None
        unknown = [e for e in cost.estimates if e.kind == "unknown type"]
        assert not unknown, unknown[:3]
        assert cost.predicted_ms > 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", MODELS)
def test_model_from_json_plans_to_a_fixed_point(name: str, mode: Mode) -> None:
    _check(name, "json", mode)


# TVMScript of the big models takes seconds to read (twice: the input and the
# output read back): the default stage reads the three smallest texts, the
# slow stage every one.
SMALL_TEXTS = ("tv_resnet18", "hf_bert", "hf_gpt2")
TEXTS = [name if name in SMALL_TEXTS else pytest.param(name, marks=pytest.mark.slow) for name in MODELS]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", TEXTS)
def test_model_from_tvmscript_plans_to_a_fixed_point(name: str, mode: Mode) -> None:
    _check(name, "text", mode)


def test_json_and_tvmscript_plan_alike() -> None:
    """The two encodings of one model give the same plan (spans aside)."""
    config = _config("optimize")
    mod, _ = load("tv_resnet18", "json")
    from_json = plan_relax(mod, config)
    mod, source = load("tv_resnet18", "text")
    from_text = plan_relax(mod, config, source)
    assert from_text.result.cost is not None and from_json.result.cost is not None
    assert from_text.result.cost.predicted_ms == from_json.result.cost.predicted_ms
    assert from_text.copies == from_json.copies
