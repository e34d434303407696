"""Golden planning cases: tests/data/plan/<case>.in.relay -> <case>.out.relay.

Inputs are hand-written text whose `meta[VirtualDevice][i]` references
resolve through `GOLDEN_CONFIG.virtual_devices` (cpu, cuda, cuda with a
texture scope, cpu with a global scope). Run `python -m tests.solver.golden
CASE...` to (re)write an expected output after reviewing the plan by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

import relay
import solver

DATA = Path(__file__).resolve().parents[1] / "data" / "plan"

GOLDEN_CONFIG = solver.PlanConfig(
    virtual_devices=(
        "cpu",
        "cuda",
        {"device_type": "cuda", "memory_scope": "global.texture"},
        {"device_type": "cpu", "memory_scope": "global"},
    ),
    default_device="cuda",
    host_device="cpu",
    z3_check=True,  # every golden plan is also confirmed by Z3
)


def cases() -> list[str]:
    return sorted(p.name[: -len(".in.relay")] for p in DATA.glob("*.in.relay"))


def plan_case(name: str) -> solver.PlanResult:
    path = DATA / f"{name}.in.relay"
    module = relay.parse_text(path.read_text(), name=str(path))
    return solver.plan(module, GOLDEN_CONFIG)


def main(names: list[str]) -> None:
    for name in names or cases():
        result = plan_case(name)
        (DATA / f"{name}.out.relay").write_text(relay.print_text(result.module))


if __name__ == "__main__":
    main(sys.argv[1:])
