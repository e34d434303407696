"""The one traversal driver for Relay expressions: iterative, DAG-aware.

Programs can be hundreds of thousands of nodes deep (a chain of graph
bindings is a chain of nested calls), so nothing here recurses. Every pass
that walks expressions goes through `children`, `post_order` / `pre_order`
(lists of nodes), `walk` (hooks before and after a node, and binder scopes)
or `rewrite` (bottom-up rebuilding).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Iterable, Sequence

from . import ast
from .ast import Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, Var


def children(expr: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of `expr` in evaluation order (binders excluded)."""
    match expr:
        case Call(op=op, args=args):
            return (op, *args)
        case Let(value=value, body=body):
            return (value, body)
        case ast.Tuple(fields=fields):
            return fields
        case ast.TupleGetItem(tuple_value=t):
            return (t,)
        case Function(body=body):
            return (body,)
        case If(cond=c, true_branch=t, false_branch=f):
            return (c, t, f)
        case Match(data=data, clauses=clauses):
            return (data, *(c.rhs for c in clauses))
        case RefCreate(value=v):
            return (v,)
        case ast.RefRead(ref=r):
            return (r,)
        case ast.RefWrite(ref=r, value=v):
            return (r, v)
        case Var() | GlobalVar() | Constant() | Op() | Constructor():
            return ()
    raise TypeError(f"not a Relay expression: {type(expr).__name__}")


def with_children(expr: Expr, new: tuple[Expr, ...]) -> Expr:
    """`expr` with its children (as `children` lists them) replaced.

    Returns `expr` itself when every child is the same object.
    """
    old = children(expr)
    if len(old) == len(new) and all(a is b for a, b in zip(old, new)):
        return expr
    match expr:
        case Call():
            return dataclasses.replace(expr, op=new[0], args=tuple(new[1:]))
        case Let():
            return dataclasses.replace(expr, value=new[0], body=new[1])
        case ast.Tuple():
            return dataclasses.replace(expr, fields=tuple(new))
        case ast.TupleGetItem():
            return dataclasses.replace(expr, tuple_value=new[0])
        case Function():
            return dataclasses.replace(expr, body=new[0])
        case If():
            return dataclasses.replace(expr, cond=new[0], true_branch=new[1], false_branch=new[2])
        case Match():
            clauses = tuple(
                c if c.rhs is rhs else ast.Clause(c.lhs, rhs, span=c.span)
                for c, rhs in zip(expr.clauses, new[1:])
            )
            return dataclasses.replace(expr, data=new[0], clauses=clauses)
        case RefCreate():
            return dataclasses.replace(expr, value=new[0])
        case ast.RefRead():
            return dataclasses.replace(expr, ref=new[0])
        case ast.RefWrite():
            return dataclasses.replace(expr, ref=new[0], value=new[1])
    raise TypeError(f"{type(expr).__name__} has no children to replace")


# Node types without children.
_LEAVES = frozenset({Var, GlobalVar, Constant, Op, Constructor})


def post_order(
    roots: Expr | Iterable[Expr],
    *,
    into_functions: bool = True,
    enter: Callable[[Expr], bool] | None = None,
) -> list[Expr]:
    """Every node reachable from `roots`, each once, children before parents.

    With `into_functions=False`, function literals are listed but their
    bodies are not entered; more generally, a node for which `enter` returns
    False is listed but its children are not visited through it.
    """
    order: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = []
    push = stack.append
    root_list = [roots] if isinstance(roots, Expr) else list(roots)
    for root in reversed(root_list):
        push((root, False))
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        t = type(node)
        if t in _LEAVES:
            order.append(node)
            continue
        push((node, True))
        if not into_functions and t is Function:
            continue
        if enter is not None and not enter(node):
            continue
        # Calls are most nodes: their children without a trip through `children`.
        kids = node.args if t is Call else children(node)  # type: ignore[attr-defined]
        for kid in reversed(kids):
            if id(kid) not in seen:
                push((kid, False))
        if t is Call and id(node.op) not in seen:  # type: ignore[attr-defined]
            push((node.op, False))  # type: ignore[attr-defined]
    return order


def pre_order(
    roots: Expr | Iterable[Expr],
    *,
    into_functions: bool = True,
    enter: Callable[[Expr], bool] | None = None,
    right_to_left: bool = False,
    seen: set[int] | None = None,
) -> list[Expr]:
    """Every node reachable from `roots`, each once, parents before children
    (the first time a node is reached), children left to right (or right to
    left). `enter` as for `post_order`. `seen` (ids) is skipped and updated,
    so several calls can share it to list each node of a program once."""
    order: list[Expr] = []
    append = order.append
    if seen is None:
        seen = set()
    root_list = [roots] if isinstance(roots, Expr) else list(roots)
    stack: list[Expr] = list(reversed(root_list))
    push, extend, pop = stack.append, stack.extend, stack.pop
    while stack:
        node = pop()
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        append(node)
        t = type(node)
        if t in _LEAVES:
            continue
        if not into_functions and t is Function:
            continue
        if enter is not None and not enter(node):
            continue
        if t is Call:  # most nodes: their children without a trip through `children`
            if right_to_left:
                push(node.op)  # type: ignore[attr-defined]
                extend(node.args)  # type: ignore[attr-defined]
            else:
                extend(reversed(node.args))  # type: ignore[attr-defined]
                push(node.op)  # type: ignore[attr-defined]
        else:
            extend(children(node) if right_to_left else reversed(children(node)))
    return order


# Hook entries on `walk`'s stack: what to do with the node they carry.
_POST, _BIND, _UNBIND = 1, 2, 3


def walk(
    roots: Expr | Iterable[Expr],
    *,
    pre: Callable[[Expr], bool | None] | None = None,
    post: Callable[[Expr], None] | None = None,
    bind: Callable[[Expr, int], None] | None = None,
    unbind: Callable[[Expr, int], None] | None = None,
    use: Callable[[Var], None] | None = None,
    kids: Callable[[Expr], Sequence[Expr]] = children,
    done: Container[int] | None = None,
) -> None:
    """A depth-first walk with hooks, for passes that need more than a list of
    nodes: scopes, or work both before and after a node's children.

    Each node is visited once (the first time it is reached), in evaluation
    order: `pre(node)` before its children (returning False skips them) and
    `post(node)` after them. Binders come into scope where their scope
    starts: `bind(node, i)` and, after the scope, `unbind(node, i)` bracket a
    function's body (i = 0), a let's body, after its value (i = 0), and the
    i-th clause of a match, after the matched value. `use(var)` is called
    every time a local variable is reached, not only the first. `kids`
    replaces `children` for nodes that bind nothing (e.g. to descend into
    only an `if`'s condition); `done` holds ids of nodes to treat as visited
    already (a memo of an enclosing scope).
    """
    seen: set[int] = set()
    root_list = [roots] if isinstance(roots, Expr) else list(roots)
    # A node on the stack is to be visited; a tuple (action, node, index) is
    # a hook to run (no tuple is built for the common visit).
    stack: list[Expr | tuple[int, Expr, int]] = list(reversed(root_list))
    push = stack.append
    pop = stack.pop
    while stack:
        item = pop()
        if type(item) is tuple:
            action, node, index = item
            if action == _POST:
                post(node)  # type: ignore[misc]
            elif action == _BIND:
                bind(node, index)  # type: ignore[misc]
            else:
                unbind(node, index)  # type: ignore[misc]
            continue
        node = item  # type: ignore[assignment]
        t = type(node)
        if t is Var and use is not None:
            use(node)  # type: ignore[arg-type]
        key = id(node)
        if key in seen or (done is not None and key in done):
            continue
        seen.add(key)
        if post is not None:
            push((_POST, node, 0))
        if pre is not None and pre(node) is False:
            continue
        if t is Let or t is Function:
            if unbind is not None:
                push((_UNBIND, node, 0))
            push(node.body)  # type: ignore[attr-defined]
            if bind is not None:
                push((_BIND, node, 0))
            if t is Let:
                push(node.value)  # type: ignore[attr-defined]
        elif t is Match:
            clauses = node.clauses  # type: ignore[attr-defined]
            for i in range(len(clauses) - 1, -1, -1):
                if unbind is not None:
                    push((_UNBIND, node, i))
                push(clauses[i].rhs)
                if bind is not None:
                    push((_BIND, node, i))
            push(node.data)  # type: ignore[attr-defined]
        elif t not in _LEAVES:
            for kid in reversed(kids(node)):
                if use is not None or id(kid) not in seen:
                    push(kid)


def binders(node: Expr, index: int = 0) -> tuple[Var, ...]:
    """The variables `walk`'s `bind(node, index)` brings into scope."""
    match node:
        case Function(params=params):
            return params
        case Let(var=var):
            return (var,)
        case Match(clauses=clauses):
            return tuple(ast.pattern_vars(clauses[index].lhs))
    return ()


def not_primitive(node: Expr) -> bool:
    """An `enter` predicate for `post_order`: do not walk into `Primitive=1` functions."""
    return not (isinstance(node, Function) and node.is_primitive)


def rewrite(root: Expr, visit: Callable[[Expr, Expr], Expr], *, into_functions: bool = True) -> Expr:
    """Rebuild `root` bottom-up: each node's children are rewritten first,
    then `visit(original, rebuilt)` gives the node's replacement.

    `rebuilt` is `original` with rewritten children (the same object when
    none changed). Shared nodes are rewritten once, so sharing is kept.
    """
    memo: dict[int, Expr] = {}
    for node in post_order(root, into_functions=into_functions):
        if not into_functions and isinstance(node, Function):
            memo[id(node)] = visit(node, node)
            continue
        kids = children(node)
        rebuilt = with_children(node, tuple(memo[id(k)] for k in kids)) if kids else node
        memo[id(node)] = visit(node, rebuilt)
    return memo[id(root)]


def free_vars(expr: Expr) -> list[Var]:
    """Local variables used in `expr` but not bound inside it, in first-use order."""
    bound: set[int] = set()
    for node in post_order(expr):
        match node:
            case Function(params=params):
                bound.update(id(p) for p in params)
            case Let(var=var):
                bound.add(id(var))
            case Match(clauses=clauses):
                for clause in clauses:
                    bound.update(id(v) for v in ast.pattern_vars(clause.lhs))
    out: list[Var] = []
    seen: set[int] = set()
    for node in pre_order(expr):
        if isinstance(node, Var) and id(node) not in bound and id(node) not in seen:
            seen.add(id(node))
            out.append(node)
    return out
