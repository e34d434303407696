"""Relay I/O throughput: text parse/print and TVM JSON load/dump.

Prints one table row per corpus file (text with its JSON twin where there is
one) and for generated chains of 10k and 100k graph bindings. Throughput is
input bytes per second (print: output bytes); peak memory is tracemalloc's
peak while parsing. Run: `python benchmarks/relay_io.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import relay
from benchmarks.timing import timed_runs

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def best_time(fn: Callable[[], object], repeat: int) -> float:
    """Seconds: the fastest of 1 or 2 runs, the median of 3 or more (each after a collection)."""
    times, _ = timed_runs(fn, repeat, collect=True)
    return min(times) if repeat < 3 else statistics.median(times)


def peak_mb(fn: Callable[[], object]) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1e6


def chain_text(n: int) -> str:
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {"]
    lines.append("  %0 = negative(%x) /* ty=Tensor[(4), float32] */;")
    lines += [f"  %{i} = add(%{i - 1}, %x) /* ty=Tensor[(4), float32] */;" for i in range(1, n)]
    lines += [f"  %{n - 1}", "}"]
    return "\n".join(lines) + "\n"


def row(name: str, text: str, json_text: str | None, repeat: int) -> list[str]:
    module = relay.parse_text(text, name=name)
    parse_s = best_time(lambda: relay.parse_text(text, name=name), repeat)
    printed = relay.print_text(module)
    print_s = best_time(lambda: relay.print_text(module), repeat)
    mem = peak_mb(lambda: relay.parse_text(text, name=name))
    cells = [
        name,
        f"{len(text) / 1e6:.3f}",
        f"{parse_s * 1e3:.1f}",
        f"{len(text) / parse_s / 1e6:.2f}",
        f"{len(printed) / print_s / 1e6:.2f}",
    ]
    if json_text is not None:
        jmod = relay.load_json(json_text)
        load_s = best_time(lambda: relay.load_json(json_text), repeat)
        dumped = relay.dump_json(jmod)
        dump_s = best_time(lambda: relay.dump_json(jmod), repeat)
        cells += [f"{len(json_text) / load_s / 1e6:.2f}", f"{len(dumped) / dump_s / 1e6:.2f}"]
    else:
        cells += ["-", "-"]
    cells.append(f"{mem:.1f}")
    return cells


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell, `|` between them."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a few corpus files only")
    args = parser.parse_args()
    header = [
        "input",
        "MB",
        "parse ms",
        "parse MB/s",
        "print MB/s",
        "json load MB/s",
        "json dump MB/s",
        "peak MB",
    ]
    rows = []
    if CORPUS.is_dir():
        names = sorted(p for p in CORPUS.glob("*.relay"))
        if args.quick:
            names = [p for p in names if p.stem in ("mlp", "resnet50", "mobilenet.anf", "squeezenet.bound")]
        for path in names:
            json_path = path.with_suffix(".json")
            json_text = json_path.read_text() if json_path.exists() else None
            rows.append(row(path.name, path.read_text(), json_text, args.repeat))
    for n in (10_000, 100_000):
        rows.append(row(f"chain {n // 1000}k", chain_text(n), None, 1 if n > 10_000 else args.repeat))
    print_table(header, rows)


if __name__ == "__main__":
    main()
