"""Type inference time: `relay.infer_types` on corpus models and long chains.

Parsing is excluded (each module is parsed or built once, then inferred
`--repeat` times; the median is shown). Targets: resnet50
under 30 ms, densenet121 under 60 ms, a chain of 200k bindings under 5 s.
Run: `python benchmarks/infer.py [--repeat N] [--quick]`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import relay
from relay import ast as A

sys.path.insert(0, str(Path(__file__).resolve().parent))
from relay_io import best_time  # a sibling script: the median of 3 or more runs

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
MODELS = ("mlp", "resnet18", "resnet50", "mobilenet", "inception_v3", "densenet121", "lstm", "resnet18.fused")
TARGETS_MS = {"resnet50": 30.0, "densenet121": 60.0, "chain 200k": 5000.0}


def chain(n: int) -> A.Module:
    """`%i = add(%i-1, %x)` for n bindings (nested calls, as a parsed chain is)."""
    x = A.Var("x", A.TensorType((4, 4), "float32"))
    expr: A.Expr = x
    for i in range(n):
        expr = A.Call(A.op("add" if i % 2 else "multiply"), (expr, x), A.Attrs())
    return A.Module(functions=((A.GlobalVar("main"), A.Function((x,), expr)),))


def nested_lets(n: int) -> A.Module:
    x = A.Var("x", A.TensorType((4, 4), "float32"))
    binders = [A.Var(f"v{i}") for i in range(n)]
    body: A.Expr = binders[-1]
    for i in range(n - 1, -1, -1):
        body = A.Let(binders[i], A.Call(A.op("negative"), (binders[i - 1] if i else x,), A.Attrs()), body)
    return A.Module(functions=((A.GlobalVar("main"), A.Function((x,), body)),))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="skip the 200k chain")
    args = parser.parse_args()

    cases: list[tuple[str, A.Module, int]] = []
    for name in MODELS:
        path = CORPUS / f"{name}.relay"
        if path.exists():
            cases.append((name, relay.parse_text(path.read_text(), name=path.name), args.repeat))
    cases.append(("nested lets 20k", nested_lets(20_000), max(3, args.repeat // 2)))
    if not args.quick:
        cases.append(("chain 200k", chain(200_000), 3))

    print("| module | nodes | infer ms (median of n) | n | target ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, module, repeat in cases:
        nodes = len(relay.post_order([f for _, f in module.functions]))
        ms = best_time(lambda m=module: relay.infer_types(m), repeat) * 1e3  # type: ignore[misc]
        target = TARGETS_MS.get(name)
        mark = "" if target is None else f"{target:.0f} ({'ok' if ms < target else 'MISSED'})"
        print(f"| {name} | {nodes} | {ms:.1f} | {repeat} | {mark} |")


if __name__ == "__main__":
    main()
