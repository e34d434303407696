"""Z3 as the solver of record over the presolved (compacted) system.

Variables: one per presolve class and constrained field (device type, device
id, target, memory scope). Hard facts: each class's pinned fields. Soft facts,
passed as assumptions: the classes merged by free `on_device` unification and
the defaults chosen by TVM's walk. The plan is read from the model.

Why SMT-LIB text in, API out: the system goes to Z3 as one `from_string`
text because building it call by call through the Python API is slower
(a synthetic system of 20,000 presolve classes: 2.6 s from text, 3.1 s
through the API, CPU time; corpus models have two classes, 9.7 vs 9.1 ms).
The answer is read through the API (`model.decls()`), not parsed from text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import z3

from relay.device import Target, VirtualDevice

from .errors import SolverTimeout

_K = TypeVar("_K")

_FIELDS = ("d", "i", "g", "s")  # device type, id, target, scope


@dataclass(frozen=True)
class ModelResult:
    """The devices Z3's model gives each final class, and the encoding's size."""

    devices: dict[int, VirtualDevice]  # final root -> device read from the model
    variables: int
    constraints: int
    assumptions: int


class FieldCodes:
    """Integer codes of the device fields Z3 sees: device type and id as
    themselves, targets and memory scopes numbered in order of first sight."""

    def __init__(self) -> None:
        self.targets: list[Target] = []
        self.target_index: dict[Target, int] = {}
        self.scopes: list[str] = []
        self.scope_index: dict[str, int] = {}

    def values(self, vd: VirtualDevice) -> tuple[int | None, ...]:
        t = None if vd.target is None else _intern(vd.target, self.target_index, self.targets)
        s = None if vd.memory_scope is None else _intern(vd.memory_scope, self.scope_index, self.scopes)
        return (vd.device_type, vd.virtual_device_id, t, s)

    def device(self, values: tuple[int | None, ...]) -> VirtualDevice:
        d, i, t, s = values
        return VirtualDevice(
            d, i, self.targets[t] if t is not None else None, self.scopes[s] if s is not None else None
        )


def _intern(key: _K, index: dict[_K, int], items: list[_K]) -> int:
    """The code of `key`: its place in `items`, appended on first sight."""
    code = index.get(key)
    if code is None:
        code = index[key] = len(items)
        items.append(key)
    return code


def check_plan(
    hard: dict[int, VirtualDevice],
    final_root: dict[int, int],
    final: dict[int, VirtualDevice],
    timeout_ms: int,
) -> ModelResult:
    """Check the compacted system with Z3 and read every final class's device.

    `hard` maps each presolve class to its device after the hard constraints,
    `final_root` each presolve class to its class after the soft steps, and
    `final` each final class to the device the greedy defaults chose.
    """
    codes = FieldCodes()
    lines: list[str] = []
    assumptions: list[str] = []
    groups: dict[int, list[int]] = {}
    for h, root in final_root.items():
        groups.setdefault(root, []).append(h)
    nvars = 0
    nconstraints = 0
    for root, members in groups.items():
        target_vals = codes.values(final[root])
        present = [k for k in range(4) if target_vals[k] is not None]
        for h in members:
            for k in present:
                lines.append(f"(declare-const {_FIELDS[k]}{h} Int)")
                nvars += 1
            hv = codes.values(hard[h])
            for k in present:
                if hv[k] is not None:
                    lines.append(f"(assert (= {_FIELDS[k]}{h} {hv[k]}))")
                    nconstraints += 1
        rep = members[0]
        # Soft: classes joined by free on_device unification stay equal.
        for h in members[1:]:
            name = f"m{h}"
            eqs = " ".join(f"(= {_FIELDS[k]}{h} {_FIELDS[k]}{rep})" for k in present)
            if eqs:
                lines.append(f"(declare-const {name} Bool)")
                lines.append(f"(assert (=> {name} (and true {eqs})))")
                assumptions.append(name)
        # Soft: the defaults chosen for fields the hard constraints left free.
        free_fields = [k for k in present if codes.values(hard[rep])[k] is None]
        if free_fields:
            name = f"a{rep}"
            eqs = " ".join(f"(= {_FIELDS[k]}{rep} {target_vals[k]})" for k in free_fields)
            lines.append(f"(declare-const {name} Bool)")
            lines.append(f"(assert (=> {name} (and true {eqs})))")
            assumptions.append(name)
    ctx = z3.Context()
    solver = z3.Solver(ctx=ctx)
    solver.set("timeout", max(1, int(timeout_ms)))
    if lines:
        solver.from_string("\n".join(lines))
    lits = [z3.Bool(a, ctx) for a in assumptions]
    result = solver.check(*lits)
    if result == z3.unknown:
        raise SolverTimeout(
            f"Z3 gave no answer within {timeout_ms} ms ({solver.reason_unknown()})", solver.reason_unknown()
        )
    if result == z3.unsat:
        raise RuntimeError("internal error: the presolved device plan is inconsistent (Z3 says unsat)")
    # The model's integer constants by name, read through the API (the
    # encoding goes in as SMT-LIB text; only its answer is read back).
    model = solver.model()
    values: dict[str, int] = {}
    for decl in model.decls():
        value = model[decl]
        if z3.is_int_value(value):
            values[decl.name()] = value.as_long()
    devices: dict[int, VirtualDevice] = {}
    for root, members in groups.items():
        rep = members[0]
        fields = tuple(values.get(f"{_FIELDS[k]}{rep}") for k in range(4))
        devices[root] = codes.device(fields)
    return ModelResult(devices, nvars, nconstraints, len(assumptions))
