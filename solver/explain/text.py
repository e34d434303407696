"""Expressions as short one-line text, for messages and explanations."""

from __future__ import annotations

from relay import ast
from relay.ast import Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op, RefRead, Var


def as_written(expr: Expr) -> Expr:
    """The expression the user wrote under the planner's own wrappers (issue
    18): the copies of the conflicting-inputs step and the on_device of a
    request pin carry the span object of what they wrap, which no written
    call does."""
    while (
        isinstance(expr, Call)
        and len(expr.args) == 1
        and isinstance(expr.op, Op)
        and expr.op.name in ("device_copy", "on_device")
        and expr.span is not None
        and expr.span is expr.args[0].span
    ):
        expr = expr.args[0]
    return expr


def short_text(expr: Expr | None, limit: int = 60) -> str:
    """A one-line rendering of an expression as written, for messages."""
    if expr is None:
        return ""
    expr = as_written(expr)
    match expr:
        case Var(name=name):
            text = f"%{name}"
        case GlobalVar(name=name):
            text = f"@{name}"
        case Op(name=name):
            text = name
        case Constructor(name=name):
            text = name
        case Constant():
            text = "constant"
        case Call(op=op, args=args):
            head = short_text(op, 30) if isinstance(op, (Op, GlobalVar, Var, Constructor)) else "(...)"
            inner = ", ".join(
                short_text(a, 20) if isinstance(a, (Var, GlobalVar, Constant)) else "..." for a in args
            )
            text = f"{head}({inner})"
        case Function(params=params):
            text = "fn(" + ", ".join(f"%{p.name}" for p in params) + ") {...}"
        case Let(var=var):
            text = f"let %{var.name} = ...; ..."
        case If():
            text = "if (...) {...} else {...}"
        case ast.Tuple(fields=fields):
            text = f"({', '.join('...' for _ in fields)})"
        case ast.TupleGetItem(index=i):
            text = f"(...).{i}"
        case ast.RefCreate():
            text = "ref(...)"
        case RefRead():
            text = "ref_read(...)"
        case ast.RefWrite():
            text = "ref_write(...)"
        case Match():
            text = "match (...) {...}"
        case _:
            text = type(expr).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
