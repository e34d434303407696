"""The TVM mode's operator-support check.

TVM's placement knows nothing of which device can run which operator, so
with `op_support` a TVM-mode plan may put an operator on a device that
cannot run it. Such a plan is refused as a `PlanningConflict` naming every
operator and its location; the optimize mode is the one that places
operators where they can run, so the message says to use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relay.ast import Call, Module, Op
from relay.device import VirtualDevice, canonical_device_name, device_name

from ..errors import ConflictConstraint, PlanConfigError, PlanningConflict
from .consistency import operator_placements

__all__ = ["check_support", "unsupported_by_device"]

_SHOWN = 20  # operators named in a conflict (the rest are counted)


def unsupported_by_device(op_support: Mapping[str, Any], names: Sequence[str]) -> dict[str, frozenset[str]]:
    """`op_support` read as device name -> operators it cannot run. A device
    name must name one of `names` (the plan's devices); each entry lists
    operator names or is `{"unsupported": [...]}`. Raises PlanConfigError."""
    out: dict[str, frozenset[str]] = {}
    for raw, value in op_support.items():
        name = canonical_device_name(str(raw))
        if name not in names:
            raise PlanConfigError(f"op_support: unknown device {raw!r} (devices: {', '.join(names)})")
        if isinstance(value, Mapping):
            extra = set(value) - {"unsupported"}
            if extra:
                raise PlanConfigError(f"op_support.{raw}: unknown field(s) {sorted(extra)}")
            value = value.get("unsupported", ())
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise PlanConfigError(f"op_support.{raw} must list operator names")
        out[name] = frozenset(value)
    return out


def check_support(
    module: Module,
    op_support: Mapping[str, Any],
    devices: Sequence[VirtualDevice],
    host: VirtualDevice | None = None,
) -> None:
    """Raise `PlanningConflict` when the planned `module` runs an operator on a
    device that `op_support` says cannot run it (`devices`: the request's
    virtual devices, default and host included, whose names `op_support` may use)."""
    if not op_support:
        return
    names = sorted({device_name(vd) for vd in devices if isinstance(vd, VirtualDevice)})
    unsupported = unsupported_by_device(op_support, names)
    if not any(unsupported.values()):
        return
    bad: list[tuple[Call, str]] = []
    for call, vd in operator_placements(module, host):
        if vd is None or not isinstance(call.op, Op):
            continue
        name = device_name(vd)
        if call.op.name in unsupported.get(name, ()):
            bad.append((call, name))
    if not bad:
        return
    bad.sort(key=lambda b: (b[0].span.line, b[0].span.column) if b[0].span is not None else (1 << 30, 0))
    constraints = []
    for call, name in bad[:_SHOWN]:
        assert isinstance(call.op, Op)
        constraints.append(
            ConflictConstraint(
                "operator support",
                f"the TVM mode's plan runs {call.op.name} on {name}, which cannot run it (op_support)",
                f"{call.op.name}(...)",
                call.span,
                [name],
            )
        )
    where = ", ".join(
        f"{call.op.name} at {call.span.line}:{call.span.column} on {name}"
        if call.span is not None
        else f"{call.op.name} on {name}"
        for call, name in bad[:_SHOWN]
        if isinstance(call.op, Op)
    )
    more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
    message = (
        f"op_support: the TVM mode places {len(bad)} operator call(s) on a device that cannot run them "
        f'({where}{more}); TVM\'s placement ignores operator support: plan with mode: "optimize" '
        "to place each operator where it can run"
    )
    raise PlanningConflict(message, constraints)
