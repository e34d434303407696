"""Steps 1-5, shared by TVM mode, optimize mode and the TVM-mode prediction:
`presolve(module, config)` resolves the devices, prepares the functions,
collects the hard constraints into the union-find and (TVM mode) applies the
soft steps: free on_device unification and TVM's defaulting walk."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from relay.ast import Module
from relay.device import VirtualDevice

from ..collect import Collector, RequestPin
from ..config import PlanConfig
from ..deadline import Deadline
from ..domains import DomainSystem, Incompatible
from ..explain.conflicts import explain_conflict
from .devices import Devices, resolve_devices
from .laps import Laps
from .prepare import Front, front

MakeCollector = Callable[[Front], Collector]


def collect(collector: Collector, request_pins: list[RequestPin]) -> None:
    """Step 4: collect the hard constraints into the union-find (presolve);
    a refused join becomes a PlanningConflict with a minimal explanation
    (Z3 gets the time left before the collector's deadline)."""
    try:
        collector.collect(request_pins)
    except Incompatible as err:
        raise explain_conflict(collector.ds, err, collector.deadline.remaining_ms()) from None


@dataclass(frozen=True)
class Defaults:
    """Step 5's result, what the Z3 check reads."""

    hard: dict[int, VirtualDevice]  # presolve class -> device after the hard constraints
    final_root: dict[int, int]  # presolve class -> class after the soft steps
    final: dict[int, VirtualDevice]  # final class -> device chosen


def needs_free_unification(fr: Front) -> bool:
    """Whether step 5 unifies free on_devices: only when the module has one.
    (Pins wrap their expression in a body-constrained on_device, never a free
    one; the two presolves' old tests of pin kinds, `("op", "at", "node")` in
    the planner and `"op"` in the TVM-mode prediction, could not change a plan.)"""
    return fr.feats.free_on_device


def choose_defaults(collector: Collector, run_free_on_device: bool) -> Defaults:
    """Step 5 (section 4): free on_device unification, then TVM's defaulting
    walk; greedy in priority order, which is the lexicographic optimum."""
    ds = collector.ds
    hard_roots = ds.classes()
    hard = {r: ds.vd[r] for r in hard_roots}
    if run_free_on_device:
        collector.unify_free_on_devices()
    collector.apply_defaults()
    final_root = {r: ds.find(r) for r in hard_roots}
    final = {r: ds.vd[r] for r in set(final_root.values())}
    return Defaults(hard, final_root, final)


@dataclass(frozen=True)
class Presolved:
    """Steps 1-5 done: the prepared functions, the collector holding the
    union-find, and (when the soft steps ran) the defaults."""

    front: Front
    collector: Collector
    defaults: Defaults | None

    @property
    def devices(self) -> Devices:
        return self.front.devices

    @property
    def ds(self) -> DomainSystem:
        return self.front.ds


def presolve(
    module: Module,
    config: PlanConfig,
    deadline: Deadline,
    *,
    devices: Devices | None = None,
    laps: Laps | None = None,
    make_collector: MakeCollector | None = None,
    copy_inputs: bool = True,
    soft_steps: bool = True,
    log_soft_steps: bool = False,
) -> Presolved:
    """Steps 1-5 of a plan.

    `devices`: step 1's result when the caller resolved it already (to check
    the request before the clock starts). `make_collector`: the collector for
    the prepared functions (the optimize mode's cuttable one); `copy_inputs`:
    insert TVM's conflicting-inputs copies (the optimize mode has none);
    `soft_steps`: run step 5 (TVM mode and its prediction), logging its facts
    for explanations with `log_soft_steps`. Laps "infer", "collect" and
    "presolve" are recorded on `laps`.
    """
    if devices is None:
        devices = resolve_devices(module, config)
    fr = front(module, devices, deadline, copy_inputs)
    collector = make_collector(fr) if make_collector is not None else fr.collector(module, deadline)
    if laps is not None:
        laps("infer")
    collect(collector, fr.request_pins)
    # Hard facts are always logged (conflicts are explained from them); the
    # soft steps' only when something reads them.
    fr.ds.logging = soft_steps and log_soft_steps
    if laps is not None:
        laps("collect")
    defaults = None
    if soft_steps:
        defaults = choose_defaults(collector, needs_free_unification(fr))
        if laps is not None:
            laps("presolve")
    return Presolved(fr, collector, defaults)
