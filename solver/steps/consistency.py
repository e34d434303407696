"""The always-on check after every rewrite: a planned module is consistent.

Reads the planned module as a downstream pass would (docs/planning.md,
section 5: a function body is on the function's `virtual_device`, a
parameter on its own, `on_device(e, d)` puts `e` on `d`, `device_copy(e, s,
t)` reads `e` on `s`, everything else is on its lexical device) and checks
every edge: an operator's arguments are on the operator's device, a copy's
argument on its source device, a function call's arguments on the callee's
parameter devices, a function's body on its result device, and no
expression is read on two devices. A violation is a planner bug, so it
raises `InternalInconsistency` (the service answers 500 with a request id),
never a plan that a client would trust.

One iterative pass, each node entered once (a shared node read on a second device is a violation); its own
reading, sharing nothing with the planner's collection or rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay import ast
from relay.ast import Call, Constructor, Expr, Function, GlobalVar, Let, Match, Module, Op, Var
from relay.device import VirtualDevice, device_name
from relay.span import Span

__all__ = ["Edge", "InternalInconsistency", "check_consistent", "find_violations", "operator_placements"]

# Operators whose arguments are not all on the call's device: per argument
# "host", "same" (the call's device) or "any"; then where the result is
# ("host", "same", or "attr": the call's virtual_device attribute).
_SLOTS: dict[str, tuple[tuple[str, ...], str]] = {
    "vm.shape_of": (("any",), "host"),
    "memory.alloc_storage": (("host", "host", "host"), "attr"),
    "memory.alloc_tensor": (("same", "host", "host"), "same"),
    "vm.reshape_tensor": (("same", "host"), "same"),
    "vm.invoke_tvm_op": (("any", "same", "same"), "same"),
}

# Nodes whose own value is on their lexical device (so reading them on two
# devices is a missing copy).
_LEXICAL = (ast.Tuple, ast.If, Match, ast.RefCreate, ast.RefRead, ast.RefWrite, ast.Constant)


@dataclass(frozen=True)
class Edge:
    """One use of a value on a device other than its own, without a copy."""

    span: Span | None
    what: str
    value_device: VirtualDevice
    used_on: VirtualDevice

    def __str__(self) -> str:
        where = f"{self.span.line}:{self.span.column}" if self.span is not None else "?"
        return (
            f"{where}: {self.what} on {device_name(self.value_device)} is used on "
            f"{device_name(self.used_on)} without a device_copy"
        )


class InternalInconsistency(RuntimeError):
    """The planner produced a module in which a value crosses devices without a
    copy. Not a RelayError: it is our bug, not the user's module."""

    def __init__(self, edges: list[Edge]) -> None:
        shown = "; ".join(str(e) for e in edges[:5])
        more = f" (and {len(edges) - 5} more)" if len(edges) > 5 else ""
        super().__init__(f"internal error: the planned module is inconsistent: {shown}{more}")
        self.edges = edges


def _device(value: object) -> VirtualDevice | None:
    if isinstance(value, VirtualDevice) and not value.is_fully_unconstrained:
        return value
    return None


def _same(a: VirtualDevice, b: VirtualDevice) -> bool:
    """One device as TVM reads it: each field equal or unconstrained on one side
    (a user's `device_copy(..., src_virtual_device=cpu)` leaves the memory scope
    open, and the copy reads a `cpu` value of any scope)."""
    return a is b or a == b or a.compatible(b)


def _label(expr: Expr) -> str:
    if isinstance(expr, Call):
        op = expr.op
        name = op.name if isinstance(op, (Op, GlobalVar, Constructor)) else "a call"
        return f"{name}(...)"
    if isinstance(expr, Var):
        return f"%{expr.name}"
    return type(expr).__name__.lower()


_ENTER, _EXIT, _BIND = 0, 1, 2


class _Walk:
    """The state of one check: values' devices and the violations found."""

    def __init__(self, module: Module, host: VirtualDevice | None) -> None:
        self.host = host
        self.globals = {gv.name: f for gv, f in module.functions}
        # node or variable -> device of its value (for a node whose value is on its
        # lexical device, that device: no second table, big modules stay cheap)
        self.value: dict[int, VirtualDevice | None] = {}
        self.functions: dict[int, Function] = {}  # let-bound variable -> the function it names
        self.edges: list[Edge] = []
        # Operator calls with the device they run on (a Primitive function's
        # body operators run where the call does).
        self.placements: list[tuple[Call, VirtualDevice | None]] = []

    def use(self, child: Expr, have: VirtualDevice | None, want: VirtualDevice | None) -> None:
        if have is not None and want is not None and not _same(have, want):
            self.edges.append(Edge(child.span, _label(child), have, want))

    def callee(self, call: Call) -> Function | None:
        op = call.op
        if isinstance(op, Function):
            return op
        if isinstance(op, GlobalVar):
            return self.globals.get(op.name)
        if isinstance(op, Var):
            return self.functions.get(id(op))
        return None

    def run(self, func: Function) -> None:
        # Work items: (_ENTER, node, lexical device, wanted device),
        # (_EXIT, node, lexical device, None), (_BIND, let, None, None).
        stack: list[tuple[int, Expr, VirtualDevice | None, VirtualDevice | None]] = [
            (_ENTER, func, None, None)
        ]
        value = self.value
        while stack:
            action, node, here, want = stack.pop()
            if action == _BIND:
                assert isinstance(node, Let)
                value[id(node.var)] = value.get(id(node.value))
                if isinstance(node.value, Function):
                    self.functions[id(node.var)] = node.value
                elif isinstance(node.value, Var) and id(node.value) in self.functions:
                    self.functions[id(node.var)] = self.functions[id(node.value)]
                continue
            if action == _EXIT:
                value[id(node)] = got = self.exit(node, here)
                self.use(node, got, want)
                continue
            t = type(node)
            if t is Var:
                self.use(node, value.get(id(node)), want)
                continue
            if t is Op or t is Constructor or t is GlobalVar:
                continue
            key = id(node)
            if key in value:  # shared node, already read
                if isinstance(node, _LEXICAL) or (isinstance(node, Call) and self._lexical_call(node)):
                    seen = value[key]  # its value is on the lexical device it was first read on
                    if seen is not None and here is not None and not _same(seen, here):
                        self.edges.append(Edge(node.span, _label(node), seen, here))
                        continue
                self.use(node, value[key], want)
                continue
            if t is Let or t is ast.TupleGetItem:
                # Their value is their body's / tuple's: known after the children.
                stack.append((_EXIT, node, here, want))
            else:
                # Known now (written on the node, the callee's, or the lexical
                # device): no exit item, so a deep chain keeps a short stack.
                value[key] = got = self.exit(node, here)
                self.use(node, got, want)
            self.enter(node, here, stack)

    @staticmethod
    def _lexical_call(call: Call) -> bool:
        """Operator calls whose value is on the device they are read on."""
        op = call.op
        if isinstance(op, Op):
            slots = _SLOTS.get(op.name)
            return op.name not in ("on_device", "device_copy") and (slots is None or slots[1] == "same")
        return isinstance(op, Constructor)

    def enter(
        self,
        node: Expr,
        here: VirtualDevice | None,
        stack: list[tuple[int, Expr, VirtualDevice | None, VirtualDevice | None]],
    ) -> None:
        """Push `node`'s children with the lexical and wanted device of each."""
        push = stack.append
        if isinstance(node, Function):
            if node.is_primitive:
                return
            for p in node.params:
                self.value[id(p)] = _device(p.virtual_device)
            result = _device(node.virtual_device)
            push((_ENTER, node.body, result, result))
            return
        if isinstance(node, Call):
            op = node.op
            attrs = node.attrs
            if isinstance(op, Op):
                name = op.name
                if name == "on_device":
                    d = _device(attrs.get("virtual_device")) if attrs is not None else None
                    push((_ENTER, node.args[0], d, d))
                    return
                if name == "device_copy":
                    s = _device(attrs.get("src_virtual_device")) if attrs is not None else None
                    push((_ENTER, node.args[0], s, s))
                    return
                slots = _SLOTS.get(name)
                if slots is not None:
                    for slot, arg in reversed(list(zip(slots[0], node.args))):
                        if slot == "host":
                            push((_ENTER, arg, self.host, self.host))
                        else:
                            push((_ENTER, arg, here, here if slot == "same" else None))
                    return
                self.placements.append((node, here))
                for arg in reversed(node.args):
                    push((_ENTER, arg, here, here))
                return
            if isinstance(op, Constructor):
                for arg in reversed(node.args):
                    push((_ENTER, arg, here, here))
                return
            callee = self.callee(node)
            if callee is not None and not callee.is_primitive:
                params = callee.params
                for i in range(len(node.args) - 1, -1, -1):
                    param = params[i] if i < len(params) else None
                    wanted = None
                    if param is not None and not isinstance(param.type_annotation, ast.FuncType):
                        wanted = _device(param.virtual_device)
                    push((_ENTER, node.args[i], here, wanted))
            else:
                # A Primitive function (its parameters' devices are each call's,
                # written nowhere) or a function value we cannot see.
                if callee is not None:
                    self.placements.extend((c, here) for c in _body_operators(callee))
                for arg in reversed(node.args):
                    push((_ENTER, arg, here, None))
            if not isinstance(op, (Var, GlobalVar)):
                push((_ENTER, op, here, None))
            return
        if isinstance(node, Let):
            push((_ENTER, node.body, here, here))
            push((_BIND, node, None, None))
            push((_ENTER, node.value, here, None))
            return
        if isinstance(node, ast.TupleGetItem):
            push((_ENTER, node.tuple_value, here, here))
            return
        if isinstance(node, Match):
            for clause in reversed(node.clauses):
                push((_ENTER, clause.rhs, here, here))
            for clause in node.clauses:
                for v in ast.pattern_vars(clause.lhs):
                    self.value[id(v)] = here
            push((_ENTER, node.data, here, here))
            return
        if isinstance(node, ast.Tuple):
            for f in reversed(node.fields):
                push((_ENTER, f, here, here))
            return
        if isinstance(node, ast.If):
            push((_ENTER, node.false_branch, here, here))
            push((_ENTER, node.true_branch, here, here))
            push((_ENTER, node.cond, here, here))
            return
        if isinstance(node, ast.RefCreate):
            push((_ENTER, node.value, here, here))
        elif isinstance(node, ast.RefRead):
            push((_ENTER, node.ref, here, here))
        elif isinstance(node, ast.RefWrite):
            push((_ENTER, node.value, here, here))
            push((_ENTER, node.ref, here, here))

    def exit(self, node: Expr, here: VirtualDevice | None) -> VirtualDevice | None:
        """The device of `node`'s value, its children done."""
        if isinstance(node, Function):
            return None  # a function value
        if isinstance(node, Call):
            op = node.op
            attrs = node.attrs
            if isinstance(op, Op):
                if op.name == "on_device":
                    return _device(attrs.get("virtual_device")) if attrs is not None else None
                if op.name == "device_copy":
                    return _device(attrs.get("dst_virtual_device")) if attrs is not None else None
                slots = _SLOTS.get(op.name)
                if slots is not None and slots[1] != "same":
                    if slots[1] == "host":
                        return self.host
                    return _device(attrs.get("virtual_device")) if attrs is not None else None
                return here
            if isinstance(op, Constructor):
                return here
            callee = self.callee(node)
            if callee is not None and not callee.is_primitive:
                return _device(callee.virtual_device)
            return here if callee is not None else None
        if isinstance(node, Let):
            return self.value.get(id(node.body))
        if isinstance(node, ast.TupleGetItem):
            return self.value.get(id(node.tuple_value))
        return here


def _body_operators(func: Function) -> list[Call]:
    """The operator calls in a Primitive function's body."""
    out: list[Call] = []
    seen: set[int] = set()
    todo: list[Expr] = [func.body]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Call):
            if isinstance(node.op, Op):
                out.append(node)
            todo.extend(node.args)
        elif isinstance(node, Let):
            todo.extend((node.value, node.body))
        elif isinstance(node, ast.Tuple):
            todo.extend(node.fields)
        elif isinstance(node, ast.TupleGetItem):
            todo.append(node.tuple_value)
    return out


def operator_placements(
    module: Module, host: VirtualDevice | None = None
) -> list[tuple[Call, VirtualDevice | None]]:
    """Every operator call of a planned `module` with the device it runs on
    (None where the reading cannot tell), in walk order."""
    walk = _Walk(module, host)
    for _, func in module.functions:
        if func.is_primitive or func.attr("Compiler") is not None or func.attr("Extern"):
            continue
        if func.attr("SkipOptimization"):
            continue
        walk.run(func)
    return walk.placements


def find_violations(module: Module, host: VirtualDevice | None = None) -> list[Edge]:
    """Every use of a value on another device than its own without a copy, in
    the optimizable global functions of a planned `module`."""
    walk = _Walk(module, host)
    for _, func in module.functions:
        if func.is_primitive or func.attr("Compiler") is not None or func.attr("Extern"):
            continue
        if func.attr("SkipOptimization"):
            continue
        walk.run(func)
    return walk.edges


def check_consistent(module: Module, host: VirtualDevice | None = None) -> None:
    """Raise `InternalInconsistency` unless every device change in the planned
    `module` goes through a `device_copy` (`host`: where shape operators put
    their results; unchecked when None)."""
    edges = find_violations(module, host)
    if edges:
        raise InternalInconsistency(edges)
