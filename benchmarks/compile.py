"""TVM bridge benchmark: lowering, compiling and running the corpus models.

For each model: `to_relax` time (the bridge's own work), compile time split
into legalize / GPU schedule / `tvm.compile`, and the Relax VM run time of
the heterogeneous two-CPU plan (first convolution or dense on cpu:0, the
rest on cpu:1, a device_copy at the boundary) against the single-device
build of the unplanned model; with `--cuda`, the llvm+cuda compile of the
TVM-planned module as well. The bridge's overhead is `to_relax` / `tvm.compile`
(target: under 10%).

    python benchmarks/compile.py                   # all corpus models
    python benchmarks/compile.py --quick           # mlp, dqn, resnet18, lstm
    python benchmarks/compile.py --models resnet18 --repeat 10 --cuda
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


import tvm_bridge
from tests.tvm_bridge.helpers import load_corpus, split_plan
from tests.tvm_bridge.test_models import _prefix_length
from tvm_bridge.check import max_abs_error, random_inputs

MODELS = [
    "mlp",
    "dqn",
    "lstm",
    "resnet18",
    "resnet18.fused",
    "mobilenet",
    "mobilenet.anf",
    "squeezenet",
    "dcgan",
    "synthetic",
    "resnet50",
    "inception_v3",
    "densenet121",
    "vgg16",
    "resnet3d_18",
]
QUICK = ["mlp", "dqn", "resnet18", "lstm"]


def _best(fn: Any, repeat: int) -> tuple[Any, float]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, min(times)


def bench(model: str, repeat: int, cuda: bool) -> dict[str, Any]:
    module = load_corpus(f"{model}.relay")
    planned = split_plan(module, _prefix_length(module))
    lowered, lower_s = _best(lambda: tvm_bridge.to_relax(planned), repeat)
    single_lowered, single_lower_s = _best(lambda: tvm_bridge.to_relax(module), repeat)
    start = time.perf_counter()
    hetero = tvm_bridge.compile(lowered)
    hetero_compile_s = time.perf_counter() - start
    start = time.perf_counter()
    single = tvm_bridge.compile(single_lowered)
    single_compile_s = time.perf_counter() - start
    inputs = random_inputs(module["main"])
    out_h, run_h = tvm_bridge.timed_run(hetero, inputs, repeat)
    out_s, run_s = tvm_bridge.timed_run(single, inputs, repeat)
    row = {
        "model": model,
        "lower_ms": lower_s * 1e3,
        "single_lower_ms": single_lower_s * 1e3,
        "legalize_s": hetero.timings.get("legalize_s", 0.0),
        "build_s": hetero.timings.get("build_s", 0.0),
        "compile_s": hetero_compile_s,
        "single_compile_s": single_compile_s,
        "overhead_pct": 100.0 * lower_s / max(hetero.timings.get("build_s", 1e-9), 1e-9),
        "run_hetero_ms": run_h,
        "run_single_ms": run_s,
        "max_abs_err": max_abs_error(out_h, out_s),
    }
    if cuda:
        try:
            cuda_module = load_corpus(f"{model}.planned.relay")
            start = time.perf_counter()
            compiled = tvm_bridge.compile(tvm_bridge.to_relax(cuda_module))
            row["cuda_compile_s"] = time.perf_counter() - start
            row["cuda_schedule_s"] = compiled.timings.get("schedule_s", 0.0)
            row["nvcc_s"] = tvm_bridge.nvcc_check(compiled)["nvcc_s"]
        except Exception as exc:  # noqa: BLE001 - a model without a planned file or a TVM failure
            row["cuda_compile_s"] = float("nan")
            print(f"# {model}: cuda compile failed: {exc}", file=sys.stderr)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--cuda", action="store_true", help="also compile the llvm+cuda planned module (+ nvcc)"
    )
    args = parser.parse_args()
    models = args.models or (QUICK if args.quick else MODELS)
    header = (
        "| model | to_relax ms | legalize s | tvm.compile s | compile total s (single) | "
        "to_relax / tvm.compile | run 2-CPU ms | run 1-CPU ms | max abs err |"
    )
    if args.cuda:
        header += " llvm+cuda compile s (dlight s, nvcc s) |"
    print(header)
    print("|" + "---|" * header.count(" |"))
    for model in models:
        r = bench(model, args.repeat, args.cuda)
        line = (
            f"| {r['model']} | {r['lower_ms']:.1f} | {r['legalize_s']:.2f} | {r['build_s']:.2f} | "
            f"{r['compile_s']:.2f} ({r['single_compile_s']:.2f}) | {r['overhead_pct']:.1f}% | "
            f"{r['run_hetero_ms']:.1f} | {r['run_single_ms']:.1f} | {r['max_abs_err']:.1e} |"
        )
        if args.cuda:
            line += f" {r.get('cuda_compile_s', float('nan')):.2f} ({r.get('cuda_schedule_s', 0):.2f}, {r.get('nvcc_s', 0):.2f}) |"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
