"""accelerate's device maps of the public decoder against our plans, in one cost model.

For each budget (a fraction of the decoder's 623 MB of weights) this prints:

- accelerate's map as `dispatch_model` runs it (`accelerate_device_map`, as-is: every module on the main GPU
  unless mapped to another, cpu weights copied in synchronously): predicted ms, peak memory on the GPUs, whether
  it fits the budgets;
- our plan under the same budgets with copies synchronous (`overlap: false`, as accelerate copies) and with
  overlap (the default): predicted ms, gap, whether its own accelerate map is expressible, planning seconds
  (`on_timeout: "best"`: a plan the time limit stopped is marked "(stopped)");
- ours / accelerate's.

One GPU: the corpus maps (`../shared/corpus/relax/offload/llama_h1024_l8.accelerate.json`). Two GPUs of half the
budget each plus the cpu: accelerate's own two-GPU fill (`tests/data/accelerate/llama_h1024_l8.gpus2.json`).

    .venv/bin/python benchmarks/accelerate.py [--timeout-ms 60000] [--gpus 1 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CORPUS = (ROOT / ".." / "shared" / "corpus" / "relax" / "offload").resolve()
TWO_GPUS = ROOT / "tests" / "data" / "accelerate" / "llama_h1024_l8.gpus2.json"


def _maps(gpus: int) -> list[dict[str, Any]]:
    path = CORPUS / "llama_h1024_l8.accelerate.json" if gpus == 1 else TWO_GPUS
    maps: list[dict[str, Any]] = json.loads(path.read_text())["maps"]
    return maps


def _request(entry: dict[str, Any], gpus: int) -> dict[str, Any]:
    budget = int(entry["gpu_budget_bytes"])
    if gpus == 1:
        return {"device_profiles": {"cuda": {"memory_bytes": budget}}}
    half = budget // 2
    return {
        "virtual_devices": ("cpu", "cuda", "cuda:1"),
        "device_profiles": {"cuda": {"memory_bytes": half}, "cuda:1": {"memory_bytes": half}},
    }


def _plan(text: str, timeout_ms: int, **fields: Any) -> tuple[Any, float]:
    from service.planning import PlanFailure, PlanJob, run_plan

    start = time.perf_counter()
    try:
        outcome = run_plan(PlanJob(text, input_format="json", language="relax", mode="optimize",
                                   include=("placements",), timeout_ms=timeout_ms, on_timeout="best", **fields))
    except PlanFailure as failure:
        return failure, time.perf_counter() - start
    return outcome, time.perf_counter() - start


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _mb(peaks: dict[str, int], devices: list[str]) -> str:
    return " / ".join(f"{peaks.get(d, 0) / 1e6:,.0f}" for d in devices)


def rows(gpus: int, timeout_ms: int) -> list[list[str]]:
    text = (CORPUS / "llama_h1024_l8.json").read_text()
    devices = ["cuda"] if gpus == 1 else ["cuda", "cuda:1"]
    out: list[list[str]] = []
    for entry in _maps(gpus):
        request = _request(entry, gpus)
        theirs, _ = _plan(text, timeout_ms, accelerate_device_map=entry["device_map"], **request)
        handed = getattr(theirs, "accelerate_input", None) or {}
        row = [f"{entry['fraction']:.2f}", _ms(handed.get("predicted_ms")), _mb(handed.get("peak_memory_bytes", {}), devices),
               "-" if handed.get("fits") is None else ("yes" if handed["fits"] else "no")]
        ratio = "-"
        for overlap in (False, True):
            ours, seconds = _plan(text, timeout_ms, overlap=overlap, **request)
            cost = getattr(ours, "cost", None)
            if cost is None:
                row += [f"({getattr(ours, 'kind', 'failed')})", "-", "-", f"{seconds:.1f} s"]
                continue
            answer = ours.as_dict()
            gap = cost.get("gap")
            stopped = " (stopped)" if "stopped" in str(cost.get("method", "")) else ""
            row += [_ms(cost["predicted_ms"]) + stopped, "-" if gap is None else f"{gap:.2%}",
                    "yes" if answer.get("accelerate_expressible") else "no", f"{seconds:.1f} s"]
            if not overlap and handed.get("predicted_ms"):
                ratio = f"{cost['predicted_ms'] / handed['predicted_ms']:.3g}"
        row.append(ratio)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="accelerate's maps of the public decoder against our plans")
    parser.add_argument("--timeout-ms", type=int, default=60_000)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2], choices=(1, 2))
    args = parser.parse_args(argv)
    head = ["budget", "accelerate ms", "peak MB", "fits", "ours (sync) ms", "gap", "expressible", "planned in",
            "ours (overlap) ms", "gap", "expressible", "planned in", "ours sync / accelerate"]
    for gpus in args.gpus:
        print(f"\n## {gpus} GPU{'s' if gpus > 1 else ''}" + (" of half the budget each" if gpus > 1 else "") + "\n")
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join(" --- " for _ in head) + "|")
        for row in rows(gpus, args.timeout_ms):
            print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
