"""Step 1: the virtual-device table, the default and host devices, and the
request's pins, resolved against the table (docs/planning.md, section 1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from relay.ast import Module
from relay.device import Target, VirtualDevice, parse_target

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


# Device types whose targets TVM's CompilationConfig lets act as the host (kDLCPU, kDLHexagon).
_HOSTING_DEVICE_TYPES = (1, 14)


@dataclass(frozen=True)
class PrimitiveDevices:
    """Devices compared as TVM's CompilationConfig compares its targets.

    CompilationConfig settles on one host target, itself without a host, and
    sets it as the host of every primitive target, overriding the host a
    target came with (`Target(raw_target, host_target)`). Within one
    compilation the host field never tells two devices apart, so two virtual
    devices that differ only in their target's host are one device: the
    metadata's cpu as TVM writes it (llvm with an llvm host) and a request's
    `cpu` (llvm without a host, the config's host target) are the same
    candidate. The optimize problem's candidates are compared in this form;
    the TVM mode keeps every device exactly as written.
    """

    host_target: Target
    _cache: dict[int, tuple[VirtualDevice, VirtualDevice]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @staticmethod
    def of(devices: Iterable[object]) -> PrimitiveDevices:
        """The host target CompilationConfig picks from these devices' targets:
        the host of the first target that has one; else the first target of a
        device type that can host (cpu); else a default llvm target."""
        targets = [vd.target for vd in devices if isinstance(vd, VirtualDevice) and vd.target is not None]
        host = next((t.host for t in targets if t.host is not None), None)
        if host is None:
            host = next((t for t in targets if t.device_type in _HOSTING_DEVICE_TYPES), None)
        if host is None:
            host = parse_target("llvm")
        return PrimitiveDevices(_without_host(host))

    def canonical(self, vd: VirtualDevice) -> VirtualDevice:
        """`vd` with the config's host target as its target's host (unchanged without a target)."""
        found = self._cache.get(id(vd))
        if found is not None and found[0] is vd:
            return found[1]
        out = vd
        target = vd.target
        if target is not None and target.host != self.host_target:
            out = dataclasses.replace(vd, target=dataclasses.replace(target, host=self.host_target, raw=None))
        self._cache[id(vd)] = (vd, out)  # holds vd, so its id is not reused while cached
        return out

    def same(self, a: VirtualDevice, b: VirtualDevice) -> bool:
        """Whether `a` and `b` are one device of the compilation."""
        return a is b or self.canonical(a) == self.canonical(b)

    def compatible(self, a: VirtualDevice, b: VirtualDevice) -> bool:
        """`VirtualDevice.compatible` of the canonical forms."""
        return self.canonical(a).compatible(self.canonical(b))

    def fits(self, partial: VirtualDevice, candidate: VirtualDevice) -> bool:
        """Whether a class's partial device can become `candidate`."""
        want = self.canonical(candidate)
        return self.canonical(partial).join(want) == want


def _without_host(target: Target) -> Target:
    return target if target.host is None else dataclasses.replace(target, host=None, raw=None)


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
