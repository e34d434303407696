"""Relax planning on the situations TVM's own `RealizeVDevice` handles.

Each case is an Input module and the Expected output, written as TVMScript:
where `RealizeVDevice` gives a valid module we must give the same placement,
and our output must be a fixed point of `RealizeVDevice`. Where it fails
(operands of one operator left on two devices), we give a valid plan or a
located conflict.
"""

from __future__ import annotations

from typing import Any

import pytest
import tvm
from tvm import relax

from service.relax_planning import plan_relax
from solver import PlanConfig, PlanningConflict
from tvm_bridge.relax_plan import read_relax, strip_devices

pytestmark = pytest.mark.tvm

DEVICES = """
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("cuda", 0)]})
"""


def _line(text: str, start: str) -> int:
    """The 1-based number of the line that starts (after indentation) with `start`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith(start))


def _plan(text: str, **options: Any) -> Any:
    mod, source = read_relax(text)
    options.setdefault("default_device", "cuda")
    return plan_relax(mod, PlanConfig(**options), source)


def _check(source: str, expected: str, **options: Any) -> Any:
    planned = _plan(source, **options)
    want, _ = read_relax(expected)
    tvm.ir.assert_structural_equal(planned.module, want)
    # A fixed point of TVM's own pass, and of re-planning.
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(planned.module), planned.module)
    again = plan_relax(planned.module, PlanConfig(**{**options, "default_device": "cuda"}))
    tvm.ir.assert_structural_equal(again.module, planned.module)
    # Only devices changed.
    tvm.ir.assert_structural_equal(strip_devices(planned.module), strip_devices(read_relax(source)[0]))
    return planned


def test_hint_in_a_dataflow_block_places_its_neighbours() -> None:
    source = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(a: R.Tensor((4, 4), "float32"), b: R.Tensor((4, 4), "float32")) -> R.Tensor((4, 4), "float32"):
        with R.dataflow():
            a1 = a
            a2 = R.hint_on_device(a1, R.device(1, 0))
            s = R.subtract(a2, b)
            out = R.exp(s)
            R.output(out)
        return out
"""
    expected = f"""
@I.ir_module
class Expected:{DEVICES}
    @R.function
    def main(a: R.Tensor((4, 4), "float32", "llvm"), b: R.Tensor((4, 4), "float32", "llvm")) -> R.Tensor((4, 4), "float32", "llvm"):
        with R.dataflow():
            a1: R.Tensor((4, 4), "float32", "llvm") = a
            a2: R.Tensor((4, 4), "float32", "llvm") = a1
            s: R.Tensor((4, 4), "float32", "llvm") = R.subtract(a2, b)
            out: R.Tensor((4, 4), "float32", "llvm") = R.exp(s)
            R.output(out)
        return out
"""
    planned = _check(source, expected)
    assert planned.copies == 0


def test_hint_on_a_plain_binding() -> None:
    source = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(p: R.Tensor((3,), "float32"), q: R.Tensor((3,), "float32")) -> R.Tensor((3,), "float32"):
        m = R.multiply(p, q)
        h = R.hint_on_device(m, R.device(1, 0))
        n = R.negative(h)
        return n
"""
    expected = f"""
@I.ir_module
class Expected:{DEVICES}
    @R.function
    def main(p: R.Tensor((3,), "float32", "llvm"), q: R.Tensor((3,), "float32", "llvm")) -> R.Tensor((3,), "float32", "llvm"):
        m: R.Tensor((3,), "float32", "llvm") = R.multiply(p, q)
        h: R.Tensor((3,), "float32", "llvm") = m
        n: R.Tensor((3,), "float32", "llvm") = R.negative(h)
        return n
"""
    _check(source, expected)


def test_return_type_names_the_device() -> None:
    source = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(u: R.Tensor((2, 5), "float32"), v: R.Tensor((2, 5), "float32")) -> R.Tensor((2, 5), "float32", "llvm"):
        with R.dataflow():
            w = R.maximum(u, v)
            R.output(w)
        return w
"""
    expected = f"""
@I.ir_module
class Expected:{DEVICES}
    @R.function
    def main(u: R.Tensor((2, 5), "float32", "llvm"), v: R.Tensor((2, 5), "float32", "llvm")) -> R.Tensor((2, 5), "float32", "llvm"):
        with R.dataflow():
            w: R.Tensor((2, 5), "float32", "llvm") = R.maximum(u, v)
            R.output(w)
        return w
"""
    # The default device is cuda: the return type's device wins over it.
    _check(source, expected)


def test_tuple_return_type_names_the_device() -> None:
    source = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(u: R.Tensor((2, 5), "float32")) -> R.Tuple(R.Tensor((2, 5), "float32", "llvm"), R.Tensor((2, 5), "float32", "llvm")):
        with R.dataflow():
            w = R.sqrt(u)
            R.output(w)
        return (w, u)
"""
    expected = f"""
@I.ir_module
class Expected:{DEVICES}
    @R.function
    def main(u: R.Tensor((2, 5), "float32", "llvm")) -> R.Tuple(R.Tensor((2, 5), "float32", "llvm"), R.Tensor((2, 5), "float32", "llvm")):
        with R.dataflow():
            w: R.Tensor((2, 5), "float32", "llvm") = R.sqrt(u)
            R.output(w)
        return (w, u)
"""
    _check(source, expected)


def test_explicit_copy_between_two_devices() -> None:
    source = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(a: R.Tensor((8,), "float32"), b: R.Tensor((8,), "float32"), c: R.Tensor((8,), "float32")) -> R.Tensor((8,), "float32", "cuda"):
        with R.dataflow():
            s = R.add(a, b)
            s_cpu = R.hint_on_device(s, R.device(1, 0))
            s_gpu = R.to_vdevice(s_cpu, "cuda")
            t = R.multiply(c, c)
            out = R.add(s_gpu, t)
            R.output(out)
        return out
"""
    expected = f"""
@I.ir_module
class Expected:{DEVICES}
    @R.function
    def main(a: R.Tensor((8,), "float32", "llvm"), b: R.Tensor((8,), "float32", "llvm"), c: R.Tensor((8,), "float32", "cuda")) -> R.Tensor((8,), "float32", "cuda"):
        with R.dataflow():
            s: R.Tensor((8,), "float32", "llvm") = R.add(a, b)
            s_cpu: R.Tensor((8,), "float32", "llvm") = s
            s_gpu: R.Tensor((8,), "float32", "cuda") = R.to_vdevice(s_cpu, "cuda")
            t: R.Tensor((8,), "float32", "cuda") = R.multiply(c, c)
            out: R.Tensor((8,), "float32", "cuda") = R.add(s_gpu, t)
            R.output(out)
        return out
"""
    planned = _check(source, expected)
    assert planned.copies == 0  # the module's own copy is the only one


def test_hint_on_a_value_known_elsewhere_becomes_a_copy() -> None:
    source = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(x: R.Tensor((2, 2), "float32"), y: R.Tensor((2, 2), "float32"), z: R.Tensor((2, 2), "float32")) -> R.Tensor((2, 2), "float32"):
        with R.dataflow():
            y_cpu = R.hint_on_device(y, R.device(1, 0))
            d = R.divide(x, y_cpu)
            d_gpu = R.hint_on_device(d, R.device(2, 0))
            e = R.multiply(d_gpu, d_gpu)
            z_gpu = R.hint_on_device(z, R.device(2, 0))
            out = R.subtract(e, z_gpu)
            R.output(out)
        return out
"""
    expected = f"""
@I.ir_module
class Expected:{DEVICES}
    @R.function
    def main(x: R.Tensor((2, 2), "float32", "llvm"), y: R.Tensor((2, 2), "float32", "llvm"), z: R.Tensor((2, 2), "float32", "cuda")) -> R.Tensor((2, 2), "float32", "cuda"):
        with R.dataflow():
            y_cpu: R.Tensor((2, 2), "float32", "llvm") = y
            d: R.Tensor((2, 2), "float32", "llvm") = R.divide(x, y_cpu)
            d_gpu: R.Tensor((2, 2), "float32", "cuda") = R.to_vdevice(d, "cuda")
            e: R.Tensor((2, 2), "float32", "cuda") = R.multiply(d_gpu, d_gpu)
            z_gpu: R.Tensor((2, 2), "float32", "cuda") = z
            out: R.Tensor((2, 2), "float32", "cuda") = R.subtract(e, z_gpu)
            R.output(out)
        return out
"""
    _check(source, expected)


def test_unannotated_module_goes_to_the_default_device() -> None:
    """RealizeVDevice leaves it unchanged; the planner applies the default."""
    source = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(x: R.Tensor((2, 2), "float32")) -> R.Tensor((2, 2), "float32"):
        y = R.tanh(x)
        return y
"""
    expected = f"""
@I.ir_module
class Expected:{DEVICES}
    @R.function
    def main(x: R.Tensor((2, 2), "float32", "cuda")) -> R.Tensor((2, 2), "float32", "cuda"):
        y: R.Tensor((2, 2), "float32", "cuda") = R.tanh(x)
        return y
"""
    unchanged, _ = read_relax(source)
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(unchanged), unchanged)
    _check(source, expected)


MIXED = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 3), "float32"):
        a = R.add(x, y)
        b = R.hint_on_device(a, R.device(1, 0))
        c = R.hint_on_device(y, R.device(2, 0))
        d = R.multiply(b, c)
        return d
"""


def test_realize_vdevice_fails_where_we_plan_or_locate_a_conflict() -> None:
    mod, _ = read_relax(MIXED)
    with pytest.raises(Exception, match="same VDevice"):
        relax.transform.RealizeVDevice()(mod)
    for mode in ("tvm", "optimize"):
        try:
            planned = _plan(MIXED, mode=mode)
        except PlanningConflict as conflict:
            lines = {c.span.line for c in conflict.constraints if c.span is not None}
            assert lines & {_line(MIXED, "b = "), _line(MIXED, "c = ")}, conflict  # the hints' lines
            continue
        out = planned.module
        tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(out), out)
        relax.analysis.well_formed(out)
        assert planned.copies >= 1
        tvm.ir.assert_structural_equal(strip_devices(out), strip_devices(mod))


def test_conflicting_pins_are_located_in_the_tvmscript() -> None:
    source = f"""
@I.ir_module
class Input:{DEVICES}
    @R.function
    def main(x: R.Tensor((2,), "float32", "llvm")) -> R.Tensor((2,), "float32", "cuda"):
        y: R.Tensor((2,), "float32", "llvm") = R.exp(x)
        return y
"""
    with pytest.raises(PlanningConflict) as info:
        _plan(source)
    lines = {c.span.line for c in info.value.constraints if c.span is not None}
    assert lines, info.value
    assert lines <= {_line(source, "def main"), _line(source, "y: ")}


def test_call_tir_stays_with_its_inputs_and_is_an_estimate() -> None:
    source = """
@I.ir_module
class Input:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @T.prim_func
    def add_one(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            b[i] = a[i] + T.float32(1)

    @R.function
    def main(x: R.Tensor((4,), "float32", "llvm:1")) -> R.Tensor((4,), "float32"):
        cls = Input
        y = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
        z = R.exp(y)
        return z
"""
    planned = _plan(source, mode="optimize", default_device="cpu:0", host_device="cpu:0")
    out = planned.module
    y = next(b.var for b in out["main"].body.blocks[0].bindings if b.var.name == "y")
    assert int(y.ty.vdevice.vdevice_id) == 1  # with its input x, not on the default cpu:0
    assert planned.result.cost is not None
    assert any("relax.call_tir" in e.message for e in planned.result.cost.estimates)
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(out), out)
    tvm.ir.assert_structural_equal(strip_devices(out), strip_devices(read_relax(source)[0]))


CALLS_AND_IF = """
@I.ir_module
class Input:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def helper(a: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        b = R.exp(a)
        return b

    @R.function
    def main(x: R.Tensor((4,), "float32"), c: R.Tensor((), "bool")) -> R.Tensor((4,), "float32"):
        cls = Input
        y = cls.helper(x)
        z = R.hint_on_device(y, R.device(1, 1))
        if c:
            w = R.negative(z)
            r = w
        else:
            r = R.add(z, R.const(1.0))
        return r
"""


@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_calls_of_other_functions_and_if_follow_the_hint(mode: str) -> None:
    planned = _plan(CALLS_AND_IF, mode=mode, default_device="cpu:0", host_device="cpu:0")
    out = planned.module
    helper = out["helper"]
    assert int(helper.params[0].ty.vdevice.vdevice_id) == 1  # the callee follows its caller's hint
    assert int(out["main"].ret_ty.vdevice.vdevice_id) == 1
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(out), out)
    tvm.ir.assert_structural_equal(strip_devices(out), strip_devices(read_relax(CALLS_AND_IF)[0]))
    relax.analysis.well_formed(out)


SELECTED = """
@I.ir_module
class Input:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        a = R.add(x, y)
        b = R.exp(a)
        c = R.multiply(b, x)
        return c
"""


@pytest.mark.parametrize(
    ("select", "var"),
    [
        ({"at": f"{_line(SELECTED, 'b = ')}:13"}, "b"),
        ({"op": "relax.exp"}, "b"),
        ({"op": "relax.multiply", "index": 0}, "c"),
        ({"param": "@main:y"}, "y"),
    ],
)
def test_selectors_name_relax_bindings(select: dict[str, Any], var: str) -> None:
    pin = {"select": select, "device": "cpu:0"}
    planned = _plan(SELECTED, default_device="cpu:1", host_device="cpu:0", constraints=(pin,))
    main = planned.module["main"]
    types = {p.name: p.ty for p in main.params}
    types.update({b.var.name: b.var.ty for b in main.body.blocks[0].bindings})
    assert int(types[var].vdevice.vdevice_id) == 0
    unpinned = _plan(SELECTED, default_device="cpu:1", host_device="cpu:0").module["main"]
    assert all(int(b.var.ty.vdevice.vdevice_id) == 1 for b in unpinned.body.blocks[0].bindings)
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(planned.module), planned.module)


def test_hint_naming_an_unlisted_device_adds_it() -> None:
    """RealizeVDevice fails on a hint whose device is not in the list; we add it
    (with its type's usual target) and place the hinted value there."""
    source = """
@I.ir_module
class Input:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        a = R.exp(x)
        b = R.hint_on_device(a, R.device(2, 0))
        c = R.negative(b)
        return c
"""
    planned = _plan(source, default_device="cpu", host_device="cpu")
    (vdevice,) = planned.module.global_infos["vdevice"]
    assert str(vdevice.target.kind.name) == "cuda" and int(vdevice.vdevice_id) == 0
    a = planned.module["main"].body.blocks[0].bindings[0]
    assert str(a.var.ty.vdevice.target.kind.name) == "cuda"
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(planned.module), planned.module)
