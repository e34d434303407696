"""Placement picture render time: build the DOT of a planned corpus
model and render it to SVG with Graphviz `dot`. Target: under 1 s each for
resnet50 and densenet121 (the picture's own work: build + render; planning
is shown separately). Run: `python benchmarks/picture.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import relay
import solver
from service.picture import build_picture, render_svg
from service.planning import RelaySource, plan_record

sys.path.insert(0, str(Path(__file__).resolve().parent))
from relay_io import CORPUS, best_time, print_table  # sibling script helpers

MODELS = ("mlp.annotated", "resnet18.annotated", "resnet50", "densenet121", "lstm.annotated")
TARGET_S = {"resnet50": 1.0, "densenet121": 1.0}
CONFIG = solver.PlanConfig(default_device="cuda", host_device="cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("dot") is None:
        sys.exit("Graphviz dot is not installed (apt-get install graphviz fonts-dejavu-core)")
    rows = []
    for name in MODELS:
        path = CORPUS / f"{name}.relay"
        if not path.exists():
            continue
        module = relay.parse_text(path.read_text(), name=path.name)
        record = plan_record(RelaySource(module), CONFIG)
        pic = build_picture(record)
        plan_s = best_time(lambda m=module: plan_record(RelaySource(m), CONFIG), args.repeat)
        build_s = best_time(lambda r=record: build_picture(r), args.repeat)
        render_s = best_time(lambda d=pic.dot: render_svg(d), args.repeat)
        total = build_s + render_s
        target = TARGET_S.get(name)
        verdict = "" if target is None else ("ok" if total < target else "SLOW")
        operators = sum(pic.devices.values())
        rows.append(
            [
                name,
                str(operators),
                str(pic.collapsed),
                f"{plan_s * 1000:.0f}",
                f"{build_s * 1000:.0f}",
                f"{render_s * 1000:.0f}",
                f"{total * 1000:.0f}",
                f"{target * 1000:.0f} {verdict}" if target else "-",
            ]
        )
    print_table(
        ["model", "operators", "collapsed", "plan ms", "build ms", "dot ms", "picture ms", "target ms"], rows
    )


if __name__ == "__main__":
    main()
