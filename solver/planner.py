"""`plan(module, config)`: the pipeline of named steps, top to bottom.

1. `resolve_devices`: the virtual-device table, default/host devices, request pins;
2. `normalise`: on_device normalisation and the conflicting-inputs copies (section 3);
3. `infer_shapes`: which expressions are functions, of what shape (section 2);
4. `collect`: hard constraints into the prioritised union-find (presolve); conflicts
   are explained with Z3 unsat cores (`explain.py`);
5. `choose_defaults`: free on_device unification and TVM's defaulting walk (section 4);
6. `check_with_z3` (only with `PlanConfig.z3_check`): Z3 checks the compacted
   system and must agree with the presolve; otherwise the plan is the presolve's;
7. `rewrite_module`: devices made explicit (section 5).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relay.ast import (
    Attrs,
    Call,
    Expr,
    Function,
    GlobalVar,
    MetaRef,
    Module,
    Op,
    Var,
    on_device,
)
from relay.device import Target, VirtualDevice, device_name
from relay.span import Span
from relay.traverse import children, free_vars, post_order, rewrite

from .collect import Collector, is_optimizable
from .config import PlanConfig, complete_spec, resolve_device, spec_text
from .deadline import Deadline
from .domains import DomainSystem, Incompatible
from .errors import ConflictConstraint, PlanConfigError, PlanningConflict
from .explain import explain_conflict, short_text
from .normalize import InputConflictCrash, copy_conflicting_inputs, rewrite_on_devices
from .optimize.report import CostReport
from .rewrite import Rewriter
from .shapes import infer_shapes
from .solve import ModelResult, check_plan
from .why import ConstraintLog, Explainer, WhyResult, apply_node_pins, check_selector, planned_roots

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanStats:
    """Sizes and timings of one planning run."""

    classes: int
    variables: int | None
    hard_constraints: int
    soft_constraints: int
    time_ms: dict[str, float] = field(default_factory=dict)
    nodes: int = 0
    z3_constraints: int | None = None
    z3_assumptions: int | None = None
    z3_checked: bool = False  # `variables`/`z3_*` are None when the check did not run


@dataclass(frozen=True)
class PlanResult:
    """The planned module and what the planner decided."""

    module: Module
    virtual_devices: list[VirtualDevice]
    stats: PlanStats
    copies: list[tuple[Span | None, VirtualDevice, VirtualDevice]]
    functions: dict[str, dict[str, Any]]
    expressions_by_device: dict[str, int]
    # Optimize mode only: the predicted cost of the plan (None in TVM mode).
    cost: CostReport | None = None
    # `plan(..., why=[selector, ...])`: one result per selector (solver/why.py).
    why: tuple[WhyResult, ...] = ()
    # `plan(..., record_constraints=True)`: the collected constraints (a test hook).
    constraints: ConstraintLog | None = None


# ---------------------------------------------------------------------------
# Step 1: the virtual-device table and meta references


def _build_table(module: Module, config: PlanConfig) -> list[Any]:
    table = list(module.meta.get("VirtualDevice", []) or [])
    for i, spec in enumerate(config.virtual_devices):
        try:
            table.append(complete_spec(spec, table) if not isinstance(spec, VirtualDevice) else spec)
        except PlanConfigError as err:
            raise PlanConfigError(f"virtual_devices[{i}]: {err}") from None
    return table


def _resolve_meta(value: Any, table: list[Any]) -> Any:
    if isinstance(value, MetaRef) and value.kind == "VirtualDevice":
        if not 0 <= value.index < len(table) or not isinstance(table[value.index], VirtualDevice):
            raise PlanConfigError(
                f"meta[VirtualDevice][{value.index}] is not in the virtual device table "
                f"({len(table)} entries); pass --virtual-devices"
            )
        return table[value.index]
    return value


def _resolve_meta_refs(
    functions: list[tuple[GlobalVar, Function]], table: list[Any]
) -> list[tuple[GlobalVar, Function]]:
    """Replace `meta[VirtualDevice][i]` placeholders by the table's devices."""

    def has_ref(node: Expr) -> bool:
        if isinstance(node, Var):
            return isinstance(node.virtual_device, MetaRef)
        if isinstance(node, Function):
            return isinstance(node.virtual_device, MetaRef) or any(
                isinstance(p.virtual_device, MetaRef) for p in node.params
            )
        if isinstance(node, Call) and node.attrs is not None:
            return any(isinstance(v, MetaRef) for _, v in node.attrs.fields)
        return False

    out = []
    for gv, func in functions:
        nodes = post_order(func)
        if not any(has_ref(n) for n in nodes):
            out.append((gv, func))
            continue
        var_map: dict[int, Var] = {}
        for n in nodes:
            if isinstance(n, Function):
                for p in n.params:
                    if isinstance(p.virtual_device, MetaRef):
                        var_map[id(p)] = dataclasses.replace(
                            p, virtual_device=_resolve_meta(p.virtual_device, table)
                        )

        def visit(original: Expr, rebuilt: Expr, var_map: dict[int, Var] = var_map) -> Expr:
            if isinstance(rebuilt, Var):
                return var_map.get(id(original), rebuilt)
            if isinstance(rebuilt, Function):
                params = tuple(var_map.get(id(p), p) for p in rebuilt.params)
                vd = _resolve_meta(rebuilt.virtual_device, table)
                if vd is not rebuilt.virtual_device or any(
                    a is not b for a, b in zip(params, rebuilt.params)
                ):
                    return dataclasses.replace(rebuilt, params=params, virtual_device=vd)
                return rebuilt
            if isinstance(rebuilt, Call) and rebuilt.attrs is not None:
                fields = tuple((k, _resolve_meta(v, table)) for k, v in rebuilt.attrs.fields)
                if any(a[1] is not b[1] for a, b in zip(fields, rebuilt.attrs.fields)):
                    return dataclasses.replace(rebuilt, attrs=Attrs(fields, rebuilt.attrs.type_key))
            return rebuilt

        new = rewrite(func, visit)
        assert isinstance(new, Function)
        out.append((gv, new))
    return out


def _targets(table: list[Any], default: VirtualDevice, host: VirtualDevice) -> dict[int, Target]:
    """The target each device type gets when only its type is known (TVM's primitive targets)."""
    targets: dict[int, Target] = {}
    for vd in [default, *table]:
        if isinstance(vd, VirtualDevice) and vd.device_type is not None and vd.target is not None:
            targets.setdefault(vd.device_type, vd.target)
    if host.device_type is not None and host.target is not None:
        targets.setdefault(host.device_type, host.target)
    return targets


@dataclass
class _Features:
    """What a module contains that makes optional steps necessary."""

    meta_refs: bool = False
    annotations: bool = False  # on_device or device_copy calls
    free_on_device: bool = False


def _function_has_meta_ref(func: Function) -> bool:
    return isinstance(func.virtual_device, MetaRef) or any(
        isinstance(p.virtual_device, MetaRef) for p in func.params
    )


def _scan(functions: list[tuple[GlobalVar, Function]]) -> _Features:
    # Hand-written walk, kept on purpose: `pre_order` plus a loop over its list
    # takes 28-30 ms on a 50k-call chain (100k nodes) where this fused walk
    # takes 19-20 ms (CPU time, best of 7, benchmarks/compare_trees.py trees):
    # the driver would cost about 45% here (issue 9 allows a hand-written walk
    # above 10%).
    feats = _Features()
    seen: set[int] = set()
    for _, func in functions:
        stack: list[Expr] = [func]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            t = type(node)
            if t is Call:
                op = node.op  # type: ignore[attr-defined]
                if type(op) is Op and op.name in ("on_device", "device_copy"):
                    feats.annotations = True
                    attrs = node.attrs  # type: ignore[attr-defined]
                    if (
                        op.name == "on_device"
                        and attrs is not None
                        and not attrs.get("constrain_body", True)
                        and not attrs.get("constrain_result", False)
                    ):
                        feats.free_on_device = True
                attrs = node.attrs  # type: ignore[attr-defined]
                if attrs is not None and any(isinstance(v, MetaRef) for _, v in attrs.fields):
                    feats.meta_refs = True
                stack.append(op)
                stack.extend(node.args)  # type: ignore[attr-defined]
                continue
            if t is Var:
                if isinstance(node.virtual_device, MetaRef):  # type: ignore[attr-defined]
                    feats.meta_refs = True
                continue
            if t is Function and _function_has_meta_ref(node):  # type: ignore[arg-type]
                feats.meta_refs = True
            stack.extend(children(node))
    return feats


# ---------------------------------------------------------------------------
# Request-level constraints


@dataclass(frozen=True)
class _Pin:
    kind: str  # param | function | op | at | node
    k: int
    device: VirtualDevice
    selector: Mapping[str, Any]


def _parse_constraints(config: PlanConfig, table: list[Any]) -> tuple[list[_Pin], list[Any]]:
    pins = []
    for k, entry in enumerate(config.constraints):
        if not isinstance(entry, Mapping) or "select" not in entry or "device" not in entry:
            raise PlanConfigError(
                f"constraint #{k} must be {{'select': {{...}}, 'device': SPEC}}, got {entry!r}"
            )
        select = entry["select"]
        kind = check_selector(select, f"constraint #{k}")
        try:
            device, _, table = resolve_device(entry["device"], table)
        except PlanConfigError as err:
            raise PlanConfigError(f"constraint #{k}: {err}") from None
        pins.append(_Pin(kind, k, device, select))
    return pins, table


def _selector_text(pin: _Pin) -> str:
    return spec_text(dict(pin.selector))


def _apply_op_pins(
    functions: list[tuple[GlobalVar, Function]], pins: list[_Pin]
) -> tuple[list[tuple[GlobalVar, Function]], dict[int, str]]:
    """Wrap the selected operator calls in `on_device(call, d)` (body constrained only)."""
    op_pins = [p for p in pins if p.kind == "op"]
    kinds: dict[int, str] = {}
    if not op_pins:
        return functions, kinds
    counters: Counter[str] = Counter()
    matched: Counter[int] = Counter()
    out = []
    for gv, func in functions:
        if not is_optimizable(func):
            out.append((gv, func))
            continue

        def visit(original: Expr, rebuilt: Expr) -> Expr:
            if not (isinstance(rebuilt, Call) and isinstance(rebuilt.op, Op)):
                return rebuilt
            name = rebuilt.op.name
            index = counters[name]
            counters[name] += 1
            hits = [
                pin
                for pin in op_pins
                if pin.selector["op"] == name and pin.selector.get("index", index) == index
            ]
            if not hits:
                return rebuilt
            first = hits[0]
            for pin in hits:
                matched[pin.k] += 1
                if pin.device != first.device:
                    raise PlanConfigError(
                        f"constraints #{first.k} and #{pin.k} pin the same call of {name} "
                        f"to {device_name(first.device)} and to {device_name(pin.device)}"
                    )
            wrapped = on_device(
                rebuilt, first.device, constrain_body=True, constrain_result=False, span=rebuilt.span
            )
            kinds[id(wrapped)] = f"constraint #{first.k}"
            return wrapped

        new = rewrite(func, visit)
        assert isinstance(new, Function)
        out.append((gv, new))
    for pin in op_pins:
        if not matched[pin.k]:
            raise PlanConfigError(
                f"constraint #{pin.k}: selector {_selector_text(pin)} matches no operator call"
            )
    return out, kinds


def _find_pins(
    functions: list[tuple[GlobalVar, Function]], pins: list[_Pin]
) -> list[tuple[str, Any, VirtualDevice, int]]:
    out: list[tuple[str, Any, VirtualDevice, int]] = []
    by_name = {gv.name: func for gv, func in functions}
    for pin in pins:
        if pin.kind == "param":
            text = str(pin.selector["param"])
            gname, _, pname = text.partition(":")
            gname = gname.lstrip("@")
            pname = pname.lstrip("%")
            func = by_name.get(gname)
            param = next((p for p in func.params if p.name == pname), None) if func is not None else None
            if param is None:
                raise PlanConfigError(
                    f"constraint #{pin.k}: selector {_selector_text(pin)} matches no parameter"
                )
            out.append(("param", param, pin.device, pin.k))
        elif pin.kind == "function":
            gname = str(pin.selector["function"]).lstrip("@")
            func = by_name.get(gname)
            if func is None:
                raise PlanConfigError(
                    f"constraint #{pin.k}: selector {_selector_text(pin)} matches no global function"
                )
            out.append(("function", func, pin.device, pin.k))
    return out


# ---------------------------------------------------------------------------
# The pipeline


def _crash_conflict(err: InputConflictCrash) -> PlanningConflict:
    """TVM 0.19 fails an internal check here; we report it as a conflict."""
    call = err.call
    loc = f"{call.span.line}:{call.span.column}" if call.span is not None else "?"
    constraints = [ConflictConstraint("conflicting inputs", err.args[0], short_text(call), call.span, [])]
    message = f"device conflict: {err.args[0]} at {loc} ({short_text(call)})"
    if err.arg is not None:
        arg = err.arg
        devices = [device_name(err.arg_device)] if err.arg_device is not None else []
        first = f", first on {devices[0]}" if devices else ""
        constraints.append(
            ConflictConstraint(
                "conflicting inputs",
                "argument used on two devices" + first,
                short_text(arg),
                arg.span,
                devices,
            )
        )
        where = f" at {arg.span.line}:{arg.span.column}" if arg.span is not None else ""
        message += f": its argument {short_text(arg)}{where} is used on two devices{first}"
    return PlanningConflict(message, constraints)


def plan(
    module: Module,
    config: PlanConfig | None = None,
    *,
    why: Sequence[Mapping[str, Any]] = (),
    record_constraints: bool = False,
) -> PlanResult:
    """Plan the devices of `module` (device-planning.md, sections 1-5).

    `why`: selectors to explain (`PlanResult.why`, solver/why.py);
    `record_constraints`: keep the collected constraints (`PlanResult.constraints`).
    Raises PlanningConflict (with a minimal explanation), SolverTimeout, or
    PlanConfigError (bad spec or selector).
    """
    # The planner allocates millions of long-lived small objects on big
    # modules; the cyclic collector would rescan them over and over.
    config = config or PlanConfig()
    if config.mode not in ("tvm", "optimize"):
        raise PlanConfigError(f"mode must be 'tvm' or 'optimize', got {config.mode!r}")
    enabled = gc.isenabled()
    gc.disable()
    try:
        if config.mode == "optimize":
            # Imported here: the optimize mode is built from this module's steps.
            from .optimize import plan_optimize

            return plan_optimize(module, config, tuple(why), record_constraints)
        return _plan(module, config, tuple(why), record_constraints)
    finally:
        if enabled:
            gc.enable()


@dataclass
class _Devices:
    """Step 1's result: the tables and the devices the request names."""

    ref_table: list[Any]  # what meta[VirtualDevice][i] in the input refers to
    table: list[Any]  # ref_table plus the default, host and pinned devices
    default: VirtualDevice
    host: VirtualDevice
    pins: list[_Pin]


def resolve_devices(module: Module, config: PlanConfig) -> _Devices:
    """Step 1: the virtual-device table, default and host devices, request pins."""
    if not isinstance(config.timeout_ms, int) or config.timeout_ms <= 0:
        raise PlanConfigError(f"timeout_ms must be a positive integer, got {config.timeout_ms!r}")
    table = _build_table(module, config)
    ref_table = list(table)
    try:
        default, _, table = resolve_device(config.default_device, table)
    except PlanConfigError as err:
        raise PlanConfigError(f"default device: {err}") from None
    try:
        host, _, table = resolve_device(config.host_device, table)
    except PlanConfigError as err:
        raise PlanConfigError(f"host device: {err}") from None
    pins, table = _parse_constraints(config, table)
    return _Devices(ref_table, table, default, host, pins)


def module_functions(module: Module) -> tuple[list[tuple[GlobalVar, Function]], bool]:
    """The global functions to plan, with meta references resolved. A
    single-expression module is planned as TVM's IRModule.from_expr holds it:
    @main over the expression's free variables (the flag says so)."""
    functions = list(module.functions)
    from_expr = False
    if module.expr is not None and not any(gv.name == "main" for gv, _ in functions):
        functions.append(
            (GlobalVar("main"), Function(tuple(free_vars(module.expr)), module.expr, span=module.expr.span))
        )
        from_expr = True
    return functions, from_expr


def normalise(
    functions: list[tuple[GlobalVar, Function]],
    feats: _Features,
    canonical: Callable[[VirtualDevice], VirtualDevice],
    deadline: Deadline | None = None,
    copy_inputs: bool = True,
) -> list[tuple[GlobalVar, Function]]:
    """Step 2 (section 3): on_device normalisation, then (with `copy_inputs`;
    the optimize mode has no such conflicts) the conflicting-inputs copies.
    Without annotations both are the identity and are skipped."""
    if not feats.annotations:
        return functions
    functions = [(gv, rewrite_on_devices(f) if is_optimizable(f) else f) for gv, f in functions]
    if not copy_inputs:
        return functions
    try:
        optimizable = [(gv, f) for gv, f in functions if is_optimizable(f)]
        rewritten, _ = copy_conflicting_inputs(optimizable, canonical, deadline)
    except InputConflictCrash as err:
        raise _crash_conflict(err) from None
    replaced = {gv.name: f for gv, f in rewritten}
    return [(gv, replaced.get(gv.name, f) if is_optimizable(f) else f) for gv, f in functions]


def collect(collector: Collector, request_pins: list[tuple[str, Any, VirtualDevice, int]]) -> None:
    """Step 4: collect the hard constraints into the union-find (presolve);
    a refused join becomes a PlanningConflict with a minimal explanation
    (Z3 gets the time left before the collector's deadline)."""
    try:
        collector.collect(request_pins)
    except Incompatible as err:
        raise explain_conflict(collector.ds, err, collector.deadline.remaining_ms()) from None


@dataclass
class _Defaults:
    hard: dict[int, VirtualDevice]  # presolve class -> device after the hard constraints
    final_root: dict[int, int]  # presolve class -> class after the soft steps
    final: dict[int, VirtualDevice]  # final class -> device chosen


def choose_defaults(collector: Collector, run_free_on_device: bool, log: bool = False) -> _Defaults:
    """Step 5 (section 4): free on_device unification, then TVM's defaulting
    walk; greedy in priority order, which is the lexicographic optimum.
    With `log` the soft steps are logged too (why-queries)."""
    ds = collector.ds
    ds.logging = log
    hard_roots = ds.classes()
    hard = {r: ds.vd[r] for r in hard_roots}
    if run_free_on_device:
        collector.unify_free_on_devices()
    collector.apply_defaults()
    final_root = {r: ds.find(r) for r in hard_roots}
    final = {r: ds.vd[r] for r in set(final_root.values())}
    return _Defaults(hard, final_root, final)


def check_with_z3(
    ds: DomainSystem, defaults: _Defaults, timeout_ms: int
) -> tuple[Callable[[int], VirtualDevice], Any]:
    """Step 6: Z3 checks the compacted system; the plan is read from its model."""
    model = check_plan(defaults.hard, defaults.final_root, defaults.final, timeout_ms)
    for root, vd in model.devices.items():
        if vd != defaults.final[root]:
            raise RuntimeError(f"internal error: Z3 model {vd} differs from presolve {defaults.final[root]}")
    model_devices = model.devices

    def device_of(elem: int) -> VirtualDevice:
        root = ds.find(elem)
        found = model_devices.get(root)
        return found if found is not None else ds.vd[root]

    return device_of, model


def presolved_devices(ds: DomainSystem) -> Callable[[int], VirtualDevice]:
    """Step 6 without Z3: after the defaults every class's device is final, and
    the Z3 check could only confirm it (TVM mode)."""

    def device_of(elem: int) -> VirtualDevice:
        return ds.vd[ds.find(elem)]

    return device_of


def rewrite_module(
    module: Module,
    functions: list[tuple[GlobalVar, Function]],
    rewriter: Rewriter,
    ref_table: list[Any],
    from_expr: bool,
) -> tuple[Module, dict[str, dict[str, Any]]]:
    """Step 7 (section 5): rewrite every optimizable global; the output table is
    the input table followed by the devices the plan introduces."""
    out_functions = []
    summary: dict[str, dict[str, Any]] = {}
    names: dict[int, tuple[Any, str]] = {}

    def name_of(vd: Any) -> str:
        found = names.get(id(vd))
        if found is None:
            found = names[id(vd)] = (vd, device_name(vd))
        return found[1]

    for gv, func in functions:
        if not is_optimizable(func):
            out_functions.append((gv, func))
            continue
        new = rewriter.rewrite_function(func)
        out_functions.append((gv, new))
        if not new.is_primitive:
            summary[gv.name] = {
                "params": [name_of(p.virtual_device) for p in new.params],
                "result": name_of(new.virtual_device),
            }
    out_table = list(ref_table)
    for vd in rewriter.used:
        if vd not in out_table:
            out_table.append(vd)
    meta = dict(module.meta)
    meta["VirtualDevice"] = out_table
    expr = None if from_expr else module.expr
    return dataclasses.replace(module, functions=tuple(out_functions), meta=meta, expr=expr), summary


class Laps:
    """Wall time per step in ms (`times`); each lap also checks the deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.times: dict[str, float] = {}
        self._clock = time.perf_counter()

    def __call__(self, phase: str) -> None:
        now = time.perf_counter()
        self.times[phase] = round((now - self._clock) * 1000, 3)
        self._clock = now
        self.deadline.check(phase)


@dataclass
class Front:
    """Steps 1-3 done: what collection needs (both modes)."""

    devices: _Devices
    functions: list[tuple[GlobalVar, Function]]
    from_expr: bool
    feats: _Features
    ds: DomainSystem
    annotation_kinds: dict[int, str]
    request_pins: list[tuple[str, Any, VirtualDevice, int]]
    shapes: Any

    def collector(self, module: Module, deadline: Deadline, kind: type[Collector] = Collector) -> Collector:
        """A collector over these functions (`kind`: the optimize mode's subclass)."""
        ds, devices = self.ds, self.devices
        return kind(
            module,
            self.functions,
            self.shapes,
            ds,
            ds.canonical(devices.default),
            devices.host,
            self.annotation_kinds,
            deadline,
        )


def front(
    module: Module,
    config: PlanConfig,
    deadline: Deadline,
    copy_inputs: bool = True,
    devices: _Devices | None = None,
) -> Front:
    """Steps 1-3: devices and pins (unless resolved already), meta references,
    normalisation, shapes."""
    if devices is None:
        devices = resolve_devices(module, config)
    functions, from_expr = module_functions(module)
    feats = _scan(functions)
    if feats.meta_refs:
        functions = _resolve_meta_refs(functions, devices.ref_table)
    ds = DomainSystem(_targets(devices.table, devices.default, devices.host))
    functions = normalise(functions, feats, ds.canonical, deadline, copy_inputs)
    functions, node_kinds, converted = apply_node_pins(
        module, functions, devices.pins, planned_roots(functions, from_expr)
    )
    functions, annotation_kinds = _apply_op_pins(functions, devices.pins)
    annotation_kinds.update(node_kinds)
    converted_pins = [_Pin(kind, k, device, sel) for kind, sel, device, k in converted]
    request_pins = _find_pins(functions, [*devices.pins, *converted_pins])
    shapes = infer_shapes(module, [f for _, f in functions], deadline)  # step 3
    for gv, func in functions:
        for param in func.params:
            ds.param_owner[id(param)] = f"@{gv.name}"
    return Front(devices, functions, from_expr, feats, ds, annotation_kinds, request_pins, shapes)


def _plan(
    module: Module, config: PlanConfig, why: tuple[Mapping[str, Any], ...] = (), record: bool = False
) -> PlanResult:
    devices = resolve_devices(module, config)  # checks the request before the clock starts
    for i, selector in enumerate(why):
        check_selector(selector, f"why #{i}")
    deadline = Deadline(config.timeout_ms, config.clock)
    deadline.check("start")
    lap = Laps(deadline)
    fr = front(module, config, deadline, devices=devices)
    functions, feats, ds = fr.functions, fr.feats, fr.ds
    lap("infer")

    collector = fr.collector(module, deadline)
    collect(collector, fr.request_pins)
    lap("collect")

    defaults = choose_defaults(
        collector,
        feats.free_on_device or any(p.kind in ("op", "at", "node") for p in devices.pins),
        log=bool(why) or record,
    )
    lap("presolve")

    model: ModelResult | None = None
    if config.z3_check:
        device_of, model = check_with_z3(ds, defaults, deadline.remaining_ms())
        lap("z3")
    else:
        device_of = presolved_devices(ds)

    rewriter = Rewriter(collector, device_of)
    out_module, summary = rewrite_module(module, functions, rewriter, devices.ref_table, fr.from_expr)
    lap("rewrite")

    stats = PlanStats(
        classes=len(defaults.final_root),
        variables=model.variables if model is not None else None,
        hard_constraints=collector.hard_count,
        soft_constraints=collector.soft_count,
        time_ms=lap.times,
        nodes=len(ds.parent),
        z3_constraints=model.constraints if model is not None else None,
        z3_assumptions=model.assumptions if model is not None else None,
        z3_checked=model is not None,
    )
    answers: tuple[WhyResult, ...] = ()
    log_: ConstraintLog | None = None
    if why or record:
        explainer = Explainer(
            module, collector, planned_roots(functions, fr.from_expr), ds.canonical(devices.default)
        )
        answers = tuple(explainer.answer_selector(s, f"why #{i}") for i, s in enumerate(why))
        log_ = explainer.log() if record else None
    return planned_result(out_module, stats, rewriter, summary, why=answers, constraints=log_)


def planned_result(
    out_module: Module,
    stats: PlanStats,
    rewriter: Rewriter,
    functions: dict[str, dict[str, Any]],
    *,
    cost: CostReport | None = None,
    why: tuple[WhyResult, ...] = (),
    constraints: ConstraintLog | None = None,
) -> PlanResult:
    """The result of either mode: the rewritten module with its device table,
    and the copies and per-device expression counts of the rewriter that made it."""
    return PlanResult(
        module=out_module,
        virtual_devices=[v for v in out_module.meta["VirtualDevice"] if isinstance(v, VirtualDevice)],
        stats=stats,
        copies=rewriter.copies,
        functions=functions,
        expressions_by_device=rewriter.expressions_by_device(),
        cost=cost,
        why=why,
        constraints=constraints,
    )
