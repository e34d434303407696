"""Section 5: make every device explicit (TVM's DeviceCapturer), iteratively.

Each node is rebuilt once (sharing kept); wrappers (`on_device`,
`device_copy`) are added per use, where the child's device differs from what
its context expects, or where the expected device differs from the lexical one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

from relay import ast
from relay.ast import Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op, Var
from relay.device import VirtualDevice, device_name
from relay.span import Span
from relay.traverse import children, not_primitive, post_order, with_children

from .collect import SPECIAL_OPS, Collector
from .deadline import MASK
from .domains import FREE, Domain
from .normalize import maybe_on_device


class Rewriter:
    """Rewrites global functions given a solved `Collector` and a device reader."""

    def __init__(self, collector: Collector, device_of: Callable[[int], VirtualDevice]) -> None:
        self.c = collector
        self.device_of = device_of
        self.memo: dict[int, Expr] = {}
        self.params: dict[int, Var] = {}
        self.copies: list[tuple[Span | None, VirtualDevice, VirtualDevice]] = []
        # The copies TVM 0.19's rewrite omits (nested annotations), also in `copies`.
        self.divergences: list[tuple[Span | None, VirtualDevice, VirtualDevice]] = []
        self.used: dict[VirtualDevice, None] = {}
        self._used_ids: set[int] = set()
        self._counts: dict[int, list[Any]] = {}
        self._dev: dict[int, VirtualDevice] = {}

    # ---- devices

    def _result(self, d: Domain) -> VirtualDevice:
        while isinstance(d, tuple):
            d = d[-1]
        vd = self.device_of(d)
        if (
            vd.device_type is None
            and vd.target is None
            and vd.virtual_device_id is None
            and vd.memory_scope is None
        ):
            vd = self.c.default
        return vd

    def dev(self, expr: Expr) -> VirtualDevice:
        """TVM's GetVirtualDevice: looks through one `on_device`."""
        found = self._dev.get(id(expr))
        if found is not None:
            return found
        key = id(expr)
        if type(expr) is Call and type(expr.op) is Op and expr.op.name == "on_device" and len(expr.args) == 1:
            expr = expr.args[0]
        vd = self._dev[key] = self._result(self.c.dom(expr))
        return vd

    def _count(self, vd: VirtualDevice) -> None:
        counts = self._counts
        key = id(vd)
        if key in counts:
            counts[key][1] += 1
        else:
            counts[key] = [vd, 1]

    def expressions_by_device(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for vd, n in self._counts.values():
            out[device_name(vd)] += n
        return dict(out)

    def _use(self, vd: VirtualDevice) -> VirtualDevice:
        if id(vd) not in self._used_ids:
            self._used_ids.add(id(vd))
            self.used[vd] = None
        return vd

    # ---- wrapping

    @staticmethod
    def _is_on_device(expr: Expr) -> bool:
        return (
            type(expr) is Call and type(expr.op) is Op and expr.op.name == "on_device" and len(expr.args) == 1
        )

    def _divergent_copy(self, value: Expr, have: VirtualDevice, want: VirtualDevice, where: Expr) -> Expr:
        """A copy TVM 0.19's rewrite omits (its value would cross devices
        without one); counted with the copies and listed in `divergences`."""
        span = where.span
        self.copies.append((span, have, want))
        if self.c.tvm_reading:
            self.divergences.append((span, have, want))
        copied = maybe_on_device(value, self._use(have))
        return ast.device_copy(copied, have, self._use(want), span=value.span)

    def child(
        self, lexical: VirtualDevice, expected: VirtualDevice, child_vd: VirtualDevice, child: Expr
    ) -> Expr:
        if isinstance(child, (Op, Constructor)):
            return child
        result = self.memo[id(child)]
        if child_vd is not expected and child_vd != expected:
            copied_span = result.span
            result = maybe_on_device(result, self._use(child_vd))
            result = ast.device_copy(result, child_vd, self._use(expected), span=result.span)
            self.copies.append((copied_span, child_vd, expected))
        if expected is not lexical and expected != lexical:
            result = maybe_on_device(result, self._use(expected))
        return result

    def child_of(self, parent: Expr, child: Expr) -> Expr:
        expected = self.dev(parent)
        return self.child(expected, expected, self.dev(child), child)

    # ---- driver

    def rewrite_function(self, func: Function) -> Function:
        order = post_order(func, enter=not_primitive)
        for node in order:
            if isinstance(node, Function) and not node.is_primitive:
                fd = self.c.dom(node)
                for i, p in enumerate(node.params):
                    pd = fd[i] if isinstance(fd, tuple) and i < len(fd) - 1 else fd
                    vd = self._use(self._result(pd))
                    self.params[id(p)] = Var(
                        p.name, p.type_annotation, vd, span=p.span, checked_type=p.checked_type
                    )
        deadline = self.c.deadline
        for i, node in enumerate(order):
            if not i & MASK:
                deadline.check("rewrite")
            self.memo[id(node)] = self._rebuild(node)
        out = self.memo[id(func)]
        assert isinstance(out, Function)
        return out

    def _rebuild(self, node: Expr) -> Expr:
        match node:
            case Var():
                return self.params.get(id(node), node)
            case GlobalVar() | Constant() | Op() | Constructor():
                return node
            case Function():
                if node.is_primitive:
                    return node
                fd = self.c.dom(node)
                result_vd = self._use(self._result(fd))
                self._count(result_vd)
                body = self.child(result_vd, result_vd, self.dev(node.body), node.body)
                params = tuple(self.params[id(p)] for p in node.params)
                return Function(
                    params,
                    body,
                    node.ret_type,
                    node.type_params,
                    node.attrs,
                    result_vd,
                    span=node.span,
                    checked_type=node.checked_type,
                )
            case Call():
                return self._call(node)
            case Let(var=var, value=value, body=body):
                let_vd = self.dev(node)
                self._count(let_vd)
                var_vd = self._result(self.c.dom(var))
                new_value = self.child(FREE, var_vd, self.dev(value), value)
                new_body = self.child(let_vd, let_vd, self.dev(body), body)
                if new_value is value and new_body is body:
                    return node
                return Let(var, new_value, new_body, span=node.span, checked_type=node.checked_type)
            case Match(data=data, clauses=clauses):
                self._count(self.dev(node))
                new_data = self.child_of(node, data)
                new_clauses = tuple(Clause(c.lhs, self.child_of(node, c.rhs), span=c.span) for c in clauses)
                return dataclasses.replace(node, data=new_data, clauses=new_clauses)
            case If() | ast.Tuple() | ast.TupleGetItem() | ast.RefCreate() | ast.RefRead() | ast.RefWrite():
                self._count(self.dev(node))
                kids = children(node)
                return with_children(node, tuple(self.child_of(node, k) for k in kids))
        raise TypeError(f"cannot rewrite {type(node).__name__}")

    def _call(self, call: Call) -> Expr:
        name = call.op.name if type(call.op) is Op else None
        if name == "on_device" and len(call.args) == 1:
            body = call.args[0]
            value = self.memo[id(body)]
            if self._is_on_device(body):
                # TVM reads a child's device through one on_device only: the
                # value of on_device(on_device(e, A), B) is on A, where TVM
                # assumes B, and it drops this copy.
                have, want = self.dev(body), self._result(self.c.dom(body))
                if have != want:
                    value = self._divergent_copy(value, have, want, body)
            return value
        call_vd = self.dev(call)
        self._count(call_vd)
        if name is not None and name not in SPECIAL_OPS:
            # Device-polymorphic operator: arguments share the call's device, so
            # only an argument read through a free on_device can need a copy.
            memo = self.memo
            dev = self.dev
            args = call.args
            op_args = []
            changed = False
            for a in args:
                new = memo.get(id(a))
                a_vd = dev(a)
                if new is None or (a_vd is not call_vd and a_vd != call_vd):
                    new = self.child(call_vd, call_vd, a_vd, a)
                if new is not a:
                    changed = True
                op_args.append(new)
            if not changed:
                return call
            return Call(
                call.op,
                tuple(op_args),
                call.attrs,
                call.type_args,
                span=call.span,
                checked_type=call.checked_type,
            )
        dc = self.c.copy_props(call) if name == "device_copy" else None
        if dc is not None:
            ds = self.c.ds
            src = ds.canonical(dc.src) if isinstance(dc.src, VirtualDevice) else FREE
            dst = ds.canonical(dc.dst) if isinstance(dc.dst, VirtualDevice) else FREE
            body = dc.body
            if self._is_on_device(body) and self.dev(body) != src:
                # device_copy(on_device(e, A), src=B, ...): e's value is on A,
                # where TVM assumes B, and it drops this copy.
                value = self._divergent_copy(self.memo[id(body)], self.dev(body), src, body)
                if src == dst:
                    return value
                self.copies.append((value.span, src, dst))
                return ast.device_copy(
                    maybe_on_device(value, self._use(src)), src, self._use(dst), span=value.span
                )
            if src == dst:
                return self.memo[id(body)]
            return self.child(dst, dst, src, body)
        cd = self.c.callee_domain(call)
        n = len(call.args)
        if isinstance(cd, tuple) and len(cd) == n + 1:
            result_vd = self._result(cd)
            param_vds = [self._result(cd[i]) for i in range(n)]
        else:
            result_vd = self._result(cd)
            param_vds = [result_vd] * n
        new_op = self.child(call_vd, call_vd, result_vd, call.op)
        new_args = tuple(self.child(call_vd, param_vds[i], self.dev(a), a) for i, a in enumerate(call.args))
        if new_op is call.op and all(a is b for a, b in zip(new_args, call.args)):
            return call
        return Call(
            new_op, new_args, call.attrs, call.type_args, span=call.span, checked_type=call.checked_type
        )
