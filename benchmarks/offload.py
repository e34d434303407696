"""Offload plans for models bigger than the GPU: our optimize mode
against accelerate's `device_map="auto"`, and planning at Llama-2-7B's width.

Part 1, the public decoder (`../shared/corpus/relax/offload/llama_h1024_l8`,
hidden 1024, 8 layers, float32, 623 MB of weights): for each of accelerate's
three maps (GPU budget 0.25, 0.5, 0.75 of the parameter bytes),

- accelerate's plan, evaluated in our cost model: its map as pattern pins
  (`service.device_map.accelerate_pins`), everything else placed by our
  optimizer (accelerate's best case). Columns: predicted ms; whether it fits
  our budget accounting (weights, incoming copies and the largest live
  intermediate) or the 422 `planning-conflict` that names the budget; the
  groups on the GPU.
- our plan under the same budget: predicted ms, bound, gap, copies, groups on
  the GPU, whether the embedding gather stays on the cpu, solve seconds.
- the ratio ours / accelerate's.

Part 2, the same architecture at Llama-2-7B's width built with
`tvm.relax.frontend.nn` (scripts/llama_nn.py; hidden 4096, 32 heads, float16)
at 8, 16 and 32 layers under the same three budget fractions: solve seconds,
peak memory (the maximum RSS of a fresh process that imports TVM, builds the
module and plans it: TVM and the module are most of it), gap and predicted
ms against the layer count.

Every plan runs with the default time limit (10 s) unless `--timeout-ms`.

    .venv/bin/python benchmarks/offload.py                 # both parts
    .venv/bin/python benchmarks/offload.py --part public   # the public model only
    .venv/bin/python benchmarks/offload.py --part 7b --layers 8 16
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

CORPUS = (ROOT / ".." / "shared" / "corpus" / "relax" / "offload").resolve()
PUBLIC = "llama_h1024_l8"
FRACTIONS = (0.25, 0.5, 0.75)
log = logging.getLogger("benchmarks.offload")


@dataclass(frozen=True)
class PlanRow:
    """One plan's numbers (or why there is none)."""

    predicted_ms: float | None
    bound_ms: float | None
    gap: float | None
    copies: int | None
    gpu_groups: tuple[str, ...]
    split_groups: tuple[str, ...]
    groups: int
    embedding_device: str | None
    seconds: float
    method: str = ""
    failure: str | None = None  # the problem's kind and first line when it did not plan


def plan_row(text: str, budget: int, pins: Sequence[Mapping[str, Any]], timeout_ms: int) -> PlanRow:
    """Plan a Relax module (TVM JSON) under a cuda budget as a request would
    (`service.planning.run_plan`, optimize mode, `include: ["placements"]`),
    with its device map."""
    from service.planning import PlanFailure, PlanJob, run_plan

    job = PlanJob(
        text,
        input_format="json",
        language="relax",
        include=("placements",),
        mode="optimize",
        timeout_ms=timeout_ms,
        device_profiles={"cuda": {"memory_bytes": budget}},
        constraints=tuple(pins),
    )
    start = time.perf_counter()
    try:
        outcome = run_plan(job)
    except PlanFailure as failure:
        first = failure.message.splitlines()[0]
        return PlanRow(None, None, None, None, (), (), 0, None, time.perf_counter() - start, f"{failure.kind}: {first}")
    seconds = time.perf_counter() - start
    cost = outcome.cost or {}
    groups = outcome.device_map or []
    return PlanRow(
        cost.get("predicted_ms"),
        cost.get("bound_ms"),
        cost.get("gap"),
        cost.get("copies"),
        tuple(g["module"] for g in groups if g["device"].startswith("cuda")),
        tuple(g["module"] for g in groups if g["device"] == "split"),
        len(groups),
        gather_device(outcome.placements or []),
        seconds,
        str(cost.get("method", "")),
    )


def gather_device(placements: Sequence[Mapping[str, Any]]) -> str | None:
    """The device of the operator that reads the token embedding table (the gather)."""
    table = {p["node"] for p in placements if p["kind"] == "parameter" and "embed_tokens" in p["name"]}
    reader = next((p for p in placements if p["kind"] == "operator" and table & set(p["inputs"])), None)
    return str(reader["device"]) if reader else None


def _groups(row: PlanRow) -> str:
    if row.failure is not None:
        return "-"
    text = f"{len(row.gpu_groups)}/{row.groups}"
    if row.split_groups:
        text += f" (+{len(row.split_groups)} split)"
    return text


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Part 1: the public model against accelerate


def public_part(timeout_ms: int) -> str:
    from service.device_map import accelerate_pins
    from tvm_bridge.relax_plan import read_relax

    text = (CORPUS / f"{PUBLIC}.json").read_text()
    maps = json.loads((CORPUS / f"{PUBLIC}.accelerate.json").read_text())
    mod, _ = read_relax(text, "json")
    params = _main_params(mod)
    rows: list[list[str]] = []
    details: list[str] = []
    for entry in maps["maps"]:
        budget = int(entry["gpu_budget_bytes"])
        pins = accelerate_pins(entry["device_map"], params)
        theirs = plan_row(text, budget, pins, timeout_ms)
        ours = plan_row(text, budget, (), timeout_ms)
        fits = "yes" if theirs.failure is None else "no"
        ratio = (
            f"{ours.predicted_ms / theirs.predicted_ms:.3f}"
            if ours.predicted_ms is not None and theirs.predicted_ms
            else "-"
        )
        rows.append([
            f"{entry['fraction']:.2f} ({budget / 1e6:.0f} MB)",
            _ms(theirs.predicted_ms), fits, _groups(theirs),
            _ms(ours.predicted_ms), _ms(ours.bound_ms),
            "-" if ours.gap is None else f"{ours.gap * 100:.2f}%",
            "-" if ours.copies is None else str(ours.copies),
            _groups(ours), "yes" if ours.embedding_device == "cpu" else "no",
            f"{ours.seconds:.2f}", ratio, ours.method,
        ])
        if theirs.failure:
            details.append(f"- {entry['fraction']:.2f}: accelerate's map: {theirs.failure}")
        if ours.failure:
            details.append(f"- {entry['fraction']:.2f}: our plan: {ours.failure}")
        details.append(f"- {entry['fraction']:.2f}: our groups on the GPU: {', '.join(ours.gpu_groups) or 'none'}"
                       + (f"; split: {', '.join(ours.split_groups)}" if ours.split_groups else ""))
    head = ["budget", "acc. ms", "acc. fits", "acc. GPU groups", "our ms", "bound ms", "gap", "copies",
            "our GPU groups", "embedding on cpu", "solve s", "ours / acc.", "method"]
    return _table(head, rows) + "\n\n" + "\n".join(details)


def _main_params(mod: Any) -> Any:
    """The entry function's parameters, as the device map groups them."""
    from service.device_map import function_params
    from tvm_bridge.relax_translate import translate

    found = function_params(translate(mod).module)
    return next(f for f in found if f.function in ("@main", "@forward"))


# ---------------------------------------------------------------------------
# Part 2: 7B width against the layer count


def _plan_7b(layers: int, fraction: float, timeout_ms: int, out: Any) -> None:
    """In a fresh process: build, plan, report the numbers and the peak RSS."""
    import llama_nn
    import tvm

    shape = llama_nn.LlamaShape(layers=layers)
    text = tvm.ir.save_json(llama_nn.build(shape))
    row = plan_row(text, int(shape.parameter_bytes() * fraction), (), timeout_ms)
    out.put((row, _peak_rss_kib() / 1024, shape.parameter_bytes()))


def _peak_rss_kib() -> float:
    """This process's peak resident set (VmHWM, KiB). Not rusage's ru_maxrss:
    a spawned child starts with its parent's peak there, so every row would
    show at least the parent's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1])
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def scale_part(layer_counts: Sequence[int], timeout_ms: int) -> str:
    ctx = multiprocessing.get_context("spawn")
    rows: list[list[str]] = []
    failures: list[str] = []
    for layers in layer_counts:
        for fraction in FRACTIONS:
            queue = ctx.Queue()
            proc = ctx.Process(target=_plan_7b, args=(layers, fraction, timeout_ms, queue))
            proc.start()
            row, peak_mb, nbytes = queue.get()
            proc.join()
            rows.append([
                str(layers), f"{nbytes / 1e9:.2f}", f"{fraction:.2f}", f"{row.seconds:.2f}",
                f"{peak_mb:.0f}",
                "-" if row.gap is None else f"{row.gap * 100:.2f}%",
                _ms(row.predicted_ms), _ms(row.bound_ms), _groups(row),
                "yes" if row.embedding_device == "cpu" else "no",
            ])
            if row.failure:
                failures.append(f"- {layers} layers at {fraction:.2f}: {row.failure}")
    head = ["layers", "param GB", "budget", "solve s", "peak RSS MB", "gap", "predicted ms", "bound ms",
            "GPU groups", "embedding on cpu"]
    return _table(head, rows) + ("\n\n" + "\n".join(failures) if failures else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="offload plans against accelerate; planning at 7B width")
    parser.add_argument("--part", choices=("public", "7b", "both"), default="both")
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--timeout-ms", type=int, default=10_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.part in ("public", "both"):
        print(f"## {PUBLIC}: accelerate's map against our plan (optimize mode, {args.timeout_ms} ms limit)\n")
        print(public_part(args.timeout_ms))
        print()
    if args.part in ("7b", "both"):
        print(f"## Llama at 7B width (relax.frontend.nn), float16, prefill 128 ({args.timeout_ms} ms limit)\n")
        print(scale_part(args.layers, args.timeout_ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
