"""Well-formedness checks for a Relay module.

`verify` raises VerifyError naming the first bad node and its span: a
variable used outside the scope that binds it, a variable bound twice, a call
of an undefined global, a constructor applied to the wrong number of
arguments, a call of a function literal with the wrong number of arguments,
a meta reference past the end of a known table, `on_device` / `device_copy`
with other than one argument. Symbolic meta placeholders (no table) are fine.
"""

from __future__ import annotations

from typing import Any

from . import ast as A
from .span import VerifyError
from .traverse import binders, post_order, walk


def verify(module: A.Module, *, check_types: bool = False) -> None:
    """Raise VerifyError if `module` is not well formed; return None if it is.

    With `check_types`, also infer its types: a type error raises
    `relay.TypeInferenceError`, and an expression whose type is unknown (a
    call of an operator with no type relation, a parameter with no written
    or inferable type) is a VerifyError at that node.
    """
    _Verifier(module).run()
    if check_types:
        _check_types(module)


def _check_types(module: A.Module) -> None:
    from .infer import UNKNOWN, infer_types

    types = infer_types(module)
    roots: list[A.Expr] = [func for _, func in module.functions]
    if module.expr is not None:
        roots.append(module.expr)
    for node in post_order(roots):
        if types.of(node) is not UNKNOWN:
            continue
        if isinstance(node, A.Call) and isinstance(node.op, A.Op) and node.op.name in types.unknown_ops:
            raise VerifyError(
                f"operator {node.op.name} has no type relation: its result type is unknown", node.span
            )
        if isinstance(node, A.Function):
            for param in node.params:
                if types.of(param) is UNKNOWN:
                    raise VerifyError(f"the type of parameter %{param.name} is unknown", param.span)


class _Verifier:
    def __init__(self, module: A.Module) -> None:
        self.module = module
        self.globals = {gv.name: len(func.params) for gv, func in module.functions}
        self.ctors = {c.name: c for td in module.type_definitions for c in td.constructors}

    def run(self) -> None:
        names: set[str] = set()
        for gv, func in self.module.functions:
            if gv.name in names:
                raise VerifyError(f"global function @{gv.name} is defined twice", gv.span)
            names.add(gv.name)
            self.check(func, free_ok=False)
        if self.module.expr is not None:
            self.check(self.module.expr, free_ok=True)

    def check(self, root: A.Expr, *, free_ok: bool) -> None:
        """Walk `root` once, tracking which variables are in scope.

        A shared node is checked once, in the first scope that reaches it;
        every use of a variable is checked against the scope it is used in.
        """
        in_scope: dict[int, int] = {}  # id(var) -> nesting count
        bound_ever: set[int] = set()

        def bind(node: A.Expr, index: int) -> None:
            for var in binders(node, index):
                if id(var) in bound_ever:
                    raise VerifyError(f"variable %{var.name} is bound more than once", var.span)
                bound_ever.add(id(var))
                in_scope[id(var)] = in_scope.get(id(var), 0) + 1

        def unbind(node: A.Expr, index: int) -> None:
            for var in binders(node, index):
                in_scope[id(var)] -= 1

        def use(var: A.Var) -> None:
            if in_scope.get(id(var), 0) > 0:
                return
            if id(var) in bound_ever:
                raise VerifyError(f"variable %{var.name} is used outside the scope that binds it", var.span)
            if not free_ok:
                raise VerifyError(f"unbound variable %{var.name}", var.span)

        walk(root, pre=self.local_checks, bind=bind, unbind=unbind, use=use)

    def local_checks(self, node: A.Expr) -> None:
        if type(node) is A.Var:  # the common case: uses are checked by `check`
            return
        match node:
            case A.GlobalVar(name=name):
                if name not in self.globals:
                    raise VerifyError(f"@{name} is not a global function of this module", node.span)
            case A.Constructor(name=name):
                if name not in self.ctors:
                    raise VerifyError(f"constructor {name} has no type definition in this module", node.span)
            case A.Constant(data=None, meta_index=index):
                table = self.module.meta.get("relay.Constant")
                if table is not None and index is not None and index >= len(table):
                    raise VerifyError(
                        f"meta[relay.Constant][{index}] is past the end of the table ({len(table)} entries)",
                        node.span,
                    )
            case A.Call(op=callee, args=args, attrs=attrs):
                if isinstance(callee, A.Constructor) and len(args) != len(callee.inputs):
                    raise VerifyError(
                        f"constructor {callee.name} takes {len(callee.inputs)} arguments, given {len(args)}",
                        node.span,
                    )
                if isinstance(callee, A.GlobalVar) and self.globals.get(callee.name, len(args)) != len(args):
                    raise VerifyError(
                        f"@{callee.name} takes {self.globals[callee.name]} arguments, given {len(args)}", node.span
                    )
                if isinstance(callee, A.Function) and len(args) != len(callee.params):
                    raise VerifyError(
                        f"function takes {len(callee.params)} arguments, given {len(args)}", node.span
                    )
                if (
                    isinstance(callee, A.Op)
                    and callee.name in (A.ON_DEVICE, A.DEVICE_COPY)
                    and len(args) != 1
                ):
                    raise VerifyError(
                        f"{callee.name} takes exactly one argument, given {len(args)}", node.span
                    )
                if attrs is not None:
                    for _, value in attrs.fields:
                        self.meta_value(value, node)
            case A.Function(params=params, virtual_device=device):
                self.meta_value(device, node)
                for p in params:
                    self.meta_value(p.virtual_device, p)

    def meta_value(self, value: Any, node: A.Expr) -> None:
        if isinstance(value, A.MetaRef):
            table = self.module.meta.get(value.kind)
            if table is not None and value.index >= len(table):
                raise VerifyError(
                    f"meta[{value.kind}][{value.index}] is past the end of the table ({len(table)} entries)",
                    node.span,
                )
        elif isinstance(value, tuple):
            for v in value:
                self.meta_value(v, node)
