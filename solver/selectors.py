"""Selectors name expressions of the *input* module; one `resolve` serves
request pins, why-queries and pictures alike.

Kinds: `{"param": "@f:%x"}` (or a name pattern, `{"param": "@f:p_layers_3_*"}`:
shell-style `*` and `?` as `fnmatch`), `{"function": "@f"}`, `{"op": NAME, "index": K}`,
`{"at": "LINE:COL"}` (the outermost expression starting there; text input
only) and `{"node": ID}`. Node ids number the input module's expressions in
post-order (`relay.traverse.post_order` over the global functions in
definition order, then a single-expression module's expression), so they are
the same for its text and JSON forms and stable across re-plans.

The k-th call of an operator (`index`) is counted by one rule: calls of that
operator in node-id order, among the functions the planner plans (a global
with `Compiler`, `Extern` or `SkipOptimization` is not counted). Pins,
why-queries and the picture's pinned outlines all use it.

`align` maps input nodes to the planner's nodes (the input with wrappers
added or dropped) and finds where the plan inserted copies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from relay import ast
from relay.ast import Call, Constructor, Expr, Function, GlobalVar, Let, Match, Module, Op
from relay.device import VirtualDevice
from relay.traverse import children, post_order, pre_order

from .collect import is_optimizable
from .errors import PlanConfigError

SELECTOR_KINDS = ("param", "function", "op", "at", "node")
WRAPPERS = ("on_device", "device_copy")
PATTERN_CHARS = "*?"
# Operators that only re-lay a tensor out, by their Relax names and the Relay
# names tvm_bridge.relax_translate gives them (permute_dims -> transpose,
# astype -> cast): pattern pins on weights follow them to the operator that
# computes, and the device map counts a re-laid-out weight as that weight.
LAYOUT_ONLY_OPS = frozenset({"permute_dims", "transpose", "reshape", "astype", "cast", "expand_dims"})


# ---------------------------------------------------------------------------
# Selectors and pins


@dataclass(frozen=True)
class Selector:
    """A validated selector: its kind, value and (for `op`) index."""

    kind: str
    value: str | int
    index: int | None = None

    @staticmethod
    def parse(raw: Any, where: str) -> Selector:
        """Validate a selector object (`where` prefixes errors: "constraint #2")."""
        if isinstance(raw, Selector):
            return raw
        if not isinstance(raw, Mapping):
            raise PlanConfigError(f"{where}: selector must be an object, got {raw!r}")
        kinds = [key for key in SELECTOR_KINDS if key in raw]
        extra = set(raw) - {*SELECTOR_KINDS, "index"}
        if len(kinds) != 1 or extra or ("index" in raw and kinds != ["op"]):
            raise PlanConfigError(f"{where}: bad selector {dict(raw)!r}")
        kind = kinds[0]
        value = raw[kind]
        if kind == "node" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise PlanConfigError(f"{where}: 'node' must be a non-negative integer, got {value!r}")
        if kind == "at" and (not isinstance(value, str) or _parse_at(value) is None):
            raise PlanConfigError(f"{where}: 'at' must be 'LINE:COL', got {value!r}")
        index = raw.get("index")
        if kind == "node":
            return Selector(kind, value)
        return Selector(kind, str(value) if kind != "op" or isinstance(value, str) else value, index)

    def as_dict(self) -> dict[str, Any]:
        """The selector's wire form."""
        out: dict[str, Any] = {self.kind: self.value}
        if self.index is not None:
            out["index"] = self.index
        return out

    def text(self) -> str:
        """The wire form as JSON, for messages."""
        return json.dumps(self.as_dict(), sort_keys=True)

    def function_name(self) -> str:
        """`@f` (function selectors) or the `@f` of `@f:%x` (param selectors), without `@`."""
        return str(self.value).partition(":")[0].lstrip("@")

    def param_name(self) -> str:
        """The `%x` of `@f:%x`, without `%`."""
        return str(self.value).partition(":")[2].lstrip("%")

    def is_pattern(self) -> bool:
        """A `param` selector whose name has `*` or `?`: it names every
        parameter of the function that matches (`fnmatch`, case-sensitive)."""
        return self.kind == "param" and any(c in self.param_name() for c in PATTERN_CHARS)


@dataclass(frozen=True)
class Pin:
    """A request-level pin: constraint #k puts what `selector` names on `device`."""

    selector: Selector
    device: VirtualDevice
    k: int

    @property
    def kind(self) -> str:
        return self.selector.kind


def _parse_at(text: str) -> tuple[int, int] | None:
    line, sep, col = text.partition(":")
    if not sep or not line.strip().isdigit() or not col.strip().isdigit():
        return None
    return int(line), int(col)


# ---------------------------------------------------------------------------
# Node ids


def input_roots(module: Module) -> list[Expr]:
    """What node ids number: the global functions in definition order (or the
    expression of a single-expression module)."""
    roots: list[Expr] = [func for _, func in module.functions]
    if module.expr is not None and not any(gv.name == "main" for gv, _ in module.functions):
        roots.append(module.expr)
    return roots


def node_ids(module: Module) -> list[Expr]:
    """The expressions of `module` in id order."""
    return post_order(input_roots(module))


def node_id_of(module: Module) -> dict[int, int]:
    """id(input expression) -> node id."""
    return {id(n): i for i, n in enumerate(node_ids(module))}


def planned_roots(functions: Sequence[tuple[GlobalVar, Function]], from_expr: bool) -> list[Expr]:
    """The planner's counterparts of `input_roots` (a single expression's
    module is planned as the body of a made-up @main, the last function)."""
    roots: list[Expr] = [f for _, f in functions]
    if from_expr and roots:
        last = roots[-1]
        assert isinstance(last, Function)
        roots[-1] = last.body
    return roots


def has_spans(module: Module) -> bool:
    """Whether the module came from text (its nodes carry source positions)."""
    return any(getattr(n, "span", None) is not None for n in pre_order(input_roots(module)))


def op_calls(module: Module, name: str) -> list[Call]:
    """The calls of operator `name` the planner plans, in node-id order: the
    one rule for "the k-th call" of pins, why-queries and pictures."""
    planned = [r for r in input_roots(module) if not isinstance(r, Function) or is_optimizable(r)]
    return [
        n for n in post_order(planned) if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == name
    ]


def resolve(
    module: Module,
    selector: Selector | Mapping[str, Any],
    where: str = "selector",
    ids: Sequence[Expr] | None = None,
) -> list[Expr]:
    """The input expressions a selector names (in node-id order for `op`).
    `ids`: `node_ids(module)` when the caller has it (a report resolves a
    node selector per placement; walking the module for each is quadratic)."""
    sel = Selector.parse(selector, where)
    value = sel.value
    if sel.kind == "node":
        if ids is None:
            ids = node_ids(module)
        assert isinstance(value, int)
        if value >= len(ids):
            raise PlanConfigError(f"{where}: node {value} does not exist (the module has {len(ids)} nodes)")
        return [ids[value]]
    if sel.kind == "at":
        pos = _parse_at(str(value))
        if not has_spans(module):
            raise PlanConfigError(f"{where}: 'at' selectors need text input (JSON has no positions)")
        for node in pre_order(input_roots(module)):
            span = getattr(node, "span", None)
            if span is not None and (span.line, span.column) == pos and not isinstance(node, Op):
                return [node]
        raise PlanConfigError(f"{where}: no expression starts at {value}")
    if sel.kind == "op":
        found: list[Expr] = list(op_calls(module, str(value)))
        want = sel.index
        if want is not None:
            found = found[want : want + 1] if isinstance(want, int) and want >= 0 else []
        if not found:
            raise PlanConfigError(f"{where}: selector {sel.text()} matches no operator call")
        return found
    by_name = {gv.name: func for gv, func in module.functions}
    func = by_name.get(sel.function_name())
    if sel.kind == "function":
        if func is None:
            raise PlanConfigError(f"{where}: selector {sel.text()} matches no global function")
        return [func]
    params = matching_params(func, sel) if func is not None else []
    if not params:
        raise PlanConfigError(f"{where}: selector {sel.text()} matches no parameter")
    return list(params)


def matching_params(func: Function, sel: Selector) -> list[ast.Var]:
    """The parameters of `func` a `param` selector names, in order: the one of
    that name, or every one matching a pattern."""
    name = sel.param_name()
    if sel.is_pattern():
        return [p for p in func.params if fnmatchcase(p.name, name)]
    return [p for p in func.params if p.name == name][:1]


def is_layout_only(name: str) -> bool:
    """Whether operator `name` only re-lays its input out, in any spelling:
    Relay's (`transpose`), Relax's (`relax.permute_dims`) or TVMScript's
    (`R.permute_dims`)."""
    return name.removeprefix("relax.").removeprefix("R.") in LAYOUT_ONLY_OPS


def weight_readers(func: Function, params: Iterable[ast.Var]) -> list[Call]:
    """The operator calls of `func` that read `params`: each call that takes
    one as an argument and, through layout-only operators
    (`is_layout_only`), the first call that computes; the layout-only calls
    on the way are included. Tuples and `on_device` pass a value through; a
    `device_copy` ends the walk (what it feeds reads the copy). In node-id
    order; iterative."""
    nodes = post_order([func])
    users: dict[int, list[Expr]] = {}
    for node in nodes:
        for child in children(node):
            users.setdefault(id(child), []).append(node)
        if isinstance(node, Let):
            users.setdefault(id(node.value), []).append(node.var)  # the bound name stands for it
    found: set[int] = set()
    seen: set[int] = set()
    stack: list[Expr] = list(params)
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        for user in users.get(id(value), ()):
            if isinstance(user, (ast.Var, ast.Tuple)):  # a let's name, a tuple field
                stack.append(user)
            elif isinstance(user, Call) and isinstance(user.op, Op) and any(a is value for a in user.args):
                name = user.op.name
                if name == "on_device":
                    stack.append(user)
                elif name == "device_copy":
                    continue
                else:
                    found.add(id(user))
                    if is_layout_only(name):
                        stack.append(user)
    return [n for n in nodes if id(n) in found and isinstance(n, Call)]


# ---------------------------------------------------------------------------
# Input nodes -> the planner's nodes


def wrapper_op(expr: Expr) -> str | None:
    """ "on_device" or "device_copy" for such a call (one argument), else None."""
    if (
        isinstance(expr, Call)
        and isinstance(expr.op, Op)
        and expr.op.name in WRAPPERS
        and len(expr.args) == 1
    ):
        return expr.op.name
    return None


@dataclass(frozen=True)
class Alignment:
    """`mapping`: id(input node) -> the planner's node for it; `copies`:
    (input parent, input child, planned copy) for every `device_copy` call of
    the planned side, which sits between that child and that parent."""

    mapping: dict[int, Expr] = field(default_factory=dict)
    copies: list[tuple[Expr | None, Expr, Call]] = field(default_factory=list)


def align(inputs: Sequence[Expr], planned: Sequence[Expr]) -> Alignment:
    """Walk an input module and the planner's version of it side by side. The
    planner's functions are the input with wrappers (`on_device`,
    `device_copy`) added or removed and parameters rebuilt; a dropped input
    wrapper maps to its body's counterpart."""
    out: dict[int, Expr] = {}
    copies: list[tuple[Expr | None, Expr, Call]] = []
    counted: set[int] = set()
    seen: set[int] = set()
    stack: list[tuple[Expr | None, Expr, Expr]] = [(None, a, b) for a, b in zip(inputs, planned)]
    while stack:
        parent, a, b = stack.pop()
        wa = wrapper_op(a)
        while (wb := wrapper_op(b)) is not None and wb != wa:
            assert isinstance(b, Call)
            if wb == "device_copy" and id(b) not in counted:
                counted.add(id(b))
                copies.append((parent, a, b))
            b = b.args[0]
        if wa == "device_copy" and wb == "device_copy" and id(b) not in counted:
            assert isinstance(b, Call)
            counted.add(id(b))  # an input copy the plan keeps
            copies.append((parent, a, b))
        if wa is not None and wb != wa:
            out.setdefault(id(a), b)  # an input wrapper the planner dropped shows as its body
            stack.append((parent, a.args[0], b))  # type: ignore[attr-defined]
            continue
        if id(a) in seen:
            continue
        seen.add(id(a))
        if type(a) is not type(b):
            continue
        out.setdefault(id(a), b)
        if isinstance(a, Function) and isinstance(b, Function):
            for p, q in zip(a.params, b.params):
                out.setdefault(id(p), q)
        elif isinstance(a, Let) and isinstance(b, Let):
            out.setdefault(id(a.var), b.var)
        elif isinstance(a, Match) and isinstance(b, Match):
            for ca, cb in zip(a.clauses, b.clauses):
                for p, q in zip(ast.pattern_vars(ca.lhs), ast.pattern_vars(cb.lhs)):
                    out.setdefault(id(p), q)
        ka, kb = children(a), children(b)
        if len(ka) == len(kb):
            stack.extend((a, x, y) for x, y in zip(ka, kb))
    return Alignment(out, copies)


def is_computation(node: Expr) -> bool:
    """Whether a selected node computes a value (operators, globals and
    constructors are names, not computations)."""
    return not isinstance(node, (Op, GlobalVar, Constructor))
