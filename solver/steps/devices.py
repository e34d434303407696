"""Step 1: the virtual-device table, the default and host devices, and the
request's pins, resolved against the table (device-planning.md, section 1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.ast import Module
from relay.device import Target, VirtualDevice

from ..config import PlanConfig, complete_spec, resolve_device
from ..errors import PlanConfigError
from ..selectors import Pin, Selector


@dataclass(frozen=True)
class Devices:
    """Step 1's result: the tables and the devices the request names."""

    ref_table: list[Any]  # what meta[VirtualDevice][i] in the input refers to
    table: list[Any]  # ref_table plus the default, host and pinned devices
    default: VirtualDevice
    host: VirtualDevice
    pins: list[Pin]

    def targets(self) -> dict[int, Target]:
        """The target each device type gets when only its type is known (TVM's primitive targets)."""
        targets: dict[int, Target] = {}
        for vd in [self.default, *self.table]:
            if isinstance(vd, VirtualDevice) and vd.device_type is not None and vd.target is not None:
                targets.setdefault(vd.device_type, vd.target)
        if self.host.device_type is not None and self.host.target is not None:
            targets.setdefault(self.host.device_type, self.host.target)
        return targets


def _build_table(module: Module, config: PlanConfig) -> list[Any]:
    table = list(module.meta.get("VirtualDevice", []) or [])
    for i, spec in enumerate(config.virtual_devices):
        try:
            table.append(complete_spec(spec, table) if not isinstance(spec, VirtualDevice) else spec)
        except PlanConfigError as err:
            raise PlanConfigError(f"virtual_devices[{i}]: {err}") from None
    return table


def parse_pins(config: PlanConfig, table: list[Any]) -> tuple[list[Pin], list[Any]]:
    """The request's `constraints` as pins; the table grows by the devices they name."""
    pins = []
    for k, entry in enumerate(config.constraints):
        if not isinstance(entry, Mapping) or "select" not in entry or "device" not in entry:
            raise PlanConfigError(
                f"constraint #{k} must be {{'select': {{...}}, 'device': SPEC}}, got {entry!r}"
            )
        selector = Selector.parse(entry["select"], f"constraint #{k}")
        try:
            device, _, table = resolve_device(entry["device"], table)
        except PlanConfigError as err:
            raise PlanConfigError(f"constraint #{k}: {err}") from None
        pins.append(Pin(selector, device, k))
    return pins, table


def resolve_devices(module: Module, config: PlanConfig) -> Devices:
    """Step 1: the virtual-device table, default and host devices, request pins."""
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
    pins, table = parse_pins(config, table)
    return Devices(ref_table, table, default, host, pins)
