"""The traversal driver: `pre_order` options and `walk`'s hooks and scopes."""

from __future__ import annotations

from relay import Call, Function, Let, Match, TensorType, Tuple, Var, op, parse_text, post_order, pre_order
from relay.ast import Clause, Expr, If, PatternTuple, PatternVar, PatternWildcard
from relay.traverse import binders, not_primitive, walk

T = TensorType((4,), "float32")


def label(node: Expr) -> str:
    match node:
        case Var(name=name):
            return f"%{name}"
        case Call(op=callee):
            return callee.name if hasattr(callee, "name") else "call"
    return type(node).__name__


def test_pre_order_right_to_left_and_shared_seen() -> None:
    x, y = Var("x", T), Var("y", T)
    left = Call(op("negative"), (x,))
    right = Call(op("exp"), (y,))
    root = Call(op("add"), (left, right))
    assert [label(n) for n in pre_order(root)] == ["add", "Op", "negative", "Op", "%x", "exp", "Op", "%y"]
    assert [label(n) for n in pre_order(root, right_to_left=True)] == [
        "add", "exp", "%y", "Op", "negative", "%x", "Op", "Op",
    ]  # fmt: skip
    seen: set[int] = set()
    first = pre_order(left, seen=seen)
    second = pre_order(root, seen=seen)
    assert left in first and left not in second and root in second
    assert not set(map(id, first)) & set(map(id, second))


def test_pre_order_enter_lists_but_does_not_descend() -> None:
    x = Var("x", T)
    inner = Function((x,), Call(op("exp"), (x,)), T, attrs=(("Primitive", 1),))
    y = Var("y", T)
    root = Call(inner, (y,))
    listed = pre_order(root, enter=not_primitive)
    assert inner in listed and inner.body not in listed


def test_walk_hooks_run_in_evaluation_order_with_scopes() -> None:
    """pre before children, post after; a let's binder comes into scope after
    its value and leaves after its body; a function's params around its body."""
    x, v = Var("x", T), Var("v", T)
    value = Call(op("negative"), (x,))
    let = Let(v, value, Call(op("add"), (v, x)))
    func = Function((x,), let, T)
    events: list[str] = []
    walk(
        func,
        pre=lambda n: events.append("pre " + label(n)) and None,
        post=lambda n: events.append("post " + label(n)),
        bind=lambda n, i: events.append("bind " + ",".join(label(b) for b in binders(n, i))),
        unbind=lambda n, i: events.append("unbind " + ",".join(label(b) for b in binders(n, i))),
    )
    assert events[:3] == ["pre Function", "bind %x", "pre Let"]
    assert events.index("post negative") < events.index("bind %v") < events.index("pre add")
    assert events.index("post add") < events.index("unbind %v") < events.index("post Let")
    assert events[-2:] == ["unbind %x", "post Function"]
    # Each node once: %x is used three times but visited once.
    assert events.count("pre %x") == 1


def test_walk_use_sees_every_reach_of_a_variable() -> None:
    x = Var("x", T)
    shared = Call(op("negative"), (x,))
    root = Tuple((shared, shared, x))
    uses: list[Var] = []
    walk(root, use=uses.append)
    # The shared call is entered once (one use through it), then %x directly.
    assert uses == [x, x]


def test_walk_match_binds_each_clause_around_its_rhs() -> None:
    a, b = Var("a", T), Var("b", T)
    data = Var("data", T)
    m = Match(
        Tuple((data, data)),
        (
            Clause(PatternTuple((PatternVar(a), PatternWildcard())), a),
            Clause(PatternVar(b), Call(op("exp"), (b,))),
        ),
    )
    in_scope: list[str] = []
    seen_in_scope: dict[str, list[str]] = {}

    def bind(node: Expr, index: int) -> None:
        in_scope.extend(v.name for v in binders(node, index))

    def unbind(node: Expr, index: int) -> None:
        for v in binders(node, index):
            in_scope.remove(v.name)

    def use(var: Var) -> None:
        seen_in_scope[var.name] = list(in_scope)

    walk(m, bind=bind, unbind=unbind, use=use)
    assert seen_in_scope == {"data": [], "a": ["a"], "b": ["b"]}
    assert in_scope == []


def test_walk_pre_false_skips_children_and_kids_replaces_children() -> None:
    x = Var("x", T)
    branch = Call(op("exp"), (x,))
    cond = Var("c", TensorType((), "bool"))
    root = If(cond, branch, x)
    visited: list[Expr] = []
    walk(root, pre=lambda n: visited.append(n) or not isinstance(n, If))
    assert visited == [root]
    visited.clear()
    walk(root, pre=visited.append, kids=lambda n: (n.cond,) if isinstance(n, If) else ())
    assert visited == [root, cond]
    visited.clear()
    walk(root, pre=visited.append, done={id(branch), id(cond)})
    assert branch not in visited and cond not in visited and x in visited


def test_walk_and_orders_handle_deep_programs() -> None:
    """200k nested calls: no recursion anywhere."""
    x = Var("x", T)
    e: Expr = x
    for _ in range(200_000):
        e = Call(op("negative"), (e,))
    count = 0

    def post(node: Expr) -> None:
        nonlocal count
        count += 1

    walk(e, post=post)
    # Each call, the one interned op node per name, and %x.
    assert count == len(post_order(e)) == len(pre_order(e, right_to_left=True))


def test_walk_on_a_parsed_program_matches_post_order() -> None:
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = negative(%x);
  let %y = add(%0, %0);
  %1 = fn (%z: Tensor[(4), float32]) { exp(%z) };
  %1(%y)
}
"""
    module = parse_text(text)
    func = module.functions[0][1]
    order: list[Expr] = []
    walk(func, post=order.append)
    assert [id(n) for n in order] == [id(n) for n in post_order(func)]
