"""Relax planning against Relay planning on the same model (issue 21).

The Relax module is the one the bridge makes from the corpus model (resnet50
by default), printed as TVMScript. Timed, best of `--repeat`, in TVM mode:

- relay: our `parse_text`, `solver.plan` and `print_text` of the Relay text;
- relax: our translation, `solver.plan`, reading the placement, writing it
  back and TVM's `mod.script()` (the output); TVM's own TVMScript parse
  (`tvm.script.from_source`) is reported on its own line: it is TVM's cost,
  paid by any tool that reads TVMScript.

Run: .venv/bin/python benchmarks/relax.py [--model resnet50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "../shared/corpus"
log = logging.getLogger("benchmarks.relax")


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best = float("inf")
    value = None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000, value


def run(model: str, repeat: int) -> list[tuple[str, float]]:
    """The rows of the table: (what, milliseconds)."""
    import tvm

    import relay
    import solver
    import tvm_bridge
    from tvm_bridge.relax_plan import print_relax, read_relax
    from tvm_bridge.relax_translate import translate
    from tvm_bridge.relax_write import read_placement, write_back

    text = (CORPUS / f"{model}.relay").read_text()
    config = solver.PlanConfig(timeout_ms=120_000)
    rows: list[tuple[str, float]] = []

    parse_ms, module = _best(lambda: relay.parse_text(text), repeat)
    plan_ms, result = _best(lambda: solver.plan(module, config), repeat)
    print_ms, _ = _best(lambda: relay.print_text(result.module), repeat)
    relay_total = parse_ms + plan_ms + print_ms
    rows += [
        ("relay: parse", parse_ms),
        ("relay: plan", plan_ms),
        ("relay: print", print_ms),
        ("relay: total", relay_total),
    ]

    script = print_relax(tvm_bridge.to_relax(module, {"cpu": "llvm", "cuda": "llvm"}))
    tvm_parse_ms, (mod, source) = _best(lambda: read_relax(script), repeat)
    translate_ms, translation = _best(lambda: translate(mod, source), repeat)
    rplan_ms, rresult = _best(lambda: solver.plan(translation.module, config), repeat)
    place_ms, placement = _best(lambda: read_placement(translation, rresult.module), repeat)
    write_ms, (out, _) = _best(lambda: write_back(translation, placement, rresult.virtual_devices), repeat)
    rprint_ms, _ = _best(lambda: print_relax(out), repeat)
    relax_total = translate_ms + rplan_ms + place_ms + write_ms + rprint_ms
    rows += [
        ("relax: translate (ours)", translate_ms),
        ("relax: plan (ours)", rplan_ms),
        ("relax: read placement (ours)", place_ms),
        ("relax: write back (ours)", write_ms),
        ("relax: print (TVM's mod.script())", rprint_ms),
        ("relax: total, our path", relax_total),
        ("relax / relay", relax_total / relay_total),
        ("TVM's TVMScript parse (tvm.script.from_source), apart", tvm_parse_ms),
    ]
    assert isinstance(out, tvm.IRModule)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = run(args.model, args.repeat)
    log.info("| %s, TVM mode, best of %d | ms |", args.model, args.repeat)
    log.info("| --- | ---: |")
    for what, value in rows:
        shown = f"{value:.2f}x" if what == "relax / relay" else f"{value:.1f}"
        log.info("| %s | %s |", what, shown)


if __name__ == "__main__":
    main()
