"""Write tvm_bridge/tvmscript_guard_table.py: the attribute chains TVMScript may use.

Run once per TVM version, from the repository root, with TVM installed:

    .venv/bin/python scripts/gen_tvmscript_allowlist.py

The table is every `I.` / `R.` / `T.` chain that occurs in what TVM prints
(the Relax corpus as exported, its TIR after `LegalizeOps`, what our bridge
lowers from the Relay corpus, planned modules with vdevices) plus TVMScript's
documented functions (the `__all__` of TVM's `I`, `R` and `T` parser modules
and of `R`'s operator namespaces such as `R.nn`), minus `DENIED`. An entry
is never a module or a namespace object (their members are listed one by
one), never a name starting with `_`. The script prints where each part
came from; the test in tests/security/ checks the checked-in table against TVM.
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tvm
from tvm import relax
from tvm.script.parser import ir as script_ir
from tvm.script.parser import relax as script_relax
from tvm.script.parser import tirx as script_tir

import relay
import tvm_bridge
from tvm_bridge.tvmscript_guard import attribute_chain

CORPUS = ROOT / "../shared/corpus"
OUT = ROOT / "tvm_bridge/tvmscript_guard_table.py"
LLVM_ONLY = {"cpu": "llvm", "cuda": "llvm"}

# Never in the table, whatever TVM prints or documents: decorators (allowed
# only as decorators), what puts or calls Python functions (`I.pyfunc`,
# `R.call_py_func`, macros, `R.emit_te` with its te function, `T.comm_reducer`
# with its combiner), what changes the parser's own namespaces, and two that
# look an attribute up by a caller's string (`T.iter_var`).
DENIED = frozenset(
    {
        "I.ir_module",
        "R.function",
        "T.prim_func",
        "I.pyfunc",
        "R.call_py_func",
        "R.macro",
        "T.macro",
        "T.inline",
        "T.jit",
        "R.rewriter",
        "R.emit_te",
        "T.comm_reducer",
        "T.meta_class",
        "T.register_script_namespace",
        "T.iter_var",
        "T.block_name_suffix_context",
        "I.meta_var",
        "T.meta_var",
        "T.scalar_wrapper",
    }
)
DECORATORS = ("R.function", "T.prim_func")
CLASS_CALLS = ("I.module_global_infos", "I.module_attrs")
# `with` heads and `for` ranges: what TVM prints, and the frame managers the
# parser modules document (their return annotations and docs name a frame).
FRAMES = (
    "R.dataflow",
    "R.If",
    "R.Then",
    "R.Else",
    "T.sblock",
    "T.init",
    "T.launch_thread",
    "T.attr",
    "T.hint",
    "T.Assert",
    "T.If",
    "T.Then",
    "T.Else",
    "T.While",
    "T.seq_scope",
)
LOOPS = ("range", "T.serial", "T.parallel", "T.grid", "T.vectorized", "T.unroll", "T.thread_binding")
# R's documented operator namespaces (R.nn.conv2d, ...): listed member by member.
R_NAMESPACES = ("builtin", "ccl", "dist", "grad", "image", "memory", "nn", "vision", "vm")
# Documented members of a namespace class TVM prints through (`T.axis.remap`).
MEMBERS = {"T.axis": ("spatial", "reduce", "scan", "opaque", "remap")}

log = logging.getLogger("gen_tvmscript_allowlist")


class Collected:
    """Chains, `with` heads, `for` ranges and local attribute names seen in printed text."""

    def __init__(self) -> None:
        self.chains: Counter[str] = Counter()
        self.frames: Counter[str] = Counter()
        self.loops: Counter[str] = Counter()
        self.local_attrs: Counter[str] = Counter()

    def text(self, text: str) -> None:
        tree = ast.parse(text)
        inner: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                inner.add(id(node.value))
            if isinstance(node, ast.With):
                for item in node.items:
                    if isinstance(item.context_expr, ast.Call):
                        self.frames[attribute_chain(item.context_expr.func) or "?"] += 1
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
                self.loops[attribute_chain(node.iter.func) or "?"] += 1
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and id(node) not in inner:
                chain = attribute_chain(node)
                if chain is None:
                    continue
                head, _, rest = chain.partition(".")
                if head in ("I", "R", "T"):
                    self.chains[chain] += 1
                elif head not in ("cls", "tvm") and "." not in rest:
                    self.local_attrs[rest] += 1


def printed(collected: Collected) -> None:
    """Feed every printed text we can make into `collected`."""
    from service.relax_planning import plan_relax
    from solver import PlanConfig

    relax_dir = CORPUS / "relax"
    for path in sorted([*relax_dir.glob("*.py"), *relax_dir.glob("offload/*.py")]):
        collected.text(path.read_text())
        log.info("corpus %s", path.name)
    for path in sorted([*relax_dir.glob("*.json"), *relax_dir.glob("offload/*.json")]):
        if path.name.endswith(".accelerate.json"):
            continue
        mod = tvm.ir.load_json(path.read_text())
        collected.text(relax.transform.LegalizeOps()(mod).script(show_meta=True))
        log.info("legalized %s", path.name)
    plan = PlanConfig(
        mode="optimize",
        default_device="cuda",
        host_device="cpu",
        timeout_ms=60_000,
        constraints=({"select": {"op": "relax.nn.softmax"}, "device": "cpu"},),
    )
    for path in sorted(CORPUS.glob("*.relay")):
        if ".bound." in path.name or ".planned." in path.name:
            continue  # the same operators as their unbound, unplanned originals
        try:
            lowered = tvm_bridge.to_relax(relay.parse_text(path.read_text(), name=path.name), LLVM_ONLY)
        except Exception as err:  # noqa: BLE001 - a model the bridge cannot lower adds nothing
            log.info("bridge skips %s: %s", path.name, type(err).__name__)
            continue
        collected.text(lowered.script(show_meta=True))
        collected.text(relax.transform.LegalizeOps()(lowered).script(show_meta=True))
        try:
            planned = plan_relax(lowered, plan)
            collected.text(planned.module.script(show_meta=True))
        except Exception as err:  # noqa: BLE001 - an unplannable model still lowered
            log.info("planner skips %s: %s", path.name, type(err).__name__)
        log.info("bridge %s", path.name)


def documented() -> dict[str, Any]:
    """Chain -> object for TVMScript's documented functions and types."""
    out: dict[str, Any] = {}
    spaces: list[tuple[str, Any]] = [("I", script_ir), ("R", script_relax), ("T", script_tir)]
    spaces += [(f"R.{name}", getattr(script_relax, name)) for name in R_NAMESPACES]
    for prefix, module in spaces:
        names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        for name in names:
            if name.startswith("_") or not hasattr(module, name):
                continue
            out[f"{prefix}.{name}"] = getattr(module, name)
    for space, members in MEMBERS.items():
        for name in members:
            out[f"{space}.{name}"] = getattr(resolve(space), name)
    return out


def resolve(chain: str) -> Any:
    heads = {"I": script_ir, "R": script_relax, "T": script_tir}
    parts = chain.split(".")
    value: Any = heads[parts[0]]
    for part in parts[1:]:
        value = getattr(value, part)
    return value


def is_value(obj: Any) -> bool:
    """A function, a type or a callable TVMScript value; not a module or a
    namespace object (an instance of a class named `...Namespace`, layout spec builders)."""
    if inspect.ismodule(obj):
        return False
    name = type(obj).__name__
    if name.endswith("Namespace") or name == "_SpecBuilder":
        return False
    return callable(obj) or inspect.isclass(obj)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    collected = Collected()
    printed(collected)
    docs = documented()
    chains: set[str] = set()
    for chain in [*collected.chains, *docs, *FRAMES, *LOOPS[1:], *CLASS_CALLS]:
        if chain in DENIED or any(p.startswith("_") for p in chain.split(".")):
            continue
        try:
            obj = resolve(chain)
        except AttributeError:
            log.info("not in this TVM: %s", chain)
            continue
        if is_value(obj):
            chains.add(chain)
        else:
            log.info("namespace, not a value: %s", chain)
    unknown_frames = set(collected.frames) - set(FRAMES)
    unknown_loops = set(collected.loops) - set(LOOPS)
    if unknown_frames or unknown_loops:
        raise SystemExit(f"TVM prints heads this script does not list: {unknown_frames | unknown_loops}")
    frames = sorted(f for f in FRAMES if f in chains)
    loops = sorted(["range", *(f for f in LOOPS if f in chains)])
    local_attrs = sorted(a for a in collected.local_attrs if not a.startswith("_"))
    printed_only = sorted(set(collected.chains) - set(docs) - DENIED)
    log.info(
        "%d chains (%d printed, %d printed but undocumented: %s)",
        len(chains),
        len(collected.chains),
        len(printed_only),
        ", ".join(printed_only),
    )
    OUT.write_text(render(sorted(chains), frames, loops, local_attrs))
    log.info("wrote %s", OUT.relative_to(ROOT))


def render(chains: list[str], frames: list[str], loops: list[str], local_attrs: list[str]) -> str:
    def block(name: str, doc: str, items: list[str] | tuple[str, ...]) -> str:
        body = "".join(f"    {json.dumps(item)},\n" for item in items)
        return f"# {doc}\n{name}: frozenset[str] = frozenset({{\n{body}}})\n"

    version = tvm.__version__
    return (
        f'"""The TVMScript allowlist (TVM {version}): generated by scripts/gen_tvmscript_allowlist.py, do not edit.\n\n'
        "What `tvm_bridge.tvmscript_guard` lets through to TVM's parser: whole attribute chains\n"
        "(never a namespace, a module or a `_` name), the decorators, class-body calls, `with`\n"
        'heads and `for` ranges, and the attributes a local value may be read through.\n"""\n\n'
        + block("CHAINS", "Whole attribute chains usable as values and calls.", chains)
        + "\n"
        + block(
            "DECORATORS",
            "Function decorators (bare or with literal keywords); the class takes `@I.ir_module`.",
            DECORATORS,
        )
        + "\n"
        + block("CLASS_CALLS", "Calls allowed as statements of the class body.", CLASS_CALLS)
        + "\n"
        + block("FRAMES", "`with` heads.", frames)
        + "\n"
        + block("LOOPS", "`for` ranges.", loops)
        + "\n"
        + block("LOCAL_ATTRS", "Attributes read off a value the module bound (`A.data`).", local_attrs)
    )


if __name__ == "__main__":
    main()
