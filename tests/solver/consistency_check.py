"""An independent reading of a planned module: is every device change a copy?

This is the test oracle of "never a wrong 200". It reads only the *output* module, the
way a downstream pass would (docs/planning.md, section 5): a function's body
is on its `virtual_device`, a parameter on its own, `on_device(e, d)` says `e`
is on `d`, `device_copy(e, s, t)` reads `e` on `s` and gives a value on `t`,
and everything else takes the device of its lexical context. It then checks
each edge: a primitive call's arguments are on the call's device, a copy's
argument is on its source device, a function call's arguments are on the
callee's parameter devices, and no expression is read on two devices.

It deliberately shares no code with the planner (no solver import, not even
relay.traverse): a planner bug cannot hide in a helper both sides use.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.ast import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    FuncType,
    GlobalVar,
    If,
    Let,
    Match,
    Module,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from relay.device import VirtualDevice
from relay.span import Span

# Special operators, read independently of solver/collect.py: per argument
# "host" (the host device), "same" (the call's device) or None (any device),
# then the result's slot ("host", "same" or "attr" for the call's virtual_device).
_HOST_OPS: dict[str, tuple[tuple[str | None, ...], str]] = {
    "vm.shape_of": ((None,), "host"),
    "memory.alloc_storage": (("host", "host", "host"), "attr"),
    "memory.alloc_tensor": (("same", "host", "host"), "same"),
    "vm.reshape_tensor": (("same", "host"), "same"),
    "vm.invoke_tvm_op": ((None, "same", "same"), "same"),
}


@dataclass(frozen=True)
class Violation:
    """One place where a value is read on a device other than its own."""

    message: str
    span: Span | None
    value_device: VirtualDevice | None
    used_on: VirtualDevice | None

    def __str__(self) -> str:
        where = f"{self.span.line}:{self.span.column}" if self.span is not None else "?"
        return f"{where}: {self.message}"


def _name(vd: VirtualDevice | None) -> str:
    if vd is None:
        return "?"
    kind = {1: "cpu", 2: "cuda"}.get(vd.device_type or -1, str(vd.device_type))
    scope = f"/{vd.memory_scope}" if vd.memory_scope else ""
    return f"{kind}:{vd.virtual_device_id or 0}{scope}"


def _same(a: VirtualDevice, b: VirtualDevice) -> bool:
    """Devices that can be one: every field equal or unconstrained on one side
    (a copy written `src_virtual_device=cpu` reads a cpu value of any scope)."""
    pairs = (
        (a.device_type, b.device_type),
        (a.virtual_device_id, b.virtual_device_id),
        (a.target, b.target),
        (a.memory_scope or None, b.memory_scope or None),
    )
    return all(x is None or y is None or x == y for x, y in pairs)


def _vd(value: object) -> VirtualDevice | None:
    if isinstance(value, VirtualDevice) and not (
        value.device_type is None and value.target is None and value.memory_scope is None
    ):
        return value
    return None


def _short(expr: Expr) -> str:
    if isinstance(expr, Call):
        head = expr.op.name if isinstance(expr.op, (Op, GlobalVar, Constructor)) else "call"
        return f"{head}(...)"
    if isinstance(expr, Var):
        return f"%{expr.name}"
    return type(expr).__name__


def _kids(node: Expr) -> list[Expr]:
    """Children in evaluation order (own walk, not relay.traverse)."""
    if isinstance(node, Call):
        return [node.op, *node.args]
    if isinstance(node, Let):
        return [node.value, node.body]
    if isinstance(node, Function):
        return [] if node.is_primitive else [node.body]
    if isinstance(node, Tuple):
        return list(node.fields)
    if isinstance(node, TupleGetItem):
        return [node.tuple_value]
    if isinstance(node, If):
        return [node.cond, node.true_branch, node.false_branch]
    if isinstance(node, Match):
        return [node.data, *(c.rhs for c in node.clauses)]
    if isinstance(node, RefCreate):
        return [node.value]
    if isinstance(node, RefRead):
        return [node.ref]
    if isinstance(node, RefWrite):
        return [node.ref, node.value]
    return []


def _pattern_vars(pattern: object) -> list[Var]:
    out: list[Var] = []
    todo = [pattern]
    while todo:
        p = todo.pop()
        if isinstance(p, PatternVar):
            out.append(p.var)
        elif isinstance(p, (PatternConstructor, PatternTuple)):
            todo.extend(p.patterns)
    return out


class _Reader:
    def __init__(self, module: Module, host: VirtualDevice | None) -> None:
        self.module = module
        self.host = host
        self.globals = {gv.name: f for gv, f in module.functions}
        self.ctx: dict[int, list[VirtualDevice | None]] = {}
        self.device: dict[int, VirtualDevice | None] = {}
        self.binding: dict[int, Expr] = {}  # let var -> value; pattern var -> match data
        self.fn_vars: set[int] = set()  # variables that hold functions
        self.violations: list[Violation] = []

    def bad(self, message: str, node: Expr, have: VirtualDevice | None, want: VirtualDevice | None) -> None:
        self.violations.append(Violation(message, node.span, have, want))

    # ---- pass 1: the lexical context of every node

    def contexts(self, func: Function) -> list[Expr]:
        """Every node under `func` with the context(s) it is read in; returns
        the nodes in post-order (children before parents, each once)."""
        order: list[Expr] = []
        done: set[int] = set()
        seen_ctx: set[tuple[int, VirtualDevice | None]] = set()
        stack: list[tuple[Expr, VirtualDevice | None, bool]] = [(func, _vd(func.virtual_device), False)]
        while stack:
            node, ctx, exiting = stack.pop()
            if exiting:
                if id(node) not in done:
                    done.add(id(node))
                    order.append(node)
                continue
            key = (id(node), ctx)
            if key in seen_ctx:
                continue
            seen_ctx.add(key)
            self.ctx.setdefault(id(node), []).append(ctx)
            stack.append((node, ctx, True))
            kid_ctx: list[VirtualDevice | None]
            kids = _kids(node)
            if isinstance(node, Function):
                kid_ctx = [_vd(node.virtual_device)]
                for p in node.params:
                    if isinstance(p.type_annotation, FuncType):
                        self.fn_vars.add(id(p))
            elif isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "on_device":
                kid_ctx = [None, _vd(node.attrs.get("virtual_device") if node.attrs else None)]
            elif isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "device_copy":
                kid_ctx = [None, _vd(node.attrs.get("src_virtual_device") if node.attrs else None)]
            elif isinstance(node, Call) and isinstance(node.op, Op) and node.op.name in _HOST_OPS:
                slots, _ = _HOST_OPS[node.op.name]
                kid_ctx = [None, *(self.host if s == "host" else ctx for s in slots)]
            elif isinstance(node, Let):
                self.binding[id(node.var)] = node.value
                if isinstance(node.value, (Function, GlobalVar)) or isinstance(
                    node.var.type_annotation, FuncType
                ):
                    self.fn_vars.add(id(node.var))
                kid_ctx = [None, ctx]  # a let value's device is written on it (on_device)
            elif isinstance(node, Match):
                for clause in node.clauses:
                    for v in _pattern_vars(clause.lhs):
                        self.binding[id(v)] = node.data
                kid_ctx = [ctx] * len(kids)
            else:
                kid_ctx = [ctx] * len(kids)
            for kid, kctx in reversed(list(zip(kids, kid_ctx))):
                if isinstance(kid, (Op, Constructor)):
                    continue
                stack.append((kid, kctx, False))
        return order

    # ---- pass 2: the device of every node, and the edge checks

    def read(self, order: list[Expr]) -> None:
        for node in order:
            self.device[id(node)] = self.own_device(node)
            self.check_edges(node)

    def dev(self, node: Expr) -> VirtualDevice | None:
        if isinstance(node, Var):
            return self.var_device(node)
        return self.device.get(id(node))

    def var_device(self, var: Var) -> VirtualDevice | None:
        if id(var) in self.fn_vars:
            return None
        bound = self.binding.get(id(var))
        if bound is not None:
            return self.device.get(id(bound))
        return _vd(var.virtual_device)

    def unique_ctx(self, node: Expr) -> VirtualDevice | None:
        ctxs = [c for c in self.ctx.get(id(node), []) if c is not None]
        distinct: list[VirtualDevice] = []
        for c in ctxs:
            if not any(_same(c, d) for d in distinct):
                distinct.append(c)
        if len(distinct) > 1:
            self.bad(
                f"{_short(node)} is read on " + " and ".join(_name(d) for d in distinct),
                node,
                distinct[0],
                distinct[1],
            )
        return distinct[0] if distinct else None

    def own_device(self, node: Expr) -> VirtualDevice | None:
        if isinstance(node, Var):
            return self.var_device(node)
        if isinstance(node, (Function, GlobalVar, Op, Constructor)):
            return None  # function values: no storage device of their own to compare
        if isinstance(node, Call):
            op = node.op
            attrs = node.attrs
            if isinstance(op, Op) and op.name == "on_device":
                return _vd(attrs.get("virtual_device") if attrs else None)
            if isinstance(op, Op) and op.name == "device_copy":
                return _vd(attrs.get("dst_virtual_device") if attrs else None)
            if isinstance(op, Op) and op.name in _HOST_OPS:
                result = _HOST_OPS[op.name][1]
                if result == "host":
                    return self.host
                if result == "attr":
                    return _vd(attrs.get("virtual_device") if attrs else None)
                return self.unique_ctx(node)
            callee = self.callee(node)
            if callee is not None and not callee.is_primitive:
                return _vd(callee.virtual_device)
            if isinstance(op, (Op, Constructor)) or callee is not None:
                return self.unique_ctx(node)
            return None  # a call of a function value we cannot see
        if isinstance(node, Let):
            return self.dev(node.body)
        if isinstance(node, TupleGetItem):
            return self.dev(node.tuple_value)
        if isinstance(node, (Constant, Tuple, If, Match, RefCreate, RefRead, RefWrite)):
            return self.unique_ctx(node)
        return None

    def callee(self, call: Call) -> Function | None:
        op: Expr = call.op
        for _ in range(64):  # let %f = %g chains
            if isinstance(op, Function):
                return op
            if isinstance(op, GlobalVar):
                return self.globals.get(op.name)
            if isinstance(op, Var) and isinstance(self.binding.get(id(op)), (Function, GlobalVar, Var)):
                op = self.binding[id(op)]
                continue
            return None
        return None

    def expect(self, parent: Expr, child: Expr, want: VirtualDevice | None, what: str) -> None:
        if want is None or isinstance(child, (Op, Constructor, Function, GlobalVar)):
            return
        have = self.dev(child)
        if have is not None and not _same(have, want):
            self.bad(
                f"{_short(child)} on {_name(have)} is used on {_name(want)} by {what} without a copy",
                child,
                have,
                want,
            )

    def check_edges(self, node: Expr) -> None:
        if isinstance(node, Function):
            if not node.is_primitive:
                self.expect(node, node.body, _vd(node.virtual_device), "the function result")
            return
        if isinstance(node, Call):
            op = node.op
            attrs = node.attrs
            if isinstance(op, Op) and op.name == "on_device":
                want = _vd(attrs.get("virtual_device") if attrs else None)
                self.expect(node, node.args[0], want, "on_device")
                return
            if isinstance(op, Op) and op.name == "device_copy":
                src = _vd(attrs.get("src_virtual_device") if attrs else None)
                self.expect(node, node.args[0], src, "device_copy (its source device)")
                return
            if isinstance(op, Op) and op.name in _HOST_OPS:
                slots, _ = _HOST_OPS[op.name]
                here = self.dev(node) if _HOST_OPS[op.name][1] == "same" else None
                for slot, arg in zip(slots, node.args):
                    want = self.host if slot == "host" else here if slot == "same" else None
                    self.expect(node, arg, want, op.name)
                return
            callee = self.callee(node)
            if callee is not None and not callee.is_primitive:
                for param, arg in zip(callee.params, node.args):
                    if not isinstance(param.type_annotation, FuncType):
                        self.expect(node, arg, _vd(param.virtual_device), "a call's parameter")
                return
            if isinstance(op, (Op, Constructor)):
                here = self.dev(node)
                for arg in node.args:
                    self.expect(node, arg, here, op.name)
            # A call of a `Primitive` function: TVM 0.19 gives its parameters the
            # devices of each call's arguments and writes none of them down, so
            # the output says nothing to check them against.
            return
        if isinstance(node, Let):
            return
        if isinstance(node, (Tuple, If, Match, RefCreate, RefRead, RefWrite)):
            here = self.dev(node)
            for kid in _kids(node):
                self.expect(node, kid, here, type(node).__name__.lower())
        if isinstance(node, TupleGetItem):
            return


def read_devices(
    module: Module, host: VirtualDevice | None = None
) -> tuple[dict[int, VirtualDevice | None], list[Violation]]:
    """The device of every node of `module`'s optimizable global functions
    (by node id) and the violations found. `host` is the host device (where
    shape operators put their results); by default the table's cpu device."""
    if host is None:
        table = module.meta.get("VirtualDevice", []) or []
        cpus = [v for v in table if isinstance(v, VirtualDevice) and v.device_type == 1]
        host = cpus[0] if cpus else None
    reader = _Reader(module, host)
    for _, func in module.functions:
        if func.attr("Compiler") is not None or func.attr("Extern") or func.attr("SkipOptimization"):
            continue
        if func.is_primitive:
            continue
        reader.read(reader.contexts(func))
    return reader.device, reader.violations


def check_consistent(module: Module, host: VirtualDevice | None = None) -> list[Violation]:
    """Every violation of "a value is used only on its own device unless copied"."""
    return read_devices(module, host)[1]
