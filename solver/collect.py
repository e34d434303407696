"""Constraint collection (section 3), free `on_device` unification and TVM's
defaulting walk (section 4), over the domains of `domains.py`.

How each construct constrains its parts is data: `OPERATOR_SIGNATURES` maps
special operators to the domain of their parameters and result, and
`Collector._RULES` maps node types to their rule. Every constraint is tagged
with its kind and expression (hence its span) for explanations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from relay import ast
from relay.ast import Call, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead, RefWrite, Tuple
from relay.device import VirtualDevice
from relay.traverse import not_primitive, post_order, pre_order

from .deadline import MASK, Deadline
from .domains import FREE, Domain, DomainSystem
from .shapes import FnShape, ShapeInfo, type_shape
from .tvm_reading import tvm_copy_props

# Parameter/result slots of special operators: "same" (one shared free
# first-order domain), "host" (the host device), "free" (a fresh free domain of
# the argument's shape), ("attr", name) (the device in that call attribute).
# As in TVM 0.19 only `vm.shape_of` is special; the plain `shape_of` operator is
# device-polymorphic like any other (its result shares its argument's device).
# Every other operator: arguments and result share one first-order domain.
# `on_device` and `device_copy` are handled in `_make_callee_domain`.
OPERATOR_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "memory.alloc_storage": ("host", "host", "host", ("attr", "virtual_device")),
    "memory.alloc_tensor": ("same", "host", "host", "same"),
    "vm.shape_of": ("free", "host"),
    "vm.invoke_tvm_op": ("free", "same", "same", "same"),
    "vm.reshape_tensor": ("same", "host", "same"),
}
SPECIAL_OPS = frozenset({"on_device", "device_copy", *OPERATOR_SIGNATURES})
_HOST_KINDS = {"memory.alloc_storage", "memory.alloc_tensor", "vm.shape_of", "vm.reshape_tensor"}


class RequestPin(NamedTuple):
    """A request pin on a planned function's parameter (`what` "param") or
    result (`what` "function"): constraint #k puts it on `device`."""

    what: str
    node: Any  # the planned Var (param) or Function (function)
    device: VirtualDevice
    k: int


def is_optimizable(func: Function) -> bool:
    """TVM's AsOptimizableFunctionNode: not external, not skipped."""
    return func.attr("Compiler") is None and not func.attr("Extern") and not func.attr("SkipOptimization")


class Collector:
    """Builds and solves (greedily) the domain system of one module."""

    def __init__(
        self,
        module: ast.Module,
        functions: list[tuple[GlobalVar, Function]],
        shapes: ShapeInfo,
        domains: DomainSystem,
        default: VirtualDevice,
        host: VirtualDevice,
        annotation_kinds: Mapping[int, str],
        deadline: Deadline | None = None,
    ) -> None:
        self.module = module
        self.deadline = deadline if deadline is not None else Deadline.never()
        self.functions = functions
        self.shapes = shapes
        self.ds = domains
        self.default = default
        self.host_elem = domains.new()
        self.host = host
        # One host class for the whole module (as TVM's host domain); each host
        # operator call logs its own pin on it, so explanations name the call.
        with domains.quiet():
            domains.pin(self.host_elem, host, domains.tag("host operator", None, "the host device"))
        self.doms: dict[int, Domain] = {}
        self.global_doms: dict[str, Domain] = {}
        self._keep: list[Expr] = []
        self.callee: dict[int, Domain] = {}
        self.callee_cid: dict[int, int] = {}
        self._last_cid: int | None = None
        self.annotation_kinds = annotation_kinds
        self.hard_count = 0
        self.soft_count = 0

    # ---- domains of expressions

    def dom(self, expr: Expr) -> Domain:
        d = self.doms.get(id(expr))
        if d is not None:
            return d
        if isinstance(expr, GlobalVar):
            d = self.global_doms.get(expr.name)
            if d is None:
                d = self.global_doms[expr.name] = self.ds.free(self.shapes.globals.get(expr.name))
            self._keep.append(expr)
        elif isinstance(expr, ast.Var):
            d = self.ds.free(self.shapes.var.get(id(expr)) or type_shape(expr.type_annotation))
        else:
            d = self.ds.free(self.shapes.expr.get(id(expr)))
        self.doms[id(expr)] = d
        return d

    def _tag(self, kind: str, expr: Expr | None, detail: str = "") -> int:
        self.hard_count += 1
        cid = self.ds.tag(kind, expr, detail)
        self._last_cid = cid
        return cid

    def callee_domain(self, call: Call) -> Domain:
        found = self.callee.get(id(call))
        if found is not None:
            return found
        self._last_cid = None
        d = self._make_callee_domain(call)
        if self._last_cid is not None:
            self.callee_cid[id(call)] = self._last_cid
        self.callee[id(call)] = d
        return d

    # The TVM mode reads annotations as TVM 0.19 does: directly nested copies as
    # one (tvm_reading.py), and its rewrite reports the copies TVM drops as
    # divergences; the optimize mode's collector reads each copy on its own.
    tvm_reading: ClassVar[bool] = True

    def copy_props(self, call: Expr) -> ast.DeviceCopyProps | None:
        """A `device_copy` call's parts as this mode reads them."""
        if self.tvm_reading:
            return tvm_copy_props(call)
        return ast.device_copy_props(call)

    def _make_callee_domain(self, call: Call) -> Domain:
        ds = self.ds
        op = call.op
        args = call.args
        if isinstance(op, Op):
            od = ast.on_device_props(call) if op.name == "on_device" else None
            if od is not None:
                cid = self._tag(self.annotation_kinds.get(id(call), "annotation"), call)
                shape = self.shapes.of(args[0])
                vd = od.virtual_device if isinstance(od.virtual_device, VirtualDevice) else FREE
                body = (
                    ds.for_device(shape, ds.canonical(vd), cid)
                    if od.constrain_body and not vd.is_fully_unconstrained
                    else ds.free(shape)
                )
                res = (
                    ds.for_device(shape, ds.canonical(vd), cid)
                    if od.constrain_result and not vd.is_fully_unconstrained
                    else ds.free(shape)
                )
                return (body, res)
            dc = self.copy_props(call) if op.name == "device_copy" else None
            if dc is not None:
                cid = self._tag("copy", call)
                shape = self.shapes.of(args[0])
                src = dc.src if isinstance(dc.src, VirtualDevice) else FREE
                dst = dc.dst if isinstance(dc.dst, VirtualDevice) else FREE
                return (
                    ds.for_device(shape, ds.canonical(src), cid),
                    ds.for_device(shape, ds.canonical(dst), cid),
                )
            sig = OPERATOR_SIGNATURES.get(op.name)
            if sig is not None and len(sig) == len(args) + 1:
                cid = self._tag("host operator", call, op.name)
                same = ds.new()
                slots: list[Domain] = []
                for i, slot in enumerate(sig):
                    if slot == "same":
                        slots.append(same)
                    elif slot == "host":
                        if ds.logging:
                            ds.pins.append((self.host_elem, self.host, cid))
                        slots.append(self.host_elem)
                    elif slot == "free":
                        slots.append(ds.free(self.shapes.of(args[i]) if i < len(args) else None))
                    else:
                        attr = call.attrs.get(slot[1]) if call.attrs is not None else None
                        if isinstance(attr, VirtualDevice) and not attr.is_fully_unconstrained:
                            slots.append(ds.for_device(self.shapes.of(call), ds.canonical(attr), cid))
                        else:
                            slots.append(ds.free(self.shapes.of(call)))
                return tuple(slots)
            # Device-polymorphic operator: arguments and result share the call's domain.
            shared = self.dom(call)
            if not isinstance(shared, int):
                shared = ds.new()
            return (shared,) * (len(args) + 1)
        if isinstance(op, ast.Constructor):
            cid = self._tag("constructor", call, op.name)
            result = ds.new()
            params: list[Domain] = []
            for i in range(len(args)):
                shape = type_shape(op.inputs[i]) if i < len(op.inputs) else self.shapes.of(args[i])
                p = ds.free(shape)
                ds.collapse(result, p, cid)
                params.append(p)
            return tuple(params) + (result,)
        return self.dom(op)

    # ---- collection (section 3)

    def collect(self, pins: Sequence[RequestPin]) -> None:
        """Collect the constraints of every optimizable global, then apply the
        request pins on parameters and function results."""
        seen: set[int] = set()
        for gv, func in self.functions:
            if not is_optimizable(func):
                continue
            self.ds.unify(self.dom(gv), self.dom(func), self._tag("global", gv, gv.name))
            self._walk(func, seen)
        for what, node, device, k in pins:
            cid = self._tag(f"constraint #{k}", node, node.name if what == "param" else what)
            vd = self.ds.canonical(device)
            if what == "param":
                shape = self.shapes.var.get(id(node)) or type_shape(node.type_annotation)
                self.ds.unify(self.dom(node), self.ds.for_device(shape, vd, cid), cid)
            else:  # function result
                func = node
                self.ds.unify(
                    self.dom(func.body), self.ds.for_device(self.shapes.of(func.body), vd, cid), cid
                )

    def _walk(self, root: Expr, seen: set[int]) -> None:
        """Apply each node's rule, parents first, each node once (`seen` is
        shared between the globals); primitive functions are not entered.
        The order (children right to left) decides which of several
        conflicting constraints is refused first, so explanations depend on it."""
        rules = self._RULES
        deadline = self.deadline
        for i, node in enumerate(pre_order(root, enter=not_primitive, right_to_left=True, seen=seen)):
            if not i & MASK:
                deadline.check("collect")
            t = type(node)
            if t is Call:
                self._call(node)  # type: ignore[arg-type]
                continue
            rule = rules.get(t)
            if rule is not None:
                rule(self, node)

    def _call(self, call: Call) -> None:
        cd = self.callee_domain(call)
        op = call.op
        if type(op) is Op and type(cd[-1]) is int and op.name not in SPECIAL_OPS:  # type: ignore[index]
            cid = self._tag("operator", call, op.name)
            shared: int = cd[-1]  # type: ignore[index]
            ds = self.ds
            for a in call.args:
                d = self.dom(a)
                if type(d) is int:
                    ds.union(shared, d, cid)
                else:
                    ds.collapse(shared, d, cid)
            d = self.dom(call)
            if d != shared:
                ds.unify(shared, d, cid)
            return
        implied = tuple(self.dom(a) for a in call.args) + (self.dom(call),)
        op = call.op
        special = self.callee_cid.get(id(call))
        if special is not None:
            self.ds.unify(cd, tuple(self.dom(a) for a in call.args) + (self.dom(call),), special)
            return
        if isinstance(op, Op):
            if op.name == "on_device":
                kind = self.annotation_kinds.get(id(call), "annotation")
            elif op.name == "device_copy":
                kind = "copy"
            elif op.name in _HOST_KINDS:
                kind = "host operator"
            else:
                kind = "operator"
            cid = self._tag(kind, call, op.name)
        else:
            cid = self._tag("call site", call)
        self.ds.unify(cd, implied, cid)

    def _let(self, let: Let) -> None:
        cid = self._tag("let", let, let.var.name)
        self.ds.unify(self.dom(let.var), self.dom(let.value), cid)
        self.ds.unify(self.dom(let), self.dom(let.body), cid)

    def _function(self, func: Function) -> None:
        ds = self.ds
        fd = self.dom(func)
        if not isinstance(fd, tuple) or len(fd) != len(func.params) + 1:
            new = ds.free(
                FnShape(tuple(self.shapes.var.get(id(p)) for p in func.params), self.shapes.of(func.body))
            )
            ds.unify(fd, new, self._tag("function", func))
            fd = new
            self.doms[id(func)] = fd
        assert isinstance(fd, tuple)
        ds.unify(self.dom(func.body), fd[-1], self._tag("function result", func))
        vd = func.virtual_device
        if isinstance(vd, VirtualDevice) and not vd.is_fully_unconstrained:
            cid = self._tag("function attribute", func)
            ds.unify(
                self.dom(func.body), ds.for_device(self.shapes.of(func.body), ds.canonical(vd), cid), cid
            )
        for i, param in enumerate(func.params):
            ds.unify(self.dom(param), fd[i], self._tag("parameter", param, param.name))
            pvd = param.virtual_device
            if isinstance(pvd, VirtualDevice) and not pvd.is_fully_unconstrained:
                cid = self._tag("parameter attribute", param, param.name)
                shape = self.shapes.var.get(id(param))
                ds.unify(self.dom(param), ds.for_device(shape, ds.canonical(pvd), cid), cid)

    def _tuple(self, tup: Tuple) -> None:
        cid = self._tag("tuple", tup)
        d = self.dom(tup)
        for f in tup.fields:
            self.ds.unify_collapsed(d, self.dom(f), cid)

    def _projection(self, tgi: ast.TupleGetItem) -> None:
        self.ds.unify_collapsed(self.dom(tgi.tuple_value), self.dom(tgi), self._tag("projection", tgi))

    def _match(self, match: Match) -> None:
        cid = self._tag("match", match)
        md = self.dom(match)
        data = self.dom(match.data)
        self.ds.unify_collapsed(data, md, cid)
        for clause in match.clauses:
            for var in ast.pattern_vars(clause.lhs):
                self.ds.unify_collapsed(data, self.dom(var), cid)
            self.ds.unify(self.dom(clause.rhs), md, cid)

    def _if(self, ife: If) -> None:
        cid = self._tag("if", ife)
        d = self.dom(ife)
        self.ds.unify_collapsed(self.dom(ife.cond), d, cid)
        self.ds.unify(self.dom(ife.true_branch), d, cid)
        self.ds.unify(self.dom(ife.false_branch), d, cid)

    def _ref_create(self, node: RefCreate) -> None:
        self.ds.unify_collapsed(self.dom(node), self.dom(node.value), self._tag("reference", node))

    def _ref_read(self, node: RefRead) -> None:
        self.ds.unify_collapsed(self.dom(node.ref), self.dom(node), self._tag("reference", node))

    def _ref_write(self, node: RefWrite) -> None:
        cid = self._tag("reference", node)
        value = self.dom(node.value)
        self.ds.unify_collapsed(self.dom(node.ref), value, cid)
        self.ds.unify_collapsed(self.dom(node), value, cid)

    _RULES: ClassVar[dict[type, Callable[[Collector, Any], None]]] = {
        Call: _call,
        Let: _let,
        Function: _function,
        Tuple: _tuple,
        ast.TupleGetItem: _projection,
        Match: _match,
        If: _if,
        RefCreate: _ref_create,
        RefRead: _ref_read,
        RefWrite: _ref_write,
    }

    # ---- defaulting (section 4)

    def unify_free_on_devices(self) -> None:
        """Step 1: free `on_device` calls take their context's device where compatible."""
        roots = [func for _, func in self.functions if is_optimizable(func)]
        for i, node in enumerate(post_order(roots, enter=not_primitive)):
            if not i & MASK:
                self.deadline.check("free on_device unification")
            if type(node) is Call and type(node.op) is Op and node.op.name == "on_device":
                od = ast.on_device_props(node)
                if od is not None and not od.constrain_body and not od.constrain_result:
                    cid = self.ds.tag("free on_device", node, hard=False)
                    self.soft_count += 1
                    self.ds.try_unify(self.dom(node), self.dom(od.body), cid)

    def apply_defaults(self) -> None:
        """Step 2: TVM's DeviceDefaulter walk, globals in definition order."""
        ds = self.ds
        default = self.default
        roots = [func for _, func in self.functions if is_optimizable(func)]
        for i, node in enumerate(pre_order(roots, enter=not_primitive)):
            if not i & MASK:
                self.deadline.check("defaults")
            if isinstance(node, Function):
                if node.is_primitive:
                    continue
                fd = self.dom(node)
                if not ds.is_fully_constrained(fd):
                    self.soft_count += 1
                    ds.set_result_default_then_params(fd, default, ds.tag("default", node, hard=False))
            elif isinstance(node, Call):
                cd = self.callee_domain(node)
                first = cd[0] if type(cd) is tuple and cd else None
                if type(first) is int and all(x == first for x in cd):  # type: ignore[union-attr]
                    # An operator's shared domain: result, then params, is one class.
                    if not ds.device(first).is_fully_constrained:
                        self.soft_count += 1
                        ds.set_default(first, default, ds.tag("default", node, hard=False))
                elif not ds.is_fully_constrained(cd):
                    self.soft_count += 1
                    ds.set_result_default_then_params(cd, default, ds.tag("default", node, hard=False))
            elif isinstance(node, Let):
                let_vd = ds.result_device(self.dom(node))
                if let_vd.is_fully_unconstrained:
                    let_vd = default
                var_dom = self.dom(node.var)
                if not ds.is_fully_constrained(var_dom):
                    self.soft_count += 1
                    ds.set_default(var_dom, let_vd, ds.tag("let default", node, hard=False))
