"""What the input checks (the TVMScript reader, the JSON check) cost, on the Relax corpus (docs/security.md).

Per corpus model, best of `--repeat`, in milliseconds:

- TVMScript (`NAME.py`): `check` is the reader (`tvmscript_guard.check_tvmscript`:
  Python's `ast.parse` plus the allowlist walk), `ast.parse` alone, and TVM's own
  parse of the checked text (`tvm.script.from_source`, TVM's cost in any case);
- JSON (`NAME.json`): `check` is `json_guard.check_json_graph` (parsing, the
  node-by-node check, writing the checked graph out again), `json only` the
  `json.loads` + `json.dumps` inside it, `load` TVM's `tvm.ir.load_json`, and
  `verify` TVM's well-formed checks that `load_checked_json` adds.

Run: .venv/bin/python benchmarks/guard.py [--repeat 3] [--only tv_swin_t]
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The repository first: benchmarks/service.py would shadow the service package.
sys.path.insert(0, str(ROOT))
from benchmarks.timing import best_ms

CORPUS = ROOT / "../shared/corpus/relax"
log = logging.getLogger("benchmarks.guard")


def _models(only: str | None) -> list[str]:
    names = sorted(p.stem for p in CORPUS.glob("*.py"))
    names += sorted(f"offload/{p.stem}" for p in CORPUS.glob("offload/*.py"))
    return [n for n in names if only is None or n.endswith(only)]


def run(repeat: int, only: str | None) -> list[dict[str, Any]]:
    import tvm
    from tvm.script.parser import ir as script_ir
    from tvm.script.parser import relax as script_relax
    from tvm.script.parser import tirx as script_tir

    from relay.span import SourceText
    from tvm_bridge.json_guard import check_json_graph, load_checked_json, verify_module
    from tvm_bridge.tvmscript_guard import check_tvmscript

    rows = []
    for name in _models(only):
        script = (CORPUS / f"{name}.py").read_text()
        graph = (CORPUS / f"{name}.json").read_text()
        source = SourceText(name, script)
        check_ms, checked = best_ms(lambda: check_tvmscript(script, source), repeat)  # noqa: B023
        ast_ms, _ = best_ms(lambda: ast.parse(script), repeat)  # noqa: B023
        extra: dict[str, Any] = {"I": script_ir, "R": script_relax, "T": script_tir}
        if checked.metadata is not None:
            extra["metadata"] = load_checked_json(checked.metadata)
        tvm_ms, _ = best_ms(lambda: tvm.script.from_source(checked.script, extra_vars=extra), repeat)  # noqa: B023
        jcheck_ms, _ = best_ms(lambda: check_json_graph(graph), repeat)  # noqa: B023
        jonly_ms, _ = best_ms(lambda: json.dumps(json.loads(graph)), repeat)  # noqa: B023
        load_ms, mod = best_ms(lambda: tvm.ir.load_json(graph), repeat)  # noqa: B023
        verify_ms, _ = best_ms(lambda: verify_module(mod), repeat)  # noqa: B023
        rows.append({
            "model": name, "py_kb": len(script) / 1024, "check": check_ms, "ast": ast_ms, "tvm_parse": tvm_ms,
            "json_kb": len(graph) / 1024, "jcheck": jcheck_ms, "jonly": jonly_ms, "load": load_ms,
            "verify": verify_ms,
        })
        log.info("%s done", name)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| model | .py KB | reader check | of it ast.parse | TVM parse | .json KB | JSON check | of it json | "
        "TVM load | TVM verify |"
    )
    lines = [head, "|" + " --- |" * 10]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['py_kb']:.0f} | {r['check']:.1f} | {r['ast']:.1f} | {r['tvm_parse']:.0f} | "
            f"{r['json_kb']:.0f} | {r['jcheck']:.1f} | {r['jonly']:.1f} | {r['load']:.1f} | {r['verify']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="one model (a suffix of its name, e.g. tv_swin_t)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(table(run(args.repeat, args.only)))


if __name__ == "__main__":
    main()
