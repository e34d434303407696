"""Rewrites the bridge's build applies before legalization, so that TVM 0.27 can
build what PyTorch exports.

TVM 0.27's llvm code generator has no integer path for `bool` (LLVM's `i1`) in
several places: it takes an `i1` add, multiply, min or max for a float one and
stops (`CodeGenLLVM::CreateAdd`: "Check failed: (t.MatchesCode(kDLFloat)) is
false"), emits a float comparison of `i1` values that LLVM's verifier refuses
(`fcmp oeq i1 %a, %b`), and cannot give a reduction over `bool` its start value
("Cannot decide min_value for type bool"). Hugging Face attention masks (GPT-2,
Llama) compute a `bool` cumsum and a `bool` equal, so plain `tvm.compile` fails
on them just as the bridge did.

Each rewrite computes the same values in a dtype the code generator handles:
the `bool` operands cast to an integer dtype, the operator as written, and its
result cast back to `bool` where it was `bool`. On 0/1 operands these are
exactly numpy's `bool` semantics (a `bool` sum is a logical or, a product a
logical and, a cumulative sum stays true once true). The table is `REWRITES`;
`rewrite_for_build` applies it to the module the bridge compiles (never to the
planned module a caller receives), and the same `compile` builds the run
check's reference, so both go through the same rewrites.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import relax

_BOOL = "bool"


def _same_attrs(call: Any, args: list[Any], _compute: str) -> Any:
    """The operator as written, on the cast operands."""
    return relax.Call(call.op, args, call.attrs, span=call.span)


def _scan(call: Any, args: list[Any], compute: str) -> Any:
    """A cumulative sum or product accumulated in `compute` (its `dtype`
    attribute would otherwise keep the accumulator `bool`)."""
    make = relax.op.cumsum if call.op.name == "relax.cumsum" else relax.op.cumprod
    axis = call.attrs.axis
    return make(
        args[0],
        axis=None if axis is None else int(axis),
        dtype=compute,
        exclusive=bool(call.attrs.exclusive),
    )


@dataclass(frozen=True, slots=True)
class DtypeRewrite:
    """Operators TVM 0.27 cannot build for the cpu on `bool` operands: computed on
    those operands cast to `compute`, their `bool` result cast back. `avoids` is
    TVM's failure without the rewrite."""

    family: str
    ops: tuple[str, ...]
    compute: str
    avoids: str
    remake: Callable[[Any, list[Any], str], Any] = _same_attrs


REWRITES: tuple[DtypeRewrite, ...] = (
    DtypeRewrite(
        "scan",
        ("relax.cumsum", "relax.cumprod"),
        "int32",
        "CodeGenLLVM::CreateAdd / CreateMul: Check failed: (t.MatchesCode(kDLFloat)) is false "
        "(the scan's running sum is an i1 add)",
        _scan,
    ),
    DtypeRewrite(
        "comparison",
        (
            "relax.equal",
            "relax.not_equal",
            "relax.less",
            "relax.less_equal",
            "relax.greater",
            "relax.greater_equal",
        ),
        "int8",
        "equal, not_equal: LLVM refuses `fcmp oeq i1` (a float comparison of i1); the ordered "
        "ones: CodeGenLLVM::CreateLT etc.: Check failed: (t.MatchesCode(kDLFloat)) is false",
    ),
    DtypeRewrite(
        "elementwise",
        ("relax.add", "relax.multiply", "relax.maximum", "relax.minimum"),
        "int8",
        "CodeGenLLVM::CreateAdd / CreateMul / min / max: Check failed: (t.MatchesCode(kDLFloat)) is false",
    ),
    DtypeRewrite(
        "reduction",
        ("relax.max", "relax.min", "relax.argmax", "relax.argmin"),
        "int8",
        "Cannot decide min_value (max_value) for type bool: the reduction's start value",
    ),
)

_BY_OP: dict[str, DtypeRewrite] = {op: rule for rule in REWRITES for op in rule.ops}


def _dtype(expr: Any) -> str | None:
    ty = getattr(expr, "ty", None)
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else None


def _applies(call: Any) -> DtypeRewrite | None:
    """The rewrite for `call`: a table operator with a `bool` tensor operand."""
    op = call.op
    if not isinstance(op, tvm.ir.Op):
        return None
    rule = _BY_OP.get(str(op.name))
    if rule is None or not any(_dtype(arg) == _BOOL for arg in call.args):
        return None
    return rule


@relax.expr_functor.mutator
class _BoolRewriter(relax.PyExprMutator):  # type: ignore[misc]
    """Emit each table operator's cast operands and cast-back result as bindings of
    their own, just before the binding they replace."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.mod_ = mod

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        rule = _applies(call)
        if rule is None:
            return call
        args = [
            self.builder_.emit(relax.op.astype(arg, rule.compute)) if _dtype(arg) == _BOOL else arg
            for arg in call.args
        ]
        value = self.builder_.normalize(rule.remake(call, args, rule.compute))
        if _dtype(call) == _BOOL and _dtype(value) != _BOOL:  # a comparison's result is bool already
            value = relax.op.astype(self.builder_.emit(value), _BOOL)
        return value

    def run(self) -> tvm.IRModule:
        for gv, func in self.mod_.functions_items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gv, self.visit_expr(func))
        result: tvm.IRModule = self.builder_.get()
        return result


def _needs_rewrite(mod: tvm.IRModule) -> bool:
    found = False

    def visit(expr: Any) -> None:
        nonlocal found
        found = found or (isinstance(expr, relax.Call) and _applies(expr) is not None)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def rewrite_for_build(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with every call that `REWRITES` names computed in its integer dtype; the
    module itself when there is none (so a module without them builds as before)."""
    if not _needs_rewrite(mod):
        return mod
    return _BoolRewriter(mod).run()
