"""Step 6: each class's device, after the defaults; with `z3_check`, Z3
checks the compacted system and must agree with the presolve."""

from __future__ import annotations

from collections.abc import Callable

from relay.device import VirtualDevice

from ..domains import DomainSystem
from ..solve import ModelResult, check_plan
from .presolve import Defaults


def check_with_z3(
    ds: DomainSystem, defaults: Defaults, timeout_ms: int
) -> tuple[Callable[[int], VirtualDevice], ModelResult]:
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
