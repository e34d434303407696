"""The build's dtype rewrites (tvm_bridge/build_rewrites.py): each table operator on
`bool` operands fails in plain `tvm.compile` for the cpu (TVM 0.27's gap the rewrite
exists for), builds through the bridge, and computes what numpy computes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_bridge
from tvm_bridge.build_rewrites import REWRITES, rewrite_for_build

R = relax.op


def _exclusive(cumulative: Callable[..., np.ndarray], neutral: bool) -> Callable[[np.ndarray], np.ndarray]:
    def run(x: np.ndarray) -> np.ndarray:
        shifted = np.concatenate([np.full(x.shape[:-1] + (1,), neutral), x[..., :-1]], axis=-1)
        return cumulative(shifted, axis=-1, dtype=bool)

    return run


# op name -> (Relax call on the operands, numpy's answer, operand shapes); two operands
# broadcast as the attention mask's (32, 1) against (1, 32) do.
PAIR = ((4, 1), (1, 5))
CASES: dict[str, tuple[Callable[..., Any], Callable[..., np.ndarray], tuple[tuple[int, ...], ...]]] = {
    "relax.cumsum": (lambda x: R.cumsum(x, axis=-1), lambda x: np.cumsum(x, axis=-1, dtype=bool), ((4, 6),)),
    "relax.cumprod": (lambda x: R.cumprod(x, axis=1), lambda x: np.cumprod(x, axis=1, dtype=bool), ((4, 6),)),
    "relax.equal": (R.equal, np.equal, PAIR),
    "relax.not_equal": (R.not_equal, np.not_equal, PAIR),
    "relax.less": (R.less, np.less, PAIR),
    "relax.less_equal": (R.less_equal, np.less_equal, PAIR),
    "relax.greater": (R.greater, np.greater, PAIR),
    "relax.greater_equal": (R.greater_equal, np.greater_equal, PAIR),
    "relax.add": (R.add, np.add, PAIR),
    "relax.multiply": (R.multiply, np.multiply, PAIR),
    "relax.maximum": (R.maximum, np.maximum, PAIR),
    "relax.minimum": (R.minimum, np.minimum, PAIR),
    "relax.max": (lambda x: R.max(x, axis=1), lambda x: np.max(x, axis=1), ((4, 6),)),
    "relax.min": (lambda x: R.min(x, axis=0, keepdims=True), lambda x: np.min(x, axis=0, keepdims=True), ((4, 6),)),
    "relax.argmax": (lambda x: R.argmax(x, axis=1), lambda x: np.argmax(x, axis=1), ((4, 6),)),
    "relax.argmin": (lambda x: R.argmin(x, axis=0), lambda x: np.argmin(x, axis=0), ((4, 6),)),
}
EXTRA = {
    "cumsum exclusive": (
        lambda x: R.cumsum(x, axis=-1, exclusive=True),
        _exclusive(np.cumsum, False),
        ((3, 7),),
    ),
    "cumprod exclusive": (
        lambda x: R.cumprod(x, axis=-1, exclusive=True),
        _exclusive(np.cumprod, True),
        ((3, 7),),
    ),
}


def _module(make: Callable[..., Any], shapes: tuple[tuple[int, ...], ...], vdevice: Any = None) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(s, "bool", vdevice=vdevice)) for i, s in enumerate(shapes)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(make(*params))
        bb.emit_func_output(out)
    mod = bb.get()
    if vdevice is not None:
        mod.update_global_info("vdevice", [vdevice])
    return mod


def _inputs(shapes: tuple[tuple[int, ...], ...], seed: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.random(s) < 0.5 for s in shapes]


def test_the_table_names_each_operator_once_and_every_one_is_tested() -> None:
    ops = [op for rule in REWRITES for op in rule.ops]
    assert len(ops) == len(set(ops))
    assert set(ops) == set(CASES)
    assert all(rule.avoids for rule in REWRITES)


@pytest.mark.parametrize("name", [*CASES, *EXTRA])
def test_plain_tvm_fails_and_the_bridge_builds_what_numpy_computes(name: str) -> None:
    make, expected, shapes = CASES[name] if name in CASES else EXTRA[name]
    mod = _module(make, shapes)
    with pytest.raises(RuntimeError) as failed:  # TVM's InternalError, or LLVM's verifier through TVM
        tvm.compile(mod, target="llvm")
    # One of the failures the table's docstrings name (a bool op taken for a float one).
    assert any(word in str(failed.value) for word in ("kDLFloat", "fcmp", "Cannot decide")), failed.value
    inputs = _inputs(shapes)
    got = tvm_bridge.run(tvm_bridge.compile(mod), inputs)
    want = expected(*inputs)
    assert got.dtype == want.dtype or (got.dtype == np.int64 and want.dtype.kind == "i")
    np.testing.assert_array_equal(got, want)


def test_the_attention_mask_builds_on_a_vdevice_and_keeps_it() -> None:
    """GPT-2's mask: a bool cumsum, then a bool equal of its broadcast rows and columns,
    all on the module's cpu vdevice, as a planned module states it."""
    cpu = relax.VDevice(tvm.target.Target("llvm"), 0, "global")

    def mask(x: Any) -> Any:
        running = R.cumsum(x, axis=-1)
        return R.equal(R.reshape(running, (6, 1)), R.reshape(running, (1, 6)))

    mod = _module(mask, ((1, 6),), cpu)
    rewritten = rewrite_for_build(relax.transform.RealizeVDevice()(mod))
    ops: list[str] = []

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            ops.append(str(expr.op.name))
            assert expr.ty.vdevice is not None, expr

    relax.analysis.post_order_visit(rewritten["main"], visit)
    assert ops.count("relax.astype") == 4  # cumsum: in and back; equal: both operands (its result is bool)
    (x,) = _inputs(((1, 6),))
    running = np.cumsum(x, axis=-1, dtype=bool)
    got = tvm_bridge.run(tvm_bridge.compile(mod), [x])
    np.testing.assert_array_equal(got, running.reshape(6, 1) == running.reshape(1, 6))


def test_a_module_without_table_operators_is_left_as_it_is() -> None:
    mod = _module(lambda x, y: R.logical_and(x, y), PAIR)
    assert rewrite_for_build(mod) is mod


# GPT-2's mask in small, as TVM prints it: token ids -> not padding -> running "seen a
# token" flag (a bool cumsum) -> equal of its rows and columns (a bool equal).
MASK = """
@I.ir_module
class Module:
    @R.function
    def main(ids: R.Tensor((1, 6), dtype="int64")) -> R.Tensor((6, 6), dtype="bool"):
        with R.dataflow():
            lv: R.Tensor((1, 6), dtype="bool") = R.not_equal(ids, R.const(1, "int64"))
            lv1: R.Tensor((1, 6), dtype="bool") = R.cumsum(lv, axis=-1, dtype=None, exclusive=False)
            lv2: R.Tensor((6, 1), dtype="bool") = R.reshape(lv1, R.shape([6, 1]))
            lv3: R.Tensor((1, 6), dtype="bool") = R.reshape(lv1, R.shape([1, 6]))
            gv: R.Tensor((6, 6), dtype="bool") = R.equal(lv2, lv3)
            R.output(gv)
        return gv
"""


def test_compile_builds_the_mask_and_its_run_check_passes() -> None:
    """`/compile` for the cpu: the plan builds and so does the run check's reference (the
    module without devices, which plain TVM cannot build either)."""
    from tests._service import thread_client

    with thread_client() as client:
        r = client.post("/compile", json={"module": MASK, "default_device": "cpu", "run_check": True})
    assert r.status_code == 200, r.text
    check = r.json()["report"]["check"]
    assert check["max_abs_error"] == 0.0
