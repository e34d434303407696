"""Regenerate the optimize-mode plans that scripts/gpu_check.py runs.

GPU machines may lack z3, so the plans are made here and carried as text:
for each entry of scripts/gpu_plans/plans.json it plans the corpus model with
the entry's request and writes `NAME.relay` (the planned module) and
`NAME.cost.json` (what the optimizer predicted, for the measured-versus-
predicted table). tests/solver/test_gpu_plans.py checks that the carried text
equals a fresh plan.

    .venv/bin/python scripts/gen_gpu_plans.py            # all plans
    .venv/bin/python scripts/gen_gpu_plans.py NAME ...   # some
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import relay
import solver

PLANS_DIR = ROOT / "scripts" / "gpu_plans"
CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
# The cost fields that do not depend on how long the solver took.
STABLE_COST_FIELDS = ("predicted_ms", "tvm_mode_predicted_ms", "tvm_mode_reason", "copies", "bytes_copied")


def load_specs() -> dict[str, dict[str, Any]]:
    """name -> {"model": corpus name, "request": /plan request fields}."""
    doc = json.loads((PLANS_DIR / "plans.json").read_text())
    plans: dict[str, dict[str, Any]] = doc["plans"]
    return plans


def plan_config(request: dict[str, Any]) -> solver.PlanConfig:
    """The PlanConfig a /plan request with these fields builds."""
    fields = dict(request)
    for key in ("virtual_devices", "constraints"):
        if key in fields:
            fields[key] = tuple(fields[key])
    return solver.PlanConfig(**fields)


def make_plan(spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The planned module's text and the stable part of its cost report."""
    path = CORPUS / f"{spec['model']}.relay"
    module = relay.parse_text(path.read_text(), name=path.name)
    result = solver.plan(module, plan_config(spec["request"]))
    if result.cost is None:
        raise SystemExit(f"{spec['model']}: the request is not an optimize-mode request")
    cost = result.cost.to_json()
    stable = {key: cost[key] for key in STABLE_COST_FIELDS}
    stable["per_device_operators"] = {name: d["operator_calls"] for name, d in cost["per_device"].items()}
    return relay.print_text(result.module), stable


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="plans to regenerate (default: all)")
    args = parser.parse_args()
    specs = load_specs()
    unknown = sorted(set(args.names) - set(specs))
    if unknown:
        parser.error(f"unknown plan(s) {unknown}; known: {sorted(specs)}")
    for name in args.names or sorted(specs):
        text, cost = make_plan(specs[name])
        (PLANS_DIR / f"{name}.relay").write_text(text)
        (PLANS_DIR / f"{name}.cost.json").write_text(json.dumps(cost, indent=2, sort_keys=True) + "\n")
        print(f"{name}: predicted {cost['predicted_ms']:.3f} ms, {cost['copies']} copies", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
