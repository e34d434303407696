"""The placement report (issue 22): one JSON document per plan, for CI jobs and build farms.

A report holds everything of `/plan`'s response except the module, plus:

- `placements`: every operator call, call of a function and function parameter of
  the *input* module (operators inside primitive functions are not planned one by
  one: the call of the primitive function stands for them), each with its node id
  (the post-order ids of `solver.why`), operator or name, global function,
  line:column, device, `decided_by` (the same vocabulary as a why-answer's
  `reason`: annotation, request pin, host rule, parameter attribute, function
  attribute, default, cost, none) and `inputs`, the node ids of the placements
  whose values flow into it (through lets, tuples, wrappers, branches). `inputs`
  is what `service.diff` matches nodes by.
- `copies`: every `device_copy` of the plan, with the placements it copies from
  and into, its devices and its bytes (from inferred types; null when a dimension
  is symbolic).
- `prediction`: the predicted run time, always present: in optimize mode the
  optimizer's own, in TVM mode the cost model's price of the TVM plan (the same
  cost model as `mode: "optimize"`, under the request's profiles and links).

The JSON Schema is `schemas/report.schema.json`; `REPORT_VERSION` changes when a
field changes meaning or goes away.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import relay
import solver
from relay import ast
from relay.ast import Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Module, Op, Var
from relay.traverse import children
from solver import (
    Sizes,
    device_setup,
    input_roots,
    kernel_costs,
    node_ids,
    ns_to_ms,
    planned_roots,
    wrapper_op,
)

log = logging.getLogger("devplan.report")

REPORT_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "report.schema.json"

KIND_OPERATOR = "operator"
KIND_CALL = "call"
KIND_PARAMETER = "parameter"


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One placement of the input module, before its device is known."""

    node: int
    kind: str  # operator | call | parameter
    name: str  # operator name, `@f` for a call of a global, `%x` for a parameter
    function: str  # the global function it is in (`@main`)
    index: int | None  # a parameter's position in its function's parameters
    line: int | None
    column: int | None
    inputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CopyEdge:
    """One device_copy of the plan, between the placements it joins."""

    src: str
    dst: str
    bytes: int | None
    line: int | None
    column: int | None
    from_nodes: tuple[int, ...]
    to_nodes: tuple[int, ...]
    into_result: str | None  # the function whose result it feeds, when no placement does

    def to_json(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "bytes": self.bytes,
            "line": self.line,
            "column": self.column,
            "from": list(self.from_nodes),
            "to": list(self.to_nodes),
            "into_result": self.into_result,
        }


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
# The placement graph of an input module


def _is_placement(expr: Expr, params: set[int]) -> bool:
    if isinstance(expr, Call):
        return wrapper_op(expr) is None and not (isinstance(expr.op, Op) and expr.op.name in ("on_device",))
    return isinstance(expr, Var) and id(expr) in params


def _primitive_name(func: Function) -> str:
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


class PlacementGraph:
    """The placements of an input module and the data flow between them."""

    def __init__(self, module: Module) -> None:
        self.module = module
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
        self._params = params
        self.nodes: list[GraphNode] = []
        self.expr_of: dict[int, Expr] = {}
        for i, n in enumerate(self.ids):
            if id(n) not in self.function_of or not _is_placement(n, params):
                continue
            self.expr_of[i] = n
            self.nodes.append(self._node(i, n))

    def _node(self, i: int, n: Expr) -> GraphNode:
        span = getattr(n, "span", None)
        line = span.line if span is not None else None
        column = span.column if span is not None else None
        function = self.function_of[id(n)]
        if isinstance(n, Var):
            return GraphNode(
                i, KIND_PARAMETER, f"%{n.name}", function, self.param_index[id(n)], line, column, ()
            )
        assert isinstance(n, Call)
        if isinstance(n.op, Op):
            kind, name = KIND_OPERATOR, n.op.name
        elif isinstance(n.op, GlobalVar):
            kind, name = KIND_CALL, f"@{n.op.name}"
        elif isinstance(n.op, Function) and n.op.is_primitive:
            kind, name = KIND_OPERATOR, _primitive_name(n.op)
        else:
            kind, name = KIND_CALL, "closure"
        inputs: list[int] = []
        for arg in n.args:
            inputs.extend(src for src, _ in self.sources(n, arg))
        return GraphNode(i, kind, name, function, None, line, column, tuple(inputs))

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
            elif isinstance(e, (Constant, Function, GlobalVar, Op, ast.Constructor, Var)):
                inner = ()
            # Reversed so that the stack pops them in argument order.
            for k in reversed(inner):
                stack.append((e, k, site))
        return out

    def copies(self, planned: Module, types: Any) -> list[CopyEdge]:
        """Every device_copy of `planned` (this module's plan) between placements."""
        sites = solver.align(self.roots, planned_roots(list(planned.functions), self.from_expr)).copies
        site_of: dict[tuple[int, int], int] = {}
        for k, (parent, child, _) in enumerate(sites):
            site_of.setdefault((id(parent), id(child)), k)

        def crossing(p: Expr, c: Expr) -> int | None:
            return site_of.get((id(p), id(c)))

        ends_from: dict[int, list[int]] = {k: [] for k in range(len(sites))}
        ends_to: dict[int, list[int]] = {k: [] for k in range(len(sites))}
        into: dict[int, str] = {}
        for g in self.nodes:
            n = self.expr_of[g.node]
            if not isinstance(n, Call):
                continue
            for arg in n.args:
                for src, site in self.sources(n, arg, crossing):
                    if site is not None:
                        _add(ends_from[site], src)
                        _add(ends_to[site], g.node)
        for n in self.ids:
            if isinstance(n, Function) and not n.is_primitive and id(n) in self.function_of:
                for src, site in self.sources(n, n.body, crossing):
                    if site is not None:
                        _add(ends_from[site], src)
                        into.setdefault(site, self.function_of[id(n)])
        out: list[CopyEdge] = []
        for k, (parent, child, call) in enumerate(sites):
            if not ends_from[k]:
                ends_from[k].extend(src for src, _ in self.sources(parent or child, child))
            props = ast.device_copy_props(call)
            src_dev, dst_dev = (_name(props.src), _name(props.dst)) if props else ("?", "?")
            span = getattr(child, "span", None)
            nbytes = value_bytes(types.of(child)) if types is not None else None
            out.append(
                CopyEdge(
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
        return out


def _add(items: list[int], value: int) -> None:
    if value not in items:
        items.append(value)


def _name(vd: Any) -> str:
    return relay.device_name(vd) if isinstance(vd, relay.VirtualDevice) else "?"


# ---------------------------------------------------------------------------
# Planning with placements


@dataclass(frozen=True, slots=True)
class Placements:
    """What a plan adds to a report: the placements, the copies and the prediction."""

    placements: list[dict[str, Any]]
    copies: list[dict[str, Any]]
    prediction: dict[str, Any]


def placement_selectors(graph: PlacementGraph) -> list[dict[str, Any]]:
    """One why-selector per placement (their answers give device and `decided_by`)."""
    return [{"node": g.node} for g in graph.nodes]


def plan_with_placements(
    module: Module,
    config: solver.PlanConfig,
    why: Sequence[Mapping[str, Any]] = (),
    record_constraints: bool = False,
) -> tuple[solver.PlanResult, Placements]:
    """`solver.plan` with a why-answer for every placement; the result's `why`
    keeps only the answers to `why`. The answers cost a search each (about 2.5 s
    for inception_v3's 784 placements on the shared machine)."""
    graph = PlacementGraph(module)
    extra = placement_selectors(graph)
    result = solver.plan(module, config, why=(*why, *extra), record_constraints=record_constraints)
    answers = result.why[len(why) :]
    result = dataclasses.replace(result, why=tuple(result.why[: len(why)]))
    by_node = {a.node: a.to_json() for w in answers for a in w.answers}
    placements = [_placement(g, by_node.get(g.node)) for g in graph.nodes]
    try:
        types: Any = relay.infer_types(module, check_annotations=False)
    except relay.RelayError:
        types = None
    copies = [e.to_json() for e in graph.copies(result.module, types)]
    return result, Placements(placements, copies, prediction(result, config, placements, copies))


def prediction(
    result: solver.PlanResult,
    config: solver.PlanConfig,
    placements: Sequence[Mapping[str, Any]],
    copies: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The predicted run time: the optimizer's in optimize mode, else the cost
    model's price of the TVM plan (`basis` says which)."""
    out = _counts(placements, copies, "optimize" if result.cost is not None else "tvm-plan")
    if result.cost is not None:
        out["predicted_ms"] = result.cost.predicted_ms
    else:
        out.update(_price_tvm_plan(result.module, config))
    return out


def build_report(response: Mapping[str, Any], placements: Placements, mode: str) -> dict[str, Any]:
    """The report of one plan from its /plan response body (the module is left out)."""
    from service import __version__

    body = {k: v for k, v in response.items() if k not in ("module", "picture")}
    return {
        "report_version": REPORT_VERSION,
        "devplan_version": __version__,
        "mode": mode,
        **body,
        "prediction": placements.prediction,
        "placements": placements.placements,
        "copies": placements.copies,
    }


def report_from_response(response: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """The report of a plan from its /plan response body made with
    `include: ["placements"]` (the module is left out)."""
    body = {k: v for k, v in response.items() if k not in ("placements", "copies", "prediction")}
    extra = Placements(list(response["placements"]), list(response["copies"]), dict(response["prediction"]))
    return build_report(body, extra, mode)


def _placement(g: GraphNode, answer: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "node": g.node,
        "kind": g.kind,
        "name": g.name,
        "function": g.function,
        "index": g.index,
        "line": g.line,
        "column": g.column,
        "device": answer["device"] if answer is not None else "?",
        "decided_by": answer["reason"] if answer is not None else "none",
        "inputs": list(g.inputs),
    }


def _counts(
    placements: Sequence[Mapping[str, Any]], copies: Sequence[Mapping[str, Any]], basis: str
) -> dict[str, Any]:
    per_device: dict[str, dict[str, Any]] = {}
    for p in placements:
        if p["kind"] == KIND_OPERATOR:
            entry = per_device.setdefault(p["device"], {"operator_calls": 0})
            entry["operator_calls"] += 1
    return {
        "predicted_ms": None,
        "basis": basis,
        "reason": None,
        "copies": len(copies),
        "bytes_copied": sum(c["bytes"] for c in copies if c["bytes"] is not None),
        "per_device": per_device,
    }


def _price_tvm_plan(planned: Module, config: solver.PlanConfig) -> dict[str, Any]:
    """predicted_ms (and reason) of a TVM-mode plan under the cost model."""
    try:
        evaluation = solver.evaluate_planned(planned, dataclasses.replace(config, mode="tvm"))
    except (solver.PlanningConflict, solver.SolverTimeout, solver.PlanConfigError) as err:
        return {"reason": f"the cost model cannot price this plan: {err}"}
    out: dict[str, Any] = {"predicted_ms": evaluation.predicted_ms}
    if evaluation.violations:
        out["reason"] = "over a memory budget: " + "; ".join(evaluation.violations)
    return out


def operator_times(
    module: Module,
    result: solver.PlanResult,
    config: solver.PlanConfig | None = None,
    only: Collection[int] | None = None,
) -> dict[int, float]:
    """node id -> predicted kernel time (ms) of each operator call on the device
    `result` gives it (`result.constraints` needed), under the optimize mode's
    cost model with `config`'s profiles and table. Empty where the cost model
    cannot price the module (pictures then show counts only)."""
    log_ = result.constraints
    if log_ is None:
        return {}
    config = config or solver.PlanConfig()
    candidates: list[relay.VirtualDevice] = []
    for vd in result.virtual_devices:
        if isinstance(vd, relay.VirtualDevice) and all(
            relay.device_name(c) != relay.device_name(vd) for c in candidates
        ):
            candidates.append(vd)
    try:
        type_of, _ = solver.module_types(module)
        sizes = Sizes(type_of, config.assume_dim)
        sizes.run(input_roots(module))
        setup = device_setup(candidates, config)
    except (solver.PlanConfigError, relay.RelayError, ValueError, TypeError, KeyError) as err:
        log.debug("no operator times: %s", err)
        return {}
    index = {name: i for i, name in enumerate(setup.names)}
    out: dict[int, float] = {}
    for i, n in enumerate(node_ids(module)):
        if only is not None and i not in only:
            continue
        device = log_.devices.get(i)
        if not isinstance(n, Call) or wrapper_op(n) is not None or device not in index:
            continue
        if not (isinstance(n.op, Op) or (isinstance(n.op, Function) and n.op.is_primitive)):
            continue
        try:
            out[i] = ns_to_ms(kernel_costs(n, sizes, setup)[index[device]])
        except (ValueError, TypeError, KeyError, ZeroDivisionError) as err:
            log.debug("no time for node %d: %s", i, err)
    return out


def load_schema() -> dict[str, Any]:
    """The report's JSON Schema (schemas/report.schema.json)."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def is_report(document: Any) -> bool:
    """Whether a JSON document is a report (rather than a plan request)."""
    return isinstance(document, Mapping) and "report_version" in document and "placements" in document
