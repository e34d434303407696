"""Structural equality of Relay modules and expressions.

Alpha-equivalent (bound variables are matched by position, not name) and
graph-aware: whether identical subterms are shared or duplicated does not
matter. Each pair of nodes is compared once, so shared subgraphs cost no
more than their size, and the walk uses an explicit worklist.
"""

from __future__ import annotations

from typing import Any

from . import ast as A
from .device import VirtualDevice
from .traverse import children


def structural_equal(a: A.Module | A.Expr, b: A.Module | A.Expr) -> bool:
    """True when `a` and `b` are the same program up to variable names,
    node sharing, spans and inferred types."""
    return _Comparer().equal(a, b)


def _attrs_key(op_name: str | None, attrs: A.Attrs | None) -> dict[str, Any]:
    if attrs is None:
        if op_name is None:
            return {}
        attrs = A.Attrs()
    if op_name is not None:
        try:
            from .op_attrs import normalize_for_compare
        except ImportError:
            pass
        else:
            return normalize_for_compare(op_name, attrs)
    return attrs.as_dict()


class _Comparer:
    def __init__(self) -> None:
        self.var_map: dict[int, A.Var] = {}
        self.var_back: dict[int, A.Var] = {}
        self.ctor_map: dict[str, str] = {}

    def equal(self, a: A.Module | A.Expr, b: A.Module | A.Expr) -> bool:
        if isinstance(a, A.Module) and isinstance(b, A.Module):
            return self.modules(a, b)
        if isinstance(a, A.Expr) and isinstance(b, A.Expr):
            return self.exprs([(a, b)])
        return False

    def modules(self, a: A.Module, b: A.Module) -> bool:
        if len(a.functions) != len(b.functions) or len(a.type_definitions) != len(b.type_definitions):
            return False
        b_funcs = {gv.name: f for gv, f in b.functions}
        for ta, tb in zip(
            sorted(a.type_definitions, key=lambda t: t.header.name),
            sorted(b.type_definitions, key=lambda t: t.header.name),
        ):
            if ta.header.name != tb.header.name or len(ta.constructors) != len(tb.constructors):
                return False
            if len(ta.type_vars) != len(tb.type_vars):
                return False
            for ca, cb in zip(ta.constructors, tb.constructors):
                if ca.name != cb.name or len(ca.inputs) != len(cb.inputs):
                    return False
        pairs: list[tuple[A.Expr, A.Expr]] = []
        for gv, fa in a.functions:
            fb = b_funcs.get(gv.name)
            if fb is None:
                return False
            pairs.append((fa, fb))
        if (a.expr is None) != (b.expr is None):
            return False
        if a.expr is not None and b.expr is not None:
            pairs.append((a.expr, b.expr))
        return self.exprs(pairs)

    def bind(self, va: A.Var, vb: A.Var) -> bool:
        """Match two binders: same annotation and device, then a bijection."""
        if not _types_equal(va.type_annotation, vb.type_annotation):
            return False
        if not _devices_equal(va.virtual_device, vb.virtual_device):
            return False
        return self.var_pair(va, vb)

    def var_pair(self, va: A.Var, vb: A.Var) -> bool:
        mapped = self.var_map.get(id(va))
        if mapped is not None:
            return mapped is vb
        if id(vb) in self.var_back:
            return False
        self.var_map[id(va)] = vb
        self.var_back[id(vb)] = va
        return True

    def patterns(self, pa: A.Pattern, pb: A.Pattern) -> bool:
        stack = [(pa, pb)]
        while stack:
            x, y = stack.pop()
            if type(x) is not type(y):
                return False
            match x:
                case A.PatternVar(var=var):
                    if not self.bind(var, y.var):  # type: ignore[attr-defined]
                        return False
                case A.PatternConstructor(constructor=ctor, patterns=ps):
                    if ctor.name != y.constructor.name or len(ps) != len(y.patterns):  # type: ignore[attr-defined]
                        return False
                    stack.extend(zip(ps, y.patterns))  # type: ignore[attr-defined]
                case A.PatternTuple(patterns=ps):
                    if len(ps) != len(y.patterns):  # type: ignore[attr-defined]
                        return False
                    stack.extend(zip(ps, y.patterns))  # type: ignore[attr-defined]
        return True

    def exprs(self, pairs: list[tuple[A.Expr, A.Expr]]) -> bool:
        """Walk the pairs in lockstep (each pair once): compare the two nodes'
        own fields, bind their binders, then queue their children pairwise."""
        seen: set[tuple[int, int]] = set()
        stack = list(reversed(pairs))
        while stack:
            x, y = stack.pop()
            key = (id(x), id(y))
            if key in seen:
                continue
            seen.add(key)
            if type(x) is not type(y) or not self.same_node(x, y):
                return False
            if type(x) is A.Call:  # most pairs: their children without `children`
                stack.extend(zip(reversed(x.args), reversed(y.args)))  # type: ignore[attr-defined]
                stack.append((x.op, y.op))  # type: ignore[attr-defined]
                continue
            kx = children(x)
            if kx:
                stack.extend(zip(reversed(kx), reversed(children(y))))
        return True

    def same_node(self, x: A.Expr, y: Any) -> bool:
        """The fields of two nodes of one type, children excepted; binders are
        matched here, before the children that use them are compared."""
        match x:
            case A.Var():
                return self.var_pair(x, y)
            case A.GlobalVar(name=name) | A.Op(name=name) | A.Constructor(name=name):
                return bool(name == y.name)
            case A.Constant(data=data, meta_index=index):
                return bool(data == y.data and (data is not None or index == y.meta_index))
            case A.Call(op=op, args=args, attrs=attrs):
                if len(args) != len(y.args):
                    return False
                op_name = op.name if isinstance(op, A.Op) else None
                if not _values_equal(_attrs_key(op_name, attrs), _attrs_key(op_name, y.attrs)):
                    return False
                return not (
                    x.type_args
                    and y.type_args
                    and not all(_types_equal(p, q) for p, q in zip(x.type_args, y.type_args))
                )
            case A.Function(params=params):
                return (
                    len(params) == len(y.params)
                    and len(x.type_params) == len(y.type_params)
                    and _types_equal(x.ret_type, y.ret_type)
                    and _devices_equal(x.virtual_device, y.virtual_device)
                    and _values_equal(dict(x.attrs), dict(y.attrs))
                    and all(self.bind(p, q) for p, q in zip(params, y.params))
                )
            case A.Let(var=var):
                return self.bind(var, y.var)
            case A.Tuple(fields=fields):
                return len(fields) == len(y.fields)
            case A.TupleGetItem(index=i):
                return bool(i == y.index)
            case A.If() | A.RefCreate() | A.RefRead() | A.RefWrite():
                return True
            case A.Match(clauses=clauses, complete=complete):
                return (
                    complete == y.complete
                    and len(clauses) == len(y.clauses)
                    and all(self.patterns(ca.lhs, cb.lhs) for ca, cb in zip(clauses, y.clauses))
                )
        return False


def _types_equal(a: A.Type | None, b: A.Type | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a == b


def _devices_equal(a: Any, b: Any) -> bool:
    unconstrained = VirtualDevice.unconstrained()
    return (a if a is not None else unconstrained) == (b if b is not None else unconstrained)


def _values_equal(a: Any, b: Any) -> bool:
    """Attribute values: like ==, but a list equals the tuple with the same
    items, bools stay distinct from ints, and floats compare exactly."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, VirtualDevice) or isinstance(b, VirtualDevice):
        return _devices_equal(a, b)
    if isinstance(a, A.Constant) and isinstance(b, A.Constant):
        return a.data == b.data
    return bool(a == b)
