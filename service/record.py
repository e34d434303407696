"""The placement record: one per plan, built once, read by every view.

Every view of a plan (the `/plan` summary and `--explain`, the report of
`--report` and `include: ["placements"]`, `devplan diff` and `/plan/diff`,
the picture, the explore page) reads this record instead of rebuilding what
it shows, so they tell the same story: the same placements on the same
devices, the same copies between the same placements at the same locations.

- `placements`: every operator call, call of a function and function parameter
  of the *planned* module as the planner sees it (the Relay module, or the
  translation of a Relax module), with its node id (the post-order ids of
  `solver.node_ids`, which why-queries, pins and pictures use), its name as
  the module's language writes it (`nn.dense`, `R.matmul`), the Relax
  binding it is (`lv41`), its location, device and inputs (the placements
  whose values flow into it, through lets, tuples, wrappers and branches).
- `copies`: every copy of the plan between the placements it joins. Its
  location is the copied value's (its producer's, looking through
  annotations and let variables), never the annotation around it.
- `pins`: the placements an annotation (`on_device`, `R.hint_on_device`) or a
  request pin fixes, with what fixed them and where.
- `results`: each function's result device and the placements flowing into it.

Everything the language decides (names, bindings) comes in as a `Naming`:
the record itself is the same code for Relay and Relax.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import relay
import solver
from relay import ast
from relay.ast import Call, Expr, Function, GlobalVar, If, Let, Match, Module, Op, Var
from relay.traverse import children
from solver import input_roots, node_ids, planned_roots, short_text, wrapper_op

log = logging.getLogger("devplan.record")

KIND_OPERATOR = "operator"
KIND_CALL = "call"
KIND_PARAMETER = "parameter"

LANGUAGES = ("relay", "relax")


@dataclass(frozen=True, slots=True)
class NodeName:
    """A node as its language writes it: `name` (`R.matmul`, a parameter `x`),
    the variable it is bound to (`lv41`) and a one-line text for messages
    (`lv41 = R.matmul(lv40, p_fc_weight)`)."""

    name: str
    binding: str | None
    text: str
    span: relay.Span | None = None  # where the language's text writes it (None: nowhere)


@dataclass(frozen=True, slots=True)
class Naming:
    """How the module's language names the planner's nodes: `names` maps
    id(planner node) to its `NodeName` for the nodes the language names
    differently (Relax: `R.matmul` bound to `lv41`); the rest keep their Relay
    names. `annotation` and `copy` are how the language writes a device
    annotation and a copy."""

    language: str = "relay"
    names: Mapping[int, NodeName] = field(default_factory=dict)
    annotation: str = "on_device"
    copy: str = "device_copy"
    # Relax writes one `R.to_vdevice` per value and device (service/relax_planning.py),
    # Relay one `device_copy` per use: the record counts copies as the module is written.
    one_copy_per_value: bool = False
    # The type of a node as the language states it (Relax: the binding's struct info),
    # for copy sizes; None: inferred from the planner's module.
    type_of: Callable[[Expr], Any] | None = None
    # Device name -> how the module itself names that device, for conflict messages
    # (Relax: `cuda (vdevice 1 "cuda:0")`, the module's `I.vdevice` list); unlisted names stay.
    devices: Mapping[str, str] = field(default_factory=dict)

    def of(self, expr: Expr, default: str) -> tuple[str, str | None, relay.Span | None]:
        """(name, binding, location) of `expr`: its own name and span when the
        language has no other name for it."""
        found = self.names.get(id(expr))
        if found is None:
            return default, None, getattr(expr, "span", None)
        return found.name, found.binding, found.span


RELAY = Naming()


@dataclass(frozen=True, slots=True)
class PlacementEntry:
    """One placement: an operator call, a call of a function or a parameter."""

    node: int
    kind: str  # operator | call | parameter
    name: str  # as the language writes it: nn.dense, R.matmul, @f, %x
    function: str  # the global function it is in (`@main`)
    index: int | None  # a parameter's position in its function's parameters
    line: int | None
    column: int | None
    device: str
    inputs: tuple[int, ...]
    binding: str | None = None  # Relax: the variable it is bound to
    decided_by: str | None = None  # a why-answer's reason, when the record was built with reasons
    # An operator's predicted kernel time on its device (ms; the cost model's, `price`);
    # None for calls of functions, parameters and what the cost model cannot price.
    predicted_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The report's `$defs.placement`."""
        return {
            "node": self.node,
            "kind": self.kind,
            "name": self.name,
            "binding": self.binding,
            "function": self.function,
            "index": self.index,
            "line": self.line,
            "column": self.column,
            "device": self.device,
            "decided_by": self.decided_by or "none",
            "inputs": list(self.inputs),
            "predicted_ms": self.predicted_ms,
        }


@dataclass(frozen=True, slots=True)
class CopyEntry:
    """One copy of the plan, between the placements it joins."""

    src: str
    dst: str
    bytes: int | None
    line: int | None  # the copied value's location (its producer's)
    column: int | None
    from_nodes: tuple[int, ...]
    to_nodes: tuple[int, ...]
    into_result: str | None  # the function whose result it feeds, when no placement does
    predicted_ms: float | None = None  # its predicted time over the link (the cost model's, `price`)

    def to_json(self) -> dict[str, Any]:
        """The report's `$defs.copy`."""
        return {
            "src": self.src,
            "dst": self.dst,
            "bytes": self.bytes,
            "line": self.line,
            "column": self.column,
            "from": list(self.from_nodes),
            "to": list(self.to_nodes),
            "into_result": self.into_result,
            "predicted_ms": self.predicted_ms,
        }


@dataclass(frozen=True, slots=True)
class PinEntry:
    """A node fixed before planning: by an annotation in the module or a request pin."""

    node: int
    device: str
    source: str  # "annotation" | "request pin"
    what: str  # on_device / R.hint_on_device, or `constraint #k`
    line: int | None
    column: int | None


@dataclass(frozen=True, slots=True)
class DivergenceEntry:
    """A copy of the plan that TVM 0.19's rewrite omits, located as its copy is."""

    src: str
    dst: str
    line: int | None
    column: int | None


@dataclass(frozen=True, slots=True)
class ResultEntry:
    """A function's result: its device and the placements whose values it returns."""

    function: str
    node: int  # the function's node id
    device: str
    inputs: tuple[int, ...]


@dataclass(frozen=True)
class PlacementRecord:
    """The record of one plan (module docstring). `module` is the planner's
    input, `result` its plan; `sites` (every `device_copy` of the planned
    module: input parent, input child, planned copy) and `site_copy` (the
    index in `copies` of each site's copy: a language that writes one copy per
    value and device merges sites) stay internal, for views that draw the
    module's structure (the picture)."""

    language: str
    placements: tuple[PlacementEntry, ...]
    copies: tuple[CopyEntry, ...]
    pins: tuple[PinEntry, ...]
    results: tuple[ResultEntry, ...]
    divergences: tuple[DivergenceEntry, ...]
    module: Module = field(repr=False)
    result: solver.PlanResult = field(repr=False)
    sites: tuple[tuple[Expr | None, Expr, Call], ...] = field(repr=False, default=())
    site_copy: tuple[int, ...] = field(repr=False, default=())
    naming: Naming = field(repr=False, default=RELAY)

    def by_node(self) -> dict[int, PlacementEntry]:
        return {p.node: p for p in self.placements}

    def placements_json(self) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.placements]

    def copies_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.copies]

    def device_times(self) -> dict[str, tuple[int, float]]:
        """device -> (operator calls, their predicted kernel times summed, ms):
        the record's own numbers; empty when the record is not priced."""
        out: dict[str, tuple[int, float]] = {}
        priced = False
        for p in self.placements:
            if p.kind != KIND_OPERATOR:
                continue
            ops, ms = out.get(p.device, (0, 0.0))
            priced = priced or p.predicted_ms is not None
            out[p.device] = (ops + 1, ms + (p.predicted_ms or 0.0))
        return {d: (ops, round(ms, 6)) for d, (ops, ms) in out.items()} if priced else {}

    def copy_ms(self) -> float:
        """The copies' predicted times summed (ms)."""
        return round(sum(c.predicted_ms or 0.0 for c in self.copies), 6)

    def copy_summary(self) -> list[dict[str, Any]]:
        """`summary.device_copies` of the response: each copy's location, devices
        and consumers (the placements it feeds, as the report's `to` names them,
        with their names and locations), or the function whose result it feeds."""
        by_node = self.by_node()

        def consumer(node: int) -> dict[str, Any]:
            p = by_node[node]
            return {"node": node, "name": p.name, "binding": p.binding, "line": p.line, "column": p.column}

        return [
            {
                "line": c.line,
                "column": c.column,
                "src": c.src,
                "dst": c.dst,
                "to": [consumer(n) for n in c.to_nodes if n in by_node],
                "into_result": c.into_result,
            }
            for c in self.copies
        ]


def copy_ends(c: Mapping[str, Any], by_node: Mapping[int, Mapping[str, Any]]) -> str:
    """`nn.dense #8 -> nn.bias_add #10`: what a copy copies from and into."""
    src = ", ".join(placement_label(by_node[n]) for n in c["from"] if n in by_node) or "?"
    dst = ", ".join(placement_label(by_node[n]) for n in c["to"] if n in by_node)
    if not dst and c.get("into_result"):
        dst = f"result of {c['into_result']}"
    return f"{src} -> {dst or '?'}"


def placement_label(p: Mapping[str, Any]) -> str:
    """A placement (its JSON) as views name it: `nn.dense #9`, `lv41 = R.matmul #9`."""
    return f"{placement_head(p)} #{p['node']}"


def placement_head(p: Mapping[str, Any]) -> str:
    """A placement (its JSON) as the module's language writes it, without its
    node id: `nn.dense`, `@f`, `lv41 = R.matmul`, `lv3 = cls.f`, `x`; the
    picture's labels and every copy's ends use it."""
    binding = p.get("binding")
    return f"{binding} = {p['name']}" if binding and binding != p["name"] else str(p["name"])


def value_bytes(t: Any) -> int | None:
    """Bytes of a value of type `t` (tensors and tuples of them), None when unknown."""
    if isinstance(t, ast.TensorType):
        return solver.static_type_bytes(t)
    fields = getattr(t, "fields", None)
    if fields is not None:
        sizes = [value_bytes(f) for f in fields]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)
    return None


# ---------------------------------------------------------------------------
# The placement graph of the planner's input module


def _is_placement(expr: Expr, params: set[int]) -> bool:
    if isinstance(expr, Call):
        return wrapper_op(expr) is None and not (isinstance(expr.op, Op) and expr.op.name == ast.ON_DEVICE)
    return isinstance(expr, Var) and id(expr) in params


def primitive_name(func: Function) -> str:
    """`fused(nn.conv2d+add+nn.relu)`: the operators a primitive function runs, in order."""
    names: list[str] = []
    stack: list[Expr] = [func.body]
    seen: set[int] = set()
    order: list[str] = []
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, Call) and isinstance(e.op, Op):
            order.append(e.op.name)
        stack.extend(reversed(children(e)))
    for name in reversed(order):
        if name not in names:
            names.append(name)
    return "fused(" + "+".join(names) + ")"


@dataclass(frozen=True, slots=True)
class _Node:
    node: int
    kind: str
    name: str
    function: str
    index: int | None
    line: int | None
    column: int | None
    binding: str | None  # (its inputs come from `PlacementGraph.flow`: the one walk over the data flow)


@dataclass(frozen=True, slots=True)
class _Flow:
    """The data flow of a plan: the copy sites, their entries (same order),
    each placement's inputs and each function result's sources."""

    sites: list[tuple[Expr | None, Expr, Call]]
    copies: list[CopyEntry]
    inputs: dict[int, tuple[int, ...]]
    results: dict[int, list[int]]
    values: list[Expr]  # each site's copied value (its producer), for the copy's price


class PlacementGraph:
    """The placements of a module and the data flow between them: what the
    record needs before planning (its node ids give the why-selectors of
    `decided_by`) and, with a plan, the copies."""

    def __init__(self, module: Module, naming: Naming = RELAY) -> None:
        self.module = module
        self.naming = naming
        self.roots = input_roots(module)
        self.ids = node_ids(module)
        self.nid = {id(n): i for i, n in enumerate(self.ids)}
        from_expr = module.expr is not None and not any(gv.name == "main" for gv, _ in module.functions)
        self.from_expr = from_expr
        names = [f"@{gv.name}" for gv, _ in module.functions] + (["@main"] if from_expr else [])
        self.function_of: dict[int, str] = {}
        self.param_index: dict[int, int] = {}
        self.let_of: dict[int, Let] = {}
        for root, name in zip(self.roots, names):
            stack = [root]
            while stack:
                n = stack.pop()
                if id(n) in self.function_of:
                    continue
                self.function_of[id(n)] = name
                if isinstance(n, Function):
                    if n.is_primitive:
                        continue
                    for k, p in enumerate(n.params):
                        self.param_index[id(p)] = k
                        self.function_of[id(p)] = name
                if isinstance(n, Let):
                    self.let_of[id(n.var)] = n
                stack.extend(children(n))
        self.root_names = names
        params = set(self.param_index)
        self.nodes: list[_Node] = []
        self.expr_of: dict[int, Expr] = {}
        for i, n in enumerate(self.ids):
            if id(n) not in self.function_of or not _is_placement(n, params):
                continue
            self.expr_of[i] = n
            self.nodes.append(self._node(i, n))

    def selectors(self) -> list[dict[str, Any]]:
        """One why-selector per placement (their answers give `decided_by`)."""
        return [{"node": g.node} for g in self.nodes]

    def _node(self, i: int, n: Expr) -> _Node:
        function = self.function_of[id(n)]
        if isinstance(n, Var):
            name, binding, span = self.naming.of(n, f"%{n.name}")
            line, column = _lc(span)
            return _Node(i, KIND_PARAMETER, name, function, self.param_index[id(n)], line, column, binding)
        assert isinstance(n, Call)
        if isinstance(n.op, Op):
            kind, default = KIND_OPERATOR, n.op.name
        elif isinstance(n.op, GlobalVar):
            kind, default = KIND_CALL, f"@{n.op.name}"
        elif isinstance(n.op, Function) and n.op.is_primitive:
            kind, default = KIND_OPERATOR, primitive_name(n.op)
        else:
            kind, default = KIND_CALL, "closure"
        name, binding, span = self.naming.of(n, default)
        line, column = _lc(span)
        return _Node(i, kind, name, function, None, line, column, binding)

    def sources(
        self, parent: Expr, expr: Expr, crossing: Callable[[Expr, Expr], int | None] | None = None
    ) -> list[tuple[int, int | None]]:
        """The placements whose values flow into `expr` (a child of `parent`), in
        argument order, each with the first `crossing(parent, child)` value met on
        the way (the copy site, when given)."""
        out: list[tuple[int, int | None]] = []
        stack: list[tuple[Expr, Expr, int | None]] = [(parent, expr, None)]
        visited: set[tuple[int, int]] = set()
        while stack:
            p, e, site = stack.pop()
            if site is None and crossing is not None:
                site = crossing(p, e)
            key = (id(e), -1 if site is None else site)
            if key in visited:
                continue
            visited.add(key)
            if isinstance(e, Var) and id(e) in self.let_of:
                let = self.let_of[id(e)]
                stack.append((let, let.value, site))
                continue
            i = self.nid.get(id(e))
            if i is not None and i in self.expr_of:
                out.append((i, site))
                continue
            inner: Sequence[Expr] = ()
            if isinstance(e, Call) and wrapper_op(e) is not None:
                inner = e.args[:1]
            elif isinstance(e, ast.Tuple):
                inner = e.fields
            elif isinstance(e, ast.TupleGetItem):
                inner = (e.tuple_value,)
            elif isinstance(e, Let):
                inner = (e.body,)
            elif isinstance(e, If):
                inner = (e.cond, e.true_branch, e.false_branch)
            elif isinstance(e, Match):
                inner = (e.data, *(c.rhs for c in e.clauses))
            elif isinstance(e, (ast.RefCreate, ast.RefWrite)):
                inner = (e.value,)
            elif isinstance(e, ast.RefRead):
                inner = (e.ref,)
            # Reversed so that the stack pops them in argument order.
            for k in reversed(inner):
                stack.append((e, k, site))
        return out

    def copied_value(self, expr: Expr) -> Expr:
        """The value a copy of `expr` copies: through annotations and let
        variables to the expression that computes it (its producer)."""
        seen: set[int] = set()
        while id(expr) not in seen:
            seen.add(id(expr))
            if isinstance(expr, Call) and wrapper_op(expr) is not None:
                expr = expr.args[0]
            elif isinstance(expr, Var) and id(expr) in self.let_of:
                expr = self.let_of[id(expr)].value
            else:
                break
        return expr

    def copy_location(self, span: relay.Span | None) -> tuple[int | None, int | None]:
        """Where a copy the planner reports at `span` (the expression it
        wraps) is shown: at its copied value, as the record's copies are."""
        if span is None:
            return None, None
        at = next((n for n in self.ids if _same_place(getattr(n, "span", None), span)), None)
        found = getattr(self.copied_value(at), "span", None) if at is not None else None
        found = found or span
        return found.line, found.column

    def flow(self, planned: Module, types: Callable[[], Callable[[Expr], Any] | None]) -> _Flow:
        """The data flow of `planned` (this module's plan), in one walk: every
        copy between placements (the sites are `solver.align`'s copies), each
        placement's inputs, each function result's sources. `types` gives the
        sizes' type function, asked only when there are copies."""
        sites = solver.align(self.roots, planned_roots(list(planned.functions), self.from_expr)).copies
        site_of: dict[tuple[int, int], int] = {}
        twin_of: dict[int, int] = {}  # a second copy at the same place (`f(%a, %a)`: one per argument)
        for k, (parent, child, _) in enumerate(sites):
            first = site_of.setdefault((id(parent), id(child)), k)
            if first != k:
                twin_of[k] = first

        def crossing(p: Expr, c: Expr) -> int | None:
            return site_of.get((id(p), id(c)))

        ends_from: dict[int, list[int]] = {k: [] for k in range(len(sites))}
        ends_to: dict[int, list[int]] = {k: [] for k in range(len(sites))}
        into: dict[int, str] = {}
        inputs: dict[int, tuple[int, ...]] = {}
        for g in self.nodes:
            n = self.expr_of[g.node]
            if not isinstance(n, Call):
                continue
            mine: list[int] = []
            for arg in n.args:
                found = self.sources(n, arg, crossing)
                mine.extend(_unique(src for src, _ in found))  # per argument, as met without sites
                for src, site in found:
                    if site is not None:
                        _add(ends_from[site], src)
                        _add(ends_to[site], g.node)
            inputs[g.node] = tuple(mine)
        results: dict[int, list[int]] = {}
        for i, n in enumerate(self.ids):
            if isinstance(n, Function) and not n.is_primitive and id(n) in self.function_of:
                found = self.sources(n, n.body, crossing)
                results[i] = _unique(src for src, _ in found)
                for src, site in found:
                    if site is not None:
                        _add(ends_from[site], src)
                        into.setdefault(site, self.function_of[id(n)])
        for k, first in twin_of.items():
            ends_from[k], ends_to[k] = list(ends_from[first]), list(ends_to[first])
            if first in into:
                into[k] = into[first]
        out: list[CopyEntry] = []
        values: list[Expr] = []
        type_of = types() if sites else None
        for k, (parent, child, call) in enumerate(sites):
            if not ends_from[k]:
                ends_from[k].extend(src for src, _ in self.sources(parent or child, child))
            props = ast.device_copy_props(call)
            src_dev, dst_dev = (_name(props.src), _name(props.dst)) if props else ("?", "?")
            value = self.copied_value(child)
            values.append(value)
            span = getattr(value, "span", None) or getattr(child, "span", None)
            nbytes = _bytes_of(type_of, value, child)
            out.append(
                CopyEntry(
                    src_dev,
                    dst_dev,
                    nbytes,
                    span.line if span is not None else None,
                    span.column if span is not None else None,
                    tuple(ends_from[k]),
                    tuple(ends_to[k]),
                    None if ends_to[k] else into.get(k),
                )
            )
        return _Flow(list(sites), out, inputs, results, values)


def _lc(span: relay.Span | None) -> tuple[int | None, int | None]:
    return (span.line, span.column) if span is not None else (None, None)


def _same_place(a: relay.Span | None, b: relay.Span) -> bool:
    return a is not None and (a.line, a.column, a.end_line, a.end_column) == (
        b.line,
        b.column,
        b.end_line,
        b.end_column,
    )


def _bytes_of(type_of: Callable[[Expr], Any] | None, *exprs: Expr) -> int | None:
    if type_of is None:
        return None
    for e in exprs:
        try:
            found = value_bytes(type_of(e))
        except (KeyError, TypeError, ValueError):
            found = None
        if found is not None:
            return found
    return None


def _add(items: list[int], value: int) -> None:
    if value not in items:
        items.append(value)


def _unique(values: Iterable[int]) -> list[int]:
    out: list[int] = []
    for v in values:
        _add(out, v)
    return out


def _name(vd: Any) -> str:
    return relay.device_name(vd) if isinstance(vd, relay.VirtualDevice) else "?"


# ---------------------------------------------------------------------------
# The record of a plan


def build_record(
    graph: PlacementGraph,
    result: solver.PlanResult,
    config: solver.PlanConfig,
    reasons: Mapping[int, str] | None = None,
    type_of: Callable[[Expr], Any] | None = None,
    *,
    priced: bool = True,
) -> PlacementRecord:
    """The record of `result`, the plan of `graph.module` under `config`
    (planned with `record_constraints=True`, whose log gives every node's
    device). `reasons`: node id -> why-answer reason (`decided_by`), when
    asked for; `type_of` sizes the copies (default: the naming's, else
    `solver.module_types`); `priced`: each operator's and copy's predicted
    time (`price`), once, for every view that shows times."""
    log_ = result.constraints
    if log_ is None:
        raise ValueError("a placement record needs a plan made with record_constraints=True")
    devices = log_.devices
    module = graph.module
    type_of = type_of or graph.naming.type_of
    flow = graph.flow(result.module, (lambda: type_of) if type_of is not None else (lambda: _types(module)))
    sites, copies, result_inputs = flow.sites, flow.copies, flow.results
    copies, site_copy = _as_written(copies) if graph.naming.one_copy_per_value else (copies, list(range(len(copies))))
    values: dict[int, Expr] = {}
    for site, k in enumerate(site_copy):
        values.setdefault(k, flow.values[site])
    placements = tuple(
        PlacementEntry(
            g.node,
            g.kind,
            g.name,
            g.function,
            g.index,
            g.line,
            g.column,
            devices.get(g.node, "?"),
            flow.inputs.get(g.node, ()),
            g.binding,
            (reasons or {}).get(g.node),
        )
        for g in graph.nodes
    )
    results = tuple(
        ResultEntry(graph.function_of[id(graph.ids[i])], i, devices.get(i, "?"), tuple(ins))
        for i, ins in result_inputs.items()
        if any(graph.ids[i] is r for r in graph.roots)
    )
    if priced:
        placements, copies = price(graph, result, config, placements, copies, [values[k] for k in range(len(copies))])
    pins = _pins(graph, devices, config.constraints)
    divergences = tuple(
        DivergenceEntry(relay.device_name(src), relay.device_name(dst), *graph.copy_location(span))
        for span, src, dst in result.divergences
    )
    return PlacementRecord(
        graph.naming.language,
        placements,
        tuple(copies),
        pins,
        results,
        divergences,
        module,
        result,
        tuple(sites),
        tuple(site_copy),
        graph.naming,
    )


def price(
    graph: PlacementGraph,
    result: solver.PlanResult,
    config: solver.PlanConfig,
    placements: Sequence[PlacementEntry],
    copies: Sequence[CopyEntry],
    values: Sequence[Expr],
) -> tuple[tuple[PlacementEntry, ...], list[CopyEntry]]:
    """Each operator's predicted kernel time on its device and each copy's
    time over its link (`values`: each copy's copied value), under the
    optimize mode's cost model with `config`'s profiles, links and table:
    the numbers of the optimizer's own objective in optimize mode, the cost
    model's price of the TVM plan in TVM mode (as the report's `prediction`).
    Everything is left unpriced (None) where the cost model cannot price the
    module; an entry it cannot price alone stays None."""
    candidates: list[relay.VirtualDevice] = []
    for vd in result.virtual_devices:
        if isinstance(vd, relay.VirtualDevice) and all(relay.device_name(c) != relay.device_name(vd) for c in candidates):
            candidates.append(vd)
    try:
        type_of, _ = solver.module_types(graph.module, stated=config.language == "relax")
        sizes = solver.Sizes(type_of, config.assume_dim)
        sizes.run(graph.roots)
        setup = solver.device_setup(candidates, config)
    except (solver.PlanConfigError, relay.RelayError, ValueError, TypeError, KeyError) as err:
        log.debug("the plan is not priced: %s", err)
        return tuple(placements), list(copies)
    index = {name: i for i, name in enumerate(setup.names)}
    priced: list[PlacementEntry] = []
    for p in placements:
        d = index.get(p.device)
        n = graph.expr_of.get(p.node)
        if p.kind != KIND_OPERATOR or d is None or not isinstance(n, Call):
            priced.append(p)
            continue
        try:
            ms: float | None = solver.ns_to_ms(solver.kernel_costs(n, sizes, setup)[d])
        except (ValueError, TypeError, KeyError, ZeroDivisionError) as err:
            log.debug("no time for node %d: %s", p.node, err)
            ms = None
        priced.append(dataclasses.replace(p, predicted_ms=ms))
    out: list[CopyEntry] = []
    for c, value in zip(copies, values):
        si, di = index.get(c.src), index.get(c.dst)
        link = setup.links[si][di] if si is not None and di is not None else None
        if link is None:
            out.append(c)
            continue
        out.append(dataclasses.replace(c, predicted_ms=solver.ns_to_ms(solver.copy_ns(sizes.of(value), link))))
    return tuple(priced), out


def _as_written(copies: Sequence[CopyEntry]) -> tuple[list[CopyEntry], list[int]]:
    """One copy per copied value and device (the sites' copies merged, their
    consumers together), and which merged copy each site is."""
    merged: list[CopyEntry] = []
    index: dict[tuple[Any, ...], int] = {}
    site_copy: list[int] = []
    for c in copies:
        key = (c.from_nodes, c.src, c.dst)
        k = index.get(key)
        if k is None:
            k = index[key] = len(merged)
            merged.append(c)
        else:
            first = merged[k]
            to_nodes = tuple(_unique((*first.to_nodes, *c.to_nodes)))
            merged[k] = dataclasses.replace(
                first, to_nodes=to_nodes, into_result=None if to_nodes else first.into_result or c.into_result
            )
        site_copy.append(k)
    return merged, site_copy


def _types(module: Module) -> Callable[[Expr], Any] | None:
    """The type of each node for copy sizes, as the optimize mode infers them."""
    try:
        type_of, _ = solver.module_types(module)
    except (relay.RelayError, ValueError, TypeError, KeyError) as err:
        log.debug("no types for copy sizes: %s", err)
        return None
    return type_of


def _pins(
    graph: PlacementGraph, devices: Mapping[int, str], constraints: Iterable[Mapping[str, Any]]
) -> tuple[PinEntry, ...]:
    """The nodes an annotation of the module or a request pin fixes."""
    out: list[PinEntry] = []
    seen: set[tuple[int, str]] = set()
    for n in graph.ids:
        if isinstance(n, Call) and wrapper_op(n) == ast.ON_DEVICE and id(n) in graph.function_of:
            target = graph.nid.get(id(graph.copied_value(n.args[0])))
            if target is None or (target, "annotation") in seen:
                continue
            seen.add((target, "annotation"))
            span = n.span
            out.append(
                PinEntry(
                    target,
                    devices.get(target, "?"),
                    "annotation",
                    graph.naming.annotation,
                    span.line if span is not None else None,
                    span.column if span is not None else None,
                )
            )
    for k, c in enumerate(constraints):
        try:
            nodes = solver.resolve(graph.module, c.get("select", {}), ids=graph.ids)
        except solver.PlanConfigError:
            continue
        for node in nodes:
            i = graph.nid.get(id(node))
            if i is None:
                continue
            span = getattr(node, "span", None)
            out.append(
                PinEntry(
                    i,
                    devices.get(i, "?"),
                    "request pin",
                    f"constraint #{k}",
                    span.line if span is not None else None,
                    span.column if span is not None else None,
                )
            )
    return tuple(out)


# ---------------------------------------------------------------------------
# Messages in the language's terms


# A tracked constraint's place in a planner message: `annotation at 9:17`, `call site at 3:5`.
# `operator c = R.add(a, b) shares ...`: an operator named by its binding is a binding.
_BINDING = re.compile(r"^operator (?=[\w.]+ = )")
_PLACE = re.compile(r"\b(?:annotation|operator|copy|let|call site|parameter) at (?P<line>\d+):(?P<column>\d+)")


class Renamer:
    """The planner's messages (why-answers, conflicts), written in Relay terms,
    in the module language's terms: each named node's Relay text becomes its
    text (`add(..., %y)` -> `c = R.add(a, b)`), parameters lose Relay's `%`,
    and the annotation and copy operators get the language's names. With the
    Relay naming every message stays as it is."""

    def __init__(self, naming: Naming, ids: Sequence[Expr]) -> None:
        self.naming = naming
        self.ids = ids
        self.active = bool(naming.names)
        words: list[tuple[str, str]] = [(ast.ON_DEVICE, naming.annotation), (ast.DEVICE_COPY, naming.copy)]
        # (line, column) -> the Relay texts of the named nodes written there, with their texts.
        self._at: dict[tuple[int, int], list[tuple[str, str]]] = {}
        if self.active:
            for n in ids:
                found = naming.names.get(id(n))
                if found is None:
                    continue
                if isinstance(n, Var):
                    words.append((f"%{n.name}", found.name))
                span = getattr(n, "span", None)
                if span is not None:
                    self._at.setdefault((span.line, span.column), []).append((short_text(n), found.text))
        self._words = [(re.compile(r"(?<![\w.])" + re.escape(a) + r"(?![\w.])"), b) for a, b in words if a != b]
        # (line, column) -> the heads (`b = R.hint_on_device`) of the named nodes written there.
        self._heads: dict[tuple[int, int], list[str]] = {}
        if self.active:
            for found in naming.names.values():
                if found.span is not None:
                    head = f"{found.binding} = {found.name}" if found.binding and found.binding != found.name else found.name
                    heads = self._heads.setdefault((found.span.line, found.span.column), [])
                    if head not in heads:
                        heads.append(head)
        # Longest names first, so that `cuda (target ...)` is not read as `cuda`.
        listed = sorted(naming.devices, key=len, reverse=True)
        names = "(?:" + "|".join(map(re.escape, listed)) + r")(?=$|[\s;,)\]])"
        self._device_pattern = re.compile(rf"(?<=\bon ){names}|(?<=\band ){names}") if listed else None

    def text(
        self, message: str, node: int | None = None, line: int | None = None, column: int | None = None
    ) -> str:
        """`message` about input node `node`, or about what is written at
        line:column (when known), in the language's terms."""
        if not self.active:
            return message
        pairs: list[tuple[str, str]] = []
        if node is not None and 0 <= node < len(self.ids):
            expr = self.ids[node]
            found = self.naming.names.get(id(expr))
            if found is not None:
                pairs.append((short_text(expr), found.text))
        if line is not None and column is not None:
            pairs.extend(self._at.get((line, column), ()))
        for relay_text, text in pairs:
            if relay_text:
                message = message.replace(relay_text, text)
        for pattern, word in self._words:
            message = pattern.sub(word, message)
        return message

    def why(self, results: Sequence[solver.WhyResult]) -> tuple[solver.WhyResult, ...]:
        """Why-answers in the language's terms."""
        if not self.active:
            return tuple(results)
        out = []
        for r in results:
            answers = tuple(
                dataclasses.replace(
                    a,
                    expression=self.text(a.expression, a.node),
                    message=self.text(a.message),
                    chain=tuple(
                        dataclasses.replace(s, message=self.text(s.message, s.node, s.line, s.column))
                        for s in a.chain
                    ),
                )
                for a in r.answers
            )
            out.append(dataclasses.replace(r, answers=answers))
        return tuple(out)

    def conflict(self, err: solver.PlanningConflict) -> solver.PlanningConflict:
        """A planning conflict in the language's terms: its nodes as the
        language writes them, each `<kind> at L:C` as the binding written
        there (`b = R.hint_on_device at 9:17`), devices as the module names
        them (`cuda (vdevice 1 "cuda:0")`)."""
        if not self.active:
            return err
        constraints = []
        message = self._places(err.message or str(err))
        for c in err.constraints:
            line = c.span.line if c.span is not None else None
            column = c.span.column if c.span is not None else None
            constraints.append(
                dataclasses.replace(
                    c,
                    description=self._devices(_BINDING.sub("binding ", self.text(c.description, line=line, column=column))),
                    expr_text=self.text(c.expr_text, line=line, column=column),
                )
            )
            message = self.text(message, line=line, column=column)
        return solver.PlanningConflict(self._devices(message), constraints, err.span)

    def _places(self, message: str) -> str:
        """`annotation at 9:17` -> `b = R.hint_on_device at 9:17`: a tracked
        constraint's kind as the binding written at its location."""

        def at(found: re.Match[str]) -> str:
            line, column = int(found["line"]), int(found["column"])
            heads = self._heads.get((line, column))
            return f"{heads[0]} at {line}:{column}" if heads else found[0]

        return _PLACE.sub(at, message)

    def _devices(self, message: str) -> str:
        """Device names after `on`/`and` as the module names the device."""
        if self._device_pattern is None:
            return message
        names = self.naming.devices
        return self._device_pattern.sub(lambda m: names[m[0]], message)
