"""Light function-shape inference: which expressions are functions, of what arity.

Device domains follow types only as far as "is this a function, with which
parameter and result shapes" (docs/planning.md, section 2). Tensor shapes
are irrelevant, so this is a small structural inference over the graph, using
type annotations where present (parameters, let binders, constructor fields,
`checked_type` from TVM JSON) and the structure of the program elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay import ast
from relay.ast import Call, Constant, Constructor, Expr, Function, FuncType, GlobalVar, If, Let, Match, Op
from relay.traverse import walk

from .deadline import MASK, Deadline


@dataclass(frozen=True, slots=True)
class FnShape:
    params: tuple[Shape, ...]
    result: Shape


@dataclass(frozen=True, slots=True)
class TupShape:
    fields: tuple[Shape, ...]


@dataclass(frozen=True, slots=True)
class RefShape:
    value: Shape


Shape = FnShape | TupShape | RefShape | None
"""None is a plain first-order value (tensor, ADT, scalar) or unknown."""


def type_shape(t: ast.Type | None) -> Shape:
    """The shape a type implies (None when the type says nothing about functions)."""
    if t is None:
        return None
    match t:
        case FuncType(arg_types=args, ret_type=ret):
            return FnShape(tuple(type_shape(a) for a in args), type_shape(ret))
        case ast.TupleType(fields=fields):
            shapes = tuple(type_shape(f) for f in fields)
            return TupShape(shapes) if any(s is not None for s in shapes) else None
        case ast.RefType(value=v):
            inner = type_shape(v)
            return RefShape(inner) if inner is not None else None
    return None


_PASS_THROUGH_OPS = frozenset({"on_device", "device_copy"})


class ShapeInfo:
    """Shapes of every expression of a module, by node identity."""

    def __init__(self) -> None:
        self.expr: dict[int, Shape] = {}
        self.var: dict[int, Shape] = {}
        self.globals: dict[str, Shape] = {}

    def of(self, expr: Expr) -> Shape:
        return self.expr.get(id(expr))


def _function_signature(func: Function) -> FnShape:
    return FnShape(tuple(type_shape(p.type_annotation) for p in func.params), type_shape(func.ret_type))


def _bind_pattern(info: ShapeInfo, pattern: object, shape: Shape) -> None:
    stack: list[tuple[object, Shape]] = [(pattern, shape)]
    while stack:
        pat, sh = stack.pop()
        match pat:
            case ast.PatternVar(var=var):
                info.var[id(var)] = type_shape(var.type_annotation) or sh
            case ast.PatternTuple(patterns=ps):
                fields = sh.fields if isinstance(sh, TupShape) else ()
                for i, p in enumerate(ps):
                    stack.append((p, fields[i] if i < len(fields) else None))
            case ast.PatternConstructor(constructor=ctor, patterns=ps):
                for i, p in enumerate(ps):
                    inp = ctor.inputs[i] if i < len(ctor.inputs) else None
                    stack.append((p, type_shape(inp)))


def infer_shapes(module: ast.Module, roots: list[Expr], deadline: Deadline | None = None) -> ShapeInfo:
    """Infer the shape of every expression reachable from `roots` (global
    function bodies in definition order, then the module expression)."""
    info = ShapeInfo()
    for gv, func in module.functions:
        info.globals[gv.name] = _function_signature(func)
    for root in roots:
        _infer_from(info, root, deadline)
    # Globals without a return type annotation: use the inferred body shape.
    for gv, func in module.functions:
        sig = info.globals[gv.name]
        if isinstance(sig, FnShape) and sig.result is None and func.ret_type is None:
            body = info.of(func.body)
            if body is not None:
                info.globals[gv.name] = FnShape(sig.params, body)
                info.expr[id(func)] = info.globals[gv.name]
    return info


def _infer_from(info: ShapeInfo, root: Expr, deadline: Deadline | None) -> None:
    """Shapes bottom-up; binders get theirs where their scope starts (parameters
    from annotations, a let's variable from its value, pattern variables
    from the matched value), before their uses are reached."""
    done = info.expr

    def bind(node: Expr, index: int) -> None:
        match node:
            case Function(params=params):
                for p in params:
                    info.var[id(p)] = type_shape(p.type_annotation)
            case Let(var=var, value=value):
                info.var[id(var)] = type_shape(var.type_annotation) or info.of(value)
            case Match(data=data, clauses=clauses):
                _bind_pattern(info, clauses[index].lhs, info.of(data))

    def post(node: Expr) -> None:
        # Operator calls, most nodes, without the general match: an operator's
        # result has no shape of its own unless it passes its argument's through.
        if isinstance(node, Call) and isinstance(node.op, Op) and node.checked_type is None:
            args = node.args
            passes = node.op.name in _PASS_THROUGH_OPS and len(args) == 1
            done[id(node)] = done.get(id(args[0])) if passes else None
        else:
            done[id(node)] = _shape_of_node(info, node)
        if deadline is not None and not len(done) & MASK:
            deadline.check("infer")

    walk(root, post=post, bind=bind, done=done)


def _shape_of_node(info: ShapeInfo, node: Expr) -> Shape:
    if node.checked_type is not None:
        shape = type_shape(node.checked_type)
        if shape is not None:
            return shape
    match node:
        case ast.Var():
            return info.var.get(id(node)) or type_shape(node.type_annotation)
        case GlobalVar(name=name):
            return info.globals.get(name)
        case Constant() | Op() | Constructor():
            return None
        case Function(params=params, body=body):
            return FnShape(
                tuple(info.var.get(id(p)) for p in params), info.of(body) or type_shape(node.ret_type)
            )
        case Call(op=callee, args=args):
            if isinstance(callee, Op):
                if callee.name in _PASS_THROUGH_OPS and len(args) == 1:
                    return info.of(args[0])
                return None
            if isinstance(callee, Constructor):
                return None
            fn = info.of(callee)
            return fn.result if isinstance(fn, FnShape) else None
        case Let(body=body):
            return info.of(body)
        case If(true_branch=t, false_branch=f):
            return info.of(t) or info.of(f)
        case ast.Tuple(fields=fields):
            shapes = tuple(info.of(f) for f in fields)
            return TupShape(shapes) if any(s is not None for s in shapes) else None
        case ast.TupleGetItem(tuple_value=t, index=i):
            sh = info.of(t)
            if isinstance(sh, TupShape) and 0 <= i < len(sh.fields):
                return sh.fields[i]
            return None
        case ast.RefCreate(value=v):
            inner = info.of(v)
            return RefShape(inner) if inner is not None else None
        case ast.RefRead(ref=r):
            sh = info.of(r)
            return sh.value if isinstance(sh, RefShape) else None
        case ast.RefWrite():
            return None
        case Match(clauses=clauses):
            for clause in clauses:
                sh = info.of(clause.rhs)
                if sh is not None:
                    return sh
            return None
    return None
