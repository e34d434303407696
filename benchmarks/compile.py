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
    python benchmarks/compile.py --run-check --models resnet18 --repeat 3

`--run-check` times the service's run check instead (`compile_workers.run_check`:
the 2-CPU build and the 1-CPU reference run on the same inputs and compared): in the
sandbox (a child process under the layers that work here, DEVPLAN_RUN_CHECK_* defaults)
and with DEVPLAN_COMPILE_SANDBOX=off (both in this process), with the child's CPU time
and peak memory against the default limits.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


import tvm_bridge
from benchmarks.timing import best_s
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


def bench(model: str, repeat: int, cuda: bool) -> dict[str, Any]:
    module = load_corpus(f"{model}.relay")
    planned = split_plan(module, _prefix_length(module))
    lower_s, lowered = best_s(lambda: tvm_bridge.to_relax(planned), repeat)
    single_lower_s, single_lowered = best_s(lambda: tvm_bridge.to_relax(module), repeat)
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


def bench_run_check(model: str, repeat: int) -> dict[str, Any]:
    """The run check of `model` with the sandbox on and off: best of `repeat` each."""
    import tempfile

    import solver
    from service import sandbox
    from service.compile_workers import CompileJob, run_check
    from service.config import Settings
    from service.planning import PlanJob

    module = load_corpus(f"{model}.relay")
    planned = split_plan(module, _prefix_length(module))
    built = tvm_bridge.compile(tvm_bridge.to_relax(planned))
    reference = tvm_bridge.compile(tvm_bridge.to_relax(module))
    inputs = random_inputs(module["main"])
    on = sandbox.config_from(Settings())
    plain = dataclasses.replace(on, bubblewrap=False)
    off = sandbox.config_from(Settings(compile_sandbox="off"))
    row: dict[str, Any] = {"model": model, "layers": ", ".join(on.layers)}
    with tempfile.TemporaryDirectory() as tmp:
        library = f"{tmp}/built.so"
        built.export_library(library)
        plan = PlanJob(module="", options=solver.PlanOptions())
        for name, config in (("on", on), ("plain", plain), ("off", off)):
            job = CompileJob(plan=plan, targets=None, cuda_arch=None, run_check=True, library=library, sandbox=config)
            row[f"{name}_s"], check = best_s(functools.partial(run_check, job, built, reference, inputs), repeat)
            row[f"{name}_err"] = check["max_abs_error"]
            row.update({f"{name}_{k}": v for k, v in check.items() if k in ("cpu_s", "peak_bytes")})
    row["limits"] = on.limits
    return row


def main_run_check(models: list[str], repeat: int) -> int:
    print(
        "| model | run check, sandbox off s | sandbox on s (overhead) | without bubblewrap s | "
        "child CPU s (limit) | child peak MiB (limit) | max abs err (on, off) | layers |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for model in models:
        r = bench_run_check(model, repeat)
        limits = r["limits"]
        print(
            f"| {model} | {r['off_s']:.2f} | {r['on_s']:.2f} ({r['on_s'] - r['off_s']:+.2f}) | {r['plain_s']:.2f} | "
            f"{r['on_cpu_s']:.1f} ({limits.cpu_s:g}) | {r['on_peak_bytes'] / 2**20:.0f} "
            f"({limits.memory_bytes / 2**20:.0f}) | {r['on_err']:.1e}, {r['off_err']:.1e} | {r['layers']} |",
            flush=True,
        )
    return 0


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
    parser.add_argument(
        "--run-check", action="store_true", help="time the run check, sandboxed and with the sandbox off"
    )
    args = parser.parse_args()
    models = args.models or (QUICK if args.quick else MODELS)
    if args.run_check:
        return main_run_check(models, args.repeat)
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
