"""Calibrate the optimizer's built-in device profiles against what TVM builds.

Two steps, so the expensive one runs once per machine and the fit can be
redone from the recorded numbers (docs/calibration.md has the method):

    python benchmarks/calibrate.py measure [--models mlp resnet18 ...]   # needs TVM; minutes
    python benchmarks/calibrate.py fit                                    # reads the record
    python benchmarks/calibrate.py fit-tables T.json ... --models M ... --device cuda   # a GPU
    python benchmarks/calibrate.py measure-relax [--models tv_resnet18 ...]  # Relax corpus, all-cpu runs
    python benchmarks/calibrate.py relax-table                            # their predictions vs the record

`measure` builds each model all-cpu with the bridge (TVM 0.27 default llvm
schedules, as `devplan compile` does), times the whole model on the Relax VM,
and times every distinct kernel alone (a one-operator module per cost key, as
`devplan profile` builds them). Both timings call the VM function with the
inputs already on the device, so neither counts creating the VM or copying
the inputs in; a second figure per model (`bridge_run_ms`) is
`tvm_bridge.timed_run`, which does count them. Each kernel is recorded with the
optimizer's own view of it: operator class, FLOPs, bytes moved. The record is
`benchmarks/calibration.json` (with the date and the machine).

`fit` turns the record into per-class efficiencies of the llvm profile (how
far below the roofline each operator class runs) and a per-kernel launch
cost, fits the cuda profile to the recorded H200 runs of the bridge's all-GPU
builds, and prints the tables: per class, per kernel class, per model
(prediction by the built-in profiles against the measured run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import relay
import solver
from relay import ast
from solver.optimize import cost_model as _cm
from solver.optimize.problem import kernel_work
from solver.optimize.sizes import Sizes

log = logging.getLogger("calibrate")

CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
RECORD = ROOT / "benchmarks" / "calibration.json"
MODELS = ("mlp", "resnet18", "mobilenet", "squeezenet", "kernels")
# Kernels the four models lack or have only tiny ones of (batched dense and
# matmul, big softmax and reductions, transposes, concatenation, pooling),
# measured with them so that every class is fitted over a range of sizes.
KERNELS_TEXT = """#[version = "0.0.5"]
def @main(%a: Tensor[(64, 512), float32], %w: Tensor[(512, 512), float32], %b: Tensor[(16, 1024), float32], %w2: Tensor[(1000, 1024), float32], %q: Tensor[(8, 128, 64), float32], %k: Tensor[(8, 128, 64), float32], %s: Tensor[(64, 1024), float32], %x: Tensor[(1, 256, 56, 56), float32], %y: Tensor[(1, 256, 56, 56), float32], %z: Tensor[(1, 64, 112, 112), float32], %f: Tensor[(1, 512, 7, 7), float32]) {
  %0 = nn.dense(%a, %w, units=512);
  %1 = nn.dense(%b, %w2, units=1000);
  %2 = nn.batch_matmul(%q, %k, transpose_b=True);
  %3 = nn.softmax(%s);
  %4 = sum(%s, axis=[1]);
  %5 = mean(%x, axis=[2, 3]);
  %6 = transpose(%x, axes=[0, 2, 3, 1]);
  %7 = reshape(%f, newshape=[1, 25088]);
  %8 = concatenate((%x, %y), axis=1);
  %9 = add(%x, %y);
  %10 = exp(%z);
  %11 = nn.avg_pool2d(%x, pool_size=[3, 3], strides=[1, 1], padding=[1, 1, 1, 1]);
  %12 = nn.max_pool2d(%z, pool_size=[2, 2], strides=[2, 2]);
  %13 = multiply(%z, %z);
  (%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13)
}
"""


def _machine() -> dict[str, Any]:
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version()}


def _record_head(tvm_version: str) -> dict[str, Any]:
    """When, where and how a record was measured, and its empty model table."""
    return {
        "date": datetime.date.today().isoformat(),
        "machine": _machine(),
        "tvm": tvm_version,
        "target": "llvm",
        "note": "VM call with inputs on the device; best of the runs; 2-core box shared with other work",
        "models": {},
    }


def load_model(name: str) -> ast.Module:
    """A corpus model, or `kernels` (KERNELS_TEXT)."""
    if name == "kernels":
        return relay.parse_text(KERNELS_TEXT, name="kernels")
    path = CORPUS / f"{name}.relay"
    return relay.parse_text(path.read_text(), name=path.name)


# ---------------------------------------------------------------------------
# measure (needs TVM)


def _vm_call_ms(executable: Any, inputs: Sequence[Any], repeat: int, budget_s: float) -> float:
    """Best time of one call of `main` with the inputs already on the cpu:
    one warm-up call, then up to `repeat` calls or `budget_s` seconds. The
    best, not the median: on a shared machine a run is only ever slowed down."""
    return _timed_runs(executable, inputs, repeat, budget_s, long_warmup_counts=False)[0]


def _timed_runs(
    executable: Any, inputs: Sequence[Any], repeat: int, budget_s: float, *, long_warmup_counts: bool = True
) -> tuple[float, int]:
    """(best ms, runs) of calls of `main` with the inputs on the cpu: one
    warm-up, then up to `repeat` calls within `budget_s`. With
    `long_warmup_counts`, a model whose warm-up alone takes longer than
    `budget_s` is not run again: the warm-up is its one run (a first call's
    allocations are noise at that length)."""
    import numpy as np
    import tvm
    from tvm import relax

    dev = tvm.cpu(0)
    vm = relax.VirtualMachine(executable, [dev])
    args = [tvm.runtime.tensor(np.asarray(x), dev) for x in inputs]
    start = time.perf_counter()
    vm["main"](*args)
    first = time.perf_counter() - start
    if long_warmup_counts and first > budget_s:
        return first * 1e3, 1
    times: list[float] = []
    spent = time.perf_counter()
    for _ in range(repeat):
        start = time.perf_counter()
        vm["main"](*args)
        times.append(time.perf_counter() - start)
        if time.perf_counter() - spent > budget_s:
            break
    return min(times) * 1e3, len(times)


def model_kernels(module: ast.Module) -> list[tuple[str, Any]]:
    """(cost key, KernelWork) of every operator call of `module`: exactly what
    the optimizer costs (its types, sizes and `kernel_work`)."""
    type_of, _ = solver.module_types(module)
    roots: list[ast.Expr] = [f for _, f in module.functions]
    sizes = Sizes(type_of, 1)
    sizes.run(roots)
    out: list[tuple[str, Any]] = []
    for node in relay.traverse.post_order(roots, enter=relay.traverse.not_primitive):
        if not (isinstance(node, ast.Call) and isinstance(node.op, ast.Op)):
            continue
        if node.op.name in ("on_device", "device_copy"):
            continue
        key = solver.cost_key(node.op.name, [type_of(a) for a in node.args], node.attrs)
        out.append((key, kernel_work(node, sizes, 1)))
    return out


def _features(work: Any) -> dict[str, Any]:
    """A kernel's record fields: class, FLOPs, bytes moved, output elements."""
    part = work.parts[0]
    features = {"class": part.op_class, "flops": part.flops, "bytes": work.bytes_moved, "outputs": part.outputs}
    if part.operand_bytes:
        features["operand_bytes"] = part.operand_bytes
    return features


def measure(models: Sequence[str], repeat: int, kernel_budget_s: float) -> dict[str, Any]:
    """Whole-model and per-kernel times of the models' all-cpu builds."""
    import tvm

    import tvm_bridge
    from tvm_bridge.check import random_inputs
    from tvm_bridge.profile import distinct_calls, one_op_module

    record: dict[str, Any] = {
        **_record_head(str(tvm.__version__)),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cuda_runs": {
            "source": "the bridge's all-GPU builds (dlight default schedules) on an NVIDIA H200",
            "ms": H200_RUNS_MS,
        },
    }
    for name in models:
        module = load_model(name)
        start = time.perf_counter()
        compiled = tvm_bridge.compile(tvm_bridge.to_relax(module))
        compile_s = time.perf_counter() - start
        inputs = random_inputs(module["main"])
        model_ms = _vm_call_ms(compiled.executable, inputs, repeat, budget_s=20.0)
        _, bridge_ms = tvm_bridge.timed_run(compiled, inputs, max(1, min(repeat, 3)))
        log.info(
            "%s: compile %.1f s, run %.3f ms (bridge timed_run %.3f ms)", name, compile_s, model_ms, bridge_ms
        )
        failed: list[str] = []
        type_of, _ = solver.module_types(module)
        view = {key: _features(work) for key, work in model_kernels(module)}
        keys, skipped = distinct_calls(module, type_of, solver.cost_key)
        kernels = []
        for call in keys:
            one = one_op_module(call)
            try:
                built = tvm_bridge.compile(tvm_bridge.to_relax(one))
            except (tvm_bridge.BridgeError, relay.RelayError) as err:
                failed.append(f"{call.key}: {str(err).splitlines()[0]}")
                continue
            ns = _vm_call_ms(built.executable, random_inputs(one["main"]), repeat, kernel_budget_s) * 1e6
            features = view[call.key]
            kernels.append({"key": call.key, "op": call.op, "calls": call.calls, "ns": round(ns), **features})
            log.info("  %-14s %-10s x%-2d %10.1f us", call.op, features["class"], call.calls, ns / 1e3)
        record["models"][name] = {
            "run_ms": round(model_ms, 4),
            "bridge_run_ms": round(bridge_ms, 4),
            "kernels": kernels,
            "skipped": [f"{s.op}: {s.reason}" for s in skipped] + failed,
        }
    # An empty-ish kernel: what one VM call of a trivial operator costs (dispatch, allocation).
    tiny = relay.parse_text("def @main(%x: Tensor[(1), float32]) { negative(%x) }")
    built = tvm_bridge.compile(tvm_bridge.to_relax(tiny))
    record["empty_call_ns"] = round(
        _vm_call_ms(built.executable, random_inputs(tiny["main"]), 200, 2.0) * 1e6
    )
    return record


def merge_best(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """`new` with `old`'s models it lacks and, where both measured a model on
    the same machine and TVM, the best of the two for the model's run and for
    each kernel (the box is shared: a run is only ever slowed down)."""
    out = dict(new)
    models = dict(old.get("models", {}))
    same = old.get("machine") == new.get("machine") and old.get("tvm") == new.get("tvm")
    for name, model in new["models"].items():
        before = models.get(name)
        if not same or before is None:
            models[name] = model
            continue
        best = {k["key"]: k["ns"] for k in before["kernels"]}
        kernels = [{**k, "ns": min(k["ns"], best.get(k["key"], k["ns"]))} for k in model["kernels"]]
        models[name] = {
            **model,
            "run_ms": min(model["run_ms"], before["run_ms"]),
            "bridge_run_ms": min(model["bridge_run_ms"], before["bridge_run_ms"]),
            "kernels": kernels,
        }
    out["models"] = models
    if same:
        out["empty_call_ns"] = min(new["empty_call_ns"], old.get("empty_call_ns", new["empty_call_ns"]))
        out["runs"] = int(old.get("runs", 1)) + 1
    return out


# ---------------------------------------------------------------------------
# Relax models exported from PyTorch: whole-model runs (needs TVM)

RELAX_CORPUS = CORPUS / "relax"
RELAX_RECORD = ROOT / "benchmarks" / "calibration_relax.json"
# The public models (the corpus README's list), in file order.
RELAX_MODELS = tuple(sorted(p.stem for p in RELAX_CORPUS.glob("*.json")))


def load_relax(name: str) -> Any:
    """A Relax corpus model (its TVM JSON) as an IRModule."""
    from tvm_bridge.relax_plan import read_relax

    mod, _ = read_relax((RELAX_CORPUS / f"{name}.json").read_text(), "json")
    return mod


def relax_inputs(mod: Any, seed: int = 0) -> list[Any]:
    """Inputs for `mod`'s `main`: floats standard normal (weights scaled by
    fan-in), integers 0 or 1 (token ids: a valid row of any table), booleans
    random."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for p in mod["main"].params:
        shape = tuple(int(d) for d in p.ty.shape.values)
        dtype = str(p.ty.dtype)
        if dtype == "bool":
            out.append(rng.random(shape) < 0.5)
        elif dtype.startswith(("int", "uint")):
            out.append(rng.integers(0, 2, shape).astype(dtype))
        else:
            value = rng.standard_normal(shape).astype(dtype)
            if len(shape) > 1:
                value *= 1.0 / math.sqrt(max(1, math.prod(shape[1:])))
            out.append(value)
    return out


def measure_relax(models: Sequence[str], repeat: int, budget_s: float) -> dict[str, Any]:
    """Each Relax model built all-cpu through the bridge (`tvm_bridge.compile`,
    llvm, no vdevices) and its `main` timed on the Relax VM with the inputs on
    the cpu: best of up to `repeat` calls within `budget_s` (after one warm-up)."""
    import tvm

    import tvm_bridge

    record: dict[str, Any] = _record_head(str(tvm.__version__))
    for name in models:
        mod = load_relax(name)
        load = os.getloadavg()[0]
        start = time.perf_counter()
        try:
            compiled = tvm_bridge.compile(mod)
        except tvm_bridge.BridgeError as err:
            log.info("%s: TVM cannot build it for the cpu: %s", name, str(err).splitlines()[0])
            record["models"][name] = {"error": str(err).splitlines()[0]}
            continue
        compile_s = time.perf_counter() - start
        run_ms, runs = _timed_runs(compiled.executable, relax_inputs(mod), repeat, budget_s)
        log.info("%s: compile %.1f s, run %.2f ms (best of %d, load %.1f)", name, compile_s, run_ms, runs, load)
        record["models"][name] = {
            "run_ms": round(run_ms, 3),
            "runs": runs,
            "compile_s": round(compile_s, 1),
            "load_average": round(load, 2),
        }
    return record


def relax_kernel_modules(mod: Any) -> list[tuple[str, Any, Any]]:
    """(cost key, KernelWork, one-kernel IRModule) of every distinct kernel of
    `mod` as the optimizer sees it (its translation, stated types and
    `kernel_work`). A linear layer the translation folds into `nn.dense` is
    timed as it is built: its `permute_dims` and its `matmul` together."""
    import tvm
    from tvm import relax

    from tvm_bridge.relax_translate import _key, real_node, translate

    translation = translate(mod, None, "optimize")
    type_of, _ = solver.module_types(translation.module, stated=True)
    sizes = Sizes(type_of, 1)
    sizes.run([f for _, f in translation.module.functions])
    folded_by = {matmul: permute for permute, matmul in translation.folded.items()}
    found: dict[str, tuple[str, Any, Any]] = {}
    for key, b in translation.bindings.items():
        if b.kind != "op" or b.node is None or key in translation.folded:
            continue
        node = real_node(b.node)
        if not (isinstance(node, ast.Call) and isinstance(node.op, ast.Op)) or node.op.name.startswith("relax.call"):
            continue
        cost_key = solver.cost_key(node.op.name, [type_of(a) for a in node.args], node.attrs)
        if cost_key in found:
            continue
        bindings = [translation.bindings[folded_by[key]], b] if key in folded_by else [b]
        found[cost_key] = (cost_key, kernel_work(node, sizes, 1), _one_kernel(bindings, tvm, relax, _key))
    return list(found.values())


def _one_kernel(bindings: Sequence[Any], tvm: Any, relax: Any, key: Any) -> Any:
    """`main` computing `bindings` (translation bindings) from their free variables."""
    defined = {key(b.var) for b in bindings}
    params: dict[int, Any] = {}
    for b in bindings:
        for v in relax.analysis.free_vars(b.value):
            if key(v) not in defined and key(v) not in params:
                params[key(v)] = relax.Var(str(v.name), v.ty)
    remap = dict(params)

    def sub(e: Any) -> Any:
        if isinstance(e, relax.Var):
            return remap[key(e)]
        if isinstance(e, relax.Tuple):
            return relax.Tuple([sub(f) for f in e.fields])
        return e

    bb = relax.BlockBuilder()
    with bb.function("main", list(params.values())):
        out = None
        for b in bindings:
            value = b.value
            out = bb.emit(relax.Call(value.op, [sub(a) for a in value.args], value.attrs, value.ty_args))
            remap[key(b.var)] = out
        bb.emit_func_output(out)
    return bb.get()


def measure_relax_kernels(models: Sequence[str], repeat: int, budget_s: float) -> dict[str, Any]:
    """Every distinct kernel of each model timed alone (one-kernel modules built
    all-cpu through the bridge), with the optimizer's view of it."""
    import tvm_bridge

    out: dict[str, Any] = {}
    for name in models:
        kernels = []
        works = relax_kernel_modules(load_relax(name))
        calls = _relax_kernel_calls(name)
        for key, work, one in works:
            try:
                built = tvm_bridge.compile(one)
            except tvm_bridge.BridgeError as err:
                log.info("  %s: TVM cannot build it: %s", key, str(err).splitlines()[0])
                continue
            ns = _vm_call_ms(built.executable, relax_inputs(one), repeat, budget_s) * 1e6
            kernels.append({"key": key, "calls": calls.get(key, 1), "ns": round(ns), **_features(work)})
            log.info("  %-60s %-14s %12.1f us", key[:60], work.parts[0].op_class, ns / 1e3)
        out[name] = kernels
    return out


def _relax_kernel_calls(name: str) -> dict[str, int]:
    """Calls per cost key in model `name` (the optimizer's kernels)."""
    from tvm_bridge.relax_translate import translate

    translation = translate(load_relax(name), None, "optimize")
    type_of, _ = solver.module_types(translation.module, stated=True)
    roots: list[ast.Expr] = [f for _, f in translation.module.functions]
    counts: dict[str, int] = {}
    for node in relay.traverse.post_order(roots):
        if isinstance(node, ast.Call) and isinstance(node.op, ast.Op) and node.op.name not in ("on_device", "device_copy"):
            key = solver.cost_key(node.op.name, [type_of(a) for a in node.args], node.attrs)
            counts[key] = counts.get(key, 0) + 1
    return counts


def merge_best_runs(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """`new` with `old`'s models it lacks, and the faster run of a model both
    measured on the same machine and TVM (a shared box only slows runs down)."""
    out = dict(new)
    models = dict(old.get("models", {}))
    same = old.get("machine") == new.get("machine") and old.get("tvm") == new.get("tvm")
    for name, model in new["models"].items():
        before = models.get(name)
        faster = before is None or "run_ms" not in before or model.get("run_ms", math.inf) <= before["run_ms"]
        models[name] = model if not same or faster else before
    out["models"] = models
    kernels = dict(old.get("kernels", {}))
    for name, new_kernels in new.get("kernels", {}).items():
        best = {k["key"]: k["ns"] for k in kernels.get(name, [])} if same else {}
        kernels[name] = [{**k, "ns": min(k["ns"], best.get(k["key"], k["ns"]))} for k in new_kernels]
    out["kernels"] = kernels
    return out


def predict_relax_ms(name: str) -> float:
    """The optimizer's prediction of Relax model `name` all on the cpu."""
    from service.relax_planning import plan_relax

    config = solver.PlanConfig(mode="optimize", default_device="cpu", host_device="cpu", virtual_devices=("cpu",))
    cost = plan_relax(load_relax(name), config).result.cost
    assert cost is not None
    return float(cost.predicted_ms)


def relax_table(record: Mapping[str, Any]) -> str:
    """The Relax calibration table (markdown): prediction, measured run, ratio."""
    rows = []
    for name, model in record["models"].items():
        pred = predict_relax_ms(name)
        if "run_ms" not in model:  # TVM could not build it
            rows.append((name, f"{pred:.1f}", "-", "-", "-", model.get("error", "")))
            continue
        meas = float(model["run_ms"])
        ratio = pred / meas
        rows.append(
            (name, f"{pred:.1f}", f"{meas:.1f}", f"{ratio:.2f}", "yes" if 1 / 3 <= ratio <= 3 else "NO",
             f"best of {model['runs']}, load {model['load_average']:.1f}")
        )
    head = f"Relax models all-cpu (built-in llvm profile vs runs recorded {record['date']}, {record['machine']['cpu']}):"
    return head + "\n" + _table(rows, ("model", "predicted ms", "measured ms", "ratio", "within 3x", "run"))


# ---------------------------------------------------------------------------
# fit and report (no TVM)

# The all-GPU runs of the bridge's builds on an NVIDIA H200, ms.
H200_RUNS_MS = {"resnet18": 13.9, "resnet50": 30.8, "densenet121": 36.0, "squeezenet": 4.1, "mobilenet": 10.0}
# The roofline bases the efficiencies are fractions of (docs/calibration.md).
LLVM_BASE = {"peak_gflops": 50.0, "mem_gbps": 50.0}
CUDA_BASE = {"peak_gflops": 20_000.0, "mem_gbps": 2_000.0}
CUDA_FIXED = {"memory": 1.0, "launch_us": 5.0}  # not fitted (see fit_cuda)
# Efficiencies are searched on a log grid of 2^(1/8) steps (about 9%).
GRID = tuple(2.0 ** (k / 8) for k in range(-8 * 16, 8 * 2 + 1))


def _profile(base: Mapping[str, float], launch_us: float, rates: Mapping[str, Any]) -> Any:
    return _cm.DeviceProfile(
        peak_gflops=base["peak_gflops"],
        mem_gbps=base["mem_gbps"],
        launch_us=launch_us,
        classes=tuple(sorted(rates.items())),
    )


def _log_error(pred: float, meas: float) -> float:
    return math.log(max(pred, 1.0) / max(meas, 1.0))


Samples = dict[str, list[tuple[Any, float, float]]]
"""op class -> [(KernelWork, measured ns, calls)]."""


def fit_llvm(record: Mapping[str, Any]) -> tuple[float, dict[str, Any]]:
    """The llvm launch cost and per-class rates that best predict the recorded
    kernels (`fit_classes`); the launch is one VM call of a trivial kernel."""
    launch_us = round(float(record["empty_call_ns"]) / 1000.0, 1)
    samples: Samples = {}
    for name, model in record["models"].items():
        works = dict(model_kernels(load_model(name)))
        for k in model["kernels"]:
            work = works.get(k["key"])
            if work is None:
                continue
            samples.setdefault(work.parts[0].op_class, []).append((work, float(k["ns"]), float(k["calls"])))
    rates = fit_classes(samples, LLVM_BASE, launch_us, saturation=False)
    if RELAX_RECORD.exists():
        rates["dense"] = fit_spill(json.loads(RELAX_RECORD.read_text()), rates["dense"], launch_us)
    return launch_us, rates


# A matmul whose streamed operand is larger than this spills out of the cache
# (ClassRate.spill_bytes): on the 2-core Xeon of the Relax record, weights up to
# 2.4 MB ran at 0.4-5.8 GFLOP/s, every one from 4.7 MB up at 0.1-0.8.
SPILL_BYTES = 4 << 20


def fit_spill(relax_record: Mapping[str, Any], dense: Any, launch_us: float) -> Any:
    """`dense` with the spill rate (`spill_compute` on the grid, squared log
    error, each call once) that best predicts the Relax record's matmuls whose
    streamed operand exceeds `SPILL_BYTES` (linear layers of
    transformers; TVM's default llvm schedule re-reads the weight once per
    output row along its strides). The kernels' features are the recorded ones
    (`measure-relax`; redo it after changing the cost formulas)."""
    samples = [
        (
            _cm.KernelWork(
                (_cm.KernelPart(k["class"], k["flops"], k["outputs"], k.get("operand_bytes", 0)),), k["bytes"]
            ),
            float(k["ns"]),
            float(k["calls"]),
        )
        for kernels in relax_record.get("kernels", {}).values()
        for k in kernels
        if k["class"] == "dense" and k.get("operand_bytes", 0) > SPILL_BYTES
    ]
    if not samples:
        return dense
    best: tuple[float, Any] | None = None
    for compute in reversed(GRID):
        rate = _cm.ClassRate(dense.compute, dense.memory, dense.saturation, SPILL_BYTES, compute)
        profile = _profile(LLVM_BASE, launch_us, {"dense": rate})
        err = sum(w * _log_error(_cm.work_ns(work, profile), ns) ** 2 for work, ns, w in samples)
        if best is None or err < best[0] * (1 - 1e-9):
            best = (err, rate)
    assert best is not None
    return _cm.ClassRate(dense.compute, dense.memory, dense.saturation, SPILL_BYTES, _round(best[1].spill_compute))


def fit_classes(
    samples: Samples, base: Mapping[str, float], launch_us: float, saturation: bool
) -> dict[str, Any]:
    """Per class, the (compute, memory) pair on the grid minimising the
    squared log error of the kernels' predictions (each call counted once, so
    small kernels weigh as much as big ones; ties to the faster pair). With
    `saturation`, then the saturation (0 or a power of 2 up to 4M outputs)
    and compute rate that fit best with that memory rate."""

    def error(cls: str, rate: Any) -> float:
        profile = _profile(base, launch_us, {cls: rate})
        return sum(w * _log_error(_cm.work_ns(work, profile), ns) ** 2 for work, ns, w in samples[cls])

    rates: dict[str, Any] = {}
    for cls in sorted(samples):
        best: tuple[float, Any] | None = None
        for compute in reversed(GRID):
            for memory in reversed(GRID):
                rate = _cm.ClassRate(compute, memory)
                err = error(cls, rate)
                if best is None or err < best[0] * (1 - 1e-9):
                    best = (err, rate)
        assert best is not None
        if saturation:
            memory = best[1].memory
            for sat in [2**k for k in range(10, 23)]:
                for compute in reversed(GRID):
                    rate = _cm.ClassRate(compute, memory, sat)
                    err = error(cls, rate)
                    if err < best[0] * (1 - 1e-9):
                        best = (err, rate)
        rate = best[1]
        rates[cls] = _cm.ClassRate(_round(rate.compute), _round(rate.memory), rate.saturation)
    return rates


def fit_tables(
    tables: Sequence[Mapping[str, Any]], models: Sequence[str], device: str, launch_us: float | None
) -> tuple[float, dict[str, Any]]:
    """Class rates for `device` from `devplan profile` cost tables of `models`
    (per kernel, as for llvm, with saturation): the way to calibrate a GPU,
    whose kernels the record cannot time without one. The bases are the
    built-in profile's of the device's kind. `devplan profile` times a kernel
    with the VM's creation and its inputs' copies (`tvm_bridge.timed_run`), so
    the launch defaults to the smallest entry: an upper bound."""
    measured: dict[str, float] = {}
    for table in tables:
        for entry in table.get("entries", []):
            if entry.get("device") == device:
                key = str(entry["key"])
                measured[key] = min(float(entry["ns"]), measured.get(key, math.inf))
    if not measured:
        raise SystemExit(f"no entries for device {device!r} in the tables")
    if launch_us is None:
        launch_us = round(min(measured.values()) / 1000.0, 1)
    kind = "cuda" if device.startswith("cuda") else "llvm"
    base = {
        "peak_gflops": _cm.BUILTIN_PROFILES[kind].peak_gflops,
        "mem_gbps": _cm.BUILTIN_PROFILES[kind].mem_gbps,
    }
    samples: Samples = {}
    for name in models:
        counts: dict[str, tuple[Any, int]] = {}
        for key, work in model_kernels(load_model(name)):
            _, n = counts.get(key, (work, 0))
            counts[key] = (work, n + 1)
        for key, (work, n) in counts.items():
            if key in measured:
                samples.setdefault(work.parts[0].op_class, []).append((work, measured[key], float(n)))
    return launch_us, fit_classes(samples, base, launch_us, saturation=True)


def _round(x: float) -> float:
    return float(f"{x:.3g}")


def _round_up(x: float) -> float:
    """x to 3 significant digits, not below x."""
    if x <= 0:
        return 0.0
    r = _round(x)
    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    return r if r >= x else float(f"{r + step:.3g}")


def _cuda_rates(p: Mapping[str, float]) -> dict[str, Any]:
    """The cuda class rates of the five fitted numbers (see fit_cuda)."""
    other = _cm.ClassRate(1.0, p["memory"])
    return {
        "conv": _cm.ClassRate(p["conv"], p["memory"], int(p["saturation"])),
        "depthwise conv": _cm.ClassRate(p["depthwise"], p["memory"]),
        "dense": _cm.ClassRate(p["conv"], p["memory"]),
        **{c: other for c in ("elementwise", "pooling", "reduction", "data movement")},
    }


def fit_cuda(floor: Mapping[str, Any] | None = None) -> tuple[float, dict[str, Any]]:
    """The cuda class rates that best predict the H200 runs (least maximal
    log error over the models). Five totals cannot fix many numbers, so three
    are fitted: the convolution's compute rate and saturation (dense shares
    the rate) and the depthwise convolution's compute rate. The memory
    efficiency (1.0 of the 2,000 GB/s base) and the launch cost (5 us) stay
    fixed: a fit that frees them explains the runs as well with a memory
    rate of 115 GB/s, which would make GPU kernels look dearer than copies.
    The other classes compute at the peak (they are memory-bound there).

    `floor` (the llvm class rates) bounds the two compute rates from below:
    no class runs slower on the H200 than on the 2-core CPU. Without it the
    best fit explains mobilenet's 10 ms with depthwise convolutions at 5
    GFLOP/s (a quarter of the CPU's), although dlight schedules them with one
    thread per output (`Fallback`, a 9-tap loop each); optimize mode would
    then move every depthwise convolution to the CPU (25 copies) on the
    strength of five totals. docs/calibration.md has both fits.

    An exhaustive search on a factor-2 grid, then coordinate descent in
    2^(1/8) steps: deterministic.
    """
    low = {"conv": 0.0, "depthwise": 0.0}
    if floor is not None:
        for key, cls in (("conv", "conv"), ("depthwise", "depthwise conv")):
            rate = floor.get(cls)
            if rate is not None:
                low[key] = LLVM_BASE["peak_gflops"] * rate.compute / CUDA_BASE["peak_gflops"]
    import numpy as np

    arrays = []
    for name, ms in H200_RUNS_MS.items():
        works = [w for _, w in model_kernels(load_model(name))]
        part = [w.parts[0] for w in works]
        arrays.append(
            (
                ms * 1e6,
                np.array([p.flops if p.op_class == "conv" else 0 for p in part], dtype=float),
                np.array([max(p.outputs, 1) for p in part], dtype=float),
                np.array([p.flops if p.op_class == "depthwise conv" else 0 for p in part], dtype=float),
                np.array([p.flops if p.op_class == "dense" else 0 for p in part], dtype=float),
                np.array(
                    [p.flops if p.op_class not in ("conv", "depthwise conv", "dense") else 0 for p in part],
                    dtype=float,
                ),
                np.array([w.bytes_moved for w in works], dtype=float),
            )
        )
    peak, bw = CUDA_BASE["peak_gflops"], CUDA_BASE["mem_gbps"]

    def error(p: Mapping[str, float]) -> float:
        if p["conv"] < low["conv"] or p["depthwise"] < low["depthwise"]:
            return math.inf
        worst = 0.0
        for meas, conv, outs, dw, dense, other, moved in arrays:
            occupancy = np.minimum(1.0, outs / p["saturation"])
            compute = conv / (peak * p["conv"] * occupancy) + dw / (peak * p["depthwise"])
            compute += dense / (peak * p["conv"]) + other / peak
            total = np.maximum(compute, moved / (bw * p["memory"])).sum() + p["launch_us"] * 1000 * len(conv)
            worst = max(worst, abs(math.log(total / meas)))
        return worst

    coarse = {
        "conv": [2.0**-k for k in range(11)],
        "saturation": [float(2**k) for k in range(10, 23)],
        "depthwise": [2.0**-k for k in range(2, 17)],
    }
    for key, value in low.items():  # the floor itself is a candidate
        if value > 0:
            coarse[key] = sorted({*coarse[key], value})
    best: tuple[float, dict[str, float]] | None = None
    for c in coarse["conv"]:
        for sat in coarse["saturation"]:
            for dw in coarse["depthwise"]:
                p = {"conv": c, "saturation": sat, "depthwise": dw, **CUDA_FIXED}
                err = error(p)
                if best is None or err < best[0] * (1 - 1e-9):
                    best = (err, p)
    assert best is not None
    current, point = best
    step = 2.0 ** (1 / 8)
    for _ in range(200):
        moved = False
        for key in ("conv", "saturation", "depthwise"):
            for factor in (step, 1 / step):
                trial = {**point, key: max(point[key] * factor, low.get(key, 0.0))}
                err = error(trial)
                if err < current * (1 - 1e-9):
                    point, current, moved = trial, err, True
        if not moved:
            break
    point = {
        k: (float(round(v, -3)) if k == "saturation" else max(_round(v), _round_up(low.get(k, 0.0))))
        for k, v in point.items()
    }
    log.info("cuda fit: %s, worst log error %.3f", point, current)
    return float(point["launch_us"]), _cuda_rates(point)


def predict_ms(name: str, device: str) -> float:
    """The optimizer's prediction of the model run all on `device` with the built-in profiles."""
    module = load_model(name)
    config = solver.PlanConfig(
        mode="optimize", default_device=device, host_device=device, virtual_devices=(device,)
    )
    cost = solver.plan(module, config).cost
    assert cost is not None
    return float(cost.predicted_ms)


def _table(rows: Sequence[Sequence[Any]], head: Sequence[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# Earlier runs of the same builds on this machine under load, ms.
ISSUE_RUNS_MS = {"mlp": 1.34, "resnet18": 1744.0, "mobilenet": 506.0}


def calibration_rows(record: Mapping[str, Any]) -> list[tuple[str, str, float, float, float]]:
    """(model, device, predicted ms, measured ms, ratio) for the cpu models of
    the record and the H200 runs: the built-in profiles' all-on-one-device
    predictions against the recorded runs."""
    rows = []
    for name, model in record["models"].items():
        if name == "kernels":
            continue
        pred = predict_ms(name, "cpu")
        rows.append((name, "cpu", pred, float(model["run_ms"]), pred / float(model["run_ms"])))
    for name, ms in record.get("cuda_runs", {}).get("ms", H200_RUNS_MS).items():
        pred = predict_ms(name, "cuda")
        rows.append((name, "cuda (H200)", pred, float(ms), pred / float(ms)))
    return rows


def calibration_table(record: Mapping[str, Any] | None = None) -> str:
    """The calibration table (markdown): prediction, measured run, ratio; the
    goal is within 3x on every cpu row."""
    if record is None:
        record = json.loads(RECORD.read_text())
    rows = []
    for name, device, pred, meas, ratio in calibration_rows(record):
        loaded = ISSUE_RUNS_MS.get(name) if device == "cpu" else None
        rows.append(
            (
                name,
                device,
                f"{pred:.3f}",
                f"{meas:.3f}",
                f"{ratio:.2f}",
                "yes" if 1 / 3 <= ratio <= 3 else "NO",
                "" if loaded is None else f"{loaded:g} ({pred / loaded:.2f})",
            )
        )
    head = f"calibration (built-in profiles vs runs recorded {record['date']}, {record['machine']['cpu']}):"
    return (
        head
        + "\n"
        + _table(
            rows,
            (
                "model",
                "device",
                "predicted ms",
                "measured ms",
                "ratio",
                "within 3x",
                "issue's loaded run (ratio)",
            ),
        )
    )


def measured_classes(record: Mapping[str, Any]) -> list[tuple[str, int, str, str, str]]:
    """Per class over the recorded kernels (each call counted): calls, total
    ms, and the achieved GFLOP/s and GB/s (FLOPs and bytes over time)."""
    totals: dict[str, list[float]] = {}
    for model in record["models"].values():
        for k in model["kernels"]:
            row = totals.setdefault(k["class"], [0, 0.0, 0.0, 0.0])
            n = k["calls"]
            row[0] += n
            row[1] += n * k["ns"]
            row[2] += n * k["flops"]
            row[3] += n * k["bytes"]
    return [
        (cls, int(n), f"{ns / 1e6:.2f}", f"{flops / ns:.2f}", f"{moved / ns:.2f}")
        for cls, (n, ns, flops, moved) in sorted(totals.items())
    ]


def fit_and_report(record: Mapping[str, Any]) -> int:
    """Fit both profiles, print them and how the built-in ones predict the runs."""
    print("measured kernels per class (all models of the record):")
    print(_table(measured_classes(record), ("class", "calls", "total ms", "GFLOP/s", "GB/s")))
    print()
    launch, rates = fit_llvm(record)
    print(
        f"llvm fit (record of {record['date']}, {record['machine']['cpu']}, {record['machine']['cores']} cores):"
    )
    print(f"  launch_us={launch}, base {LLVM_BASE}")
    print(
        _table(
            [(c, r.compute, r.memory, r.saturation) for c, r in sorted(rates.items())],
            ("class", "compute", "memory", "saturation"),
        )
    )
    claunch, crates = fit_cuda(rates)
    print(f"\ncuda fit (H200 runs of the all-GPU builds): launch_us={claunch}, base {CUDA_BASE}")
    print(
        _table(
            [(c, r.compute, r.memory, r.saturation) for c, r in sorted(crates.items())],
            ("class", "compute", "memory", "saturation"),
        )
    )
    builtin = {kind: p for kind, p in _cm.BUILTIN_PROFILES.items()}
    same = dict(builtin["llvm"].classes) == rates and dict(builtin["cuda"].classes) == crates
    same = same and builtin["llvm"].launch_us == launch and builtin["cuda"].launch_us == claunch
    print(f"\nthe built-in profiles {'are' if same else 'are NOT'} this fit (solver/optimize/cost_model.py)")
    print()
    print(calibration_table(record))
    return 0


def _write_record(path: Path, record: dict[str, Any], merge: Any) -> None:
    """Write `record` to `path`, merged (`merge(old, new)`) with what is there."""
    if path.exists():
        record = merge(json.loads(path.read_text()), record)
    path.write_text(json.dumps(record, indent=1) + "\n")
    log.info("wrote %s", path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the models and their kernels (needs TVM), write the record")
    m.add_argument("--models", nargs="+", default=list(MODELS))
    m.add_argument("--repeat", type=int, default=10)
    m.add_argument("--kernel-budget-s", type=float, default=1.5, help="time cap per kernel")
    m.add_argument("--output", type=Path, default=RECORD)
    r = sub.add_parser("measure-relax", help="time the Relax corpus models all-cpu (needs TVM), write their record")
    r.add_argument("--models", nargs="+", default=list(RELAX_MODELS))
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--budget-s", type=float, default=20.0, help="time cap per model's runs")
    r.add_argument("--output", type=Path, default=RELAX_RECORD)
    r.add_argument("--kernels-of", nargs="*", default=[], help="models whose kernels are timed one by one too")
    r.add_argument("--kernel-budget-s", type=float, default=1.5, help="time cap per kernel")
    rt = sub.add_parser("relax-table", help="the Relax models' predictions against their record (needs TVM)")
    rt.add_argument("--record", type=Path, default=RELAX_RECORD)
    f = sub.add_parser("fit", help="fit the profiles to the record and print the tables")
    f.add_argument("--record", type=Path, default=RECORD)
    t = sub.add_parser("fit-tables", help="fit one device's class rates to `devplan profile` tables")
    t.add_argument("tables", nargs="+", type=Path, help="cost tables (`devplan profile --output`)")
    t.add_argument("--models", nargs="+", required=True, help="the corpus models the tables profiled")
    t.add_argument("--device", default="cuda", help="the device name in the tables (cpu, cuda, cuda:1)")
    t.add_argument("--launch-us", type=float, default=None, help="default: the smallest entry")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "measure":
        _write_record(args.output, measure(args.models, args.repeat, args.kernel_budget_s), merge_best)
        return 0
    if args.command == "measure-relax":
        record = measure_relax(args.models, args.repeat, args.budget_s)
        record["kernels"] = measure_relax_kernels(args.kernels_of, args.repeat, args.kernel_budget_s)
        _write_record(args.output, record, merge_best_runs)
        return 0
    if args.command == "relax-table":
        print(relax_table(json.loads(args.record.read_text())))
        return 0
    if args.command == "fit-tables":
        docs = [json.loads(p.read_text()) for p in args.tables]
        launch, rates = fit_tables(docs, args.models, args.device, args.launch_us)
        print(f"{args.device}: launch_us={launch}")
        print(
            _table(
                [(c, r.compute, r.memory, r.saturation) for c, r in sorted(rates.items())],
                ("class", "compute", "memory", "saturation"),
            )
        )
        return 0
    return fit_and_report(json.loads(args.record.read_text()))


if __name__ == "__main__":
    raise SystemExit(main())
