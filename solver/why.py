"""Why-queries (issue 13): for an expression, its device and the shortest chain
of collected constraints that decided it.

Expressions are addressed by selectors: the request-level ones (`param`,
`function`, `op` with optional `index`) plus `{"at": "LINE:COL"}` (the
outermost expression starting there; text input only) and `{"node": ID}`.
Node ids number the expressions of the *input* module in post-order
(`relay.traverse.post_order` over the global functions in definition order),
so they are the same for its text and JSON forms and stable across re-plans.

The planner logs every union (an edge between two union-find elements with
the constraint that made it) and every pin (an element fixed to a device,
also defaults). An answer is a breadth-first search over that log from the
expression's element to the pin that decided its device:

1. a hard pin (annotation, request pin, host operator, parameter or function
   attribute) reachable over hard edges; else
2. a hard pin reachable once the soft `free on_device` unifications count; else
3. the first default applied to the class (TVM's defaulting walk order). A
   default that copies another element's device (parameters follow their
   function's result, a let variable its let) continues from that element.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relay import ast
from relay.ast import Call, Constructor, Expr, Function, GlobalVar, Let, Match, Module, Op, TupleGetItem
from relay.device import VirtualDevice, device_name
from relay.traverse import children, post_order, pre_order, rewrite

from .collect import Collector
from .domains import DomainSystem
from .errors import PlanConfigError
from .explain import short_text, shortest_path

MAX_ANSWERS = 50
"""Answers per selector; a selector matching more says it was truncated."""

SELECTOR_KINDS = ("param", "function", "op", "at", "node")
_WRAPPERS = ("on_device", "device_copy")
_HARD_END_KINDS = {
    "annotation": "annotation",
    "copy": "annotation",
    "host operator": "host rule",
    "parameter attribute": "parameter attribute",
    "function attribute": "function attribute",
}


# ---------------------------------------------------------------------------
# Node ids and selectors


def input_roots(module: Module) -> list[Expr]:
    """What node ids number: the global functions in definition order (or the
    expression of a single-expression module)."""
    roots: list[Expr] = [func for _, func in module.functions]
    if module.expr is not None and not any(gv.name == "main" for gv, _ in module.functions):
        roots.append(module.expr)
    return roots


def node_ids(module: Module) -> list[Expr]:
    """The expressions of `module` in id order (contract 5)."""
    return post_order(input_roots(module))


def check_selector(select: Any, where: str) -> str:
    """Validate a selector object; returns its kind."""
    if not isinstance(select, Mapping):
        raise PlanConfigError(f"{where}: selector must be an object, got {select!r}")
    kinds = [key for key in SELECTOR_KINDS if key in select]
    extra = set(select) - {*SELECTOR_KINDS, "index"}
    if len(kinds) != 1 or extra or ("index" in select and kinds != ["op"]):
        raise PlanConfigError(f"{where}: bad selector {dict(select)!r}")
    kind = kinds[0]
    value = select[kind]
    if kind == "node" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise PlanConfigError(f"{where}: 'node' must be a non-negative integer, got {value!r}")
    if kind == "at" and (not isinstance(value, str) or _parse_at(value) is None):
        raise PlanConfigError(f"{where}: 'at' must be 'LINE:COL', got {value!r}")
    return kind


def _parse_at(text: str) -> tuple[int, int] | None:
    line, sep, col = text.partition(":")
    if not sep or not line.strip().isdigit() or not col.strip().isdigit():
        return None
    return int(line), int(col)


def has_spans(module: Module) -> bool:
    """Whether the module came from text (its nodes carry source positions)."""
    return any(getattr(n, "span", None) is not None for n in pre_order(input_roots(module)))


def select(module: Module, selector: Mapping[str, Any], where: str = "selector") -> list[Expr]:
    """The input expressions a selector names (in id order for `op`)."""
    kind = check_selector(selector, where)
    value = selector[kind]
    if kind == "node":
        ids = node_ids(module)
        if value >= len(ids):
            raise PlanConfigError(f"{where}: node {value} does not exist (the module has {len(ids)} nodes)")
        return [ids[value]]
    if kind == "at":
        pos = _parse_at(value)
        if not has_spans(module):
            raise PlanConfigError(f"{where}: 'at' selectors need text input (JSON has no positions)")
        for node in pre_order(input_roots(module)):
            span = getattr(node, "span", None)
            if span is not None and (span.line, span.column) == pos and not isinstance(node, Op):
                return [node]
        raise PlanConfigError(f"{where}: no expression starts at {value}")
    if kind == "op":
        want = selector.get("index")
        found = [
            n for n in node_ids(module) if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == value
        ]
        if want is not None:
            found = found[want : want + 1] if isinstance(want, int) and want >= 0 else []
        if not found:
            raise PlanConfigError(f"{where}: selector {dict(selector)!r} matches no operator call")
        return list(found)
    by_name = {gv.name: func for gv, func in module.functions}
    if kind == "function":
        func = by_name.get(str(value).lstrip("@"))
        if func is None:
            raise PlanConfigError(f"{where}: selector {dict(selector)!r} matches no global function")
        return [func]
    gname, _, pname = str(value).partition(":")
    func = by_name.get(gname.lstrip("@"))
    param = next((p for p in func.params if p.name == pname.lstrip("%")), None) if func else None
    if param is None:
        raise PlanConfigError(f"{where}: selector {dict(selector)!r} matches no parameter")
    return [param]


def planned_roots(functions: Sequence[tuple[GlobalVar, Function]], from_expr: bool) -> list[Expr]:
    """The planner's counterparts of `input_roots` (a single expression's
    module is planned as the body of a made-up @main, the last function)."""
    roots: list[Expr] = [f for _, f in functions]
    if from_expr and roots:
        last = roots[-1]
        assert isinstance(last, Function)
        roots[-1] = last.body
    return roots


def node_id_of(module: Module) -> dict[int, int]:
    """id(input expression) -> node id."""
    return {id(n): i for i, n in enumerate(node_ids(module))}


# ---------------------------------------------------------------------------
# Input nodes -> the planner's nodes


def wrapper_op(expr: Expr) -> str | None:
    """ "on_device" or "device_copy" for such a call (one argument), else None."""
    if (
        isinstance(expr, Call)
        and isinstance(expr.op, Op)
        and expr.op.name in _WRAPPERS
        and len(expr.args) == 1
    ):
        return expr.op.name
    return None


def align(inputs: Sequence[Expr], planned: Sequence[Expr]) -> dict[int, Expr]:
    """Map id(input node) -> the planner's node for it. The planner's functions
    are the input with wrappers (`on_device`, `device_copy`) added or removed,
    `on_device(e).i` turned into `on_device(e.i)` and parameters rebuilt."""
    out: dict[int, Expr] = {}
    stack: list[tuple[Expr, Expr]] = list(zip(inputs, planned))
    while stack:
        a, b = stack.pop()
        if id(a) in out:
            continue
        wa = wrapper_op(a)
        while wrapper_op(b) is not None and wrapper_op(b) != wa:
            b = b.args[0]  # type: ignore[attr-defined]
        wb = wrapper_op(b)
        if wa is not None and wb != wa:
            out[id(a)] = b  # an input wrapper the planner dropped shows as its body
            stack.append((a.args[0], b))  # type: ignore[attr-defined]
            continue
        if (
            isinstance(a, TupleGetItem)
            and wrapper_op(a.tuple_value) == "on_device"
            and wb == "on_device"
            and isinstance(b.args[0], TupleGetItem)  # type: ignore[attr-defined]
        ):
            inner = b.args[0]  # type: ignore[attr-defined]
            out[id(a)] = inner
            out[id(a.tuple_value)] = b
            stack.append((a.tuple_value.args[0], inner.tuple_value))  # type: ignore[attr-defined]
            continue
        if type(a) is not type(b):
            continue
        out[id(a)] = b
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
            stack.extend(zip(ka, kb))
    return out


def apply_node_pins(
    module: Module,
    functions: list[tuple[GlobalVar, Function]],
    pins: Sequence[Any],
    planned_roots: Sequence[Expr],
) -> tuple[list[tuple[GlobalVar, Function]], dict[int, str], list[tuple[str, Any, Any, int]]]:
    """Pins with `at`/`node` selectors: a global function or one of its
    parameters becomes a function/param pin; any other expression is wrapped
    in `on_device(e, d)` (body constrained), as `op` pins are.

    Returns the functions, the annotation kinds of the wrappers, and the
    function/param pins as `(kind, equivalent selector, device, k)`."""
    node_pins = [p for p in pins if p.kind in ("at", "node")]
    kinds: dict[int, str] = {}
    extra: list[tuple[str, Any, Any, int]] = []
    if not node_pins:
        return functions, kinds, extra
    globals_ = {id(f): gv.name for gv, f in module.functions}
    params = {id(p): (gv.name, p) for gv, f in module.functions for p in f.params}
    mapping = align(input_roots(module), planned_roots)
    wrap: dict[int, tuple[Any, int]] = {}
    for pin in node_pins:
        where = f"constraint #{pin.k}"
        for node in select(module, pin.selector, where):
            if id(node) in globals_:
                extra.append(("function", {"function": "@" + globals_[id(node)]}, pin.device, pin.k))
            elif id(node) in params:
                gname, param = params[id(node)]
                extra.append(("param", {"param": f"@{gname}:%{param.name}"}, pin.device, pin.k))
            elif isinstance(node, (Op, GlobalVar, Constructor)):
                raise PlanConfigError(
                    f"{where}: node {short_text(node)} is not a computation; select the call instead"
                )
            else:
                target = mapping.get(id(node))
                if target is None:
                    raise PlanConfigError(
                        f"{where}: the selected expression is not planned (inside a primitive function)"
                    )
                wrap[id(target)] = (pin.device, pin.k)
    if not wrap:
        return functions, kinds, extra
    out = []
    for gv, func in functions:

        def visit(original: Expr, rebuilt: Expr) -> Expr:
            found = wrap.get(id(original))
            if found is None:
                return rebuilt
            wrapped = ast.on_device(
                rebuilt, found[0], constrain_body=True, constrain_result=False, span=rebuilt.span
            )
            kinds[id(wrapped)] = f"constraint #{found[1]}"
            return wrapped

        new = rewrite(func, visit)
        out.append((gv, new if isinstance(new, Function) else func))
    return out, kinds, extra


# ---------------------------------------------------------------------------
# Answers


@dataclass(frozen=True)
class Step:
    """One constraint of a chain: its kind, what it says and where it is.

    `a`/`b` are the union-find elements it links (`b` is None for the pin
    that ends a chain); `cid` the planner's constraint id."""

    kind: str
    message: str
    line: int | None
    column: int | None
    node: int | None
    cid: int
    a: int
    b: int | None

    def to_json(self) -> dict[str, Any]:
        """The public fields (the union-find elements and constraint id stay internal)."""
        where = {"line": self.line, "column": self.column, "node": self.node}
        return {"kind": self.kind, "message": self.message, **where}


@dataclass(frozen=True)
class Answer:
    """The device of one expression and the chain that decided it."""

    node: int | None
    expression: str
    line: int | None
    column: int | None
    device: str
    chain: tuple[Step, ...]
    reason: str  # annotation | request pin | host rule | parameter attribute | function attribute | default | cost | none
    message: str
    element: int | None = None
    cost: Mapping[str, Any] | None = None
    # Node ids of other constraints that fix the same device (redundant pins).
    also: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "expression": self.expression,
            "line": self.line,
            "column": self.column,
            "device": self.device,
            "reason": self.reason,
            "message": self.message,
            "chain": [s.to_json() for s in self.chain],
            "also": list(self.also),
        }
        if self.cost is not None:
            out["cost"] = dict(self.cost)
        return out

    def text(self) -> str:
        """The answer as a block of text (the CLI's stderr form)."""
        return "\n".join(answer_lines(self.to_json()))


def answer_lines(answer: Mapping[str, Any], indent: str = "") -> list[str]:
    """An answer (its JSON form) as lines of text: the expression and device,
    the numbered chain, what decided it."""
    where = f" at {answer['line']}:{answer['column']}" if answer.get("line") is not None else ""
    lines = [f"{indent}node {answer['node']} {answer['expression']}{where}: on {answer['device']}"]
    for i, step in enumerate(answer["chain"], 1):
        loc = f"{step['line']}:{step['column']}" if step.get("line") is not None else "?"
        lines.append(f"{indent}  {i}. {loc} {step['kind']}: {step['message']}")
    lines.append(f"{indent}  decided by {answer['reason']}: {answer['message']}")
    return lines


@dataclass(frozen=True)
class WhyResult:
    """The answers for one selector (at most MAX_ANSWERS)."""

    selector: Mapping[str, Any]
    answers: tuple[Answer, ...]
    matches: int
    truncated: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "selector": dict(self.selector),
            "matches": self.matches,
            "truncated": self.truncated,
            "answers": [a.to_json() for a in self.answers],
        }
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class ConstraintLog:
    """The constraints the planner collected (the test hook): `edges[i] =
    (a, b, cid)`, `pins[i] = (element, device, cid)`, `kinds[cid]`, `hard[cid]`,
    and `follows[cid]`: for a default that copied another element's device, that element."""

    edges: tuple[tuple[int, int, int], ...]
    pins: tuple[tuple[int, VirtualDevice, int], ...]
    kinds: tuple[str, ...]
    hard: tuple[bool, ...]
    follows: Mapping[int, Mapping[int, int]]
    elements: Mapping[int, int]  # node id -> element of its result
    devices: Mapping[int, str]  # node id -> device name (relay.device_name)


class _Graph:
    """Adjacency over the planner's log, built once per plan."""

    def __init__(self, ds: DomainSystem) -> None:
        n = len(ds.parent)
        self.hard_adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.all_adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        tags = ds.tags
        for a, b, c in zip(ds.edge_a, ds.edge_b, ds.edge_c):
            if a == b:
                continue
            self.all_adj[a].append((b, c))
            self.all_adj[b].append((a, c))
            if tags[c].hard:
                self.hard_adj[a].append((b, c))
                self.hard_adj[b].append((a, c))
        self.pins: dict[int, list[tuple[VirtualDevice, int]]] = {}
        for elem, vd, cid in ds.pins:
            self.pins.setdefault(elem, []).append((vd, cid))


def _component(start: int, adj: list[list[tuple[int, int]]]) -> set[int]:
    seen = {start}
    queue = [start]
    while queue:
        x = queue.pop()
        for y, _ in adj[x]:
            if y not in seen:
                seen.add(y)
                queue.append(y)
    return seen


class Explainer:
    """Answers why-queries over one finished TVM-mode plan."""

    def __init__(
        self,
        module: Module,
        collector: Collector,
        planned_roots: Sequence[Expr],
        default: VirtualDevice,
        device_of: Callable[[int], VirtualDevice] | None = None,
    ) -> None:
        self.module = module
        self.c = collector
        self.ds = collector.ds
        self.default = default
        self._device_of = device_of
        # Optimize mode: element -> (message, cost details) for classes no pin decides.
        self.cost_reason: Callable[[int], tuple[str, dict[str, Any]]] | None = None
        self._cost: dict[str, Any] | None = None
        self.graph = _Graph(collector.ds)
        self.mapping = align(input_roots(module), planned_roots)
        self.ids = node_ids(module)
        self.id_of = {id(n): i for i, n in enumerate(self.ids)}
        self.input_of = {id(p): self.id_of[id(a)] for a, p in _pairs(self.ids, self.mapping)}
        self.follows: dict[int, dict[int, int]] = {}
        self._also: tuple[int, ...] = ()

    # ---- elements

    def element(self, node: Expr) -> int | None:
        """The union-find element of an input expression's result (None when
        the planner did not collect it: inside a primitive function)."""
        target = self.mapping.get(id(node))
        if target is None:
            return None
        if wrapper_op(target) == "on_device":
            target = target.args[0]  # type: ignore[attr-defined]
        if isinstance(target, (Op, Constructor)):
            return None
        d = self.c.doms.get(id(target))
        if d is None and isinstance(target, GlobalVar):
            d = self.c.global_doms.get(target.name)
        if d is None:
            return None
        return DomainSystem.result_of(d)

    def device_of(self, elem: int) -> VirtualDevice:
        vd = self._device_of(elem) if self._device_of is not None else self.ds.device(elem)
        return self.default if vd.is_fully_unconstrained else vd

    def _follow_source(self, elem: int, cid: int) -> int | None:
        """For a default pin that copied another element's device (parameters
        follow their function's result; a let variable its let), that element."""
        tag = self.ds.tags[cid]
        node = tag.expr
        if node is None:
            return None
        if tag.kind == "let default" and isinstance(node, Let):
            d = self.c.doms.get(id(node))
        elif isinstance(node, Call):
            d = self.c.callee.get(id(node))
        else:
            d = self.c.doms.get(id(node))
        if d is None:
            return None
        src = DomainSystem.result_of(d)
        return None if self.ds.find(src) == self.ds.find(elem) else src

    # ---- chains

    def _step(self, a: int, b: int | None, cid: int, message: str | None = None) -> Step:
        tag = self.ds.tags[cid]
        span = getattr(tag.expr, "span", None) if tag.expr is not None else None
        text = short_text(tag.expr)
        if message is None:
            message = f"{tag.detail}: {text}" if tag.detail and tag.detail not in text else text
        return Step(
            tag.kind,
            message,
            span.line if span is not None else None,
            span.column if span is not None else None,
            self.input_of.get(id(tag.expr)) if tag.expr is not None else None,
            cid,
            a,
            b,
        )

    def _decide(self, elem: int) -> tuple[list[Step], str, str, int | None]:
        """(chain, reason, message, element to continue from) for one element."""
        g = self.graph
        hard = self.ds.tags

        def hard_pin(x: int) -> bool:
            return any(hard[c].hard and vd.device_type is not None for vd, c in g.pins.get(x, ()))

        for adj in (g.hard_adj, g.all_adj):
            found = shortest_path(elem, adj.__getitem__, hard_pin)
            if found is not None:
                path, end = found
                vd, cid = next((v, c) for v, c in g.pins[end] if hard[c].hard and v.device_type is not None)
                chain = [self._step(a, b, c) for a, b, c in path]
                kind = hard[cid].kind
                reason = "request pin" if kind.startswith("constraint #") else _HARD_END_KINDS.get(kind, kind)
                if kind == "host operator":
                    msg = f"{short_text(hard[cid].expr) or 'the host'} keeps this value on the host device {device_name(vd)}"
                else:
                    msg = f"{kind} puts it on {device_name(vd)}"
                chain.append(self._step(end, None, cid, msg))
                self._also = self._agreeing(elem, adj, cid)
                if self._also:
                    msg += f" (also fixed by {len(self._also)} other constraint(s))"
                return chain, reason, msg, None
        if self.cost_reason is not None:
            msg, self._cost = self.cost_reason(elem)
            return [], "cost", msg, None
        comp = _component(elem, g.all_adj)
        # The first default applied to the class (log order is the walk's order).
        best = next(
            (
                (c, x, vd)
                for x, vd, c in self.ds.pins
                if x in comp and not hard[c].hard and vd.device_type is not None
            ),
            None,
        )
        if best is None:
            msg = (
                f"nothing constrains it (no annotation, pin, host operator or attribute reaches "
                f"its {len(comp)} element(s)); it takes the default device {device_name(self.default)}"
            )
            return [], "default", msg, None
        cid, end, vd = best
        found = shortest_path(elem, g.all_adj.__getitem__, lambda x: x == end)
        assert found is not None
        chain = [self._step(a, b, c) for a, b, c in found[0]]
        src = self._follow_source(end, cid)
        if src is not None and self.ds.device(src).device_type == vd.device_type:
            self.follows.setdefault(cid, {})[end] = src
            what = (
                "let variable takes its let's device"
                if hard[cid].kind == "let default"
                else "parameter takes its function's result device"
            )
            msg = f"{what} ({device_name(vd)})"
            chain.append(self._step(end, src, cid, msg))
            return chain, "default", msg, src
        msg = (
            f"no annotation, pin, host operator or attribute reaches it ({len(comp)} element(s) "
            f"share its device); TVM's defaulting walk gave it the default device {device_name(vd)}"
        )
        chain.append(
            self._step(end, None, cid, f"TVM's defaulting walk: the default device {device_name(vd)}")
        )
        return chain, "default", msg, None

    def _agreeing(self, elem: int, adj: list[list[tuple[int, int]]], cid: int) -> tuple[int, ...]:
        """Node ids of the other hard pins that fix the same class (flipping
        only the chain's end would leave the device to them)."""
        tags = self.ds.tags
        comp = _component(elem, adj)
        out: list[int] = []
        for x, vd, c in self.ds.pins:
            if c != cid and x in comp and tags[c].hard and vd.device_type is not None:
                expr = tags[c].expr
                nid = self.input_of.get(id(expr)) if expr is not None else None
                if nid is not None and nid not in out:
                    out.append(nid)
        return tuple(out)

    def answer(self, node: Expr) -> Answer:
        nid = self.id_of.get(id(node))
        span = getattr(node, "span", None)
        line = span.line if span is not None else None
        column = span.column if span is not None else None
        text = short_text(node)
        if isinstance(node, (Op, Constructor)):
            return Answer(
                nid, text, line, column, "?", (), "none", "an operator has no device; select its call"
            )
        elem = self.element(node)
        if elem is None:
            return Answer(
                nid, text, line, column, "?", (), "none", "not planned: inside a primitive function"
            )
        chain: list[Step] = []
        seen = set()
        current: int | None = elem
        reason, msg = "default", ""
        self._also = ()
        self._cost = None
        while current is not None and current not in seen:
            seen.add(current)
            steps, reason, msg, current = self._decide(current)
            chain.extend(steps)
        return Answer(
            nid,
            text,
            line,
            column,
            device_name(self.device_of(elem)),
            tuple(chain),
            reason,
            msg,
            elem,
            cost=self._cost,
            also=self._also,
        )

    def answer_selector(self, selector: Mapping[str, Any], where: str = "why") -> WhyResult:
        nodes = select(self.module, selector, where)
        answers = tuple(self.answer(n) for n in nodes[:MAX_ANSWERS])
        return WhyResult(dict(selector), answers, len(nodes), len(nodes) > MAX_ANSWERS)

    def log(self) -> ConstraintLog:
        ds = self.ds
        elements = {}
        devices = {}
        names: dict[int, tuple[VirtualDevice, str]] = {}  # keeps each device alive with its name
        for i, n in enumerate(self.ids):
            e = self.element(n)
            if e is not None:
                elements[i] = e
                vd = self.device_of(e)
                found = names.get(id(vd))
                if found is None:
                    found = names[id(vd)] = (vd, device_name(vd))
                devices[i] = found[1]
        return ConstraintLog(
            tuple(zip(ds.edge_a, ds.edge_b, ds.edge_c)),
            tuple(ds.pins),
            tuple(t.kind for t in ds.tags),
            tuple(t.hard for t in ds.tags),
            {k: dict(v) for k, v in self.follows.items()},
            elements,
            devices,
        )


def _pairs(ids: Sequence[Expr], mapping: Mapping[int, Expr]) -> list[tuple[Expr, Expr]]:
    return [(n, mapping[id(n)]) for n in ids if id(n) in mapping]


def explain_optimized(
    result: Any,
    module: Module,
    collector: Collector,
    planned: Sequence[Expr],
    default: VirtualDevice,
    device_of: Callable[[int], VirtualDevice],
    reason: Callable[[int], tuple[str, dict[str, Any]]],
    why: Sequence[Mapping[str, Any]],
    record: bool,
) -> Any:
    """`result` (an optimize-mode PlanResult) with its why-answers: pins decide
    as in the TVM mode; any other class was chosen by cost, so its answer gives
    `reason` (the predicted time with it on each device and what forbids the others)."""
    explainer = Explainer(module, collector, planned, default, device_of)
    explainer.cost_reason = reason
    answers = tuple(explainer.answer_selector(s, f"why #{i}") for i, s in enumerate(why))
    log = explainer.log() if record else None
    return dataclasses.replace(result, why=answers, constraints=log)
