"""Plan-report time (`include: ["placements"]`, `devplan plan
--report`): the plan with a why-answer for every placement, against the plan
alone, for corpus models in both modes. The answers share their walks (each
component once), so the report grows about linearly with the module; before
stop 24 every answer walked its whole component again (densenet121 in TVM
mode: 2.8 s, now about 0.6 s on the 2-core machine).

Every plan builds its placement record (the copies, pins and
placements every view reads), without `decided_by`: the "record ms" column
is what each /plan pays, against "plan ms" for the planner alone.

    python benchmarks/report.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import relay
import solver
from service.planning import RelaySource, plan_record

sys.path.insert(0, str(Path(__file__).resolve().parent))
from relay_io import CORPUS, best_time, print_table  # sibling script helpers

MODELS = ("resnet18", "resnet50", "inception_v3", "densenet121")
MODES = ("tvm", "optimize")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for name in MODELS:
        module = relay.parse_text((CORPUS / f"{name}.relay").read_text())
        for mode in MODES:
            config = solver.PlanConfig(virtual_devices=("cpu", "cuda"), mode=mode)
            source = RelaySource(module)
            placements = len(plan_record(source, config).placements)
            plan_s = best_time(lambda m=module, c=config: solver.plan(m, c), args.repeat)
            record_s = best_time(lambda s=source, c=config: plan_record(s, c), args.repeat)
            report_s = best_time(lambda s=source, c=config: plan_record(s, c, reasons=True), args.repeat)
            rows.append(
                [
                    name,
                    mode,
                    str(placements),
                    f"{plan_s * 1000:.0f}",
                    f"{record_s * 1000:.0f}",
                    f"{report_s * 1000:.0f}",
                ]
            )
            sys.stderr.write(f"{name} {mode}: {report_s:.2f} s\n")
    print_table(["model", "mode", "placements", "plan ms", "record ms", "report ms"], rows)


if __name__ == "__main__":
    main()
