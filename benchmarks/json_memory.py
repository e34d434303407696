"""A planning worker's RSS over a long run of varied requests with metadata
constants: parse_text -> print_text -> dump_json -> load_json, as the service
does with text bodies. Each request has 16 constants of shapes no other
request has, so every one adds a section to relay.tvm_json's type memory.

Prints RSS (MiB) after N requests with the memory's byte budget (8 MiB) and,
for comparison, with the budget lifted (each run in its own process).
Run: `python benchmarks/json_memory.py [--requests 4000]`.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay_io import print_table  # a sibling script

CHECKPOINTS = (100, 500, 1000, 2000, 4000, 8000, 16000)


def program(i: int) -> str:
    """Eight dense + bias_add pairs whose weights and biases are metadata constants."""
    from relay import ast as A
    from relay.tvm_json import encode_meta_section

    consts: list[A.Constant] = []
    lines: list[str] = []
    width = 10 + i % 89
    for k in range(8):
        rows = 10 + (i * 7 + k) % 89
        weight = A.NDArray("float32", (rows, width), bytes(4 * rows * width))
        bias = A.NDArray("float32", (rows,), bytes(4 * rows))
        consts.append(A.Constant(weight, checked_type=A.TensorType((rows, width), "float32")))
        consts.append(A.Constant(bias, checked_type=A.TensorType((rows,), "float32")))
        lines.append(f"  %{2 * k} = nn.dense(%x, meta[relay.Constant][{2 * k}], units=None);")
        lines.append(f"  %{2 * k + 1} = nn.bias_add(%{2 * k}, meta[relay.Constant][{2 * k + 1}]);")
    body = "\n".join(lines)
    return (
        f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, {width}), float32]) {{\n{body}\n  %15\n}}\n\n'
        "#[metadata]\n" + encode_meta_section({"relay.Constant": consts}) + "\n"
    )


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def worker(requests: int, unbounded: bool) -> None:
    """One process's run: prints the RSS at each checkpoint, space-separated."""
    import relay
    from relay.tvm_json.memory import TYPE_MEMORY

    if unbounded:
        TYPE_MEMORY.max_bytes = 1 << 60
    marks = []
    for i in range(requests):
        module = relay.parse_text(program(i))
        relay.print_text(module)
        relay.load_json(relay.dump_json(module))
        if i + 1 in CHECKPOINTS:
            gc.collect()
            marks.append(f"{rss_mib():.1f}")
    print(" ".join(marks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--worker", choices=("bounded", "unbounded"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.requests, args.worker == "unbounded")
        return
    points = [n for n in CHECKPOINTS if n <= args.requests]
    rows = []
    for label in ("bounded", "unbounded"):
        out = subprocess.run(
            [sys.executable, __file__, "--requests", str(args.requests), "--worker", label],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        rows.append(["8 MiB budget" if label == "bounded" else "budget lifted", *out])
    print_table(["RSS MiB after N requests", *map(str, points)], rows)


if __name__ == "__main__":
    main()
