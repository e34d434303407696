"""The device-map view of a plan: which device each module of a model runs
on, the modules named as accelerate's `device_map` names them
(`model.layers.3`; service/module_names.py has the naming rules).

A model's modules are not in the IR; they are read off its weight names.
`device_map` is a pure function of a plan's placements (the report's
`placements`: node, kind, name, function, index, device, inputs), the global
functions' parameters and the weights' module names:

- Weights are parameters after a function's data inputs (TVM's `num_input`
  attribute where present, else the first parameter), so `input_ids` is in
  no module.
- An operator that reads weights, directly or through layout-only operators
  (`permute_dims`, `reshape`, `astype`, `expand_dims`, as the pattern pins of
  `solver.selectors.weight_readers` follow them), belongs to the module of
  the first weight it reads. An operator without weights belongs to the
  latest module (in the order of their first weights) among its inputs'
  modules, as a module's forward runs after the modules that feed it: a
  residual add of layer 3 and layer 2's output is layer 3's. Operators that
  reach no weight at all (the rotary tables, the mask built from
  `input_ids`) are in no module: the model's own forward runs them.
- A module is `split` when its operators are on more than one device (a
  module without operators takes its weights' device).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import solver
from relay.ast import Function, Module
from service.module_names import ModuleNames, module_names
from service.record import PlacementRecord

SPLIT = "split"
KIND_OPERATOR = "operator"
KIND_CALL = "call"
KIND_PARAMETER = "parameter"
_COMPONENTS = re.compile(r"[_.]")
_PREFIX = "p_"


# ---------------------------------------------------------------------------
# Names


def components(name: str) -> list[str]:
    """A parameter name's components: without `%` and a `p_` prefix, split on
    `_` and `.` (empty components dropped)."""
    name = name.lstrip("%").removeprefix(_PREFIX)
    return [c for c in _COMPONENTS.split(name) if c]


def group_name(name: str) -> str:
    """The module a weight belongs to (see the module docstring); a
    one-component name is its own group."""
    parts = components(name)
    for k, part in enumerate(parts):
        if part.isdigit():
            return "_".join(parts[: k + 1])
    return "_".join(parts[:-1] if len(parts) > 1 else parts)


# ---------------------------------------------------------------------------
# Parameters


@dataclass(frozen=True, slots=True)
class FunctionParams:
    """A global function's parameters as the device map needs them: names in
    order, the bytes of each (None when a dimension is symbolic) and how many
    lead as data inputs."""

    function: str  # "@main", as placements name it
    names: tuple[str, ...]
    sizes: tuple[int | None, ...]
    data_inputs: int

    def is_weight(self, index: int) -> bool:
        return index >= self.data_inputs


def data_inputs(func: Function, num_input: int | None = None) -> int:
    """How many of `func`'s parameters are data inputs: `num_input` (the
    caller's, e.g. from the Relax function), else the function's own
    `num_input` attribute, else one (the first)."""
    value: Any = num_input if num_input is not None else func.attr("num_input")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return min(value, len(func.params))
    return min(1, len(func.params))


def function_params(module: Module, num_inputs: Mapping[str, int] | None = None) -> list[FunctionParams]:
    """The parameters of every global function of `module` (the planner's
    input: a Relay module or a Relax module's translation); `num_inputs`:
    function name (without `@`) -> its `num_input`, where the module's own
    functions do not carry it."""
    out: list[FunctionParams] = []
    for gv, func in module.functions:
        if func.is_primitive:
            continue
        given = (num_inputs or {}).get(gv.name)
        out.append(
            FunctionParams(
                f"@{gv.name}",
                tuple(p.name for p in func.params),
                tuple(solver.static_type_bytes(p.type_annotation) for p in func.params),
                data_inputs(func, given),
            )
        )
    return out


# ---------------------------------------------------------------------------
# The view


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    """One module of the device map: where its operators run."""

    module: str
    device: str  # a device name, or "split"
    operators: tuple[tuple[str, int], ...]  # (device, count), devices in first-seen order
    parameter_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "device": self.device,
            "operators": dict(self.operators),
            "parameter_bytes": self.parameter_bytes,
        }


@dataclass
class _Group:
    name: str
    parameter_bytes: int = 0
    param_devices: list[str] = field(default_factory=list)
    operators: dict[str, int] = field(default_factory=dict)


def weight_names(params: Sequence[FunctionParams]) -> list[str]:
    """Every weight parameter's name, function by function, in order."""
    return [n for f in params for k, n in enumerate(f.names) if f.is_weight(k)]


@dataclass(frozen=True, slots=True)
class Membership:
    """Which module each placement belongs to (see the module docstring):
    `module_of` for operators, calls and weights, `weight_of` for the nodes
    that are a weight (re-laid out or not) and the weight's name."""

    module_of: Mapping[int, str]
    weight_of: Mapping[int, str]


def membership(
    placements: Sequence[Mapping[str, Any]], params: Sequence[FunctionParams], names: ModuleNames
) -> Membership:
    """The module of every placement that has one (`placements` in node-id
    order, every input before the placements that read it; device not read)."""
    by_function = {f.function: f for f in params}
    rank = {m: k for k, m in enumerate(names.order())}
    module_of: dict[int, str] = {}
    weight_of: dict[int, str] = {}
    for p in placements:
        node = int(p["node"])
        kind = p["kind"]
        if kind == KIND_PARAMETER:
            owner = by_function.get(str(p["function"]))
            position = p.get("index")
            if owner is not None and isinstance(position, int) and owner.is_weight(position):
                weight = owner.names[position]
                weight_of[node] = weight
                module_of[node] = names.of(weight)
            continue
        if kind not in (KIND_OPERATOR, KIND_CALL):
            continue
        inputs = [int(i) for i in p.get("inputs", ())]
        read = next((weight_of[i] for i in inputs if i in weight_of), None)
        if read is not None:
            if kind == KIND_OPERATOR and solver.is_layout_only(str(p["name"])):
                weight_of[node] = read
            module_of[node] = names.of(read)
            continue
        fed = [module_of[i] for i in inputs if i in module_of]
        if fed:
            module_of[node] = max(fed, key=lambda m: rank.get(m, -1))
    return Membership(module_of, weight_of)


def device_map(
    placements: Sequence[Mapping[str, Any]],
    params: Sequence[FunctionParams],
    names: ModuleNames | None = None,
) -> list[DeviceGroup]:
    """The device map of a plan: one group per module, in the order of their
    first weight parameter (see the module docstring for the rule).

    `placements` in node-id order (every input before the placements that
    read it, as a report lists them); `params`: the functions' parameters;
    `names`: the weights' modules (default: read off their names)."""
    by_function = {f.function: f for f in params}
    if names is None:
        names = module_names(weight_names(params))
    groups: dict[str, _Group] = {m: _Group(m) for m in names.order()}
    for f in params:
        for index, (param, size) in enumerate(zip(f.names, f.sizes)):
            if f.is_weight(index):
                groups[names.of(param)].parameter_bytes += size or 0
    member = membership(placements, params, names)
    for p in placements:
        node = int(p["node"])
        module = member.module_of.get(node)
        if module is None:
            continue
        device = str(p["device"])
        if p["kind"] == KIND_PARAMETER:
            owner = by_function.get(str(p["function"]))
            if owner is not None:
                groups[module].param_devices.append(device)
            continue
        ops = groups[module].operators
        ops[device] = ops.get(device, 0) + 1
    out: list[DeviceGroup] = []
    for g in groups.values():
        devices = list(g.operators) or list(dict.fromkeys(g.param_devices))
        device = devices[0] if len(devices) == 1 else (SPLIT if devices else "none")
        out.append(DeviceGroup(g.name, device, tuple(g.operators.items()), g.parameter_bytes))
    return out


def record_device_map(record: PlacementRecord, names: ModuleNames | None = None) -> list[DeviceGroup]:
    """The device map of a plan from its placement record (the placements
    and the planned module's parameters; a Relax translation keeps each
    function's `num_input`)."""
    return device_map(record.placements_json(), function_params(record.module), names)


def device_map_table(groups: Sequence[DeviceGroup]) -> str:
    """The device map as a plain-text table (`--explain`)."""
    devices = list(dict.fromkeys(d for g in groups for d, _ in g.operators))
    header = ["module", "device", *(f"ops on {d}" for d in devices), "parameter MB"]
    rows = [
        [
            g.module,
            g.device,
            *(str(dict(g.operators).get(d, 0)) for d in devices),
            f"{g.parameter_bytes / 1e6:.1f}",
        ]
        for g in groups
    ]
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# accelerate's maps as pins


def accelerate_device(value: Any) -> str:
    """An accelerate device (`0`, `"cuda:1"`, `"cpu"`) as a device spec."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return "cuda" if value == 0 else f"cuda:{value}"
    if isinstance(value, str) and (value in ("cpu", "cuda") or re.fullmatch(r"cuda:\d+", value)):
        return value
    raise ValueError(f"accelerate device {value!r} is not a GPU index, 'cuda[:N]' or 'cpu'")


def accelerate_pins(device_map: Mapping[str, Any], params: FunctionParams) -> list[dict[str, Any]]:
    """accelerate's `device_map` (module name -> device) as pattern pins on
    the weights of one function. A module `model.layers.3` becomes
    `{"param": "@main:p_model_layers_3_*"}` (written in the weights' own
    spelling: `p_` prefix and separator as they have them); the module `""`
    is the whole model (one pin per top-level module); an entry that owns no
    weight (`model.rotary_emb`) gives no pin."""
    weights = [n for k, n in enumerate(params.names) if params.is_weight(k)]
    prefix = _PREFIX if weights and all(n.startswith(_PREFIX) for n in weights) else ""
    sep = "." if any("." in n for n in weights) else "_"
    pins: list[dict[str, Any]] = []
    for module, value in device_map.items():
        device = accelerate_device(value)
        heads = [module.split(".")] if module else [[c] for c in dict.fromkeys(components(n)[0] for n in weights)]
        for head in heads:
            pattern = f"{prefix}{sep.join(head)}{sep}*"
            if any(fnmatchcase(n, pattern) for n in weights):
                pins.append({"select": {"param": f"{params.function}:{pattern}"}, "device": device})
    return pins
