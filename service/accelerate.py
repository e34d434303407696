"""accelerate's device maps, in and out.

accelerate (`infer_auto_device_map`, `from_pretrained(device_map="auto")`)
describes an offloaded model as a dict from module names to where each
module's weights are stored: a GPU index (`0`, `1`, or `"cuda:1"`), `"cpu"`
or `"disk"`. `dispatch_model` executes it so (accelerate 1.x):

- the main device is the map's GPU of the lowest index (a map from
  `infer_auto_device_map` lists it first); a map that names no GPU runs on
  the cpu;
- a module mapped to a GPU runs there, with its weights resident;
- a module mapped to `"cpu"` or `"disk"` runs on the main device, its weights
  copied in before its forward and dropped after, on every forward pass, and
  the copy is synchronous (nothing else runs meanwhile); `"disk"` weights are
  read from disk first (`DeviceProfile.disk_read_gbps`);
- operators of no module (the model's own forward: rotary tables, masks)
  run on the main device; activations follow the modules, copied where two
  consecutive modules run on different devices.

Map in (`read_map`, `placement`): a request's `accelerate_device_map` as a
placement of the planner's nodes: every weight stored where its entry says
(`param`-like node pins; `"disk"` stored on the cpu and its read priced
apart) and every operator on the device `dispatch_model` runs it on (node
pins), so the plan *is* the map as accelerate executes it, priced by the
same cost model with copies synchronous (`overlap: false`).

Map out (`plan_map`): a plan's weights and operators read back as such a
map: each module's entry is where its weights are stored. Where the plan
runs a module's operator somewhere `dispatch_model` would not (on the cpu
while its weights live on a GPU, on the cpu with a GPU in the map, on a GPU
that is not its weights' nor the main device) the map cannot express the
plan: the answer says `accelerate_expressible: false` and which modules are
at fault. Operators of no module that the plan runs off the main device are
listed apart (`accelerate_outside_modules`): accelerate runs them on the main
device whatever the map says, so no entry could express them, and they are
small (the rotary tables and masks of a decoder).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.device_map import (
    KIND_CALL,
    KIND_OPERATOR,
    KIND_PARAMETER,
    FunctionParams,
    membership,
    weight_names,
)
from service.module_names import (
    SOURCE_PARAMETERS,
    ModuleNames,
    dotted_module,
    is_dotted,
    map_owners,
    module_names,
)

CPU = "cpu"
DISK = "disk"
CUDA = "cuda"
AS_IS = "as-is"
AS_STORAGE = "storage"
MAP_AS = (AS_IS, AS_STORAGE)
_GPU = re.compile(r"cuda(?::(\d+))?")
_INTEGER = re.compile(r"\d+")
# How many names an error lists before "and N more".
_LISTED = 5


class MapError(ValueError):
    """A device map that cannot be read: `entry` is the map's key at fault
    (None when the fault is a weight no entry covers)."""

    def __init__(self, message: str, entry: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.entry = entry


# ---------------------------------------------------------------------------
# Devices


def device_of(value: Any) -> str:
    """An accelerate device (`0`, `"cuda:1"`, `"cpu"`, `"disk"`) as a device
    name of ours (`cuda`, `cuda:1`, `cpu`, `disk`); ValueError for others."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return CUDA if value == 0 else f"{CUDA}:{value}"
    if isinstance(value, str):
        if value in (CPU, DISK):
            return value
        found = _GPU.fullmatch(value)
        if found is not None:
            index = int(found.group(1) or 0)
            return CUDA if index == 0 else f"{CUDA}:{index}"
    raise ValueError(f"{value!r} is not an accelerate device (a GPU index, 'cuda[:N]', 'cpu' or 'disk')")


def is_gpu(device: str) -> bool:
    return _GPU.fullmatch(device.split(" ", 1)[0]) is not None


def gpu_index(device: str) -> int:
    found = _GPU.fullmatch(device.split(" ", 1)[0])
    assert found is not None, device
    return int(found.group(1) or 0)


def accelerate_value(device: str) -> int | str:
    """A device name of ours as accelerate writes it: a GPU as its index,
    `"cpu"`, `"disk"` (a name with a target or scope by its kind and id)."""
    if is_gpu(device):
        return gpu_index(device)
    return device.split(" ", 1)[0].split(":", 1)[0]


def main_device(devices: Iterable[str]) -> str:
    """Where `dispatch_model` runs what is not on a GPU of its own: the GPU of
    the lowest index among `devices`, else the cpu."""
    gpus = sorted({d for d in devices if is_gpu(d)}, key=gpu_index)
    return gpus[0] if gpus else CPU


# ---------------------------------------------------------------------------
# Map in


@dataclass(frozen=True, slots=True)
class HandedMap:
    """A request's device map, read against the module's weights."""

    entries: Mapping[str, str]  # module -> device name (`disk` kept)
    names: ModuleNames  # each weight's entry
    main: str  # the main device
    notices: tuple[str, ...] = ()

    def storage(self, weight: str) -> str:
        """Where the weight is stored (`disk` kept)."""
        return self.entries[self.names.of(weight)]

    def execution(self, module: str | None) -> str:
        """Where `dispatch_model` runs a module's operators (None: the model's own)."""
        if module is None:
            return self.main
        device = self.entries[module]
        return device if is_gpu(device) else self.main


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_LISTED])
    return shown + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def read_map(raw: Mapping[str, Any], weights: Sequence[str], devices: Iterable[str]) -> HandedMap:
    """Read an accelerate map against the module's weight names and the
    request's devices. Raises MapError naming the entry (or the weights) at
    fault: a device that is not accelerate's or not the request's, a module
    the model does not have, a weight no entry covers.

    An entry that covers no weight is accepted, with a notice, when it can be
    a weightless module of the model (rotary tables, activations): a child of
    a module that owns weights, and not a numbered block (an 8-layer model
    has no `model.layers.12`)."""
    known = set(devices)
    entries: dict[str, str] = {}
    for entry, value in raw.items():
        try:
            device = device_of(value)
        except ValueError as err:
            raise MapError(f"accelerate_device_map[{entry!r}]: {err}", entry) from None
        if device != DISK and device not in known:
            raise MapError(
                f"accelerate_device_map[{entry!r}]: {value!r} is the device {device}, which the request does not "
                f"have (its devices: {', '.join(sorted(known))}); add it to `virtual_devices`",
                entry,
            )
        entries[entry] = device
    owners = map_owners(entries, weights)
    unassigned = [w for w, o in owners.items() if o is None]
    if unassigned:
        modules = module_names(weights)
        missing = list(dict.fromkeys(modules.of(w) for w in unassigned))
        raise MapError(
            f"accelerate_device_map assigns no device to the weights of {_listed(missing)} "
            f"({len(unassigned)} weight{'s' if len(unassigned) != 1 else ''}: {_listed(unassigned)}); "
            "add an entry for each module (or \"\" for the whole model)"
        )
    owning = set(owners.values())
    notices: list[str] = []
    dotted = is_dotted(weights)
    for entry in entries:
        if entry in owning:
            continue
        if _covers_any(entry, weights, dotted):
            continue  # a module whose weights its more specific entries place
        parent, _, leaf = entry.rpartition(".")
        if entry and leaf and not _INTEGER.fullmatch(leaf) and (parent == "" or _covers_any(parent, weights, dotted)):
            notices.append(
                f"accelerate_device_map[{entry!r}]: the module owns no weight here "
                "(its operators, if any, run with the modules around them)"
            )
            continue
        raise MapError(f"accelerate_device_map[{entry!r}]: the model has no module {entry!r} (it matches no weight)", entry)
    names = ModuleNames("request", {w: o for w, o in owners.items() if o is not None})
    return HandedMap(entries, names, main_device(entries.values()), tuple(notices))


def _covers_any(entry: str, weights: Sequence[str], dotted: bool) -> bool:
    from service.module_names import covers

    return any(covers(entry, w, dotted) for w in weights)


@dataclass(frozen=True, slots=True)
class MapPlacement:
    """A map as the planner's nodes: each weight's storage device (`disk`
    stored on the cpu) and each operator's device, by node id."""

    devices: Mapping[int, str]  # node -> device: weights and operators
    disk_bytes: int  # weights read from disk on each forward pass
    disk_weights: tuple[str, ...] = ()

    def pins(self) -> list[dict[str, Any]]:
        """Node pins, in node order."""
        return [{"select": {"node": node}, "device": device} for node, device in sorted(self.devices.items())]


def placement(
    handed: HandedMap, placements: Sequence[Mapping[str, Any]], params: Sequence[FunctionParams]
) -> MapPlacement:
    """Where `dispatch_model` stores every weight and runs every operator
    (`placements`: the module's placements without devices, inputs before
    readers)."""
    member = membership(placements, params, handed.names)
    sizes = {n: s for f in params for n, s in zip(f.names, f.sizes)}
    devices: dict[int, str] = {}
    disk: list[str] = []
    for p in placements:
        node = int(p["node"])
        kind = p["kind"]
        if kind == KIND_PARAMETER:
            weight = member.weight_of.get(node)
            if weight is None:
                continue
            stored = handed.storage(weight)
            if stored == DISK:
                disk.append(weight)
                stored = CPU
            devices[node] = stored
        elif kind in (KIND_OPERATOR, KIND_CALL):
            devices[node] = handed.execution(member.module_of.get(node))
    return MapPlacement(devices, sum(sizes.get(w) or 0 for w in disk), tuple(disk))


# ---------------------------------------------------------------------------
# Map out


@dataclass(frozen=True, slots=True)
class Fault:
    """A module whose operators the map cannot place where the plan does."""

    module: str  # "" for operators of no module (the model's own forward)
    operators: int
    plan_device: str
    accelerate_device: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "operators": self.operators,
            "plan_device": self.plan_device,
            "accelerate_device": self.accelerate_device,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class PlanMap:
    """A plan as an accelerate map."""

    device_map: Mapping[str, int | str]
    names: str  # where the module names came from (ModuleNames.source)
    main: str
    faults: tuple[Fault, ...] = ()
    # Operators of no module (the model's own forward: rotary tables, masks) the plan
    # runs off the main device: accelerate runs them there. No module is at fault, so
    # they do not make the map inexpressible; the answer lists them apart.
    outside: tuple[Fault, ...] = ()

    @property
    def expressible(self) -> bool:
        return not self.faults

    def to_json(self) -> dict[str, Any]:
        """The answer's fields (`accelerate_device_map`, `accelerate_expressible`, ...)."""
        return {
            "accelerate_device_map": dict(self.device_map),
            "accelerate_expressible": self.expressible,
            "accelerate_at_fault": [f.to_json() for f in self.faults],
            "accelerate_outside_modules": [f.to_json() for f in self.outside],
            "accelerate_names": self.names,
            "accelerate_main_device": accelerate_value(self.main),
        }


@dataclass
class _Module:
    weights: list[str] = field(default_factory=list)
    stored: dict[str, int] = field(default_factory=dict)  # device -> bytes


def plan_map(
    placements: Sequence[Mapping[str, Any]],
    params: Sequence[FunctionParams],
    names: ModuleNames | None = None,
    disk: Iterable[str] = (),
) -> PlanMap:
    """The plan given by `placements` (with devices) as an accelerate map.
    `names`: the weights' modules (default: read off their names); `disk`:
    weights the plan reads from disk (a map handed in stored them there).

    Each module's entry is where its weights are stored. A module whose
    weights are stored on several devices gets one entry per submodule where
    the weights carry dotted names (`model.layers.3.mlp.up_proj`); with
    inferred names it keeps one entry (the device holding most of its bytes)
    and is at fault."""
    weights = weight_names(params)
    if names is None:
        names = module_names(weights)
    on_disk = set(disk)
    sizes = {n: s or 0 for f in params for n, s in zip(f.names, f.sizes)}
    member = membership(placements, params, names)
    stored_at: dict[str, str] = {}
    for p in placements:
        weight = member.weight_of.get(int(p["node"])) if p["kind"] == KIND_PARAMETER else None
        if weight is not None:
            stored_at[weight] = DISK if weight in on_disk else str(p["device"])
    modules: dict[str, _Module] = {m: _Module() for m in names.order()}
    for w in weights:
        m = modules[names.of(w)]
        m.weights.append(w)
        device = stored_at.get(w, CPU)
        m.stored[device] = m.stored.get(device, 0) + sizes.get(w, 0)
    entries: dict[str, str] = {}  # map key -> device
    module_entry: dict[str, str] = {}  # weight -> its map key
    faults: list[Fault] = []
    for name, m in modules.items():
        if len(m.stored) <= 1 or names.source != SOURCE_PARAMETERS:
            device = max(m.stored.items(), key=lambda kv: kv[1])[0] if m.stored else CPU
            entries[name] = device
            module_entry.update({w: name for w in m.weights})
            if len(m.stored) > 1:
                listed = ", ".join(sorted(m.stored))
                faults.append(
                    Fault(name, 0, listed, device, f"its weights are stored on {listed}; accelerate stores a module "
                          f"on one device, and the names are {names.source}, so no submodule can be named apart")
                )
            continue
        for w in m.weights:
            sub = _submodule(w)
            entries[sub] = stored_at.get(w, CPU)
            module_entry[w] = sub
    main = main_device(entries.values())
    split = ModuleNames(names.source, module_entry)
    handed = HandedMap(entries, split, main)
    member = membership(placements, params, split)
    wrong: dict[tuple[str, str, str], int] = {}
    for p in placements:
        if p["kind"] not in (KIND_OPERATOR, KIND_CALL):
            continue
        module = member.module_of.get(int(p["node"]))
        expected = handed.execution(module)
        actual = str(p["device"])
        if actual != expected:
            key = (module or "", actual, expected)
            wrong[key] = wrong.get(key, 0) + 1
    outside: list[Fault] = []
    for (module, actual, expected), count in wrong.items():
        stored = entries.get(module) if module else None
        fault = Fault(module, count, actual, expected, _reason(module, stored, actual, expected, main))
        (faults if module else outside).append(fault)
    value_map = {k: accelerate_value(v) for k, v in entries.items()}
    return PlanMap(value_map, names.source, main, tuple(faults), tuple(outside))


def _submodule(weight: str) -> str:
    """A dotted weight's own module (its name without the leaf)."""
    name = weight.lstrip("%")
    head, _, _ = name.rpartition(".")
    return head or dotted_module(name)


def _reason(module: str, stored: str | None, actual: str, expected: str, main: str) -> str:
    """Why accelerate cannot run these operators where the plan does."""
    ops = "its operators" if module else "operators of no module (the model's own forward)"
    if stored is None:
        return (
            f"the plan runs {ops} on {actual}; accelerate runs them on the main device {expected}, "
            "which the map cannot change (its price differs by their time there)"
        )
    if is_gpu(stored):
        return (
            f"the plan runs {ops} on {actual} while its weights live on {stored}; "
            f"accelerate runs a module on the GPU that holds its weights"
        )
    if actual == CPU:
        return (
            f"the plan runs {ops} on the cpu, where its weights are stored; with a GPU in the map accelerate "
            f"copies {stored} weights to the main device {main} and runs the module there"
        )
    return (
        f"the plan runs {ops} on {actual} with its weights streamed from {stored}; accelerate streams "
        f"{stored} weights to the main device {main} only"
    )


def module_placements(module: Any, naming: Any) -> list[dict[str, Any]]:
    """The placements of a module before planning (node, kind, name,
    function, index, inputs; no device), as the record lists them."""
    from relay.ast import Call
    from service.record import PlacementGraph

    graph = PlacementGraph(module, naming)
    out: list[dict[str, Any]] = []
    for g in graph.nodes:
        n = graph.expr_of[g.node]
        inputs: list[int] = []
        if isinstance(n, Call):
            for arg in n.args:
                for src, _ in graph.sources(n, arg):
                    if src not in inputs:
                        inputs.append(src)
        out.append(
            {"node": g.node, "kind": g.kind, "name": g.name, "function": g.function, "index": g.index, "inputs": inputs}
        )
    return out


# ---------------------------------------------------------------------------
# A request's map, end to end


def spec_name(spec: Any) -> str | None:
    """A device spec's report name (`cuda:0` -> `cuda`), None when it names no type."""
    import relay

    if isinstance(spec, str):
        return relay.canonical_device_name(spec.strip())
    if isinstance(spec, Mapping):
        kind = spec.get("device_type")
        if isinstance(kind, int) and not isinstance(kind, bool):
            kind = relay.device_type_name(kind)
        if not isinstance(kind, str):
            return None
        index = spec.get("virtual_device_id")
        return kind if index in (None, 0) else f"{kind}:{index}"
    return None


def request_devices(config: Any) -> list[str]:
    """The devices a request names: its virtual devices, default and host device."""
    specs = [*config.virtual_devices, config.default_device, config.host_device]
    return list(dict.fromkeys(n for n in (spec_name(s) for s in specs) if n is not None))


def memory_budgets(config: Any) -> dict[str, int]:
    """The request's memory budgets, per device name."""
    out: dict[str, int] = {}
    for name, profile in config.device_profiles.items():
        budget = profile.get("memory_bytes")
        if budget is not None:
            out[str(name)] = int(budget)
    return out


@dataclass(frozen=True, slots=True)
class Handing:
    """A request's map read against its module: the planner's config that
    prices it (`as-is`) or plans within its storage (`storage`), and what the
    answer says about it."""

    handed: HandedMap
    placement: MapPlacement
    config: Any  # solver.PlanConfig: what the request plans
    taken_as: str
    budgets: Mapping[str, int]
    as_is: Any = None  # solver.PlanConfig pricing the map as-is (`config` itself when taken as-is)

    def answer(self, cost: Mapping[str, Any] | None, disk_gbps: float) -> dict[str, Any]:
        """The answer's `accelerate_input`: the map's price as-is (`cost`: the
        as-is plan's cost; the disk reads added), peak memory per device and
        whether it fits the request's budgets."""
        disk_ms = self.placement.disk_bytes / (disk_gbps * 1e6) if self.placement.disk_bytes else 0.0
        out: dict[str, Any] = {
            "as": self.taken_as,
            "main_device": accelerate_value(self.handed.main),
            "disk_bytes": self.placement.disk_bytes,
            "disk_read_ms": round(disk_ms, 6),
            "memory_budgets": dict(self.budgets),
        }
        if cost is None:
            return out
        peaks = peak_memory(cost)
        over = {d: b for d, b in self.budgets.items() if peaks.get(d, 0) > b}
        out["peak_memory_bytes"] = peaks
        out["predicted_ms"] = round(float(cost["predicted_ms"]) + disk_ms, 6)
        out["fits"] = not over
        out["over_budget"] = {d: {"peak_bytes": peaks[d], "budget_bytes": b} for d, b in over.items()}
        return out


def peak_memory(cost: Mapping[str, Any]) -> dict[str, int]:
    """Peak bytes per device of a priced plan: the cost's `peak_memory_bytes`
    where the cost model gives it, else the weights placed on each device."""
    given = cost.get("peak_memory_bytes")
    if isinstance(given, Mapping):
        return {str(d): int(b) for d, b in given.items()}
    return {str(d): int(c.get("weight_bytes", 0)) for d, c in cost.get("per_device", {}).items()}


def hand_in(module: Any, naming: Any, config: Any, raw: Mapping[str, Any], taken_as: str) -> Handing:
    """Read the request's map against the planner's module (`module`, named
    by `naming`) and make the config that plans it: `as-is` pins every
    weight and operator where `dispatch_model` puts them, prices copies
    synchronously and lifts the budgets (a map over a budget is priced and
    marked as not fitting); `storage` pins the weights only and keeps the
    request's mode and budgets. Raises MapError."""
    import dataclasses

    from service.device_map import function_params

    if taken_as not in MAP_AS:
        raise MapError(f"accelerate_device_map_as: {taken_as!r} is not one of {', '.join(MAP_AS)}")
    if taken_as == AS_STORAGE and config.mode != "optimize":
        raise MapError('accelerate_device_map_as "storage" plans within the map\'s storage: it needs mode "optimize"')
    params = function_params(module)
    handed = read_map(raw, weight_names(params), request_devices(config))
    placements = module_placements(module, naming)
    placed = placement(handed, placements, params)
    budgets = memory_budgets(config)
    pins = placed.pins()
    profiles = {
        name: {k: v for k, v in profile.items() if k != "memory_bytes"} for name, profile in config.device_profiles.items()
    }
    fields: dict[str, Any] = {"constraints": (*config.constraints, *pins), "mode": "optimize",
                              "device_profiles": profiles}
    if any(f.name == "overlap" for f in dataclasses.fields(config)):
        fields["overlap"] = False
    as_is = dataclasses.replace(config, **fields)
    if taken_as == AS_IS:
        return Handing(handed, placed, as_is, taken_as, budgets, as_is)
    kinds = {p["node"]: p["kind"] for p in placements}
    stored = [p for p in pins if kinds.get(p["select"]["node"]) == KIND_PARAMETER]
    planned = dataclasses.replace(config, constraints=(*config.constraints, *stored))
    return Handing(handed, placed, planned, taken_as, budgets, as_is)


def disk_read_gbps(config: Any) -> float:
    """The host's disk read bandwidth: its profile's `disk_read_gbps`, else the default."""
    from solver.optimize.cost_model import DEFAULT_DISK_READ_GBPS

    host = spec_name(config.host_device) or CPU
    value = (config.device_profiles.get(host) or {}).get("disk_read_gbps")
    return float(value) if value is not None else DEFAULT_DISK_READ_GBPS


def record_accelerate_map(record: Any, names: ModuleNames | None = None, disk: Iterable[str] = ()) -> PlanMap:
    """The plan of a placement record as an accelerate map."""
    from service.device_map import function_params

    return plan_map(record.placements_json(), function_params(record.module), names, disk)
