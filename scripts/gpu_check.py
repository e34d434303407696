"""Heterogeneous CPU+GPU check: plan, lower, compile, run, compare with CPU only.

Run by scripts/gpu_check.sh on a machine with a CUDA GPU. For each model
it prints one line: the plan, the devices, the max abs error against the
CPU-only build of the unplanned model, and the stage timings. `--dry-run`
maps cuda to a second CPU device so the script itself can be checked on a
machine without a GPU.

The optimize-mode plans (scripts/gpu_plans/NAME.relay, made beforehand by
scripts/gen_gpu_plans.py on a machine with z3) run too, and a last table sets
their measured run time beside the optimizer's prediction.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tvm

import relay
import tvm_bridge
from relay import ast
from relay.traverse import rewrite
from tests.tvm_bridge.helpers import CPU0, CPU1, CUDA0, load_corpus
from tvm_bridge.check import max_abs_error, random_inputs, retarget

PLANS_DIR = ROOT / "scripts" / "gpu_plans"


def pin_first_convolutions(module: ast.Module, count: int, device: relay.VirtualDevice) -> ast.Module:
    """`module` with its first `count` convolutions wrapped in on_device(device)."""
    pinned: list[ast.Expr] = []

    def visit(original: ast.Expr, rebuilt: ast.Expr) -> ast.Expr:
        if (
            isinstance(rebuilt, ast.Call)
            and getattr(rebuilt.op, "name", "") == "nn.conv2d"
            and len(pinned) < count
        ):
            pinned.append(rebuilt)
            return ast.on_device(rebuilt, device)
        return rebuilt

    main = module["main"]
    func = dataclasses.replace(main, body=rewrite(main.body, visit))
    return ast.Module(((module.functions[0][0], func),), (), {"VirtualDevice": [device]})


def carried_plans() -> list[tuple[str, str, dict[str, Any]]]:
    """(name, corpus model, predicted cost) of each optimize plan carried as text."""
    doc = json.loads((PLANS_DIR / "plans.json").read_text())
    out = []
    for name, spec in sorted(doc["plans"].items()):
        cost_path = PLANS_DIR / f"{name}.cost.json"
        cost = json.loads(cost_path.read_text()) if cost_path.exists() else {}
        out.append((name, str(spec["model"]), cost))
    return out


def check(name: str, planned: ast.Module, reference: ast.Module, repeat: int) -> str:
    start = time.perf_counter()
    lowered = tvm_bridge.to_relax(planned)
    lower_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    compiled = tvm_bridge.compile(lowered)
    compile_s = time.perf_counter() - start
    cpu = tvm_bridge.compile(tvm_bridge.to_relax(reference))
    inputs = random_inputs(reference["main"])
    out, run_ms = tvm_bridge.timed_run(compiled, inputs, repeat)
    expected, cpu_ms = tvm_bridge.timed_run(cpu, inputs, repeat)
    devices = ",".join(f"{d.type if hasattr(d, 'type') else d}:{d.index}" for d in compiled.devices)
    measured[name] = (run_ms, cpu_ms)
    return (
        f"{name:34s} devices={devices:14s} max_abs_err={max_abs_error(out, expected):.3e} "
        f"lower={lower_ms:7.1f}ms compile={compile_s:6.2f}s run={run_ms:8.2f}ms cpu_only_run={cpu_ms:8.2f}ms"
    )


measured: dict[str, tuple[float, float]] = {}  # check name -> (run ms, cpu-only run ms)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dry-run", action="store_true", help="map cuda to cpu:1 (no GPU needed)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--models", nargs="*", default=None, help="extra whole-model cuda plans (corpus names)"
    )
    parser.add_argument(
        "--optimize-only", action="store_true", help="run only the carried optimize-mode plans"
    )
    args = parser.parse_args()
    gpu = CPU1 if args.dry_run else CUDA0
    if not args.dry_run and not tvm.cuda(0).exist:
        print("no CUDA GPU visible; use --dry-run", file=sys.stderr)
        return 2
    mapping = {1: CPU0, 2: gpu}
    failures = 0
    lines = []

    def attempt(name: str, make: Any) -> None:
        nonlocal failures
        try:
            planned, reference = make()
            line = check(name, planned, reference, args.repeat)
        except Exception as exc:  # noqa: BLE001 - report and go on to the next model
            failures += 1
            line = f"{name:34s} FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        lines.append(line)
        print(line, flush=True)

    def resnet18_solver() -> tuple[ast.Module, ast.Module]:
        import solver

        module = load_corpus("resnet18.relay")
        annotated = pin_first_convolutions(module, 2, CPU0)
        target = "cpu:1" if args.dry_run else "cuda"
        config = solver.PlanConfig(
            virtual_devices=("cpu:0", target), default_device=target, host_device="cpu:0"
        )
        return solver.plan(annotated, config).module, module

    if not args.optimize_only:
        attempt("resnet18 (first 2 convs cpu, solver)", resnet18_solver)
    for name in (
        []
        if args.optimize_only
        else [
            "resnet18.annotated.planned",
            "mlp.annotated.planned",
            "lstm.annotated.planned",
        ]
    ):
        attempt(
            f"{name} (TVM plan)",
            lambda n=name: (
                retarget(load_corpus(f"{n}.relay"), mapping),
                retarget(load_corpus(f"{n}.relay"), None),
            ),
        )
    default_models = [] if args.optimize_only else ["resnet18", "mobilenet", "squeezenet", "mlp", "dqn"]
    for name in args.models or default_models:
        attempt(
            f"{name}.planned (all gpu)",
            lambda n=name: (retarget(load_corpus(f"{n}.planned.relay"), mapping), load_corpus(f"{n}.relay")),
        )
    plans = carried_plans()
    for name, model, _ in plans:
        attempt(
            f"{name} (optimize)",
            lambda n=name, m=model: (
                retarget(
                    relay.parse_text((PLANS_DIR / f"{n}.relay").read_text(), name=f"{n}.relay"), mapping
                ),
                load_corpus(f"{m}.relay"),
            ),
        )
    print("\n| optimize plan | predicted ms | TVM mode predicted ms | copies | measured ms | cpu-only ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, _, cost in plans:
        run_ms, cpu_ms = measured.get(f"{name} (optimize)", (float("nan"), float("nan")))
        tvm_ms = cost.get("tvm_mode_predicted_ms")
        print(
            f"| {name} | {cost.get('predicted_ms', float('nan')):.3f} | "
            f"{tvm_ms if tvm_ms is None else format(tvm_ms, '.3f')} | {cost.get('copies')} | "
            f"{run_ms:.3f} | {cpu_ms:.3f} |"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
