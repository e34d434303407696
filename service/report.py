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
  An operator's `predicted_ms` is its kernel time on its device under the cost
  model (null for calls of functions and parameters).
- `copies`: every copy of the plan, with the placements it copies from and
  into, its devices, its bytes (null when a dimension is symbolic or the type
  unknown), the copied value's line:column and its predicted time.
- `prediction`: the predicted run time, always present: in optimize mode the
  optimizer's own, in TVM mode the cost model's price of the TVM plan (the same
  cost model as `mode: "optimize"`, under the request's profiles and links);
  `per_device[d].kernel_ms` sums the placements' times on `d`.

Every time here is the placement record's (`service.record.price`, computed
once per plan): for a Relay plan the placements' and copies' times add up to
`prediction.predicted_ms` in both modes. A Relax plan writes one copy per
value and device where the planner prices one per use, so its copies can add
up to less.

The JSON Schema is `schemas/report.schema.json`; `REPORT_VERSION` changes when a
field changes meaning or goes away.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import solver
from relay.ast import Module
from service.record import KIND_OPERATOR, PlacementRecord

log = logging.getLogger("devplan.report")

REPORT_VERSION = 2
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "report.schema.json"


def prediction(record: PlacementRecord, config: solver.PlanConfig) -> dict[str, Any]:
    """The predicted run time of the record's plan: the optimizer's in optimize
    mode, else the cost model's price of the TVM plan (`basis` says which);
    per device, the record's operator times summed (`kernel_ms`)."""
    result = record.result
    placements = record.placements_json()
    copies = record.copies_json()
    out = _counts(placements, copies, "optimize" if result.cost is not None else "tvm-plan")
    for name, (_, ms) in record.device_times().items():
        out["per_device"][name]["kernel_ms"] = ms
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


def load_schema() -> dict[str, Any]:
    """The report's JSON Schema (schemas/report.schema.json)."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def is_report(document: Any) -> bool:
    """Whether a JSON document is a report (rather than a plan request)."""
    return isinstance(document, Mapping) and "report_version" in document and "placements" in document
