"""Hypothesis strategies for random well-formed Relay modules (built as ASTs)."""

from __future__ import annotations

from hypothesis import strategies as st

import relay
from relay import ast as A
from relay.device import VirtualDevice, parse_target

T44 = A.TensorType((4, 4), "float32")
CPU = VirtualDevice(1, 0, parse_target("llvm"), "global")
GPU = VirtualDevice(2, 0, parse_target("cuda"), "global")
UNARY = ("exp", "negative", "sigmoid", "tanh", "nn.relu")
BINARY = ("add", "multiply", "subtract")


@st.composite
def tensor_exprs(draw: st.DrawFn, env: list[A.Var], depth: int, fuel: list[int]) -> A.Expr:
    """A tensor-valued expression over the variables in `env`."""
    fuel[0] -= 1
    if depth <= 0 or fuel[0] <= 0:
        choice = draw(st.sampled_from(["var", "var", "const"]))
    else:
        choice = draw(
            st.sampled_from(
                ["var", "const", "unary", "binary", "binary", "let", "if", "tuple", "fn", "on_device", "copy", "ref"]
            )
        )
    if choice == "var":
        return draw(st.sampled_from(env))
    if choice == "const":
        value = draw(st.floats(-4, 4, allow_nan=False, width=32))
        return A.Constant(A.NDArray.scalar(value, "float32"))
    sub = lambda e=env: draw(tensor_exprs(e, depth - 1, fuel))
    if choice == "unary":
        return A.Call(A.op(draw(st.sampled_from(UNARY))), (sub(),), A.Attrs())
    if choice == "binary":
        shared = sub()
        other = shared if draw(st.booleans()) else sub()
        return A.Call(A.op(draw(st.sampled_from(BINARY))), (shared, other), A.Attrs())
    if choice == "let":
        var = A.Var(f"v{fuel[0]}", T44 if draw(st.booleans()) else None)
        value = sub()
        return A.Let(var, value, sub(env + [var]))
    if choice == "if":
        cond = A.Constant(A.NDArray.scalar(draw(st.booleans()), "bool"))
        return A.If(cond, sub(), sub())
    if choice == "tuple":
        fields = (sub(), sub())
        return A.TupleGetItem(A.Tuple(fields), draw(st.integers(0, 1)))
    if choice == "fn":
        param = A.Var(f"p{fuel[0]}", T44)
        func = A.Function((param,), sub(env + [param]), T44)
        return A.Call(func, (sub(),))
    if choice == "on_device":
        device = draw(st.sampled_from([CPU, GPU]))
        flags = draw(st.sampled_from([(True, False), (True, True), (False, False)]))
        return A.on_device(sub(), device, constrain_body=flags[0], constrain_result=flags[1])
    if choice == "copy":
        src, dst = draw(st.permutations([CPU, GPU]))
        return A.device_copy(sub(), src, dst)
    ref = A.RefCreate(sub())
    var = A.Var(f"r{fuel[0]}", None)
    return A.Let(var, ref, A.RefRead(var))


@st.composite
def modules(draw: st.DrawFn) -> A.Module:
    """A module of one to three global functions over 4x4 tensors; later
    functions may call earlier ones."""
    count = draw(st.integers(1, 3))
    functions: list[tuple[A.GlobalVar, A.Function]] = []
    for i in range(count):
        params = tuple(A.Var(f"x{i}_{j}", T44) for j in range(draw(st.integers(1, 3))))
        fuel = [draw(st.integers(3, 25))]
        body = draw(tensor_exprs(list(params), 5, fuel))
        if functions and draw(st.booleans()):
            gv, callee = functions[-1]
            body = A.Call(gv, tuple(body for _ in callee.params))
        name = "main" if i == count - 1 else f"f{i}"
        functions.append((A.GlobalVar(name), A.Function(params, body, T44)))
    return A.Module(tuple(functions), meta={"VirtualDevice": [CPU, GPU]})


__all__ = ["modules", "relay", "tensor_exprs"]
