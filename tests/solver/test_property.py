"""Property test: random well-typed programs with random annotations either plan
(output verifies, planning is idempotent, every device change goes through a
device_copy) or raise PlanningConflict; never anything else."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay
import solver
from relay.ast import Call, Function, Let, Op, device_copy_props, on_device_props
from relay.traverse import post_order

T = "Tensor[(4), float32]"
CFG = solver.PlanConfig(virtual_devices=("cpu", "cuda"), z3_check=True)
# With memory scopes TVM's greedy defaults are not idempotent (a parameter
# defaulted before a scope reaches the function result keeps the scope-less
# device; re-planning sees the scope first), so that variant checks validity only.
SCOPED = solver.PlanConfig(
    virtual_devices=("cpu", "cuda", {"device_type": "cpu", "memory_scope": "global"}), z3_check=True
)
UNARY = ("negative", "exp", "tanh", "sigmoid")
BINARY = ("add", "multiply", "subtract")


@st.composite
def programs(draw: st.DrawFn, devices: int = 2) -> str:
    """A @main over three tensors with lets, local functions, tuples, if and annotations."""
    n_params = 3
    values = [f"%x{i}" for i in range(n_params)]
    lines: list[str] = []
    counter = 0
    helper: list[str] = []

    def fresh() -> str:
        nonlocal counter
        counter += 1
        return f"%v{counter}"

    def device() -> str:
        return f"meta[VirtualDevice][{draw(st.integers(0, devices - 1))}]"

    if draw(st.booleans()):
        ann = f" {{virtual_device={device()}}}" if draw(st.booleans()) else ""
        body_ann = draw(st.sampled_from(["", "on_device"]))
        body = "negative(%a)" if not body_ann else f"on_device(negative(%a), virtual_device={device()})"
        helper.append(f"def @g(%a{ann}: {T}) -> {T} {{\n  {body}\n}}\n")
    steps = draw(st.integers(1, 10))
    for _ in range(steps):
        kind = draw(
            st.sampled_from(["unary", "binary", "on_device", "copy", "let", "tuple", "fn", "if", "global"])
        )
        a = draw(st.sampled_from(values))
        b = draw(st.sampled_from(values))
        v = fresh()
        if kind == "unary":
            expr = f"{draw(st.sampled_from(UNARY))}({a})"
        elif kind == "binary":
            expr = f"{draw(st.sampled_from(BINARY))}({a}, {b})"
        elif kind == "on_device":
            flags = draw(st.sampled_from(["", ", constrain_result=True", ", constrain_body=False"]))
            expr = f"on_device({a}, virtual_device={device()}{flags})"
        elif kind == "copy":
            expr = f"device_copy({a}, src_virtual_device={device()}, dst_virtual_device={device()})"
        elif kind == "let":
            w = fresh()
            lines.append(f"  let {w}: {T} = {draw(st.sampled_from(UNARY))}({a});")
            values.append(w)
            continue
        elif kind == "tuple":
            expr = f"({a}, {b}).{draw(st.integers(0, 1))}"
        elif kind == "fn":
            f = fresh()
            inner = "%p" if not draw(st.booleans()) else f"on_device(%p, virtual_device={device()})"
            lines.append(f"  let {f} = fn (%p: {T}) -> {T} {{ add({inner}, {a}) }};")
            expr = f"{f}({b})"
        elif kind == "if":
            expr = f"if (True) {{ {a} }} else {{ exp({b}) }}"
        else:
            if not helper:
                continue
            expr = f"@g({a})"
        lines.append(f"  let {v}: {T} = {expr};")
        values.append(v)
    result = values[-1]
    params = ", ".join(f"%x{i}: {T}" for i in range(n_params))
    main = f"def @main({params}) -> {T} {{\n" + "\n".join(lines) + f"\n  {result}\n}}\n"
    return '#[version = "0.0.5"]\n' + "".join(helper) + main


def _has_cross_device_function(module: relay.Module) -> bool:
    for node in post_order([f for _, f in module.functions]):
        if (
            isinstance(node, Function)
            and not node.is_primitive
            and any(p.virtual_device != node.virtual_device for p in node.params)
        ):
            return True
    return False


def _count_copies(module: relay.Module) -> int:
    roots = [f for _, f in module.functions]
    return sum(1 for n in post_order(roots) if device_copy_props(n) is not None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_plan_or_conflict(text: str) -> None:
    module = relay.parse_text(text)
    try:
        result = solver.plan(module, CFG)
    except solver.PlanningConflict as err:
        assert err.constraints
        return
    out = result.module
    relay.verify(out)
    assert len(result.copies) <= _count_copies(out)
    for _, src, dst in result.copies:
        assert src != dst
    # Idempotence: planning the output changes nothing and adds no copy, so
    # every device boundary in the output already has its device_copy.
    printed = relay.print_text(out)
    try:
        again = solver.plan(relay.parse_text(printed), solver.PlanConfig())
    except solver.PlanningConflict:
        # TVM's conflicting-inputs walk (section 3) assumes every call argument
        # lives where the call does; re-planning an output in which a function
        # takes a parameter on another device than its result can therefore
        # fail, in TVM as here. Anything else must re-plan.
        assert _has_cross_device_function(out), printed
        return
    if not _has_cross_device_function(out):
        assert relay.structural_equal(again.module, out), printed
        assert _count_copies(again.module) == _count_copies(out)
    # Every function and parameter carries its device; no free on_device remains.
    for node in post_order([f for _, f in out.functions]):
        if isinstance(node, Function) and not node.is_primitive:
            assert node.virtual_device is not None
            assert all(p.virtual_device is not None for p in node.params)
        props = on_device_props(node)
        if props is not None:
            assert props.constrain_result and props.constrain_body
        if isinstance(node, Let):
            assert not isinstance(node.value, Op)
        if isinstance(node, Call) and device_copy_props(node) is not None:
            p = device_copy_props(node)
            assert p is not None and p.src != p.dst


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(devices=3))
def test_random_scoped_programs_plan_or_conflict(text: str) -> None:
    module = relay.parse_text(text)
    try:
        result = solver.plan(module, SCOPED)
    except solver.PlanningConflict as err:
        assert err.constraints
        return
    relay.verify(result.module)
    for _, src, dst in result.copies:
        assert src != dst
    # The output is a consistent plan: planning it again succeeds (up to TVM's
    # conflicting-inputs limitation, see above).
    printed = relay.print_text(result.module)
    try:
        solver.plan(relay.parse_text(printed), solver.PlanConfig())
    except solver.PlanningConflict:
        assert _has_cross_device_function(result.module), printed
