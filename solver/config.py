"""Planning configuration and device specs (docs/planning.md, section 1).

A device spec is `"cpu"`, `"cuda"`, `"cuda:1"` or a dict with any of
`device_type`, `virtual_device_id`, `target`, `memory_scope`. Resolving a spec
against a virtual-device table reuses the first entry that agrees with every
field the spec gives, else appends the completed spec.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from relay.device import (
    DEVICE_TYPE_CODES,
    TARGET_KIND_DEVICE,
    Target,
    VirtualDevice,
    canonical_device_name,
    parse_target,
)

from .errors import PlanConfigError

DeviceSpec = str | Mapping[str, Any] | VirtualDevice
Mode = Literal["tvm", "optimize"]
MODES: tuple[Mode, ...] = ("tvm", "optimize")
Language = Literal["relay", "relax"]
OnTimeout = Literal["fail", "best"]
ON_TIMEOUT: tuple[OnTimeout, ...] = ("fail", "best")
LANGUAGES: tuple[Language, ...] = ("relay", "relax")

# The target a device type gets when a spec names only the type.
_DEFAULT_TARGET_KIND: dict[int, str] = {
    1: "llvm",
    2: "cuda",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    10: "rocm",
}


@dataclass(frozen=True)
class PlanConfig:
    """What `plan` needs besides the module.

    `virtual_devices` is the meta[VirtualDevice] table when the module has
    none, appended after the module's own entries when it has one.
    `constraints` are request-level pins: `{"select": {...}, "device": spec}`.
    `z3_check` runs Z3 over the presolved system to confirm a successful TVM-mode
    plan (conflicts always use Z3 for their explanation).
    """

    virtual_devices: tuple[DeviceSpec, ...] = ()
    default_device: DeviceSpec = "cuda"
    host_device: DeviceSpec = "cpu"
    constraints: tuple[Mapping[str, Any], ...] = ()
    # A deadline: the planner's walks check it cooperatively and child solvers
    # are stopped at it; past it, `plan` raises SolverTimeout. It never decides
    # where the optimize search stops (that counts work: solver.work).
    timeout_ms: int = 10_000
    # Optimize mode, at the time limit: "fail" (SolverTimeout, the service's
    # 504) or "best" (the best plan found so far, its cost marked
    # `time_limit_reached`).
    on_timeout: OnTimeout = "fail"
    # TVM mode: also check the greedy plan with Z3 (it cannot change the answer;
    # the tests run it, requests may ask for it).
    z3_check: bool = False
    # Type-check the module before planning, as TVM does (operator
    # names are always checked); False skips the type check.
    check_types: bool = True
    # Optimize mode (docs/optimize.md): "tvm" reproduces TVM's
    # PlanDevices; "optimize" minimises the predicted run time.
    mode: Mode = "tvm"
    # device name ("cpu", "cuda:1") -> operator names it cannot run; the wire
    # form {"unsupported": [...]} is accepted too.
    op_support: Mapping[str, Any] = field(default_factory=dict)
    # device name -> any of peak_gflops, mem_gbps, launch_us, memory_bytes
    device_profiles: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # "cpu->cuda" -> any of gbps, latency_us
    links: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # {"version": 1, "entries": [{"key": solver.cost_key(...), "device": NAME, "ns": N}]}
    cost_table: Mapping[str, Any] | None = None
    # what a symbolic dimension (`?`) counts as in costs and budgets
    assume_dim: int = 1
    # Optimize mode: copies of weights run on a copy stream per link beside
    # compute, prefetched as far ahead as a budget leaves room (docs/optimize.md, memory
    # and overlap); False prices every copy synchronously, as accelerate runs
    # a device map.
    overlap: bool = True
    # The language the module was written in. "relax": the bridge's
    # translation of a Relax module (tvm_bridge/relax_translate.py), whose
    # operator names TVM's Relax registry checked and whose every node states
    # its type from TVM's struct info: the Relay name and type checks are
    # skipped and optimize mode's sizes read the stated types (no Relay
    # inference). Set by the bridge, not a request option.
    language: Language = "relay"
    # The clock `timeout_ms` is measured on (seconds, monotonic); tests inject
    # one to expire the deadline deterministically.
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)

    def __post_init__(self) -> None:
        # A device written `cuda:0` is the device reports call `cuda`: key the
        # per-device fields by the report names once, here, for every consumer.
        for name in ("op_support", "device_profiles"):
            object.__setattr__(self, name, _canonical_keys(getattr(self, name), name))
        object.__setattr__(self, "links", _canonical_keys(self.links, "links", link=True))


def _canonical_keys(mapping: Mapping[str, Any], what: str, link: bool = False) -> Mapping[str, Any]:
    """`mapping` with its device-name keys (`SRC->DST` for links) in report
    form; two keys that name one device are a PlanConfigError."""
    if not mapping:
        return mapping

    def canonical(key: str) -> str:
        if link:
            src, sep, dst = key.partition("->")
            return canonical_device_name(src) + sep + canonical_device_name(dst) if sep else key
        return canonical_device_name(key)

    out: dict[str, Any] = {}
    written: dict[str, str] = {}
    for key, value in mapping.items():
        name = canonical(key) if isinstance(key, str) else key
        if name in out:
            raise PlanConfigError(f"{what}: {written[name]!r} and {key!r} name the same device")
        out[name] = value
        written[name] = key
    return out


def check_config(config: PlanConfig) -> None:
    """What a valid configuration is, checked once before planning (raises
    PlanConfigError): a known `mode`, a positive integer `timeout_ms` and
    `assume_dim`, a boolean `z3_check`, `constraints` of the form
    `{"select": ..., "device": ...}` (selectors and device specs are read
    with the module's device table, `steps.devices`), and the optimize
    fields as objects keyed by device name (`op_support` values list operator
    names or are `{"unsupported": [...]}`). The device names in `op_support`,
    `device_profiles` and `links`, and the profiles' numbers, are checked
    against the module's candidate devices when the optimize problem is
    built (`optimize.problem.device_setup`): they depend on the module."""
    if config.mode not in MODES:
        raise PlanConfigError(f"mode must be 'tvm' or 'optimize', got {config.mode!r}")
    if config.on_timeout not in ON_TIMEOUT:
        raise PlanConfigError(f"on_timeout must be 'fail' or 'best', got {config.on_timeout!r}")
    if (
        isinstance(config.timeout_ms, bool)
        or not isinstance(config.timeout_ms, int)
        or config.timeout_ms <= 0
    ):
        raise PlanConfigError(f"timeout_ms must be a positive integer, got {config.timeout_ms!r}")
    if not isinstance(config.overlap, bool):
        raise PlanConfigError(f"overlap must be true or false, got {config.overlap!r}")
    if isinstance(config.assume_dim, bool) or not isinstance(config.assume_dim, int) or config.assume_dim < 1:
        raise PlanConfigError(f"assume_dim must be a positive integer, got {config.assume_dim!r}")
    if not isinstance(config.z3_check, bool):
        raise PlanConfigError(f"z3_check must be true or false, got {config.z3_check!r}")
    if not isinstance(config.check_types, bool):
        raise PlanConfigError(f"check_types must be true or false, got {config.check_types!r}")
    if config.language not in LANGUAGES:
        raise PlanConfigError(f"language must be 'relay' or 'relax', got {config.language!r}")
    for k, entry in enumerate(config.constraints):
        if not isinstance(entry, Mapping) or "select" not in entry or "device" not in entry:
            raise PlanConfigError(
                f"constraint #{k} must be {{'select': {{...}}, 'device': SPEC}}, got {entry!r}"
            )
    for name in ("op_support", "device_profiles", "links"):
        value = getattr(config, name)
        if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
            raise PlanConfigError(f"{name} must be an object keyed by device name, got {value!r}")
        if name == "op_support":
            continue  # each entry's form is read with the devices (`steps.support.unsupported_by_device`)
        for key, entry in value.items():
            if not isinstance(entry, Mapping):
                raise PlanConfigError(f"{name}.{key} must be an object, got {entry!r}")
    if config.cost_table is not None and not isinstance(config.cost_table, Mapping):
        raise PlanConfigError("cost_table: expected {'version': 1, 'entries': [...]}")


@dataclass(frozen=True)
class _PartialSpec:
    device_type: int | None
    virtual_device_id: int | None
    target: Target | None  # only the attributes the spec gave
    target_text: str | None
    memory_scope: str | None


def _device_type_code(value: Any) -> int:
    if isinstance(value, bool):
        raise PlanConfigError(f"bad device_type {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise PlanConfigError(f"bad device_type {value!r}")
        return value
    if isinstance(value, str):
        code = DEVICE_TYPE_CODES.get(value.strip().lower())
        if code is not None:
            return code
        if value.strip().isdigit():
            return int(value.strip())
    raise PlanConfigError(f"unknown device type {value!r}")


def _target_from_text(text: str) -> tuple[Target, str]:
    """The target a spec's string names, holding only the attributes it gives."""
    try:
        return parse_target(text, complete=False), text
    except ValueError as exc:
        raise PlanConfigError(str(exc)) from None


def _target_from_json(obj: Mapping[str, Any]) -> tuple[Target, str]:
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        raise PlanConfigError(f"target object without a kind: {json.dumps(obj)}")
    attrs: list[tuple[str, Any]] = []
    words = [kind]
    for key, value in obj.items():
        if key in ("kind", "keys", "host", "tag"):
            continue
        if isinstance(value, list):
            value = tuple(value)
        attrs.append((key, value))
        text_value = ",".join(str(v) for v in value) if isinstance(value, tuple) else str(value)
        words.append(f"-{key}={text_value}")
    keys = tuple(obj.get("keys", ()) or ())
    if keys:
        words.append("-keys=" + ",".join(keys))
    return Target(kind, keys, tuple(attrs)), " ".join(words)


def _parse_spec(spec: DeviceSpec) -> _PartialSpec:
    if isinstance(spec, VirtualDevice):
        return _PartialSpec(spec.device_type, spec.virtual_device_id, spec.target, None, spec.memory_scope)
    if isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise PlanConfigError("empty device spec")
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise PlanConfigError(f"bad device spec {spec!r}: {exc}") from None
            return _parse_spec(obj)
        name, _, ident = text.partition(":")
        code = _device_type_code(name)
        vid: int | None = None
        if ident:
            if not ident.strip().isdigit():
                raise PlanConfigError(f"bad device id in spec {spec!r}")
            vid = int(ident)
        return _PartialSpec(code, vid, None, None, None)
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"device_type", "virtual_device_id", "target", "memory_scope"}
        if unknown:
            raise PlanConfigError(f"unknown device spec field(s) {sorted(unknown)} in {dict(spec)!r}")
        device_type: int | None = (
            _device_type_code(spec["device_type"]) if spec.get("device_type") is not None else None
        )
        vid = spec.get("virtual_device_id")
        if vid is not None and (isinstance(vid, bool) or not isinstance(vid, int) or vid < 0):
            raise PlanConfigError(f"bad virtual_device_id {vid!r}")
        target = None
        target_text = None
        raw_target = spec.get("target")
        if isinstance(raw_target, str):
            target, target_text = _target_from_text(raw_target)
        elif isinstance(raw_target, Mapping):
            target, target_text = _target_from_json(raw_target)
        elif raw_target is not None:
            raise PlanConfigError(f"bad target {raw_target!r}")
        if target is not None:
            implied = TARGET_KIND_DEVICE.get(target.kind)
            if device_type is None:
                device_type = implied
            elif implied is not None and implied != device_type:
                raise PlanConfigError(f"target {target.kind} does not run on device type {device_type}")
        scope = spec.get("memory_scope")
        if scope is not None and not isinstance(scope, str):
            raise PlanConfigError(f"bad memory_scope {scope!r}")
        if scope == "":
            scope = None
        if device_type is None and vid is None and target is None and scope is None:
            raise PlanConfigError(f"device spec {dict(spec)!r} names nothing")
        return _PartialSpec(device_type, vid, target, target_text, scope)
    raise PlanConfigError(f"bad device spec {spec!r}")


def _agrees(entry: Any, spec: _PartialSpec) -> bool:
    if not isinstance(entry, VirtualDevice):
        return False
    if spec.device_type is not None and entry.device_type != spec.device_type:
        return False
    if spec.virtual_device_id is not None and entry.virtual_device_id != spec.virtual_device_id:
        return False
    if spec.memory_scope is not None and entry.memory_scope != spec.memory_scope:
        return False
    if spec.target is not None:
        if entry.target is None or not entry.target.agrees_with(spec.target):
            return False
        if spec.target.keys and entry.target.keys != spec.target.keys:
            return False
    return True


def _host_target(table: Sequence[Any]) -> Target | None:
    """The host target the table's targets name (TVM's config host), if any."""
    for entry in table:
        if isinstance(entry, VirtualDevice) and entry.target is not None:
            host = entry.target.host
            if host is not None and host.device_type == 1:
                return host
    return None


def complete_spec(spec: DeviceSpec, table: Sequence[Any] = ()) -> VirtualDevice:
    """The full virtual device a spec names when no table entry agrees with it."""
    if isinstance(spec, VirtualDevice):
        return spec
    part = _parse_spec(spec)
    if part.device_type is None:
        raise PlanConfigError(f"device spec {spec!r} names no device type or target")
    target: Target | None
    if part.target_text is not None:
        try:
            target = parse_target(part.target_text)
        except ValueError as exc:
            raise PlanConfigError(str(exc)) from None
    else:
        kind = _DEFAULT_TARGET_KIND.get(part.device_type)
        if kind is None:
            target = None
        elif kind == "llvm" and _host_target(table) is not None:
            target = _host_target(table)
        else:
            target = parse_target(kind)
    vid = part.virtual_device_id if part.virtual_device_id is not None else 0
    return VirtualDevice(part.device_type, vid, target, part.memory_scope)


def resolve_device(spec: DeviceSpec, table: Sequence[Any] = ()) -> tuple[VirtualDevice, int, list[Any]]:
    """Resolve `spec` against `table`: (virtual device, its index, the table).

    The first entry agreeing with every field the spec gives is reused;
    otherwise the completed spec is appended (the returned table is a new
    list; the argument is not modified). Raises PlanConfigError on a bad spec.
    """
    part = _parse_spec(spec)
    entries = list(table)
    for index, entry in enumerate(entries):
        if _agrees(entry, part):
            return entry, index, entries
    device = complete_spec(spec, entries)
    for index, entry in enumerate(entries):
        if entry == device:
            return entry, index, entries
    entries.append(device)
    return device, len(entries) - 1, entries


def spec_text(spec: DeviceSpec) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, VirtualDevice):
        return str(spec)
    return json.dumps(dict(spec), sort_keys=True)
