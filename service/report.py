"""The placement report (issues 22 and 29): one JSON document per plan, for CI jobs and build farms.

A report holds everything of `/plan`'s response except the module, plus the
plan's placement record (`service.record`, the one every view reads):

- `placements`: every operator call, call of a function and function parameter
  the planner places (operators inside primitive functions are not planned one
  by one: the call of the primitive function stands for them), each with its
  node id (the post-order ids of why-queries and pictures), its name as the
  module's language writes it (`nn.dense`, `R.matmul`), its Relax `binding`
  (`lv41`; null for Relay), global function, line:column, device, `decided_by`
  (the `reason` of its why-answer: annotation, request pin, host rule,
  parameter attribute, function attribute, default, cost, none) and `inputs`,
  the node ids of the placements whose values flow into it (through lets,
  tuples, wrappers, branches). `inputs` is what `service.diff` matches nodes by.
- `copies`: every copy of the plan, with the placements it copies from and
  into, its devices, its bytes (null when a dimension is symbolic or the type
  unknown) and the copied value's line:column.
- `prediction`: the predicted run time, always present: in optimize mode the
  optimizer's own, in TVM mode the cost model's price of the TVM plan (the same
  cost model as `mode: "optimize"`, under the request's profiles and links).

The JSON Schema is `schemas/report.schema.json`; `REPORT_VERSION` changes when a
field changes meaning or goes away.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import relay
import solver
from relay.ast import Call, Function, Module, Op
from service.record import KIND_OPERATOR, PlacementRecord
from solver import Sizes, device_setup, input_roots, kernel_costs, node_ids, ns_to_ms, wrapper_op

log = logging.getLogger("devplan.report")

REPORT_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "report.schema.json"


def prediction(record: PlacementRecord, config: solver.PlanConfig) -> dict[str, Any]:
    """The predicted run time of the record's plan: the optimizer's in optimize
    mode, else the cost model's price of the TVM plan (`basis` says which)."""
    result = record.result
    placements = record.placements_json()
    copies = record.copies_json()
    out = _counts(placements, copies, "optimize" if result.cost is not None else "tvm-plan")
    if result.cost is not None:
        out["predicted_ms"] = result.cost.predicted_ms
    else:
        out.update(_price_tvm_plan(result.module, config))
    return out


def report_from_response(response: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """The report of one plan from its /plan response body made with
    `include: ["placements"]` (the module and the picture are left out)."""
    from service import __version__

    body = {k: v for k, v in response.items() if k not in ("module", "picture")}
    return {
        "report_version": REPORT_VERSION,
        "devplan_version": __version__,
        "mode": mode,
        **body,
        "prediction": response["prediction"],
        "placements": response["placements"],
        "copies": response["copies"],
    }


def _counts(
    placements: Sequence[Mapping[str, Any]], copies: Sequence[Mapping[str, Any]], basis: str
) -> dict[str, Any]:
    per_device: dict[str, dict[str, Any]] = {}
    for p in placements:
        if p["kind"] == KIND_OPERATOR:
            entry = per_device.setdefault(p["device"], {"operator_calls": 0})
            entry["operator_calls"] += 1
    return {
        "predicted_ms": None,
        "basis": basis,
        "reason": None,
        "copies": len(copies),
        "bytes_copied": sum(c["bytes"] for c in copies if c["bytes"] is not None),
        "per_device": per_device,
    }


def _price_tvm_plan(planned: Module, config: solver.PlanConfig) -> dict[str, Any]:
    """predicted_ms (and reason) of a TVM-mode plan under the cost model."""
    try:
        evaluation = solver.evaluate_planned(planned, dataclasses.replace(config, mode="tvm"))
    except (solver.PlanningConflict, solver.SolverTimeout, solver.PlanConfigError) as err:
        return {"reason": f"the cost model cannot price this plan: {err}"}
    out: dict[str, Any] = {"predicted_ms": evaluation.predicted_ms}
    if evaluation.violations:
        out["reason"] = "over a memory budget: " + "; ".join(evaluation.violations)
    return out


def operator_times(
    module: Module,
    result: solver.PlanResult,
    config: solver.PlanConfig | None = None,
    only: Collection[int] | None = None,
) -> dict[int, float]:
    """node id -> predicted kernel time (ms) of each operator call on the device
    `result` gives it (`result.constraints` needed), under the optimize mode's
    cost model with `config`'s profiles and table. Empty where the cost model
    cannot price the module (pictures then show counts only)."""
    log_ = result.constraints
    if log_ is None:
        return {}
    config = config or solver.PlanConfig()
    candidates: list[relay.VirtualDevice] = []
    for vd in result.virtual_devices:
        if isinstance(vd, relay.VirtualDevice) and all(
            relay.device_name(c) != relay.device_name(vd) for c in candidates
        ):
            candidates.append(vd)
    try:
        type_of, _ = solver.module_types(module)
        sizes = Sizes(type_of, config.assume_dim)
        sizes.run(input_roots(module))
        setup = device_setup(candidates, config)
    except (solver.PlanConfigError, relay.RelayError, ValueError, TypeError, KeyError) as err:
        log.debug("no operator times: %s", err)
        return {}
    index = {name: i for i, name in enumerate(setup.names)}
    out: dict[int, float] = {}
    for i, n in enumerate(node_ids(module)):
        if only is not None and i not in only:
            continue
        device = log_.devices.get(i)
        if not isinstance(n, Call) or wrapper_op(n) is not None or device not in index:
            continue
        if not (isinstance(n.op, Op) or (isinstance(n.op, Function) and n.op.is_primitive)):
            continue
        try:
            out[i] = ns_to_ms(kernel_costs(n, sizes, setup)[index[device]])
        except (ValueError, TypeError, KeyError, ZeroDivisionError) as err:
            log.debug("no time for node %d: %s", i, err)
    return out


def load_schema() -> dict[str, Any]:
    """The report's JSON Schema (schemas/report.schema.json)."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def is_report(document: Any) -> bool:
    """Whether a JSON document is a report (rather than a plan request)."""
    return isinstance(document, Mapping) and "report_version" in document and "placements" in document
