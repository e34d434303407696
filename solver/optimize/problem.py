"""The optimisation problem over the presolved classes, and how a collected
module becomes one.

The union-find classes of the hard constraints are the decision variables.
`build_problem` assembles them in four steps, one function each: kernel costs
per class (`_kernels`, each call costed by `kernel_costs`), weight bytes
(`_weight_bytes`), cuttable edges (`_edges`) and each class's allowed devices
(`_allowed`); input `device_copy` calls with both ends fixed are constants.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import relay
from relay.ast import Call, Constant, Expr, Function, Op, TensorType
from relay.device import VirtualDevice, device_name
from relay.traverse import not_primitive, post_order

from ..collect import SPECIAL_OPS, Collector, is_optimizable
from ..config import PlanConfig
from ..domains import DomainSystem
from ..errors import PlanConfigError
from ..steps.devices import PrimitiveDevices
from ..steps.support import unsupported_by_device
from .cost_model import (
    VIEWS,
    CostTable,
    DeviceProfile,
    KernelPart,
    KernelWork,
    LinkProfile,
    check_link_names,
    copy_ns,
    cost_key,
    device_profile,
    link_profile,
    op_bytes,
    op_part,
    work_ns,
)
from .cut_collector import Cuts
from .memory import Liveness, liveness, peak_memory
from .sizes import Estimate, Sizes, dtype_bytes

Edge = tuple[int, int, int, int]  # (consumer class, producer class, bytes, uses)


@dataclass(frozen=True)
class Problem:
    """The optimisation problem over the presolved classes.

    Devices are indices into `devices`. `allowed[c]` lists the devices class c
    may take; `unary[c][d]` its kernel time there (ns); `edges` are
    (consumer class, producer class, bytes, uses); `links[s][t]` prices a copy
    (see `edge_ns`). Budgets: `weight_bytes[c]` bytes of parameters and
    constants in c, `largest[c]` its largest intermediate (or copy the module
    makes itself into it); the memory rule is `memory`'s.
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
    edges: list[Edge]
    weight_bytes: list[int]
    largest: list[int]
    budgets: dict[int, int]
    fixed_ns: int = 0  # input device_copy calls (fixed both ends)
    fixed_copies: int = 0
    # destination -> bytes of the module's own copies (held at their class's step: `largest`)
    fixed_copy_bytes: dict[int, int] = field(default_factory=dict)
    fixed_copy_ns: dict[int, int] = field(default_factory=dict)  # destination -> ns
    # how the devices compare (`steps.devices.PrimitiveDevices`); None: as written
    primitive: PrimitiveDevices | None = None

    def compatible(self, partial: VirtualDevice, d: int) -> bool:
        """Whether a partial device and `devices[d]` agree where both are constrained."""
        if self.primitive is None:
            return partial.compatible(self.devices[d])
        return self.primitive.compatible(partial, self.devices[d])

    def edge_ns(self, nbytes: int, src: int, dst: int, uses: int) -> int:
        return _edge_ns(self.links, nbytes, src, dst, uses)

    @functools.cached_property
    def liveness(self) -> Liveness:
        """The order the classes run in and what liveness needs of it
        (`memory.Liveness`; computed once per problem)."""
        return liveness(self)


def _edge_ns(
    links: Sequence[Sequence[LinkProfile | None]], nbytes: int, src: int, dst: int, uses: int
) -> int:
    link = links[src][dst]
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


@dataclass(frozen=True)
class Solution:
    """An assignment (class -> device index) with its objective, a lower bound
    on the optimum, how it was found and how many Z3 variables were used."""

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
    """(device, peak bytes, budget) for every device whose budget the plan's
    peak memory by liveness (`memory.peak_memory`) exceeds."""
    if not problem.budgets:
        return []
    peak = peak_memory(problem, assign)
    return [(d, peak.get(d, 0), budget) for d, budget in problem.budgets.items() if peak.get(d, 0) > budget]


def identical_devices(problem: Problem) -> list[list[int]]:
    """Groups of interchangeable devices: same profile and budget, the same
    links to every other device and between themselves both ways, and for
    every class the same support and kernel cost."""
    k = len(problem.devices)

    def same(a: int, b: int) -> bool:
        if problem.profiles[a] != problem.profiles[b] or problem.budgets.get(a) != problem.budgets.get(b):
            return False
        if problem.links[a][b] != problem.links[b][a]:
            return False
        for o in range(k):
            if o not in (a, b) and (
                problem.links[a][o] != problem.links[b][o] or problem.links[o][a] != problem.links[o][b]
            ):
                return False
        return all(
            (a in ok) == (b in ok) and problem.unary[c].get(a) == problem.unary[c].get(b)
            for c, ok in enumerate(problem.allowed)
        )

    groups: list[list[int]] = []
    seen: set[int] = set()
    for a in range(k):
        if a in seen:
            continue
        group = [a, *(b for b in range(a + 1, k) if b not in seen and same(a, b))]
        seen.update(group)
        if len(group) > 1:
            groups.append(group)
    return groups


# ---------------------------------------------------------------------------
# Building the problem


def candidate_devices(
    ds: DomainSystem,
    table: Sequence[object],
    extra: Sequence[VirtualDevice],
    primitive: PrimitiveDevices | None = None,
) -> list[VirtualDevice]:
    """The devices a class may take: the table's and the request's, canonical,
    once each. Two that are one device of the compilation (`primitive`, by
    default the form of `table` and `extra`: they differ only in their
    target's host) are one candidate, the first as written."""
    if primitive is None:
        primitive = PrimitiveDevices.of([*table, *extra])
    out: list[VirtualDevice] = []
    for vd in [*table, *extra]:
        if isinstance(vd, VirtualDevice) and not vd.is_fully_unconstrained:
            c = ds.canonical(vd)
            if not any(primitive.same(c, o) for o in out):
                out.append(c)
    return out


def fits(partial: VirtualDevice, candidate: VirtualDevice) -> bool:
    """Whether a class's partial device can become `candidate`."""
    return partial.join(candidate) == candidate


@dataclass(frozen=True)
class DeviceSetup:
    """The candidate devices with their names, profiles, links, budgets,
    measured table and unsupported operators (all from the request)."""

    candidates: list[VirtualDevice]
    names: list[str]
    profiles: list[DeviceProfile]
    links: list[list[LinkProfile | None]]
    budgets: dict[int, int]
    table: CostTable
    unsupported: dict[str, frozenset[str]]
    assume_dim: int
    primitive: PrimitiveDevices


def device_setup(
    candidates: list[VirtualDevice], config: PlanConfig, primitive: PrimitiveDevices | None = None
) -> DeviceSetup:
    """Read and check the request's per-device settings against the candidates
    (`primitive`: how they compare, by default the candidates' own form)."""
    if primitive is None:
        primitive = PrimitiveDevices.of(candidates)
    names = [device_name(vd) for vd in candidates]
    _check_names_differ(candidates, names, primitive)
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
    unsupported = unsupported_by_device(config.op_support or {}, names)
    table = CostTable.from_document(config.cost_table)
    budgets = {i: p.memory_bytes for i, p in enumerate(profiles) if p.memory_bytes is not None}
    return DeviceSetup(
        candidates, names, profiles, links, budgets, table, unsupported, config.assume_dim, primitive
    )


def _check_names_differ(
    candidates: Sequence[VirtualDevice], names: Sequence[str], primitive: PrimitiveDevices
) -> None:
    """Every candidate has its own name (per-device settings, reports and
    pictures are keyed by it). Two devices the name cannot tell apart differ
    in what `device_name` leaves out (target keys or tag): a PlanConfigError
    saying what differs."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        j = first.setdefault(name, i)
        if j == i:
            continue
        a, b = primitive.canonical(candidates[j]), primitive.canonical(candidates[i])
        raise PlanConfigError(
            f"two candidate devices are both named {name!r} but differ in {_difference(a, b)}; "
            "give one of them another virtual_device_id or a distinguishing target attribute"
        )


def _difference(a: VirtualDevice, b: VirtualDevice) -> str:
    """What tells two same-named devices apart, in words."""
    ta, tb = a.target, b.target
    if ta is not None and tb is not None:
        parts = []
        if ta.keys != tb.keys:
            parts.append(f"target keys ({','.join(ta.keys) or 'none'} vs {','.join(tb.keys) or 'none'})")
        if ta.tag != tb.tag:
            parts.append(f"target tag ({ta.tag or 'none'} vs {tb.tag or 'none'})")
        mine, theirs = ta.attr_dict, tb.attr_dict
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key, "<unset>") != theirs.get(key, "<unset>"):
                parts.append(
                    f"target attribute {key} ({mine.get(key, '<unset>')!r} vs {theirs.get(key, '<unset>')!r})"
                )
        if parts:
            return ", ".join(parts)
    return f"{a} vs {b}"


def primitive_function(call: Call) -> Function | None:
    """The fused function a call applies (`Primitive=1`), else None."""
    fn = call.op
    return fn if isinstance(fn, Function) and fn.is_primitive else None


def kernel_ops(call: Call) -> list[Call]:
    """The operator calls a kernel computes: an operator call itself, or
    every operator call of a fused function's body (a device must support
    them all; a conflict names the one it lacks, where it is)."""
    fn = primitive_function(call)
    if fn is None:
        return [call] if isinstance(call.op, Op) else []
    return [
        n
        for n in post_order([fn.body])
        if type(n) is Call and type(n.op) is Op and n.op.name not in SPECIAL_OPS
    ]


# Operators whose arithmetic the model cannot know: a translated Relax
# module's `call_tir`, `call_dps_packed`, packed calls and calls of PrimFuncs
# (tvm_bridge/relax_translate.py names them `relax.call...`).
OPAQUE_PREFIX = "relax.call"


def _operator_part(call: Call, sizes: Sizes, assume_dim: int) -> KernelPart:
    name = call.op.name  # type: ignore[attr-defined]
    arg_types = [sizes.type(a) for a in call.args]
    out_type = sizes.type(call)
    if name.startswith(OPAQUE_PREFIX):
        sizes.estimates.append(
            Estimate(
                "no flops formula",
                f"{name}: an opaque kernel, costed as elementwise over its largest tensor",
                call.span,
            )
        )
    # FLOPs without a formula's inputs: one per element of the largest known tensor.
    itemsize = dtype_bytes(out_type.dtype) if isinstance(out_type, TensorType) else 4
    unknown = max(sizes.of(call), max((sizes.of(a) for a in call.args), default=0)) // itemsize
    return op_part(name, arg_types, out_type, call.attrs, assume_dim, unknown)


def kernel_work(call: Call, sizes: Sizes, assume_dim: int) -> KernelWork:
    """What one kernel does: an operator call's arithmetic and the bytes it
    moves (`op_bytes`: its arguments and result, less for a gather or a
    view), or a fused function's body operators together (one kernel), with
    the bytes of the call's own arguments and result."""
    args = [sizes.of(a) for a in call.args]
    fn = primitive_function(call)
    if fn is None:
        name = call.op.name if isinstance(call.op, Op) else ""
        moved = op_bytes(name, args, sizes.of(call))
        return KernelWork((_operator_part(call, sizes, assume_dim),), moved)
    moved = sizes.of(call) + sum(args)
    return KernelWork(tuple(_operator_part(n, sizes, assume_dim) for n in kernel_ops(call)), moved)


def kernel_costs(call: Call, sizes: Sizes, setup: DeviceSetup) -> list[int]:
    """The time (ns) of one kernel on each candidate device: a primitive
    operator call, or a call of a fused (`Primitive`) function, which is one
    kernel. The measured table's entry for an operator call's cost key, else
    the cost model's `work_ns` of its class-rated roofline. (The one place a
    kernel is costed.)"""
    work = kernel_work(call, sizes, setup.assume_dim)
    key = None
    if isinstance(call.op, Op):
        key = cost_key(call.op.name, [sizes.type(a) for a in call.args], call.attrs)
    per_device = []
    for d, dev_name in enumerate(setup.names):
        measured = setup.table.lookup(key, dev_name) if key is not None else None
        per_device.append(measured if measured is not None else work_ns(work, setup.profiles[d]))
    return per_device


class _Classes:
    """Dense class indices for the union-find roots met while building."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.index: dict[int, int] = {}
        self.roots: list[int] = []

    def of_elem(self, elem: int) -> int:
        r = self.collector.ds.find(elem)
        found = self.index.get(r)
        if found is None:
            found = self.index[r] = len(self.roots)
            self.roots.append(r)
        return found

    def of(self, expr: Expr) -> int:
        return self.of_elem(self.collector.ds.result_of(self.collector.dom(expr)))


@dataclass(frozen=True)
class _Kernels:
    unary: dict[int, dict[int, int]]
    forbidden: dict[int, list[tuple[int, Call]]]  # class -> (device, call without support)
    per_call: dict[int, list[int]]  # id(call) -> ns per device
    ops: dict[int, int]
    largest: dict[int, int]


def _kernels(collector: Cuts, classes: _Classes, sizes: Sizes, setup: DeviceSetup) -> _Kernels:
    """Each class's summed kernel time per device, operator count, largest
    result, and the calls a device cannot run."""
    unary: dict[int, dict[int, int]] = {}
    forbidden: dict[int, list[tuple[int, Call]]] = {}
    per_call: dict[int, list[int]] = {}
    ops: dict[int, int] = {}
    largest: dict[int, int] = {}
    for call in [*collector.op_calls, *collector.primitive_calls]:
        c = classes.of(call)
        per_device = kernel_costs(call, sizes, setup)
        # A fused kernel needs every operator of its body: each one a device
        # lacks is a support rule at that operator.
        for op_call in kernel_ops(call):
            name = op_call.op.name  # type: ignore[attr-defined]
            for d, dev_name in enumerate(setup.names):
                if name in setup.unsupported.get(dev_name, ()):
                    forbidden.setdefault(c, []).append((d, op_call))
        per_call[id(call)] = per_device
        row = unary.setdefault(c, {})
        for d, ns in enumerate(per_device):
            row[d] = row.get(d, 0) + ns
        ops[c] = ops.get(c, 0) + 1
        if not (isinstance(call.op, Op) and call.op.name in VIEWS):  # a view allocates nothing
            largest[c] = max(largest.get(c, 0), sizes.of(call))
    return _Kernels(unary, forbidden, per_call, ops, largest)


def _weight_bytes(collector: Cuts, classes: _Classes, sizes: Sizes, main: Function | None) -> dict[int, int]:
    """Bytes of @main's parameters and of every constant, per class."""
    weights: dict[int, int] = {}
    seen: set[int] = set()

    def add(expr: Expr) -> None:
        if id(expr) in seen:
            return
        seen.add(id(expr))
        c = classes.of(expr)
        weights[c] = weights.get(c, 0) + sizes.of(expr)

    if main is not None:
        for p in main.params:
            add(p)
    # Constants at cut edges, then those of hard edges. Both ends of every cut
    # edge get their class index here, in walk order, so that class numbering
    # (and with it every tie-break of the solvers) is that of one walk.
    for call, arg in collector.cut_edges:
        classes.of(call)
        classes.of(arg)
        if isinstance(arg, Constant):
            add(arg)
    for call in collector.op_calls:
        for a in call.args:
            if isinstance(a, Constant):
                add(a)
    return weights


def _edges(collector: Cuts, classes: _Classes, sizes: Sizes) -> list[Edge]:
    """The cuttable edges between different classes, merged per class pair."""
    edge_map: dict[tuple[int, int], list[int]] = {}
    for call, arg in collector.cut_edges:
        u, v = classes.of(call), classes.of(arg)
        if u == v:
            continue
        entry = edge_map.setdefault((u, v), [0, 0])
        entry[0] += sizes.of(arg)
        entry[1] += 1
    return [(u, v, b, k) for (u, v), (b, k) in edge_map.items()]


@dataclass(frozen=True)
class SupportFailure:
    """A class no candidate device may take: its pins and annotations leave
    `fits`, and operator support forbids each of those."""

    cls: int
    root: int
    partial: VirtualDevice
    fits: list[int]
    forbidden: list[tuple[int, Call]]


def _allowed(
    ds: DomainSystem,
    roots: Sequence[int],
    candidates: Sequence[VirtualDevice],
    forbidden: Mapping[int, list[tuple[int, Call]]],
    default: VirtualDevice,
    primitive: PrimitiveDevices,
) -> tuple[list[list[int]], list[int], list[SupportFailure]]:
    """Each class's allowed devices (pins and support), its preferred one
    (TVM's default where allowed), and the classes left with none."""
    allowed: list[list[int]] = []
    pref: list[int] = []
    failures: list[SupportFailure] = []
    default_c = ds.canonical(default)
    for c, r in enumerate(roots):
        partial = ds.vd[r]
        fitting = [d for d, vd in enumerate(candidates) if primitive.fits(partial, vd)]
        banned = {d for d, _ in forbidden.get(c, ())}
        ok = [d for d in fitting if d not in banned]
        if not ok:
            failures.append(SupportFailure(c, r, partial, fitting, list(forbidden.get(c, []))))
            ok = fitting or list(range(len(candidates)))
        allowed.append(ok)
        want = next((d for d in ok if primitive.same(candidates[d], default_c)), None)
        if want is None:
            want = next((d for d in ok if primitive.compatible(candidates[d], default_c)), ok[0])
        pref.append(want)
    return allowed, pref, failures


@dataclass(frozen=True)
class _FixedCopies:
    ns: int = 0
    copies: int = 0
    copy_bytes: dict[int, int] = field(default_factory=dict)
    copy_ns: dict[int, int] = field(default_factory=dict)
    results: list[tuple[Call, int]] = field(default_factory=list)  # (device_copy call, bytes)


def _fixed_copies(collector: Collector, setup: DeviceSetup, sizes: Sizes) -> _FixedCopies:
    """The module's own `device_copy` calls between two candidate devices."""
    ds = collector.ds
    candidates = setup.candidates
    total_ns = copies = 0
    copy_bytes: dict[int, int] = {}
    copy_ns_to: dict[int, int] = {}
    results: list[tuple[Call, int]] = []
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
            si = next((i for i, vd in enumerate(candidates) if setup.primitive.fits(src, vd)), None)
            di = next((i for i, vd in enumerate(candidates) if setup.primitive.fits(dst, vd)), None)
            if si is None or di is None or si == di:
                continue
            b = sizes.of(node.args[0])
            ns = _edge_ns(setup.links, b, si, di, 1)
            total_ns += ns
            copy_ns_to[di] = copy_ns_to.get(di, 0) + ns
            copies += 1
            copy_bytes[di] = copy_bytes.get(di, 0) + b
            results.append((node, b))
    return _FixedCopies(total_ns, copies, copy_bytes, copy_ns_to, results)


@dataclass(frozen=True)
class Built:
    """A built problem with what explaining and reporting it needs."""

    problem: Problem
    failures: list[SupportFailure]
    estimates: list[Estimate]
    sizes: Sizes
    kernels: dict[int, list[int]]  # id(call) -> ns per device


def build_problem(
    cuts: Cuts,
    candidates: list[VirtualDevice],
    default: VirtualDevice,
    config: PlanConfig,
    sizes: Sizes,
    main: Function | None,
    primitive: PrimitiveDevices | None = None,
) -> Built:
    """Classes, allowed devices, costs, edges and budgets of a collected module
    (`primitive`: how the candidates compare, as `candidate_devices` compared them)."""
    setup = device_setup(candidates, config, primitive)
    collector = cuts.collector
    classes = _Classes(collector)
    kernels = _kernels(cuts, classes, sizes, setup)
    weights = _weight_bytes(cuts, classes, sizes, main)
    edges = _edges(cuts, classes, sizes)
    # Every class that appears gets a full row; other classes are read by
    # `device_of` with the default rule.
    n = len(classes.roots)
    allowed, pref, failures = _allowed(
        collector.ds, classes.roots, candidates, kernels.forbidden, default, setup.primitive
    )
    unary = []
    for c in range(n):
        row = dict(kernels.unary.get(c, {}))
        for d in range(len(candidates)):
            row.setdefault(d, 0)
        unary.append(row)
    fixed = _fixed_copies(collector, setup, sizes)
    # A copy the module makes itself is a result of the class it belongs to
    # (memory: held at that class's step, as its largest result if bigger).
    largest = [kernels.largest.get(c, 0) for c in range(n)]
    for node, nbytes in fixed.results:
        held = classes.index.get(collector.ds.find(collector.ds.result_of(collector.dom(node))))
        if held is not None:
            largest[held] = max(largest[held], nbytes)
    problem = Problem(
        devices=candidates,
        names=setup.names,
        profiles=setup.profiles,
        links=setup.links,
        classes=classes.roots,
        allowed=allowed,
        unary=unary,
        ops=[kernels.ops.get(c, 0) for c in range(n)],
        pref=pref,
        edges=edges,
        weight_bytes=[weights.get(c, 0) for c in range(n)],
        largest=largest,
        budgets=setup.budgets,
        fixed_ns=fixed.ns,
        fixed_copies=fixed.copies,
        fixed_copy_bytes=fixed.copy_bytes,
        fixed_copy_ns=fixed.copy_ns,
        primitive=setup.primitive,
    )
    return Built(problem, failures, sizes.estimates, sizes, kernels.per_call)
