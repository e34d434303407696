"""Compare two or more source trees of devplan on the planner and Relay I/O.

Refactors must keep the planner and the parser/printer within 10% of
before. Timing one tree and then the other on a shared machine measures the
load as much as the code, so this runs the trees alternately, one fresh
process per tree per round, and prints the median of the rounds per case
with the ratio to the first tree (CPU time of this process, best of
`--inner` runs, so other load on a shared machine distorts it less):

    git archive <old-commit> | tar -x -C /tmp/devplan_old
    python benchmarks/compare_trees.py --tree old=/tmp/devplan_old --tree new=. --rounds 10

Cases: `solver.plan` (TVM mode) of the corpus' resnet50 and densenet121 and
of a 50k-node call chain; `relay.print_text`, `relay.parse_text`,
`relay.verify` and `relay.structural_equal` of the same three modules.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()

# Runs inside the tree under test (argv: tree, corpus); prints {case: ms}.
_WORKER = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[1])
import relay, solver
from relay.ast import Call, Function, GlobalVar, Module, TensorType, Var, op

def chain(n):
    t = TensorType((4,), "float32")
    x = Var("x", t)
    e = x
    for _ in range(n):
        e = Call(op("add"), (e, x))
    return Module(functions=((GlobalVar("main"), Function((x,), e, t)),))

def timed(fn):
    best = None
    for _ in range(INNER):
        gc.collect()
        start = time.process_time()
        fn()
        ms = (time.process_time() - start) * 1000
        best = ms if best is None else min(best, ms)
    return best

corpus = sys.argv[2]
INNER = int(sys.argv[3])
modules = {}
texts = {}
for name in ("resnet50", "densenet121"):
    with open(f"{corpus}/{name}.relay") as f:
        texts[name] = f.read()
    modules[name] = relay.parse_text(texts[name], name=name)
modules["chain 50000"] = chain(50_000)
texts["chain 50000"] = relay.print_text(modules["chain 50000"])
out = {}
config = solver.PlanConfig()
for name, module in modules.items():
    out[f"plan {name}"] = timed(lambda: solver.plan(module, config))
for name, module in modules.items():
    out[f"print {name}"] = timed(lambda: relay.print_text(module))
    out[f"parse {name}"] = timed(lambda: relay.parse_text(texts[name], name=name))
    out[f"verify {name}"] = timed(lambda: relay.verify(module))
    twin = relay.parse_text(texts[name], name=name)
    out[f"equal {name}"] = timed(lambda: relay.structural_equal(module, twin))
print(json.dumps(out))
"""


def run_tree(tree: Path, inner: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, str(tree), str(CORPUS), str(inner)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH (the first is the baseline)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--inner", type=int, default=3, help="runs per case in one process (best taken)")
    args = parser.parse_args()
    trees = [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in args.tree)]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, path in trees:
            runs[name].append(run_tree(path, args.inner))
    cases = list(runs[trees[0][0]][0])
    header = ["case"] + [f"{name} ms" for name, _ in trees] + [f"{name}/{trees[0][0]}" for name, _ in trees[1:]]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for case in cases:
        medians = [statistics.median(r[case] for r in runs[name]) for name, _ in trees]
        ratios = [f"{m / medians[0]:.2f}" for m in medians[1:]]
        print("| " + " | ".join([case, *(f"{m:.1f}" for m in medians), *ratios]) + " |")
    print(
        f"\nCPU ms (process time, so other load on the machine counts less): best of {args.inner} "
        f"in one process, median of {args.rounds} rounds, trees run alternately"
    )


if __name__ == "__main__":
    main()
