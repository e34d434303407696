"""Unit tests of the planner's building blocks: domains, shapes, explanations."""

from __future__ import annotations

import pytest

import relay
import solver
from relay.ast import Call, Function, FuncType, TensorType, TupleType, Var, on_device, op
from relay.device import VirtualDevice, parse_target
from solver.domains import DomainSystem, Incompatible
from solver.shapes import FnShape, TupShape, type_shape

CPU = VirtualDevice(1, 0, parse_target("llvm"))
CUDA = VirtualDevice(2, 0, parse_target("cuda"))
T = TensorType((4,), "float32")


def _system() -> DomainSystem:
    return DomainSystem({1: CPU.target, 2: CUDA.target})  # type: ignore[dict-item]


def test_union_joins_partial_devices() -> None:
    ds = _system()
    a, b = ds.new(), ds.new()
    ds.pin(a, VirtualDevice(device_type=2), ds.tag("annotation", None))
    ds.pin(b, VirtualDevice(memory_scope="global"), ds.tag("annotation", None))
    ds.union(a, b, ds.tag("let", None))
    joined = ds.device(a)
    # the join is canonical: the device type brought its target along
    assert (joined.device_type, joined.target, joined.memory_scope) == (2, CUDA.target, "global")
    assert ds.device(b) is joined


def test_incompatible_union_is_refused() -> None:
    ds = _system()
    a, b = ds.new(), ds.new()
    ds.pin(a, CPU, ds.tag("annotation", None))
    ds.pin(b, CUDA, ds.tag("annotation", None))
    with pytest.raises(Incompatible):
        ds.union(a, b, ds.tag("call site", None))


def test_try_unify_rolls_back_partial_work() -> None:
    ds = _system()
    p1, r1, p2, r2 = ds.new(), ds.new(), ds.new(), ds.new()
    ds.pin(r1, CPU, ds.tag("annotation", None))
    ds.pin(r2, CUDA, ds.tag("annotation", None))
    # fn(p1):r1 vs fn(p2):r2: the parameters unify, then the results fail.
    assert not ds.try_unify((p1, r1), (p2, r2), ds.tag("free on_device", None, hard=False))
    assert ds.find(p1) != ds.find(p2)
    assert ds.device(r1) == CPU and ds.device(r2) == CUDA
    assert ds.try_unify((p1, r1), (p2, ds.new()), ds.tag("free on_device", None, hard=False))
    assert ds.find(p1) == ds.find(p2)


def test_defaults_fill_only_free_fields() -> None:
    ds = _system()
    a = ds.new()
    ds.pin(a, VirtualDevice(memory_scope="texture"), ds.tag("annotation", None))
    ds.set_default(a, CUDA, ds.tag("default", None, hard=False))
    assert ds.device(a) == VirtualDevice(2, 0, CUDA.target, "texture")
    b = ds.new()
    ds.pin(b, CPU, ds.tag("annotation", None))
    ds.set_default(b, CUDA, ds.tag("default", None, hard=False))
    assert ds.device(b) == CPU


def test_result_then_params() -> None:
    ds = _system()
    fn = (ds.new(), ds.new(), ds.new())
    ds.pin(fn[0], CPU, ds.tag("annotation", None))
    ds.set_result_default_then_params(fn, CUDA, ds.tag("default", None, hard=False))
    assert [ds.device(x) for x in fn] == [CPU, CUDA, CUDA]


def test_collapse_forces_function_domains_onto_container() -> None:
    ds = _system()
    container = ds.new()
    ds.pin(container, CPU, ds.tag("annotation", None))
    fn = ds.free(FnShape((None, FnShape((None,), None)), None))
    ds.unify_collapsed(container, fn, ds.tag("tuple", None))
    assert isinstance(fn, tuple)
    # Every class inside the function domain, nested ones included.
    classes, stack = [], list(fn)
    while stack:
        d = stack.pop()
        if isinstance(d, int):
            classes.append(d)
        else:
            stack.extend(d)
    assert len(classes) == 4
    assert all(ds.device(x) == CPU for x in classes)


def test_type_shapes() -> None:
    fty = FuncType((T, FuncType((T,), T)), T)
    assert type_shape(fty) == FnShape((None, FnShape((None,), None)), None)
    assert type_shape(TupleType((T, fty))) == TupShape((None, type_shape(fty)))
    assert type_shape(TupleType((T, T))) is None
    assert type_shape(T) is None


def test_plan_leaves_input_untouched() -> None:
    x = Var("x", T)
    func = Function((x,), Call(op("exp"), (x,)), T)
    module = relay.Module(functions=((relay.GlobalVar("main"), func),))
    before = relay.print_text(module)
    result = solver.plan(module, solver.PlanConfig())
    assert relay.print_text(module) == before
    assert result.module is not module
    assert module.functions[0][1].params[0].virtual_device is None


def test_z3_check_is_optional_and_agrees() -> None:
    """TVM mode skips the Z3 re-check unless asked; both give the same module,
    and the statistics say whether the check ran instead of reporting zeros."""
    x = Var("x", T)
    body = on_device(Call(op("exp"), (x,)), CPU, constrain_body=True, constrain_result=False)
    func = Function((x,), Call(op("negative"), (body,)), T)
    module = relay.Module(functions=((relay.GlobalVar("main"), func),))
    plain = solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda")))
    checked = solver.plan(module, solver.PlanConfig(virtual_devices=("cpu", "cuda"), z3_check=True))
    assert relay.print_text(plain.module) == relay.print_text(checked.module)
    assert not plain.stats.z3_checked and "z3" not in plain.stats.time_ms
    assert plain.stats.variables is None and plain.stats.z3_constraints is None
    assert checked.stats.z3_checked and "z3" in checked.stats.time_ms
    assert checked.stats.variables is not None and checked.stats.variables > 0
    assert len(plain.copies) == len(checked.copies) == 1
