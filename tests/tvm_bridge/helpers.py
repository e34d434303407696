"""Test helpers for the bridge: corpus loading, hand-made two-device plans,
random inputs, and the compile-and-run round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import relay
from relay import ast
from relay.device import Target, VirtualDevice, parse_target
from relay.traverse import children, post_order, rewrite, with_children
from tvm_bridge.check import random_inputs, retarget

__all__ = ["random_inputs", "retarget"]  # re-exported for the tests

CORPUS = Path(__file__).resolve().parents[2] / "../shared/corpus"

LLVM = parse_target("llvm")
CPU0 = VirtualDevice(1, 0, LLVM, "")
CPU1 = VirtualDevice(1, 1, LLVM, "")
CUDA0 = VirtualDevice(2, 0, parse_target("cuda"), "")


def corpus_path(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        pytest.skip(f"corpus file {name} not found (expected ../shared/corpus next to the repo)")
    return path


# ---------------------------------------------------------------- metadata fallback


def _decode_meta_section(text: str) -> tuple[str, dict[str, list[Any]]]:
    """Split off a `#[metadata]` section and decode the entries the bridge
    needs (VirtualDevice, runtime.BoxInt) with the standard library; used
    only while `relay.tvm_json` is not available."""
    head, _, section = text.partition("#[metadata]")
    nodes = json.loads(section)["nodes"]

    def string(i: int) -> str:
        return str(nodes[i].get("repr_str", "")) if i else ""

    def value(i: int) -> Any:
        node = nodes[i]
        key = node["type_key"]
        if key in ("runtime.BoxInt", "IntImm"):
            return int(node.get("repr_str", node.get("attrs", {}).get("value", 0)))
        if key == "runtime.String":
            return node.get("repr_str", "")
        if key == "Array":
            return tuple(value(j) for j in node.get("data", []))
        return node.get("repr_str")

    def target(i: int) -> Target | None:
        if not i:
            return None
        attrs = nodes[i]["attrs"]
        kind = string(int(attrs["kind"]))
        keys = tuple(value(int(attrs["keys"])) or ())
        amap = nodes[int(attrs["attrs"])]
        pairs = tuple(zip(amap.get("keys", []), (value(j) for j in amap.get("data", []))))
        return Target(kind, keys, pairs, target(int(attrs["host"])))

    tables: dict[str, list[Any]] = {}
    root = nodes[json.loads(section)["root"]]
    for kind, index in zip(root.get("keys", []), root.get("data", [])):
        entries = []
        for j in nodes[index].get("data", []):
            node = nodes[j]
            if node["type_key"] == "VirtualDevice":
                a = node["attrs"]
                entries.append(
                    VirtualDevice(
                        int(a["device_type_int"]),
                        int(a["virtual_device_id"]),
                        target(int(a["target"])),
                        string(int(a["memory_scope"])),
                    )
                )
            else:
                entries.append(value(j))
        tables[kind] = entries
    return head, tables


def load_corpus(name: str) -> ast.Module:
    """Parse a corpus `.relay` file (with its metadata section)."""
    text = corpus_path(name).read_text()
    try:
        return relay.parse_text(text, name=name)
    except ModuleNotFoundError:
        if "relay.Constant" in text:
            pytest.skip(f"{name}: constants in metadata need relay.tvm_json")
        head, tables = _decode_meta_section(text)
        return relay.parse_text(head, name=name, meta=tables)


# ---------------------------------------------------------------- two-device plans


def split_plan(
    module: ast.Module, prefix: int, first: VirtualDevice = CPU0, rest: VirtualDevice = CPU1
) -> ast.Module:
    """A planned version of a single-function, graph-form module: the first
    `prefix` computations (post order) on `first`, the others on `rest`, a
    `device_copy` on every edge from `first` to `rest`, parameters on the
    device of their first consumer. Written for the tests; the real plans
    come from `solver.plan`."""
    main = module["main"]
    nodes = [n for n in post_order(main.body) if isinstance(n, (ast.Call, ast.Tuple, ast.TupleGetItem))]
    device: dict[int, VirtualDevice] = {id(n): (first if i < prefix else rest) for i, n in enumerate(nodes)}
    for n in post_order(main.body):
        # A let variable lives where its value was computed.
        if isinstance(n, ast.Let) and id(n.value) in device:
            device[id(n.var)] = device[id(n.value)]
    for n in nodes:
        for kid in children(n):
            if isinstance(kid, ast.Var) and id(kid) not in device:
                device[id(kid)] = device[id(n)]
    new_params = {
        id(p): ast.Var(p.name, p.type_annotation, device.get(id(p), rest), span=p.span) for p in main.params
    }
    copies: dict[int, ast.Expr] = {}

    def visit(original: ast.Expr, rebuilt: ast.Expr) -> ast.Expr:
        if isinstance(original, ast.Var) and id(original) in new_params:
            return new_params[id(original)]
        if id(original) not in device or isinstance(original, ast.Var):
            return rebuilt
        here = device[id(original)]
        old_kids, new_kids = children(original), list(children(rebuilt))
        for i, kid in enumerate(old_kids):
            there = device.get(id(kid))
            if there is not None and there != here:
                key = id(kid) * 2 + (here == rest)
                if key not in copies:
                    copies[key] = ast.device_copy(new_kids[i], there, here)
                new_kids[i] = copies[key]
        return with_children(rebuilt, tuple(new_kids))

    body = rewrite(main.body, visit)
    if device.get(id(main.body), rest) != rest:
        body = ast.device_copy(body, device[id(main.body)], rest)
    func = ast.Function(
        tuple(new_params[id(p)] for p in main.params),
        body,
        main.ret_type,
        main.type_params,
        main.attrs,
        rest,
        span=main.span,
    )
    functions = tuple((gv, func if f is main else f) for gv, f in module.functions)
    meta = dict(module.meta)
    meta["VirtualDevice"] = [first, rest]
    return ast.Module(functions, module.type_definitions, meta)


def copy_params_plan(module: ast.Module, src: VirtualDevice = CPU0, dst: VirtualDevice = CPU1) -> ast.Module:
    """`@main` with its parameters on `src` and everything else on `dst`:
    every use of a parameter goes through one `device_copy`."""
    main = module["main"]
    params = {id(p): ast.Var(p.name, p.type_annotation, src, span=p.span) for p in main.params}
    copies = {k: ast.device_copy(v, src, dst) for k, v in params.items()}

    def visit(original: ast.Expr, rebuilt: ast.Expr) -> ast.Expr:
        if isinstance(original, ast.Var) and id(original) in copies:
            return copies[id(original)]
        return rebuilt

    body = rewrite(main.body, visit)
    func = ast.Function(tuple(params[id(p)] for p in main.params), body, main.ret_type, (), main.attrs, dst)
    functions = tuple((gv, func if f is main else f) for gv, f in module.functions)
    return ast.Module(functions, module.type_definitions, {"VirtualDevice": [src, dst]})


def compile_and_run(module: ast.Module, inputs: list[np.ndarray]) -> Any:
    import tvm_bridge

    return tvm_bridge.run(tvm_bridge.compile(tvm_bridge.to_relax(module)), inputs)
