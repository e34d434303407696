"""Optimize mode (issue 11, docs/optimize.md): choose the devices that minimise
the predicted run time, subject to pins, operator support and memory budgets.

The hard constraints are TVM mode's except one: the edge between a primitive
operator call and each tensor argument is *cuttable* (a `device_copy` when its
two ends differ). The union-find classes of the hard constraints are the
decision variables; each has a set of allowed devices (its pins, the support
of the operators it computes), a kernel cost per device, and cuttable edges to
other classes with a copy cost per direction. The objective folds run time,
copies and TVM's default device into one integer (`_Weights`).

Solving: with two devices and no budget, a minimum s-t cut (`optimize_flow`)
is exact and its flow certifies optimality; otherwise Z3 `Optimize` over the
classes (fresh context, time limit), warm-started by the cut. A budget plan
that the cut relaxation already satisfies is optimal without search.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

import relay
from relay.ast import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    Let,
    Module,
    Op,
    TensorType,
    TupleGetItem,
    TupleType,
    Type,
    Var,
    on_device_props,
)
from relay.device import VirtualDevice, device_name
from relay.op_attrs import complete_attrs
from relay.span import RelayError
from relay.traverse import not_primitive, post_order

from .collect import _SPECIAL_OPS, Collector, is_optimizable
from .config import PlanConfig
from .cost import (
    CostReport,
    CostTable,
    DeviceCost,
    DeviceProfile,
    Estimate,
    LinkProfile,
    check_link_names,
    copy_ns,
    cost_key,
    device_profile,
    kernel_ns,
    link_profile,
    ns_to_ms,
    op_flops,
    type_bytes,
)
from .deadline import Deadline
from .domains import DomainSystem
from .errors import ConflictConstraint, PlanConfigError, PlanningConflict, SolverTimeout
from .explain import _constraint, short_text
from .optimize_flow import two_device_cut
from .planner import (
    Laps,
    PlanResult,
    PlanStats,
    choose_defaults,
    collect,
    front,
    planned_result,
    presolved_devices,
    resolve_devices,
    rewrite_module,
)
from .rewrite import Rewriter

log = logging.getLogger(__name__)

MODES = ("tvm", "optimize")


# ---------------------------------------------------------------------------
# Types and sizes


TypeOf = Callable[[Expr], Type | None]


def module_types(module: Module) -> tuple[TypeOf, list[Estimate]]:
    """The type of each expression from `relay.infer_types`; where inference
    rejects the module (a type error), what the module states (parameter
    annotations, constant data, checked types), with a note saying so.
    Unknown types come back as None."""

    def stated(expr: Expr) -> Type | None:
        if isinstance(expr, Var):
            return expr.type_annotation
        if isinstance(expr, Constant) and expr.data is not None:
            return TensorType(tuple(expr.data.shape), expr.data.dtype)
        return expr.checked_type

    try:
        types = relay.infer_types(module, check_annotations=False)
    except RelayError as err:
        return stated, [Estimate("unknown type", f"type inference failed: {err}", err.span)]

    def inferred(expr: Expr) -> Type | None:
        try:
            ty = types.of(expr)
        except KeyError:  # a node made after inference (normalisation, copies)
            return stated(expr)
        return None if ty is relay.UNKNOWN else ty

    return inferred, []


class Sizes:
    """Bytes of every data expression, with the cost model's fallbacks: an
    unknown operator result is as big as its largest known input, a `?`
    dimension counts as `assume_dim`; each guess is an `Estimate`."""

    def __init__(self, type_of: TypeOf, assume_dim: int) -> None:
        self.type_of = type_of
        self.assume_dim = assume_dim
        self.bytes: dict[int, int] = {}
        self.estimates: list[Estimate] = []
        self._keep: list[Expr] = []

    def run(self, roots: Sequence[Expr]) -> None:
        nodes = post_order(list(roots), enter=not_primitive)
        # A let-bound variable of unknown type is as big as its value; values
        # come before the bodies that use the variable in post-order.
        binder = {id(n.value): n.var for n in nodes if isinstance(n, Let)}
        for node in nodes:
            size = self.bytes[id(node)] = self.bytes.get(id(node)) or self._size(node)
            var = binder.get(id(node))
            if var is not None and self.type_of(var) is None:
                self.bytes[id(var)] = size
            self._keep.append(node)

    def of(self, expr: Expr) -> int:
        found = self.bytes.get(id(expr))
        if found is None:
            found = self._size(expr)
        return found

    def _size(self, node: Expr) -> int:
        ty = self.type_of(node)
        nbytes, guessed = type_bytes(ty, self.assume_dim)
        if nbytes is not None:
            if guessed:
                self.estimates.append(
                    Estimate(
                        "symbolic dimension",
                        f"{short_text(node)}: a symbolic dimension counted as {self.assume_dim}",
                        node.span,
                    )
                )
            return nbytes
        if isinstance(node, TupleGetItem):
            # Unknown projection: the whole tuple (an over-estimate, listed).
            return self.bytes.get(id(node.tuple_value), 0)
        if isinstance(node, relay.Tuple):
            return sum(self.bytes.get(id(f), 0) for f in node.fields)
        if isinstance(node, Call):
            if isinstance(node.op, Op) and node.op.name == "on_device" and node.args:
                return self.of(node.args[0])
            if isinstance(node.op, Op) and node.op.name == "device_copy" and node.args:
                return self.of(node.args[0])
            known = [self.bytes.get(id(a), 0) for a in node.args]
            largest = max(known, default=0)
            if isinstance(node.op, Op):
                self.estimates.append(
                    Estimate(
                        "unknown type",
                        f"{node.op.name}: result type unknown, costed as elementwise over its "
                        f"largest input ({largest} bytes)",
                        node.span,
                    )
                )
            return largest
        return 0

    def type(self, expr: Expr) -> Type | None:
        return self.type_of(expr)


def _is_tensor(sizes: Sizes, expr: Expr) -> bool:
    """Whether an operator argument is a tensor (its edge is cuttable): a known
    tensor type, or an unknown type on an expression that is not a tuple."""
    ty = sizes.type(expr)
    if isinstance(ty, TensorType):
        return True
    if isinstance(ty, TupleType) or isinstance(expr, relay.Tuple):
        return False
    return ty is None and not isinstance(expr, (Function, GlobalVar))


def _look_through(expr: Expr) -> Expr:
    """The expression whose device an operator argument has (the rewriter's
    GetVirtualDevice looks through one `on_device`)."""
    if type(expr) is Call and type(expr.op) is Op and expr.op.name == "on_device" and len(expr.args) == 1:
        return expr.args[0]
    return expr


# ---------------------------------------------------------------------------
# Collection with cuttable operator edges


class CutCollector(Collector):
    """The TVM-mode collector, except that a primitive operator call is not
    unified with its tensor arguments: the edge is recorded as cuttable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Whether an argument's edge may be cut; set from the types before collecting.
        self.is_tensor: Callable[[Expr], bool] = lambda e: True
        self.op_calls: list[Call] = []
        self.cut_edges: list[tuple[Call, Expr]] = []  # (operator call, argument looked through on_device)

    def _call(self, call: Call) -> None:
        op = call.op
        if type(op) is Op and op.name == "on_device" and len(call.args) == 1:
            # A result the annotation leaves free meets its body at a copy
            # point, in both modes: a cuttable edge.
            super()._call(call)
            props = on_device_props(call)
            if props is not None and not props.constrain_result:
                self.cut_edges.append((call, call.args[0]))
            return
        if type(op) is Op and op.name not in _SPECIAL_OPS:
            cd = self.callee_domain(call)
            shared = cd[-1]  # type: ignore[index]
            if type(shared) is int:
                cid = self._tag("operator", call, op.name)
                ds = self.ds
                d = self.dom(call)
                if d != shared:
                    ds.unify(shared, d, cid)
                self.op_calls.append(call)
                for a in call.args:
                    da = self.dom(a)
                    if type(da) is int and self.is_tensor(_look_through(a)):
                        self.cut_edges.append((call, _look_through(a)))
                    elif type(da) is int:
                        ds.union(shared, da, cid)
                    else:
                        ds.collapse(shared, da, cid)
                return
        super()._call(call)


# ---------------------------------------------------------------------------
# The problem over classes


@dataclass
class Problem:
    """The optimisation problem over the presolved classes.

    Devices are indices into `devices`. `allowed[c]` lists the devices class c
    may take; `unary[c][d]` its kernel time there (ns); `edges` are
    (consumer class, producer class, bytes, uses); `copy_cost[s][t]` is the ns
    of copying one byte-count (see `edge_ns`). Budgets: `weights[c]` bytes of
    parameters/constants in c, `largest[c]` its largest intermediate.
    """

    devices: list[VirtualDevice]
    names: list[str]
    profiles: list[DeviceProfile]
    links: list[list[LinkProfile | None]]
    classes: list[int]  # class index -> union-find root
    allowed: list[list[int]]
    unary: list[dict[int, int]]
    ops: list[int]  # operator calls per class
    pref: list[int]
    edges: list[tuple[int, int, int, int]]  # (consumer, producer, bytes, uses)
    weights: list[int]
    largest: list[int]
    budgets: dict[int, int]
    fixed_ns: int = 0  # input device_copy calls (fixed both ends)
    fixed_copies: int = 0
    fixed_copy_bytes: dict[int, int] = field(default_factory=dict)  # destination -> bytes
    fixed_copy_ns: dict[int, int] = field(default_factory=dict)  # destination -> ns

    def edge_ns(self, nbytes: int, src: int, dst: int, uses: int) -> int:
        link = self.links[src][dst]
        assert link is not None
        return copy_ns(nbytes, link) * uses


@dataclass(frozen=True)
class Weights:
    """Run time (ns) outweighs copies, which outweigh non-default devices:
    objective = ns * per_ns + copies * per_copy + non_default, where
    per_copy > every possible non-default count and per_ns > every possible
    copies * per_copy + non_default."""

    per_ns: int
    per_copy: int

    @staticmethod
    def of(problem: Problem) -> Weights:
        per_copy = len(problem.classes) + 1
        copies = sum(e[3] for e in problem.edges)
        return Weights(per_copy * (copies + 1), per_copy)


@dataclass
class Solution:
    assign: list[int]
    objective: int
    lower: int  # lower bound on the objective
    method: str
    variables: int = 0


def evaluate(problem: Problem, weights: Weights, assign: Sequence[int]) -> tuple[int, int, int, int]:
    """(objective, run time ns, copies, bytes copied) of an assignment."""
    ns = problem.fixed_ns
    copies = problem.fixed_copies
    nbytes = sum(problem.fixed_copy_bytes.values())
    nondefault = 0
    for c, d in enumerate(assign):
        ns += problem.unary[c][d]
        if d != problem.pref[c]:
            nondefault += 1
    for u, v, b, uses in problem.edges:
        du, dv = assign[u], assign[v]
        if du != dv:
            ns += problem.edge_ns(b, dv, du, uses)
            copies += uses
            nbytes += b * uses
    return ns * weights.per_ns + copies * weights.per_copy + nondefault, ns, copies, nbytes


def budget_violations(problem: Problem, assign: Sequence[int]) -> list[tuple[int, int, int]]:
    """(device, bytes needed, budget) for every device whose budget the plan exceeds."""
    out = []
    for d, budget in problem.budgets.items():
        need = problem.fixed_copy_bytes.get(d, 0)
        largest = 0
        for c, x in enumerate(assign):
            if x == d:
                need += problem.weights[c]
                largest = max(largest, problem.largest[c])
        for u, v, b, uses in problem.edges:
            if assign[u] == d and assign[v] != d:
                need += b * uses
        need += largest
        if need > budget:
            out.append((d, need, budget))
    return out


# ---------------------------------------------------------------------------
# Building the problem


def _unsupported(config: PlanConfig, names: Sequence[str]) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for name, value in (config.op_support or {}).items():
        if name not in names:
            raise PlanConfigError(f"op_support: unknown device {name!r} (devices: {', '.join(names)})")
        if isinstance(value, Mapping):
            unknown = set(value) - {"unsupported"}
            if unknown:
                raise PlanConfigError(f"op_support.{name}: unknown field(s) {sorted(unknown)}")
            value = value.get("unsupported", ())
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise PlanConfigError(f"op_support.{name} must list operator names")
        out[name] = frozenset(value)
    return out


@dataclass
class _Built:
    problem: Problem
    conflicts: list[tuple[int, list[ConflictConstraint]]]
    estimates: list[Estimate]
    sizes: Sizes
    kernels: dict[int, list[int]]  # id(call) -> ns per device


def candidate_devices(
    ds: DomainSystem, table: Sequence[Any], extra: Sequence[VirtualDevice]
) -> list[VirtualDevice]:
    """The devices a class may take: the table's and the request's, canonical, once each."""
    out: list[VirtualDevice] = []
    for vd in [*table, *extra]:
        if isinstance(vd, VirtualDevice) and not vd.is_fully_unconstrained:
            c = ds.canonical(vd)
            if c not in out:
                out.append(c)
    return out


def _fits(partial: VirtualDevice, candidate: VirtualDevice) -> bool:
    return partial.join(candidate) == candidate


def build_problem(
    collector: CutCollector,
    candidates: list[VirtualDevice],
    default: VirtualDevice,
    config: PlanConfig,
    sizes: Sizes,
    main: Function | None,
) -> _Built:
    """Classes, allowed devices, costs, edges and budgets of a collected module."""
    ds = collector.ds
    names = [device_name(vd) for vd in candidates]
    if len(set(names)) != len(names):
        raise PlanConfigError(f"two candidate devices share a name: {names}")
    profiles = [device_profile(n, vd, config.device_profiles or {}) for n, vd in zip(names, candidates)]
    for key in config.device_profiles or {}:
        if key not in names:
            raise PlanConfigError(f"device_profiles: unknown device {key!r} (devices: {', '.join(names)})")
    check_link_names(config.links or {}, names)
    links: list[list[LinkProfile | None]] = [
        [
            None
            if i == j
            else link_profile(names[i], names[j], candidates[i], candidates[j], config.links or {})
            for j in range(len(candidates))
        ]
        for i in range(len(candidates))
    ]
    unsupported = _unsupported(config, names)
    table = CostTable.from_document(config.cost_table)
    budgets = {i: p.memory_bytes for i, p in enumerate(profiles) if p.memory_bytes is not None}

    index: dict[int, int] = {}
    roots: list[int] = []

    def cls(elem: int) -> int:
        r = ds.find(elem)
        found = index.get(r)
        if found is None:
            found = index[r] = len(roots)
            roots.append(r)
        return found

    def root_of(expr: Expr) -> int:
        return cls(ds.result_of(collector.dom(expr)))

    unary: list[dict[int, int]] = []
    forbidden: dict[int, list[tuple[int, Call]]] = {}
    kernels: dict[int, list[int]] = {}
    ops_per: dict[int, int] = {}
    largest: dict[int, int] = {}
    weights: dict[int, int] = {}
    # Kernels
    for call in collector.op_calls:
        c = root_of(call)
        name = call.op.name  # type: ignore[attr-defined]
        arg_types = [sizes.type(a) for a in call.args]
        out_type = sizes.type(call)
        key = cost_key(name, arg_types, call.attrs)
        try:
            attrs = complete_attrs(name, call.attrs).as_dict()
        except (RelayError, ValueError, KeyError, TypeError):
            attrs = call.attrs.as_dict() if call.attrs is not None else {}
        out_bytes = sizes.of(call)
        moved = out_bytes + sum(sizes.of(a) for a in call.args)
        flops = op_flops(name, arg_types, out_type, attrs, config.assume_dim)
        if flops is None:
            itemsize = 4
            if isinstance(out_type, TensorType):
                itemsize = max(1, type_bytes(TensorType((1,), out_type.dtype), 1)[0] or 4)
            flops = max(out_bytes, max((sizes.of(a) for a in call.args), default=0)) // itemsize
        per_device = []
        for d, dev_name in enumerate(names):
            measured = table.lookup(key, dev_name)
            per_device.append(measured if measured is not None else kernel_ns(flops, moved, profiles[d]))
            if name in unsupported.get(dev_name, ()):
                forbidden.setdefault(c, []).append((d, call))
        kernels[id(call)] = per_device
        while len(unary) <= c:
            unary.append({})
        for d, ns in enumerate(per_device):
            unary[c][d] = unary[c].get(d, 0) + ns
        ops_per[c] = ops_per.get(c, 0) + 1
        largest[c] = max(largest.get(c, 0), out_bytes)
    # Weights: @main's parameters and every constant.
    seen_weights: set[int] = set()
    if main is not None:
        for p in main.params:
            c = root_of(p)
            weights[c] = weights.get(c, 0) + sizes.of(p)
            seen_weights.add(id(p))
    edge_map: dict[tuple[int, int], list[int]] = {}
    for call, arg in collector.cut_edges:
        u, v = root_of(call), root_of(arg)
        if isinstance(arg, Constant) and id(arg) not in seen_weights:
            seen_weights.add(id(arg))
            weights[v] = weights.get(v, 0) + sizes.of(arg)
        if u == v:
            continue
        entry = edge_map.setdefault((u, v), [0, 0])
        entry[0] += sizes.of(arg)
        entry[1] += 1
    # Other constants (arguments of hard edges) still count as weights.
    for call in collector.op_calls:
        for a in call.args:
            if isinstance(a, Constant) and id(a) not in seen_weights:
                seen_weights.add(id(a))
                c = root_of(a)
                weights[c] = weights.get(c, 0) + sizes.of(a)
    n = len(roots)
    # Every class that appears gets a full row; other classes are read by
    # `device_of` with the default rule.
    while len(unary) < n:
        unary.append({})
    allowed: list[list[int]] = []
    conflicts: list[tuple[int, list[ConflictConstraint]]] = []
    pref: list[int] = []
    default_c = ds.canonical(default)
    for c, r in enumerate(roots):
        partial = ds.vd[r]
        fits = [d for d, vd in enumerate(candidates) if _fits(partial, vd)]
        banned = {d for d, _ in forbidden.get(c, ())}
        ok = [d for d in fits if d not in banned]
        if not ok:
            conflicts.append((c, _support_conflict(ds, r, partial, fits, forbidden.get(c, []), names)))
            ok = fits or list(range(len(candidates)))
        allowed.append(ok)
        want = next((d for d in ok if candidates[d] == default_c), None)
        if want is None:
            want = next((d for d in ok if candidates[d].compatible(default_c)), ok[0])
        pref.append(want)
        for d in range(len(candidates)):
            unary[c].setdefault(d, 0)
    # Input device_copy calls: both ends are fixed.
    problem = Problem(
        devices=candidates,
        names=names,
        profiles=profiles,
        links=links,
        classes=roots,
        allowed=allowed,
        unary=unary,
        ops=[ops_per.get(c, 0) for c in range(n)],
        pref=pref,
        edges=[(u, v, b, k) for (u, v), (b, k) in edge_map.items()],
        weights=[weights.get(c, 0) for c in range(n)],
        largest=[largest.get(c, 0) for c in range(n)],
        budgets=budgets,
    )
    _fixed_copies(collector, problem, candidates, sizes)
    return _Built(problem, conflicts, sizes.estimates, sizes, kernels)


def _fixed_copies(
    collector: Collector, problem: Problem, candidates: list[VirtualDevice], sizes: Sizes
) -> None:
    ds = collector.ds
    roots = [f for _, f in collector.functions if is_optimizable(f)]
    for node in post_order(roots, enter=not_primitive):
        if type(node) is Call and type(node.op) is Op and node.op.name == "device_copy":
            props = relay.device_copy_props(node)
            if (
                props is None
                or not isinstance(props.src, VirtualDevice)
                or not isinstance(props.dst, VirtualDevice)
            ):
                continue
            src, dst = ds.canonical(props.src), ds.canonical(props.dst)
            if src == dst:
                continue
            si = next((i for i, vd in enumerate(candidates) if _fits(src, vd)), None)
            di = next((i for i, vd in enumerate(candidates) if _fits(dst, vd)), None)
            if si is None or di is None or si == di:
                continue
            b = sizes.of(node.args[0])
            ns = problem.edge_ns(b, si, di, 1)
            problem.fixed_ns += ns
            problem.fixed_copy_ns[di] = problem.fixed_copy_ns.get(di, 0) + ns
            problem.fixed_copies += 1
            problem.fixed_copy_bytes[di] = problem.fixed_copy_bytes.get(di, 0) + b


def _pins_of(ds: DomainSystem, root: int) -> list[tuple[int, VirtualDevice]]:
    """The logged pins (constraint id, device) on the class `root`."""
    out: list[tuple[int, VirtualDevice]] = []
    seen: set[int] = set()
    for elem, vd, cid in ds.pins:
        if cid in seen or ds.find(elem) != root:
            continue
        if ds.tags[cid].kind == "host operator" and ds.tags[cid].expr is None:
            continue
        seen.add(cid)
        out.append((cid, vd))
    return out


def _support_conflict(
    ds: DomainSystem,
    root: int,
    partial: VirtualDevice,
    fits: list[int],
    forbidden: list[tuple[int, Call]],
    names: list[str],
) -> list[ConflictConstraint]:
    out: list[ConflictConstraint] = []
    for cid, vd in _pins_of(ds, root)[:4]:
        out.append(_constraint(ds, cid, [device_name(vd)]))
    seen: set[tuple[int, str]] = set()
    for d, call in forbidden:
        if d not in fits:
            continue
        op_name = call.op.name  # type: ignore[attr-defined]
        if (d, op_name) in seen:
            continue
        seen.add((d, op_name))
        out.append(
            ConflictConstraint(
                "operator support",
                f"{op_name} is not supported on {names[d]}",
                short_text(call),
                call.span,
                [names[d]],
            )
        )
    return out


# ---------------------------------------------------------------------------
# Solving


_MODEL_RE = re.compile(r"\(define-fun (b\d+_\d+) \(\) Bool\s+(true|false)\)")


def _two_devices(problem: Problem) -> tuple[int, int] | None:
    used = sorted({d for ok in problem.allowed for d in ok})
    if len(used) > 2:
        return None
    if len(used) == 1:
        return (used[0], used[0])
    return (used[0], used[1])


def _cut(
    problem: Problem,
    weights: Weights,
    pair: tuple[int, int],
    penalty: Mapping[int, int] | None = None,
    intermediates: bool = True,
) -> tuple[int, list[int]]:
    """The exact two-device optimum by minimum cut, and its value without the
    problem's constants. `penalty`: an extra cost per byte placed on (weights,
    copies in, and with `intermediates` each class's largest result) a device,
    for the budget heuristic and its Lagrangian bound."""
    d0, d1 = pair
    unary: list[tuple[int | None, int | None]] = []
    for c, ok in enumerate(problem.allowed):
        costs: list[int | None] = []
        for d in (d0, d1):
            if d not in ok:
                costs.append(None)
                continue
            v = problem.unary[c][d] * weights.per_ns + (0 if d == problem.pref[c] else 1)
            if penalty and d in penalty:
                v += penalty[d] * (problem.weights[c] + (problem.largest[c] if intermediates else 0))
            costs.append(v)
        unary.append((costs[0], costs[1]))
    pairs = []
    for u, v, b, uses in problem.edges:
        # x_v=0 (producer on d0), x_u=1: copy d0->d1; and the reverse.
        c01 = problem.edge_ns(b, d0, d1, uses) * weights.per_ns + uses * weights.per_copy
        c10 = problem.edge_ns(b, d1, d0, uses) * weights.per_ns + uses * weights.per_copy
        if penalty:
            c01 += penalty.get(d1, 0) * b * uses
            c10 += penalty.get(d0, 0) * b * uses
        pairs.append((v, u, c01, c10))
    value, x = two_device_cut(unary, pairs)
    return value, [pair[i] for i in x]


def _encode(
    problem: Problem, weights: Weights, track: bool
) -> tuple[list[str], list[str], dict[str, Any], int]:
    """SMT-LIB for Z3: one Bool per (class, allowed device), exactly one per
    class; soft clauses for every cost term; budgets as linear constraints.
    With `track`, pins, support rules and budgets are guarded by literals
    (for an unsat core) instead of being hard."""
    lines: list[str] = []
    soft: list[str] = []
    guards: dict[str, Any] = {}
    nvars = 0
    k = len(problem.devices)

    def lit(c: int, d: int) -> str:
        return f"b{c}_{d}"

    domain: list[list[int]] = []
    for c, ok in enumerate(problem.allowed):
        dom = list(range(k)) if track else ok
        domain.append(dom)
        for d in dom:
            lines.append(f"(declare-const {lit(c, d)} Bool)")
            nvars += 1
        if len(dom) == 1:
            lines.append(f"(assert {lit(c, dom[0])})")
        else:
            ones = " ".join("1" for _ in dom)
            lines.append(f"(assert ((_ pbeq 1 {ones}) {' '.join(lit(c, d) for d in dom)}))")
        if track and len(ok) < k:
            g = f"g_allow{c}"
            guards[g] = ("allow", c)
            lines.append(f"(declare-const {g} Bool)")
            lines.append(f"(assert (=> {g} (or {' '.join(lit(c, d) for d in ok) or 'false'})))")
        for d in dom:
            cost = problem.unary[c][d] * weights.per_ns + (0 if d == problem.pref[c] else 1)
            if cost > 0 and len(dom) > 1:
                soft.append(f"(assert-soft (not {lit(c, d)}) :weight {cost})")
    for u, v, b, uses in problem.edges:
        for dv in domain[v]:
            for du in domain[u]:
                if du == dv:
                    continue
                cost = problem.edge_ns(b, dv, du, uses) * weights.per_ns + uses * weights.per_copy
                soft.append(f"(assert-soft (not (and {lit(v, dv)} {lit(u, du)})) :weight {cost})")
    for d, budget in problem.budgets.items():
        terms = []
        for c in range(len(problem.allowed)):
            if d in domain[c] and problem.weights[c]:
                terms.append(f"(ite {lit(c, d)} {problem.weights[c]} 0)")
        for u, v, b, uses in problem.edges:
            if d in domain[u]:
                away = [lit(v, e) for e in domain[v] if e != d]
                if away:
                    cond = away[0] if len(away) == 1 else f"(or {' '.join(away)})"
                    terms.append(f"(ite (and {lit(u, d)} {cond}) {b * uses} 0)")
        m = f"m{d}"
        lines.append(f"(declare-const {m} Int)")
        lines.append(f"(assert (>= {m} 0))")
        for c in range(len(problem.allowed)):
            if d in domain[c] and problem.largest[c]:
                lines.append(f"(assert (=> {lit(c, d)} (>= {m} {problem.largest[c]})))")
        fixed = problem.fixed_copy_bytes.get(d, 0)
        total = f"(+ {m} {fixed} {' '.join(terms)})" if terms else f"(+ {m} {fixed})"
        rule = f"(<= {total} {budget})"
        if track:
            g = f"g_budget{d}"
            guards[g] = ("budget", d)
            lines.append(f"(declare-const {g} Bool)")
            lines.append(f"(assert (=> {g} {rule}))")
        else:
            lines.append(f"(assert {rule})")
    return lines, soft, guards, nvars


def _read(model_text: str, problem: Problem) -> list[int]:
    assign = [ok[0] for ok in problem.allowed]
    for name, value in _MODEL_RE.findall(model_text):
        if value == "true":
            c, d = name[1:].split("_")
            assign[int(c)] = int(d)
    return assign


def _z3_optimize(
    problem: Problem, weights: Weights, start: Solution | None, deadline: Deadline
) -> Solution | None:
    """Z3 Optimize (weighted MaxSAT) with half the time left; None when
    infeasible. On time-out: the best plan Z3 or the warm start has (its bound
    is the caller's), or SolverTimeout when there is none."""
    lines, soft, _, nvars = _encode(problem, weights, track=False)
    ctx = z3.Context()
    opt = z3.Optimize(ctx=ctx)
    # Half the time left: the rest is for the rewrite and the TVM-mode prediction.
    opt.set("timeout", max(1, deadline.remaining_ms() // 2))
    opt.from_string("\n".join(lines + soft))
    result = opt.check()
    if result == z3.unsat:
        return None
    if result == z3.sat:
        assign = _read(opt.model().sexpr(), problem)
        value = evaluate(problem, weights, assign)[0]
        return Solution(assign, value, value, "z3", nvars)
    # Time-out: the best model Z3 has, or the warm start; the bound stays the relaxation's.
    best = start
    try:
        model = opt.model()
    except z3.Z3Exception:
        model = None
    if model is not None:
        assign = _read(model.sexpr(), problem)
        if not budget_violations(problem, assign) and all(
            assign[c] in ok for c, ok in enumerate(problem.allowed)
        ):
            value = evaluate(problem, weights, assign)[0]
            if best is None or value < best.objective:
                best = Solution(assign, value, start.lower if start else 0, "z3 (time-out)", nvars)
    if best is None:
        raise SolverTimeout(
            f"Z3 found no plan in the time left ({opt.reason_unknown()})", opt.reason_unknown()
        )
    best.variables = nvars
    best.method = "z3 (time-out)"
    return best


def z3_confirm(problem: Problem, weights: Weights, solution: Solution, timeout_ms: int) -> int:
    """Z3 checks a plan found without it (`z3_check`): the assignment meets
    every hard constraint and budget of the encoding, and Z3's value of the
    objective equals ours. (Proving a cut minimal is the flow's job: Z3 alone
    cannot refute a better plan on a few hundred classes in reasonable time.)
    Returns the number of Z3 variables."""
    lines, soft, _, nvars = _encode(problem, weights, track=False)
    terms = []
    for line in soft:
        clause = line[len("(assert-soft ") : line.rindex(" :weight")]
        weight = line[line.rindex(":weight ") + len(":weight ") : -1]
        terms.append(f"(ite {clause} 0 {weight})")
    ctx = z3.Context()
    checker = z3.Solver(ctx=ctx)
    checker.set("timeout", max(1, timeout_ms))
    checker.from_string(
        "\n".join([*lines, "(declare-const obj Int)", f"(assert (= obj (+ 0 {' '.join(terms)})))"])
    )
    for c, d in enumerate(solution.assign):
        if len(problem.allowed[c]) > 1:
            checker.add(z3.Bool(f"b{c}_{d}", ctx))
    result = checker.check()
    if result == z3.unknown:
        raise SolverTimeout(f"Z3 gave no answer checking the plan ({checker.reason_unknown()})")
    if result == z3.unsat:
        raise RuntimeError("internal error: Z3 finds the optimize plan inconsistent")
    constant = problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy
    for c, ok in enumerate(problem.allowed):
        if len(ok) == 1:
            constant += problem.unary[c][ok[0]] * weights.per_ns + (0 if ok[0] == problem.pref[c] else 1)
    value = checker.model().eval(z3.Int("obj", ctx)).as_long()
    if value + constant != solution.objective:
        raise RuntimeError(
            f"internal error: Z3 values the plan at {value + constant}, not {solution.objective}"
        )
    return nvars


def _relaxation_bound(problem: Problem, weights: Weights) -> int:
    """A lower bound: every class at its cheapest allowed device, no copies."""
    total = problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy
    for c, ok in enumerate(problem.allowed):
        total += min(problem.unary[c][d] * weights.per_ns for d in ok)
    return total


def solve(problem: Problem, weights: Weights, deadline: Deadline) -> Solution | None:
    """The optimum (or on time-out the best plan and a bound); None if infeasible."""
    first = [ok[0] for ok in problem.allowed]
    if all(len(ok) == 1 for ok in problem.allowed):
        if budget_violations(problem, first):
            return None
        value = evaluate(problem, weights, first)[0]
        return Solution(first, value, value, "single choice")
    pair = _two_devices(problem)
    start: Solution | None = None
    if pair is not None:
        _, assign = _cut(problem, weights, pair)
        value = evaluate(problem, weights, assign)[0]
        if not budget_violations(problem, assign):
            # Exact without budgets; with budgets the relaxation's optimum fits, so it is optimal too.
            return Solution(assign, value, value, "min-cut")
        start = _budget_heuristic(problem, weights, pair, assign, value, deadline)
        if start is not None and start.lower >= start.objective:
            return start
    elif not problem.budgets:
        # Three or more devices: every class at its cheapest device is a plan.
        cheapest = [min(ok, key=problem.unary[c].__getitem__) for c, ok in enumerate(problem.allowed)]
        start = Solution(cheapest, evaluate(problem, weights, cheapest)[0], 0, "cheapest")
    found = _z3_optimize(problem, weights, start, deadline)
    if found is not None and found.method == "z3 (time-out)" and found.lower == 0:
        found.lower = _relaxation_bound(problem, weights)
    return found


def _budget_heuristic(
    problem: Problem,
    weights: Weights,
    pair: tuple[int, int],
    relaxed: list[int],
    lower: int,
    deadline: Deadline,
) -> Solution | None:
    """A plan within the budgets: minimum cuts with a growing price per byte on
    the devices the relaxation overfills (Lagrangian style). Its bound is the
    best Lagrangian dual value seen: for a price p >= 0 on the weights and
    copies placed on device d, min(objective + p * (bytes on d - budget of d))
    is below every plan within the budget (whose bytes on d fit)."""
    over = {d for d, _need, _budget in budget_violations(problem, relaxed)}
    constant = problem.fixed_ns * weights.per_ns + problem.fixed_copies * weights.per_copy
    bound = lower

    def trial(scale: int) -> Solution | None:
        nonlocal bound
        deadline.check("optimize")
        prices = {d: scale for d in over}
        value, dual_plan = _cut(problem, weights, pair, prices, intermediates=False)
        fixed = sum(p * (problem.fixed_copy_bytes.get(d, 0) - problem.budgets[d]) for d, p in prices.items())
        bound = max(bound, value + constant + fixed)
        _, assign = _cut(problem, weights, pair, prices)
        # Either cut may fit the budgets (the dual's plan ignores intermediates).
        fits = [a for a in (dual_plan, assign) if not budget_violations(problem, a)]
        if not fits:
            return None
        best_fit = min(fits, key=lambda a: evaluate(problem, weights, a)[0])
        return Solution(best_fit, evaluate(problem, weights, best_fit)[0], bound, "min-cut + budget")

    low, high = 0, 1
    best = trial(high)
    while best is None and high < 1 << 120:
        low, high = high, high * 4
        best = trial(high)
    # Refine: the smallest price that still fits usually moves the fewest classes.
    for _ in range(16):
        if best is None or high - low <= 1:
            break
        mid = (low + high) // 2
        found = trial(mid)
        if found is None:
            low = mid
        else:
            high = mid
            if found.objective < best.objective:
                best = found
    if best is not None:
        best.lower = min(bound, best.objective)
        if best.lower == best.objective:
            best.method = "min-cut + budget (dual bound)"
    return best


def budget_conflict(problem: Problem, built: _Built, ds: DomainSystem, timeout_ms: int) -> PlanningConflict:
    """Explain an infeasible problem with Z3's unsat core over guarded pins, support rules and budgets."""
    weights = Weights.of(problem)
    lines, _, guards, _ = _encode(problem, weights, track=True)
    ctx = z3.Context()
    solver = z3.Solver(ctx=ctx)
    solver.set("timeout", max(1, timeout_ms))
    solver.from_string("\n".join(lines))
    lits = [z3.Bool(g, ctx) for g in guards]
    result = solver.check(*lits)
    constraints: list[ConflictConstraint] = []
    if result == z3.unsat:
        core = {str(x) for x in solver.unsat_core()}
        for g in core:
            what, arg = guards[g]
            if what == "budget":
                p = problem.profiles[arg]
                constraints.append(
                    ConflictConstraint(
                        "memory budget",
                        f"{problem.names[arg]} holds at most {p.memory_bytes} bytes",
                        "",
                        None,
                        [problem.names[arg]],
                    )
                )
            else:
                root = problem.classes[arg]
                for cid, vd in _pins_of(ds, root)[:2]:
                    constraints.append(_constraint(ds, cid, [device_name(vd)]))
    if not constraints:
        constraints = [
            ConflictConstraint(
                "memory budget", f"{problem.names[d]} holds at most {b} bytes", "", None, [problem.names[d]]
            )
            for d, b in problem.budgets.items()
        ]
    lines_text = "; ".join(str(c) for c in constraints)
    return PlanningConflict(
        f"device conflict: no placement satisfies pins, support and budgets: {lines_text}", constraints
    )


# ---------------------------------------------------------------------------
# The pipeline


@dataclass
class Optimized:
    """An optimize-mode plan with its problem (for tests and the report)."""

    result: PlanResult
    problem: Problem
    solution: Solution
    weights: Weights


def plan_optimize(
    module: Module, config: PlanConfig, why: Sequence[Mapping[str, Any]] = (), record: bool = False
) -> PlanResult:
    """Plan `module` in optimize mode (docs/optimize.md); `why`/`record` as in `plan`."""
    return optimize(module, config, why, record).result


def optimize(
    module: Module, config: PlanConfig, why: Sequence[Mapping[str, Any]] = (), record: bool = False
) -> Optimized:
    """Plan `module` in optimize mode; the result with its problem and solution."""
    if isinstance(config.assume_dim, bool) or not isinstance(config.assume_dim, int) or config.assume_dim < 1:
        raise PlanConfigError(f"assume_dim must be a positive integer, got {config.assume_dim!r}")
    devices = resolve_devices(module, config)
    deadline = Deadline(config.timeout_ms, config.clock)
    lap = Laps(deadline)
    times = lap.times
    fr = front(module, config, deadline, copy_inputs=False, devices=devices)
    functions, ds = fr.functions, fr.ds
    typed = dataclasses.replace(module, functions=tuple(functions), expr=None)
    type_of, notes = module_types(typed)
    sizes = Sizes(type_of, config.assume_dim)
    sizes.estimates.extend(notes)
    sizes.run([f for _, f in functions if is_optimizable(f)])
    lap("infer")

    collector = fr.collector(module, deadline, CutCollector)
    assert isinstance(collector, CutCollector)
    collector.is_tensor = lambda e: _is_tensor(sizes, e)
    collect(collector, fr.request_pins)
    ds.logging = False
    lap("collect")

    candidates = candidate_devices(ds, devices.table, [devices.default, devices.host])
    main = next((f for gv, f in functions if gv.name == "main"), None)
    built = build_problem(collector, candidates, devices.default, config, sizes, main)
    problem = built.problem
    lap("build")
    if built.conflicts:
        _, constraints = built.conflicts[0]
        text = "; ".join(str(c) for c in constraints)
        raise PlanningConflict(f"device conflict: pins and operator support disagree: {text}", constraints)
    weights = Weights.of(problem)
    solution = solve(problem, weights, deadline)
    if solution is None:
        raise budget_conflict(problem, built, ds, deadline.remaining_ms())
    lap("solve")
    z3_checked = solution.method.startswith("z3")
    if config.z3_check and not z3_checked:
        solution.variables = z3_confirm(problem, weights, solution, deadline.remaining_ms())
        z3_checked = True
        lap("z3")

    chosen = {problem.classes[c]: d for c, d in enumerate(solution.assign)}
    default_c = ds.canonical(devices.default)
    free_device: dict[int, VirtualDevice] = {}

    def device_of(elem: int) -> VirtualDevice:
        r = ds.find(elem)
        d = chosen.get(r)
        partial = ds.vd[r]
        if d is not None:
            return ds.canonical(partial.join(candidates[d]) or candidates[d])
        found = free_device.get(r)
        if found is None:
            found = free_device[r] = ds.canonical(partial.default_from(default_c))
        return found

    rewriter = Rewriter(collector, device_of)
    out_module, summary = rewrite_module(module, functions, rewriter, devices.ref_table, fr.from_expr)
    lap("rewrite")

    _, ns, copies, nbytes = evaluate(problem, weights, solution.assign)
    report = _report(problem, solution, weights, built, ns, copies, nbytes, times)
    started = time.perf_counter()
    tvm_ms, reason = tvm_mode_prediction(module, config, deadline.remaining_ms())
    report = dataclasses.replace(report, tvm_mode_predicted_ms=tvm_ms, tvm_mode_reason=reason)
    times["tvm mode"] = round((time.perf_counter() - started) * 1000, 3)
    report = dataclasses.replace(report, solver_ms=times.get("solve", 0.0))
    stats = PlanStats(
        classes=len(problem.classes),
        variables=solution.variables,
        hard_constraints=collector.hard_count,
        soft_constraints=0,
        time_ms=times,
        nodes=len(ds.parent),
        z3_checked=z3_checked,
    )
    result = planned_result(out_module, stats, rewriter, summary, cost=report)
    if why or record:
        from .why import explain_optimized, planned_roots

        optimized = Optimized(result, problem, solution, weights)
        planned = planned_roots(functions, fr.from_expr)
        result = explain_optimized(
            result, module, collector, planned, default_c, device_of, optimized, why, record
        )
    return Optimized(result, problem, solution, weights)


def _report(
    problem: Problem,
    solution: Solution,
    weights: Weights,
    built: _Built,
    ns: int,
    copies: int,
    nbytes: int,
    times: Mapping[str, float],
) -> CostReport:
    per: dict[str, list[int]] = {name: [0, 0, 0] for name in problem.names}
    for c, d in enumerate(solution.assign):
        row = per[problem.names[d]]
        row[0] += problem.ops[c]
        row[1] += problem.unary[c][d]
        row[2] += problem.weights[c]
    for u, v, b, uses in problem.edges:
        du, dv = solution.assign[u], solution.assign[v]
        if du != dv:
            per[problem.names[du]][1] += problem.edge_ns(b, dv, du, uses)
    for d, ns_in in problem.fixed_copy_ns.items():
        per[problem.names[d]][1] += ns_in
    per_device = {
        name: DeviceCost(row[0], ns_to_ms(row[1]), row[2])
        for name, row in per.items()
        if row[0] or row[1] or row[2]
    }
    lower_ns = solution.lower // weights.per_ns
    seen: set[tuple[str, str, int | None, int | None]] = set()
    estimates = []
    for e in built.estimates:
        key = (e.kind, e.message, e.span.line if e.span else None, e.span.column if e.span else None)
        if key not in seen:
            seen.add(key)
            estimates.append(e)
    return CostReport(
        predicted_ms=ns_to_ms(ns),
        tvm_mode_predicted_ms=None,
        tvm_mode_reason=None,
        copies=copies,
        bytes_copied=nbytes,
        per_device=per_device,
        optimal=solution.lower >= solution.objective,
        bound_ms=ns_to_ms(min(lower_ns, ns)),
        solver_ms=times.get("solve", 0.0),
        estimates=tuple(estimates),
        method=solution.method,
        classes=len(problem.classes),
        z3_variables=solution.variables,
    )


def tvm_mode_prediction(
    module: Module, config: PlanConfig, timeout_ms: int
) -> tuple[float | None, str | None]:
    """The TVM mode's plan of the same request under the same cost model, or
    (None, reason) when that plan conflicts or violates support or budgets, or
    does not finish in `timeout_ms` (it never fails the optimize plan)."""
    tvm_config = dataclasses.replace(config, mode="tvm", z3_check=False, timeout_ms=max(1, timeout_ms))
    try:
        evaluation = evaluate_planned(module, tvm_config, pins=True)
    except PlanningConflict as err:
        return None, f"the TVM mode's plan conflicts or violates operator support: {err}"
    except SolverTimeout as err:
        return None, f"the TVM mode's plan did not finish in the time left: {err}"
    if evaluation.violations:
        return None, "the TVM mode's plan exceeds the memory budget: " + "; ".join(evaluation.violations)
    return evaluation.predicted_ms, None


@dataclass(frozen=True)
class Evaluation:
    predicted_ms: float
    copies: int
    violations: tuple[str, ...]
    per_device_ops: Mapping[str, int]


def evaluate_planned(planned: Module, config: PlanConfig, pins: bool = False) -> Evaluation:
    """The predicted cost of the TVM mode's plan of `planned` under `config`'s
    cost model: for a module the planner wrote (every device explicit), that
    module's own placement; with `pins`, the request's pins apply too (the
    TVM-mode prediction of a request). Raises PlanningConflict when the plan
    conflicts or places an operator on a device without support."""
    evaluation_config = dataclasses.replace(
        config, mode="optimize", constraints=config.constraints if pins else ()
    )
    optimized = optimize_fixed(planned, evaluation_config)
    problem, assign = optimized
    weights = Weights.of(problem)
    _, ns, copies, _ = evaluate(problem, weights, assign)
    violations = tuple(
        f"{problem.names[d]} needs {need} bytes, budget {budget}"
        for d, need, budget in budget_violations(problem, assign)
    )
    ops: dict[str, int] = {}
    for c, d in enumerate(assign):
        ops[problem.names[d]] = ops.get(problem.names[d], 0) + problem.ops[c]
    return Evaluation(ns_to_ms(ns), copies, violations, ops)


@dataclass
class _TvmPlan:
    collector: Collector
    device_of: Callable[[int], VirtualDevice]
    table: list[Any]
    default: VirtualDevice
    host: VirtualDevice


def _tvm_presolve(module: Module, config: PlanConfig) -> _TvmPlan:
    """The TVM mode's steps 1-5 (planner.py) without the rewrite: the collector
    and each class's device."""
    deadline = Deadline(config.timeout_ms, config.clock)
    fr = front(module, config, deadline)
    collector = fr.collector(module, deadline)
    collect(collector, fr.request_pins)
    choose_defaults(collector, fr.feats.free_on_device or any(p.kind == "op" for p in fr.devices.pins))
    devices = fr.devices
    return _TvmPlan(collector, presolved_devices(fr.ds), devices.table, devices.default, devices.host)


def optimize_fixed(planned: Module, config: PlanConfig) -> tuple[Problem, list[int]]:
    """The problem of a planned module with every class at the device the TVM
    mode gives it (the module's own annotations decide)."""
    internals = _tvm_presolve(planned, dataclasses.replace(config, mode="tvm"))
    device_of: Callable[[int], VirtualDevice] = internals.device_of
    tvm_collector = internals.collector
    # Costs over the TVM collector's classes: operator edges are all hard there,
    # so copies are exactly the module's device_copy calls.
    typed = dataclasses.replace(planned, functions=tuple(tvm_collector.functions), expr=None)
    sizes = Sizes(*_types_only(typed, config))
    sizes.run([f for _, f in tvm_collector.functions if is_optimizable(f)])
    cut = _as_cut(tvm_collector)
    candidates = candidate_devices(tvm_collector.ds, internals.table, [internals.default, internals.host])
    main = next((f for gv, f in tvm_collector.functions if gv.name == "main"), None)
    built = build_problem(cut, candidates, internals.default, config, sizes, main)
    problem = built.problem
    if built.conflicts:
        _, constraints = built.conflicts[0]
        raise PlanningConflict("; ".join(str(c) for c in constraints), constraints)
    assign = []
    for c, root in enumerate(problem.classes):
        vd = device_of(root)
        d = next(
            (i for i, cand in enumerate(candidates) if _fits(cand, vd) or _fits(vd, cand)),
            problem.allowed[c][0],
        )
        assign.append(d)
    for c, d in enumerate(assign):
        if d not in problem.allowed[c]:
            raise PlanningConflict(
                f"operator support: class {c} on {problem.names[d]}",
                [
                    ConflictConstraint(
                        "operator support", f"placed on {problem.names[d]}", "", None, [problem.names[d]]
                    )
                ],
            )
    return problem, assign


def _types_only(module: Module, config: PlanConfig) -> tuple[TypeOf, int]:
    type_of, _ = module_types(module)
    return type_of, config.assume_dim


def _as_cut(collector: Collector) -> CutCollector:
    """View a TVM-mode collector as a CutCollector with no cut edges: its
    operator calls are every primitive operator call it collected."""
    cut = CutCollector.__new__(CutCollector)
    cut.__dict__.update(collector.__dict__)
    nodes = post_order([f for _, f in collector.functions if is_optimizable(f)], enter=not_primitive)
    calls = [n for n in nodes if type(n) is Call and type(n.op) is Op]
    cut.op_calls = [c for c in calls if c.op.name not in _SPECIAL_OPS]  # type: ignore[attr-defined]
    # The copy points of the TVM plan besides device_copy calls: annotations
    # whose result is free (their two classes differ when a copy is needed).
    cut.cut_edges = []
    for call in calls:
        props = on_device_props(call) if call.op.name == "on_device" else None  # type: ignore[attr-defined]
        if props is not None and not props.constrain_result and len(call.args) == 1:
            cut.cut_edges.append((call, call.args[0]))
    return cut
