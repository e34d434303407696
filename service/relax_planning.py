"""Planning a Relax module (issue 21): the bridge translates it for the
planner, the solver plans the translation unchanged in either mode, and the
bridge writes the placements back onto the same IRModule. It lives here
because it joins solver/ and tvm_bridge/, which never import each other
(architecture.md). Importing it imports TVM: callers import it only for
Relax input."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import solver
from relay.span import SourceText
from tvm_bridge.relax_plan import relax_op_calls
from tvm_bridge.relax_translate import Translation, translate
from tvm_bridge.relax_write import Placement, read_placement, write_back


@dataclass(frozen=True)
class RelaxPlan:
    """The planned Relax module and what the planner said about it."""

    module: Any  # tvm.IRModule
    result: solver.PlanResult  # the plan of the translated Relay module
    translation: Translation
    placement: Placement
    copies: int  # R.to_vdevice bindings added


def plan_relax(
    mod: Any, config: solver.PlanConfig | None = None, source: SourceText | None = None
) -> RelaxPlan:
    """Plan `mod` (a Relax IRModule) with the planner in `config.mode`.

    Raises what `solver.plan` raises (PlanningConflict with TVMScript
    line:column, SolverTimeout, PlanConfigError) and RelaxTranslationError."""
    config = config or solver.PlanConfig()
    translation = translate(mod, source, config.mode)
    # The translation checked the operator names against TVM's Relax registry
    # and states every node's type from the module's struct info: the solver
    # skips its Relay checks and reads those types (solver.PlanConfig.language).
    config = dataclasses.replace(config, language="relax")
    if any(_relax_op_selector(c) for c in config.constraints):
        config = dataclasses.replace(config, constraints=_node_constraints(translation, config.constraints))
    result = solver.plan(translation.module, config)
    placement = read_placement(translation, result.module)
    out, copies = write_back(translation, placement, result.virtual_devices)
    return RelaxPlan(out, result, translation, placement, copies)


def _relax_op_selector(constraint: Any) -> bool:
    select = constraint.get("select") if isinstance(constraint, Mapping) else None
    return isinstance(select, Mapping) and relax_op_name(select.get("op")) is not None


def relax_op_name(op: Any) -> str | None:
    """TVM's name of a Relax operator a selector names, in either spelling:
    `relax.nn.softmax` or TVMScript's `R.nn.softmax`; None for other names."""
    if not isinstance(op, str):
        return None
    if op.startswith("relax."):
        return op
    if op.startswith("R."):
        return "relax." + op[len("R."):]
    return None


def _node_constraints(translation: Translation, constraints: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    """Request pins that select Relax operators (`{"op": "relax.nn.softmax",
    "index"?: i}`, counted in binding order) as pins of the translated nodes."""
    ids = solver.node_id_of(translation.module)
    calls = {
        name: [ids[id(node)] for node in nodes if id(node) in ids]
        for name, nodes in relax_op_calls(translation).items()
    }
    out: list[Any] = []
    for k, c in enumerate(constraints):
        if not _relax_op_selector(c):
            out.append(c)
            continue
        select = c["select"]
        found = calls.get(relax_op_name(select["op"]) or "", [])
        if "index" in select:
            index = select["index"]
            found = found[index : index + 1] if isinstance(index, int) and index >= 0 else []
        if not found:
            raise solver.PlanConfigError(f"constraint #{k}: selector {dict(select)!r} matches no operator call")
        out.extend({**c, "select": {"node": node}} for node in found)
    return tuple(out)
