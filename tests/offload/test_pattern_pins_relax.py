"""Pattern pins on a Relax module: the pin reaches the matmul behind
`permute_dims(weight)`, whether the translation folds the pair into `nn.dense`
(2-D input) or keeps the transpose (3-D input)."""

from __future__ import annotations

from typing import Any

import pytest

import solver

pytestmark = pytest.mark.tvm

# l0: a 3-D matmul of a transposed weight; l1: a 2-D one (folded into nn.dense).
TWO_LAYERS = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 4, 8), dtype="float32"), p_l0_w: R.Tensor((16, 8), dtype="float32"),
             p_l1_w: R.Tensor((8, 16), dtype="float32")) -> R.Tensor((4, 8), dtype="float32"):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            lv: R.Tensor((8, 16), dtype="float32") = R.permute_dims(p_l0_w, axes=[1, 0])
            lv1: R.Tensor((1, 4, 16), dtype="float32") = R.matmul(x, lv, out_dtype="float32")
            lv2: R.Tensor((4, 16), dtype="float32") = R.reshape(lv1, R.shape([4, 16]))
            lv3: R.Tensor((4, 16), dtype="float32") = R.nn.relu(lv2)
            lv4: R.Tensor((16, 8), dtype="float32") = R.permute_dims(p_l1_w, axes=[1, 0])
            lv5: R.Tensor((4, 8), dtype="float32") = R.matmul(lv3, lv4, out_dtype="float32")
            R.output(lv5)
        return lv5
"""

ANNOTATED = """
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("cuda", 0)]})
    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32"), p_l0_w: R.Tensor((16, 8), dtype="float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            lv: R.Tensor((8, 16), dtype="float32") = R.permute_dims(p_l0_w, axes=[1, 0])
            lv1: R.Tensor((4, 16), dtype="float32") = R.matmul(x, lv, out_dtype="float32")
            lv2: R.Tensor((4, 16), dtype="float32") = R.hint_on_device(lv1, R.device(2, 0))
            R.output(lv2)
        return lv2
"""


def _plan(text: str, pattern: str, device: str, mode: str = "tvm") -> Any:
    from service.relax_planning import plan_relax
    from tvm_bridge.relax_plan import read_relax

    mod, source = read_relax(text)
    pin = {"select": {"param": f"@main:{pattern}"}, "device": device}
    return plan_relax(mod, solver.PlanConfig(constraints=(pin,), mode=mode, check_types=False), source)


def _kinds(planned: Any) -> dict[str, str]:
    """Binding or parameter name -> the target kind of its vdevice."""
    func = planned.module["main"]
    out = {str(p.name): str(p.ty.vdevice.target.kind.name) for p in func.params}
    for block in func.body.blocks:
        for b in block.bindings:
            out[str(b.var.name)] = str(b.var.ty.vdevice.target.kind.name)
    return out


@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_pattern_reaches_a_3d_matmul_through_permute_dims(mode: str) -> None:
    kinds = _kinds(_plan(TWO_LAYERS, "p_l0_*", "cpu", mode))
    assert (kinds["p_l0_w"], kinds["lv"], kinds["lv1"]) == ("llvm", "llvm", "llvm")
    if mode == "tvm":  # (optimize mode may move the tiny rest to the cpu too)
        assert kinds["p_l1_w"] == kinds["lv5"] == "cuda"


@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_pattern_reaches_a_folded_dense(mode: str) -> None:
    kinds = _kinds(_plan(TWO_LAYERS, "p_l1_*", "cpu", mode))
    assert (kinds["p_l1_w"], kinds["lv4"], kinds["lv5"]) == ("llvm", "llvm", "llvm")


def test_pattern_against_a_hint_is_a_conflict_at_the_hint() -> None:
    with pytest.raises(solver.PlanningConflict) as info:
        _plan(ANNOTATED, "p_l0_*", "cpu")
    where = {(c.kind, c.span.line) for c in info.value.constraints if c.span is not None}
    # The pinned reader (the matmul's binding) against the hint on its result.
    assert where == {("constraint #0", 10), ("annotation", 11)}


def test_unmatched_pattern_on_relax_names_it() -> None:
    with pytest.raises(solver.PlanConfigError, match=r"p_model_\*.* matches no parameter"):
        _plan(TWO_LAYERS, "p_model_*", "cpu")
