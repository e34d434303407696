"""The type-check step: what TVM 0.19 checks before it plans devices.

TVM's Relay parser rejects an operator name it does not register ("operator
`negatve` not found"), and `PlanDevices` starts from a type-checked module
(`InferType`), so an ill-typed module never gets a plan. This step does the
same on our own type inference (`relay.infer_types`): an unknown operator
name is a `relay.ParseError` (the service's 400 `malformed-module`), a type
error a `relay.TypeInferenceError` with its span and both types (400
`type-error`). An operator TVM registers but for which we have no type
relation is not an error: its result type is unknown, and the report lists
it (`unchecked_ops`) so a client knows what went unchecked.

The operator-name check is always on for Relay (it is a parse error in TVM);
the type check can be skipped (`check_types=False`). A module translated from
Relax (`language="relax"`) skips both: its operators keep their
Relax names, which the bridge checked against the installed TVM's Relax
registry, and TVM type-checked it when it read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import relay
from relay import ast
from relay.span import ParseError
from relay.traverse import pre_order

from .tvm_ops import TVM_019_OPERATORS

__all__ = ["TypeReport", "check_operator_names", "type_check"]


@dataclass(frozen=True)
class TypeReport:
    """What the type check found: the registered operators it could not check
    (no type relation), sorted; `checked` is False when the check was skipped."""

    unchecked_ops: tuple[str, ...] = ()
    checked: bool = True


def _roots(module: ast.Module) -> list[ast.Expr]:
    roots: list[ast.Expr] = [func for _, func in module.functions]
    if module.expr is not None:
        roots.append(module.expr)
    return roots


def check_operator_names(module: ast.Module) -> None:
    """Raise `relay.ParseError` at the first call of an operator TVM 0.19 does
    not register (in source order), as TVM's parser does."""
    known = TVM_019_OPERATORS
    for node in pre_order(_roots(module)):
        if isinstance(node, ast.Call):
            op = node.op
            if isinstance(op, ast.Op) and op.name not in known:
                raise ParseError(
                    f"operator `{op.name}` not found (TVM 0.19 registers no operator of that name)",
                    node.span,
                )


def type_check(module: ast.Module, *, check_types: bool = True, language: str = "relay") -> TypeReport:
    """Check operator names and (unless `check_types` is False) types of a
    Relay module; a translated Relax module (`language="relax"`) is not
    checked here (see the module docstring).

    Raises `relay.ParseError` for an unknown operator name and
    `relay.TypeInferenceError` for an ill-typed module.
    """
    if language == "relax":
        return TypeReport(checked=False)
    check_operator_names(module)
    if not check_types:
        return TypeReport(checked=False)
    types = relay.infer_types(module)
    return TypeReport(unchecked_ops=tuple(sorted(types.unknown_ops)))
