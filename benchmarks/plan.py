"""Planner benchmark: corpus models and synthetic modules of 1k-200k nodes.

Prints a table: plan time (parsing excluded) split into infer / collect /
presolve / z3 / rewrite, presolve classes, Z3 variables and constraints, and
peak memory (tracemalloc, measured in a second run so it does not distort the
times). TVM 0.19's PlanDevices times (corpus README) are the yardstick.

    python benchmarks/plan.py               # everything
    python benchmarks/plan.py --quick       # sizes up to 10k, small models
    python benchmarks/plan.py --no-memory   # skip the tracemalloc runs
    python benchmarks/plan.py --z3-check    # with the TVM-mode Z3 re-check (off by default)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import relay
import solver
from relay.ast import Call, Expr, Function, GlobalVar, Let, MetaRef, Module, TensorType, Var, on_device, op
from relay.traverse import post_order

CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
TVM_MS = {
    "resnet18": 27,
    "resnet50": 71,
    "mobilenet": 38,
    "inception_v3": 127,
    "densenet121": 163,
    "lstm": 24,
    "chain 10000": 1000,
    "chain 50000": 8400,
    "let chain 50000": 23000,
}
T = TensorType((4,), "float32")


# ---------------------------------------------------------------------------
# Synthetic modules (built as ASTs: no parsing, no recursion)


def chain(n: int) -> Module:
    """`%i = add(%i-1, %x)`: n nested calls."""
    x = Var("x", T)
    e: Expr = x
    for _ in range(n):
        e = Call(op("add"), (e, x))
    return Module(functions=((GlobalVar("main"), Function((x,), e, T)),))


def annotated_chain(n: int) -> Module:
    """`chain(n)` with one `on_device(..., virtual_device=meta[VirtualDevice][0])`
    in the middle (a meta reference the planner resolves, and an annotation it
    normalises): a one-node change to a big module."""
    x = Var("x", T)
    e: Expr = x
    device = MetaRef("VirtualDevice", 0)
    for i in range(n):
        e = Call(op("add"), (e, x))
        if i == n // 2:
            e = on_device(e, device, constrain_body=True, constrain_result=False)
    return Module(functions=((GlobalVar("main"), Function((x,), e, T)),))


def let_chain(n: int, *, lets: int | None = None) -> Module:
    """`let %vi = add(%v(i-1), %x); ...`: about n nodes (n/3 nested lets, ANF),
    or exactly `lets` lets."""
    x = Var("x", T)
    n = lets if lets is not None else max(1, n // 3)
    vars_ = [Var(f"v{i}", T) for i in range(n)]
    body: object = vars_[-1]
    for i in range(n - 1, -1, -1):
        prev = vars_[i - 1] if i else x
        body = Let(vars_[i], Call(op("add"), (prev, x)), body)  # type: ignore[arg-type]
    return Module(functions=((GlobalVar("main"), Function((x,), body, T)),))  # type: ignore[arg-type]


def wide_dag(n: int) -> Module:
    """n/2 independent leaves `negative(%x)` reduced by a balanced tree of adds."""
    x = Var("x", T)
    level = [Call(op("negative"), (x,)) for _ in range(max(1, n // 2))]
    while len(level) > 1:
        nxt = [Call(op("add"), (level[i], level[i + 1])) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return Module(functions=((GlobalVar("main"), Function((x,), level[0], T)),))


def many_functions(n: int) -> Module:
    """n/6 small globals `@fi(%a) = add(negative(%a), %a)`, called in sequence by @main."""
    k = max(1, n // 6)
    funcs = []
    gvs = []
    for i in range(k):
        a = Var("a", T)
        gv = GlobalVar(f"f{i}")
        funcs.append((gv, Function((a,), Call(op("add"), (Call(op("negative"), (a,)), a)), T)))
        gvs.append(gv)
    x = Var("x", T)
    e: Expr = x
    for gv in gvs:
        e = Call(gv, (e,))
    return Module(functions=(*funcs, (GlobalVar("main"), Function((x,), e, T))))


def higher_order(n: int) -> Module:
    """Deep higher-order nesting: `let %hk = fn (%a) { %h(k-1)(%a) }` closures, k = n/5."""
    from relay.ast import FuncType

    fty = FuncType((T,), T)
    x = Var("x", T)
    k = max(1, n // 5)
    hs = [Var(f"h{i}", fty) for i in range(k)]
    a0 = Var("a", T)
    values = [Function((a0,), Call(op("negative"), (a0,)), T)]
    for i in range(1, k):
        a = Var("a", T)
        values.append(Function((a,), Call(hs[i - 1], (a,)), T))
    body: object = Call(hs[-1], (x,))
    for i in range(k - 1, -1, -1):
        body = Let(hs[i], values[i], body)  # type: ignore[arg-type]
    return Module(functions=((GlobalVar("main"), Function((x,), body, T)),))  # type: ignore[arg-type]


SYNTHETIC: dict[str, Callable[[int], Module]] = {
    "chain": chain,
    "let chain": let_chain,
    "wide dag": wide_dag,
    "many functions": many_functions,
    "higher-order": higher_order,
}


# ---------------------------------------------------------------------------


def count_nodes(module: Module) -> int:
    return len(post_order([f for _, f in module.functions]))


def measure(
    name: str,
    module: Module,
    repeat: int,
    memory: bool,
    z3_check: bool = False,
    virtual_devices: tuple[str, ...] = (),
) -> dict[str, object]:
    config = solver.PlanConfig(z3_check=z3_check, virtual_devices=virtual_devices)
    runs = []
    result = None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        result = solver.plan(module, config)
        runs.append((time.perf_counter() - t) * 1000)
    assert result is not None
    best = min(range(repeat), key=lambda i: runs[i])
    del best
    peak = None
    if memory:
        gc.collect()
        tracemalloc.start()
        solver.plan(module, config)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    s = result.stats
    return {
        "name": name,
        "nodes": count_nodes(module),
        "total": statistics.median(runs),
        **{k: s.time_ms.get(k, 0.0) for k in ("infer", "collect", "presolve", "z3", "rewrite")},
        "classes": s.classes,
        "vars": s.variables,
        "cons": None if s.z3_constraints is None else s.z3_constraints + (s.z3_assumptions or 0),
        "peak": peak,
        "tvm": TVM_MS.get(name),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--z3-check", action="store_true", help="also run the TVM-mode Z3 re-check")
    args = parser.parse_args()
    z3 = args.z3_check
    rows = []
    if CORPUS.is_dir():
        for path in sorted(CORPUS.glob("*.relay")):
            stem = path.name[: -len(".relay")]
            if stem.endswith(".planned") or (args.quick and path.stat().st_size > 60_000):
                continue
            module = relay.parse_text(path.read_text(), name=str(path))
            rows.append(measure(stem, module, args.repeat, not args.no_memory, z3))
            print(f"  done {stem}", file=sys.stderr)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 50_000, 200_000]
    for kind, build in SYNTHETIC.items():
        for n in sizes:
            module = build(n)
            repeat = args.repeat if n <= 10_000 else 1
            rows.append(measure(f"{kind} {n}", module, repeat, not args.no_memory and n <= 50_000, z3))
            print(f"  done {kind} {n}", file=sys.stderr)
    if not args.quick:
        # TVM's yardsticks: 10,000 and 50,000 adds, 50,000 let-bound adds.
        rows.append(measure("adds 10000", chain(10_000), args.repeat, False, z3))
        rows.append(measure("adds 50000", chain(50_000), 1, False, z3))
        rows.append(measure("lets 50000", let_chain(0, lets=50_000), 1, False, z3))
        # One annotation with a meta reference in the middle of the 50k chain.
        # meta[VirtualDevice][0] is the cpu.
        rows.append(measure("adds 50000, one annotation", annotated_chain(50_000), 1, False, z3, ("cpu",)))
    header = (
        "case",
        "nodes",
        "total ms",
        "infer",
        "collect",
        "presolve",
        "z3",
        "rewrite",
        "classes",
        "z3 vars",
        "z3 cons",
        "peak MiB",
        "TVM ms",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        peak = f"{r['peak']:.0f}" if r["peak"] is not None else "-"
        tvm = str(r["tvm"]) if r["tvm"] is not None else ""
        print(
            f"| {r['name']} | {r['nodes']} | {r['total']:.0f} | {r['infer']:.0f} | {r['collect']:.0f} | "
            f"{r['presolve']:.0f} | {r['z3']:.0f} | {r['rewrite']:.0f} | {r['classes']} | "
            f"{r['vars'] if r['vars'] is not None else '-'} | {r['cons'] if r['cons'] is not None else '-'} | "
            f"{peak} | {tvm} |"
        )


if __name__ == "__main__":
    main()
