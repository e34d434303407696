"""Relax planning against Relay planning on the same model.

The Relax module is the one the bridge makes from the corpus model (resnet50
by default), printed as TVMScript. Timed, best of `--repeat`, in TVM mode:

- relay: our `parse_text`, `solver.plan` and `print_text` of the Relay text;
- relax: our translation, `solver.plan`, reading the placement, writing it
  back and TVM's `mod.script()` (the output); TVM's own TVMScript parse
  (`tvm.script.from_source`) is reported on its own line: it is TVM's cost,
  paid by any tool that reads TVMScript.

With `--corpus`, the models PyTorch users export
(`../shared/corpus/relax`: torchvision and Hugging Face, `offload/` included)
instead: per model, reading (TVM JSON, and TVMScript through the allowlisted
reader), then per mode our translation, `solver.plan`, reading the placement
and writing it back, and optimize mode's estimate count (none should say
"unknown type") and predicted time.

Run: .venv/bin/python benchmarks/relax.py [--model resnet50] [--repeat 3]
     .venv/bin/python benchmarks/relax.py --corpus [--models hf_bert ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The repository first: benchmarks/service.py would shadow the service package.
sys.path.insert(0, str(ROOT))
from benchmarks.timing import best_ms

CORPUS = ROOT / "../shared/corpus"
log = logging.getLogger("benchmarks.relax")


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

    parse_ms, module = best_ms(lambda: relay.parse_text(text), repeat)
    plan_ms, result = best_ms(lambda: solver.plan(module, config), repeat)
    print_ms, _ = best_ms(lambda: relay.print_text(result.module), repeat)
    relay_total = parse_ms + plan_ms + print_ms
    rows += [
        ("relay: parse", parse_ms),
        ("relay: plan", plan_ms),
        ("relay: print", print_ms),
        ("relay: total", relay_total),
    ]

    script = print_relax(tvm_bridge.to_relax(module, {"cpu": "llvm", "cuda": "llvm"}))
    tvm_parse_ms, (mod, source) = best_ms(lambda: read_relax(script), repeat)
    translate_ms, translation = best_ms(lambda: translate(mod, source), repeat)
    rplan_ms, rresult = best_ms(lambda: solver.plan(translation.module, config), repeat)
    place_ms, placement = best_ms(lambda: read_placement(translation, rresult.module), repeat)
    write_ms, (out, _) = best_ms(lambda: write_back(translation, placement, rresult.virtual_devices), repeat)
    rprint_ms, _ = best_ms(lambda: print_relax(out), repeat)
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


# Every model of the Relax corpus (offload/'s included; its device maps, NAME.accelerate.json, are no model).
CORPUS_MODELS = tuple(
    str(p.relative_to(CORPUS / "relax").with_suffix(""))
    for p in sorted((CORPUS / "relax").glob("**/*.json"))
    if "." not in p.stem
)
CORPUS_HEAD = (
    "model",
    "bindings",
    "read JSON",
    "read TVMScript",
    "tvm: translate",
    "tvm: plan",
    "tvm: write back",
    "optimize: translate",
    "optimize: plan",
    "optimize: write back",
    "estimates (unknown type)",
    "predicted ms (cuda, cpu host)",
)


def corpus_rows(models: tuple[str, ...], repeat: int) -> list[tuple[Any, ...]]:
    """One row per Relax corpus model (`CORPUS_HEAD`): times in ms, best of `repeat`."""
    import dataclasses

    import solver
    from service.relax_planning import configure
    from tvm_bridge.relax_plan import read_relax
    from tvm_bridge.relax_translate import translate

    rows: list[tuple[Any, ...]] = []
    for name in models:
        base = CORPUS / "relax" / name
        json_text = base.with_suffix(".json").read_text()
        script = base.with_suffix(".py").read_text()
        json_ms, (mod, _) = best_ms(functools.partial(read_relax, json_text, "json"), repeat)
        text_ms, (_, source) = best_ms(functools.partial(read_relax, script, "text"), repeat)
        bindings = sum(len(block.bindings) for block in mod["main"].body.blocks)
        row: list[Any] = [name, bindings, json_ms, text_ms]
        estimates = ""
        predicted = 0.0
        for mode in ("tvm", "optimize"):
            config = solver.PlanConfig(
                mode=mode, default_device="cuda", host_device="cpu", virtual_devices=("cpu", "cuda")
            )
            translate_ms, translation = best_ms(functools.partial(translate, mod, source, mode), repeat)
            planned_config = configure(translation, dataclasses.replace(config, timeout_ms=120_000))
            plan_ms, result = best_ms(functools.partial(solver.plan, translation.module, planned_config), repeat)
            write_ms, _ = best_ms(functools.partial(_write_back, translation, result), repeat)
            row += [translate_ms, plan_ms, write_ms]
            if result.cost is not None:
                unknown = sum(1 for e in result.cost.estimates if e.kind == "unknown type")
                estimates = f"{len(result.cost.estimates)} ({unknown})"
                predicted = result.cost.predicted_ms
        rows.append((*row, estimates, predicted))
    return rows


def _write_back(translation: Any, result: Any) -> Any:
    """Reading the placement of a plan and writing it onto the Relax module."""
    from tvm_bridge.relax_write import read_placement, write_back

    return write_back(translation, read_placement(translation, result.module), result.virtual_devices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--corpus", action="store_true", help="the Relax corpus models instead")
    parser.add_argument("--models", nargs="+", default=list(CORPUS_MODELS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.corpus:
        log.info("| %s |", " | ".join(CORPUS_HEAD))
        log.info("|%s", " --- |" * len(CORPUS_HEAD))
        for row in corpus_rows(tuple(args.models), args.repeat):
            cells = [f"{c:.1f}" if isinstance(c, float) else str(c) for c in row]
            log.info("| %s |", " | ".join(cells))
        return
    rows = run(args.model, args.repeat)
    log.info("| %s, TVM mode, best of %d | ms |", args.model, args.repeat)
    log.info("| --- | ---: |")
    for what, value in rows:
        shown = f"{value:.2f}x" if what == "relax / relay" else f"{value:.1f}"
        log.info("| %s | %s |", what, shown)


if __name__ == "__main__":
    main()
