"""How long `devplan diff` / POST /plan/diff take to match hostile hand-written reports.

Each report is a chain of `add`s where every operator also reads the first parameter; on the
`after` side each also reads the second, so only the parameters match exactly and every operator
goes through the propagation step, comparing itself with every free `add` of the other side (the
worst case for it: cubic before the anchors were memoized and the candidates bounded). Prints one row per size: placements per side and
the seconds `service.diff.diff_reports` took. Run: `python benchmarks/diff_matching.py [N ...]`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from service import diff


def hostile_report(n: int, both: bool) -> dict[str, Any]:
    """`n` placements: parameters 0 and 1, then node i adds node i-1 and parameter 0 (and
    parameter 1 when `both`)."""
    placements: list[dict[str, Any]] = [
        {
            "node": k,
            "kind": "parameter",
            "name": f"p{k}",
            "index": k,
            "function": "main",
            "device": "cpu",
            "inputs": [],
        }
        for k in (0, 1)
    ]
    for i in range(2, n):
        inputs = [i - 1, 0, 1] if both else [i - 1, 0]
        placements.append(
            {
                "node": i,
                "kind": "operator",
                "name": "add",
                "function": "main",
                "device": "cpu",
                "inputs": inputs,
            }
        )
    return {"report_version": 1, "placements": placements, "copies": [], "prediction": {}}


def main(sizes: list[int]) -> None:
    print("| placements per side | seconds | matched |")
    print("| ---: | ---: | ---: |")
    for n in sizes:
        before, after = hostile_report(n, False), hostile_report(n, True)
        start = time.perf_counter()
        result = diff.diff_reports(before, after)
        print(f"| {n} | {time.perf_counter() - start:.3f} | {result['matched']} |")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [400, 4_000, 40_000])
