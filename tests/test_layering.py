"""The package layering of architecture.md, read from the source.

Every import statement counts, including the ones inside functions: a
function-level import that closes a cycle is still a cycle, only a later one.
An import `from pkg import name` is an edge to the module `pkg.name` when that
is a module, else to `pkg` itself. Implicit imports of parent packages are not
edges (every module imports its package's `__init__` first; that is not a
design choice).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("relay", "solver", "service", "tvm_bridge", "devplan")
# Which package may import which (architecture.md: the arrows point one way).
ALLOWED = {
    "relay": set(),
    "solver": {"relay"},
    "tvm_bridge": {"relay"},
    "service": {"relay", "solver", "tvm_bridge"},
    # The public Python API on top of everything; nothing inside imports it.
    "devplan": {"relay", "solver", "service", "tvm_bridge"},
}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _target(name: str) -> str | None:
    """The longest known module that `name` starts with (`relay.ast.Call` -> `relay.ast`)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports_of(name: str) -> set[str]:
    """The project modules `name` imports anywhere in its text."""
    tree = ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))
    package = name if _is_package(name) else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _target(alias.name)
                if target is not None:
                    out.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                target = _target(f"{base}.{alias.name}") or _target(base)
                if target is not None:
                    out.add(target)
    out.discard(name)
    return out


GRAPH = {name: imports_of(name) for name in MODULES}


def _cycles(scope: str) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module
    among the modules of package `scope` (Tarjan's algorithm, iterative)."""
    nodes = [n for n in GRAPH if n == scope or n.startswith(scope + ".")]
    inside = set(nodes)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root] & inside)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
                continue
            if child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(GRAPH[child] & inside))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def test_the_graph_sees_function_level_imports() -> None:
    # the checker itself: a module whose only import of another sits in a function body
    # still has the edge (service.cli imports tvm_bridge.profile lazily, for `devplan profile`)
    assert any(t.startswith("tvm_bridge") for t in GRAPH["service.cli"])


@pytest.mark.parametrize("scope", ["solver", "service"])
def test_no_import_cycle(scope: str) -> None:
    assert _cycles(scope) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_one_way(package: str) -> None:
    wrong = sorted(
        (name, target)
        for name, targets in GRAPH.items()
        if name.split(".")[0] == package
        for target in targets
        if target.split(".")[0] not in ALLOWED[package] | {package}
    )
    assert wrong == []
