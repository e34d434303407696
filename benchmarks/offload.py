"""Offloading decoders bigger than the GPU: our plans against accelerate's
device map as executed and llama.cpp's best `-ngl N`, all priced in the same
cost model through pins (memory by liveness, docs/optimize.md section 11).

Per model and GPU budget (a share of the weights):

- **ours**: optimize mode with the budget, as a request plans it (default
  time limit, `overlap: true`: weight copies beside compute), and the same
  with `overlap: false` (copies synchronous, as the baselines run);
- **accelerate**: the map as `dispatch_model` executes it (`accelerate_device_map`,
  `"as-is"`): every operator on the map's main GPU, `"cpu"` weights copied in
  synchronously each forward pass; a map with no GPU runs on the cpu. The
  public decoder's maps come from `llama_h1024_l8.accelerate.json`; for the
  generated decoders `auto_map` fills the GPU in module order as
  `infer_auto_device_map` does (keeping room for the largest layer when
  anything is offloaded);
- **-ngl N**: llama.cpp stores the last N layers on the GPU (the token
  embedding always on the cpu, the output head on the GPU only when N is
  above the layer count). Below 32 tokens a batch ("cpu" variant) the layers
  stored on the cpu compute there; at 32 and more ("offload" variant, the
  default op offload) their weight-reading matrix products stream the
  weights to the GPU and compute there, the rest of those layers stays on
  the cpu. Every N is priced with synchronous copies; the largest N whose
  peak memory fits the budget (found by bisection: the peak grows with N,
  the time falls) is shown with its N.

Columns: predicted ms, the GPU's peak memory (MiB) and for ours the planning
seconds (the whole request, reading and writing included, TVM imported
beforehand), the planner's memory (the peak resident memory of a process
that plans only that request, forked with TVM imported: interpreter, TVM
and the module included), the bound's gap and the method.

    .venv/bin/python benchmarks/offload.py                     # every model
    .venv/bin/python benchmarks/offload.py --models public 7b-32
    .venv/bin/python benchmarks/offload.py --models --export DIR/hf_llama.json   # a torch export only
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

CORPUS = (ROOT / ".." / "shared" / "corpus" / "relax" / "offload").resolve()
PUBLIC = "llama_h1024_l8"
FRACTIONS = (0.25, 0.5, 0.75)
MIB = 1 << 20
log = logging.getLogger("benchmarks.offload")


@dataclass(frozen=True)
class Priced:
    """A plan's price (None when it did not plan: `failure` says why)."""

    ms: float | None
    peak: int | None  # bytes on the GPU
    seconds: float = 0.0
    gap: float | None = None
    method: str = ""
    failure: str | None = None
    label: str = ""


def _job(text: str, budget: int | None, **fields: Any) -> Any:
    from service.planning import PlanJob

    profiles = {"cuda": {"memory_bytes": budget}} if budget is not None else {}
    return PlanJob(text, input_format="json", language="relax", mode="optimize", device_profiles=profiles, **fields)


def price(text: str, budget: int | None, **fields: Any) -> tuple[Priced, Any]:
    """Plan (or price a pinned placement) as a request would."""
    from service.planning import PlanFailure, run_plan

    start = time.perf_counter()
    try:
        outcome = run_plan(_job(text, budget, **fields))
    except PlanFailure as failure:
        first = failure.message.splitlines()[0][:160]
        return Priced(None, None, time.perf_counter() - start, failure=f"{failure.kind}: {first}"), None
    seconds = time.perf_counter() - start
    cost = outcome.cost or {}
    peak = (cost.get("peak_memory_bytes") or {}).get("cuda", 0)
    return Priced(cost.get("predicted_ms"), peak, seconds, cost.get("gap"), str(cost.get("method", ""))), outcome


def _child(conn: Any, text: str, budget: int | None, fields: dict[str, Any]) -> None:
    import resource

    priced, _ = price(text, budget, **fields)
    conn.send((priced, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
    conn.close()


def price_apart(text: str, budget: int | None, **fields: Any) -> tuple[Priced, int]:
    """`price` in a process of its own (forked, TVM already imported), with
    that process's peak resident memory in bytes: the planner's memory, the
    interpreter, TVM and the module's text included."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    here, there = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(there, text, budget, fields))
    child.start()
    there.close()
    priced, rss = here.recv()
    child.join()
    return priced, int(rss)


def accelerate_price(text: str, budget: int, device_map: Mapping[str, Any]) -> Priced:
    """accelerate's map as `dispatch_model` executes it (the service's `as-is` pricing)."""
    from service.planning import PlanFailure, run_plan

    try:
        outcome = run_plan(_job(text, budget, accelerate_device_map=dict(device_map), overlap=False))
    except PlanFailure as failure:
        return Priced(None, None, failure=f"{failure.kind}: {failure.message.splitlines()[0][:160]}")
    handed = outcome.accelerate_input or {}
    peak = (handed.get("peak_memory_bytes") or {}).get("cuda", 0)
    fits = handed.get("fits")
    return Priced(handed.get("predicted_ms"), peak, label="" if fits else "does not fit")


# ---------------------------------------------------------------------------
# Modules and their layers


@dataclass(frozen=True)
class Layout:
    """A decoder's modules in order (embedding, layers, norm, head) with their
    weight bytes, each placement's module, and its placements."""

    modules: list[str]
    sizes: dict[str, int]
    module_of: dict[int, str]
    weight_of: dict[int, str]
    placements: list[dict[str, Any]]
    layers: list[str]


def layout(text: str) -> Layout:
    """Read a decoder's modules off a plan's placements (no budget)."""
    from service.device_map import function_params, membership, weight_names
    from service.module_names import module_names
    from tvm_bridge.relax_plan import read_relax
    from tvm_bridge.relax_translate import translate

    _, outcome = price(text, None, include=("placements",))
    placements = list(outcome.placements)
    mod, _ = read_relax(text, "json")
    params = function_params(translate(mod).module)
    names = module_names(weight_names(params))
    member = membership(placements, params, names)
    sizes: dict[str, int] = {}
    for f in params:
        for k, (name, size) in enumerate(zip(f.names, f.sizes)):
            if f.is_weight(k):
                sizes[names.of(name)] = sizes.get(names.of(name), 0) + (size or 0)
    modules = list(names.order())
    layers = [m for m in modules if any(part.isdigit() for part in m.split("."))]
    return Layout(modules, sizes, dict(member.module_of), dict(member.weight_of), placements, layers)


def auto_map(lay: Layout, budget: int) -> dict[str, Any]:
    """A map as `infer_auto_device_map` makes one for one GPU and the cpu:
    modules in order onto the GPU while they fit, the room for the largest
    layer kept when anything goes to the cpu."""
    total = sum(lay.sizes.values())
    room = budget if total <= budget else budget - max(lay.sizes[m] for m in lay.layers)
    out: dict[str, Any] = {}
    used = 0
    full = False
    for m in lay.modules:
        if not full and used + lay.sizes[m] <= room:
            out[m] = 0
            used += lay.sizes[m]
        else:
            full = True
            out[m] = "cpu"
    return out


def ngl_pins(lay: Layout, n: int, offload: bool) -> list[dict[str, Any]]:
    """llama.cpp's `-ngl n` as node pins: the last n layers' weights and
    operators on cuda, the head too when n is above the layer count, the
    embedding on the cpu; with `offload` the weight-reading matrix products
    of the layers stored on the cpu (and the head's) compute on cuda."""
    layers = lay.layers
    on_gpu = set(layers[len(layers) - min(n, len(layers)):])
    head = lay.modules[-1]
    if n > len(layers):
        on_gpu |= {m for m in lay.modules if m not in layers and m != lay.modules[0]}
    pins: list[dict[str, Any]] = []
    weight_nodes = set(lay.weight_of)
    for p in lay.placements:
        node = int(p["node"])
        module = lay.module_of.get(node)
        stored = "cuda" if module in on_gpu else "cpu"
        if p["kind"] == "parameter":
            if node in weight_nodes:
                pins.append({"select": {"param": f"{p['function']}:{p['name']}"}, "device": stored})
            continue
        if p["kind"] not in ("operator", "call"):
            continue
        device = stored if module is not None else ("cuda" if n > 0 else "cpu")
        reads_weight = any(int(i) in weight_nodes for i in p.get("inputs", ()))
        name = str(p["name"])
        if offload and stored == "cpu" and module not in (lay.modules[0],) and (
            node in weight_nodes or (reads_weight and ("matmul" in name or "dense" in name))
        ):
            device = "cuda"
        if module == head and n <= len(layers) and not offload:
            device = "cpu"
        pins.append({"select": {"node": node}, "device": device})
    return pins


_NGL: dict[tuple[int, int, bool], Priced] = {}


def ngl_price(text: str, lay: Layout, n: int, offload: bool) -> Priced:
    """`-ngl n` priced with synchronous copies (once per model, n and variant)."""
    key = (id(lay), n, offload)
    if key not in _NGL:
        priced, _ = price(text, None, constraints=tuple(ngl_pins(lay, n, offload)), overlap=False)
        _NGL[key] = Priced(priced.ms, priced.peak, label=f"N={n}", failure=priced.failure)
    return _NGL[key]


def best_ngl(text: str, lay: Layout, budget: int, offload: bool) -> Priced:
    """The largest `-ngl N` whose peak memory fits the budget (binary search:
    the peak grows with N and the time falls with it, each more layer stored
    on the GPU taking a layer's copies or cpu compute away)."""
    low, high = 0, len(lay.layers) + 1
    if (ngl_price(text, lay, 0, offload).peak or 0) > budget:
        return Priced(None, None, failure="no N fits")
    while low < high:
        mid = (low + high + 1) // 2
        priced = ngl_price(text, lay, mid, offload)
        if priced.ms is not None and priced.peak is not None and priced.peak <= budget:
            low = mid
        else:
            high = mid - 1
    return ngl_price(text, lay, low, offload)


# ---------------------------------------------------------------------------
# The table


def _ms(p: Priced) -> str:
    return "-" if p.ms is None else f"{p.ms:,.1f}"


def _mib(p: Priced) -> str:
    return "-" if p.peak is None else f"{p.peak / MIB:,.0f}"


def model_rows(name: str, text: str, maps: Mapping[float, Mapping[str, Any]] | None, weights: int) -> list[list[str]]:
    lay = layout(text)
    rows = []
    for fraction in FRACTIONS:
        budget = int(weights * fraction)
        amap = dict(maps[fraction]) if maps is not None else auto_map(lay, budget)
        ours, rss = price_apart(text, budget)
        sync, _ = price(text, budget, overlap=False)
        acc = accelerate_price(text, budget, amap)
        cpu = best_ngl(text, lay, budget, offload=False)
        off = best_ngl(text, lay, budget, offload=True)
        rows.append([
            name, f"{fraction:.2f} ({budget / MIB:,.0f} MiB)",
            _ms(ours), _ms(sync), _ms(acc) + (f" ({acc.label})" if acc.label else ""),
            f"{_ms(cpu)} ({cpu.label})" if cpu.label else _ms(cpu),
            f"{_ms(off)} ({off.label})" if off.label else _ms(off),
            _mib(ours), f"{ours.seconds:.1f} / {sync.seconds:.1f}", f"{rss / MIB:,.0f}",
            "-" if ours.gap is None else f"{ours.gap * 100:.2f}%",
            "-" if sync.gap is None else f"{sync.gap * 100:.2f}%",
            ours.failure or ours.method,
        ])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    return rows


HEAD = ["model", "budget", "ours ms", "ours, no overlap ms", "accelerate ms", "-ngl N, cpu ms",
        "-ngl N, offload ms", "ours peak MiB", "plan s (ours / no overlap)", "planner MiB", "gap", "gap, no overlap",
        "method"]


def public_model() -> tuple[str, str, dict[float, Any], int]:
    text = (CORPUS / f"{PUBLIC}.json").read_text()
    data = json.loads((CORPUS / f"{PUBLIC}.accelerate.json").read_text())
    maps = {float(m["fraction"]): m["device_map"] for m in data["maps"]}
    return PUBLIC, text, maps, int(data["param_bytes"])


GENERATED = {
    # name: llama_nn.LlamaShape fields
    "7b-32": {"layers": 32},
    "70b-80": {"layers": 80, "hidden": 8192, "intermediate": 28672, "heads": 64, "kv_heads": 8},
    "h2048-22": {"layers": 22, "hidden": 2048, "intermediate": 5632, "heads": 32, "kv_heads": 4},
}


def generated_model(name: str) -> tuple[str, str, None, int]:
    import llama_nn
    import tvm

    shape = llama_nn.LlamaShape(**GENERATED[name])
    return name, tvm.ir.save_json(llama_nn.build(shape)), None, shape.parameter_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="offload plans against accelerate and llama.cpp -ngl N")
    parser.add_argument("--models", nargs="*", default=["public", *GENERATED])
    parser.add_argument(
        "--export",
        nargs="+",
        default=[],
        metavar="JSON",
        help="Relax modules in TVM JSON made by ../shared/tools/export_relax.py (a torch export), after --models",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import service.relax_planning  # noqa: F401  (TVM imported before the clocks start)

    print("| " + " | ".join(HEAD) + " |")
    print("|" + "|".join(" --- " for _ in HEAD) + "|")
    for name in args.models:
        model = public_model() if name == "public" else generated_model(name)
        model_rows(*model)
    for path in args.export:
        text = Path(path).read_text()
        model_rows(f"{Path(path).stem} (torch export)", text, None, sum(layout(text).sizes.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
