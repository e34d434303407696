"""A picture of a placement: the data-flow graph of each
function as Graphviz DOT, rendered to SVG by `dot`, readable at screen size.

Nodes are the input module's operator calls, calls of functions, `if`/`match`,
parameters and each function's result, labelled with their node ids (the
post-order ids of `solver.node_ids`) and filled with their device's color.
Weights and constants fold into their consumer (`_fold`: a constant, or a
parameter whose one consumer is an operator taking it after its first
argument): the consumer shows `+N weights`, lists the folded ids in its tooltip
and carries a `fold-{ID}` class per weight, so the explore page can still pin
them. Copies are red edges labelled with the bytes copied (from inferred
types; their tooltips give the predicted copy time); pinned nodes (annotations,
request pins) are outlined. Over `max_nodes` operators (60), runs of operators
on one device (a chain with no branch) collapse into one node with its count
and predicted time (the sum of its operators' times in the placement record);
copies and pins never collapse, and `expand` lists node ids whose runs stay
open. The legend explains every mark. Every name, device and time shown is
the placement record's (service.record): nothing is priced here.

The SVG is structured for tests and the explore page: every node is
`<g id="n{ID}" class="node ...">` (a collapsed run `id="g{first ID}"` with the
class `collapsed count-{N}`), its device in a class `dev-{index}`; every copy
edge has the class `copy`; legend entries are `legend-device` or `legend-mark`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import resource
import shutil
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relay import ast
from relay.ast import Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, Var
from relay.traverse import children
from service.record import CopyEntry, PlacementRecord, placement_head
from service.units import bytes_text
from solver import input_roots, node_ids, wrapper_op

MAX_NODES = 60
"""Operators shown one by one; above it, single-device runs collapse (was 250)."""

# Graphviz runs under these limits (DEVPLAN_PICTURE_CPU_S, DEVPLAN_PICTURE_MEMORY_BYTES): its layout
# is superlinear in the long edges a node with many readers makes, and measured, a chain of 3,000
# operators that each also read the first value took 60 s and 4.7 GiB.
PICTURE_CPU_S = 20.0
PICTURE_MEMORY_BYTES = 1024 * 1024 * 1024
# What is drawn at most (DEVPLAN_PICTURE_MAX_DRAWN_NODES, ..._EDGES, ..._EDGES_PER_NODE): measured
# here, one value read by 50 operators of a chain lays out in 0.2 s, read by 100 in over 30 s.
MAX_DRAWN_NODES = 2_000
MAX_DRAWN_EDGES = 4_000
MAX_EDGES_PER_NODE = 50

# Fill colors, one per device in the legend's order (cpu first, then by name).
_PALETTE = ("#9ecae1", "#a1d99b", "#fdd0a2", "#dadaeb", "#fcbba1", "#c7e9c0", "#fde0ef", "#d9d9d9")
_COPY_COLOR = "#c0392b"


class PictureUnavailable(Exception):
    """Graphviz `dot` is not installed (the route answers 503 picture-unavailable)."""


class PictureLimit(Exception):
    """Graphviz ran past its CPU, wall-clock or memory limit (the route answers 504 picture-limit)."""


@dataclass(frozen=True, slots=True)
class RenderLimits:
    """What one Graphviz run may use: CPU seconds (RLIMIT_CPU; the wall clock allows twice as
    long) and address space (RLIMIT_AS)."""

    cpu_s: float = PICTURE_CPU_S
    memory_bytes: int = PICTURE_MEMORY_BYTES


@dataclass(frozen=True, slots=True)
class DensityBounds:
    """The largest graph handed to Graphviz; a denser one is refused before it starts."""

    nodes: int = MAX_DRAWN_NODES
    edges: int = MAX_DRAWN_EDGES
    edges_per_node: int = MAX_EDGES_PER_NODE


def too_dense(picture: Mapping[str, Any], bounds: DensityBounds) -> str | None:
    """Why a picture (`Picture.to_json()`) is too dense to draw, naming its counts and the
    bounds; None when Graphviz may draw it."""
    nodes, edges, degree = (
        picture.get("nodes", 0),
        picture.get("edges", 0),
        picture.get("max_edges_per_node", 0),
    )
    over = []
    if nodes > bounds.nodes:
        over.append(f"{nodes} nodes (bound {bounds.nodes}, DEVPLAN_PICTURE_MAX_DRAWN_NODES)")
    if edges > bounds.edges:
        over.append(f"{edges} edges (bound {bounds.edges}, DEVPLAN_PICTURE_MAX_DRAWN_EDGES)")
    if degree > bounds.edges_per_node:
        name = str(picture.get("densest_node", ""))
        where = f"node {name[1:]}" if name[:1] == "n" and name[1:].isdigit() else f"node {name}"
        over.append(
            f"{degree} edges at {where} (bound {bounds.edges_per_node}, DEVPLAN_PICTURE_MAX_EDGES_PER_NODE)"
        )
    if not over:
        return None
    return (
        "the graph is too dense to draw: " + "; ".join(over) + " (lower max_nodes to collapse more runs, "
        "or ask for the placements as JSON)"
    )


def _limit(pid: int, limits: RenderLimits) -> None:
    """Set Graphviz's rlimits. It is started with no input yet and blocks reading it, so the
    limits are in place before it does any work (no pre-exec hook in this threaded process)."""
    cpu = max(1, math.ceil(limits.cpu_s))
    resource.prlimit(pid, resource.RLIMIT_CPU, (cpu, cpu + 1))
    if limits.memory_bytes:
        resource.prlimit(pid, resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))


def dot_path() -> str | None:
    """Where `dot` is, or None."""
    return shutil.which("dot")


def render_svg(dot_text: str, limits: RenderLimits | None = None) -> str:
    """DOT -> SVG with Graphviz under `limits`; raises PictureUnavailable without `dot`,
    PictureLimit when Graphviz runs past a limit (it is killed; nothing is left running)."""
    limits = limits or RenderLimits()
    exe = dot_path()
    if exe is None:
        raise PictureUnavailable("Graphviz `dot` is not installed on this server")
    wall_s = 2 * limits.cpu_s + 1
    cpu_text = f"its CPU limit of {limits.cpu_s:g} s (DEVPLAN_PICTURE_CPU_S)"
    memory_text = f"its memory limit of {limits.memory_bytes // 2**20} MiB (DEVPLAN_PICTURE_MEMORY_BYTES)"
    with subprocess.Popen(
        [exe, "-Tsvg"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        try:
            _limit(proc.pid, limits)
            stdout, stderr_bytes = proc.communicate(dot_text.encode(), timeout=wall_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise PictureLimit(
                f"Graphviz ran past its wall-clock limit of {wall_s:g} s ({cpu_text}, x2)"
            ) from None
        except BaseException:
            proc.kill()  # nothing is left running
            raise
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise PictureLimit(f"Graphviz ran past {cpu_text}")
    if proc.returncode != 0:
        # Our DOT is always well formed: a failing Graphviz ran out of its address space.
        stderr = stderr_bytes.decode(errors="replace").strip()[:300]
        raise PictureLimit(
            f"Graphviz stopped (exit {proc.returncode}), most likely at {memory_text}: {stderr}"
        )
    return stdout.decode()


# ---------------------------------------------------------------------------
# The graph


@dataclass
class _Node:
    key: str
    label: str
    kind: str  # op | call | param | if | match | result | const | use
    device: str
    cluster: int
    members: list[int] = field(default_factory=list)  # node ids
    pinned: bool = False
    folded: list[tuple[int, str]] = field(default_factory=list)  # (node id, label) of folded weights
    ms: float | None = None  # predicted kernel time on its device


@dataclass
class Picture:
    """The DOT text and what it shows (for tests and the page)."""

    dot: str
    devices: dict[str, int]  # operators per device, collapsed runs counted in full
    copies: int
    collapsed: int  # collapsed nodes
    legend: dict[str, str]  # device -> color
    folded: int = 0  # weights and constants folded into their consumers
    nodes: int = 0  # nodes drawn (legend aside)
    edges: int = 0  # edges drawn (legend aside)
    max_edges_per_node: int = 0  # the most edges that meet at one node
    densest_node: str = ""  # where they meet (its DOT name)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def build_picture(
    record: PlacementRecord,
    *,
    max_nodes: int = MAX_NODES,
    expand: Iterable[int] = (),
) -> Picture:
    """The picture of a plan's placement record (service.record: its devices,
    names, pins, copies and their predicted times: an operator's time and a
    collapsed run's, the sum of its operators', are the record's)."""
    module = record.module
    result = record.result
    log = result.constraints
    if log is None:
        raise ValueError("build_picture needs a plan made with record_constraints=True")
    ids = node_ids(module)
    nid = {id(n): i for i, n in enumerate(ids)}
    devices = log.devices
    placed = record.by_node()
    pinned = {p.node for p in record.pins}
    from_expr = module.expr is not None and not any(gv.name == "main" for gv, _ in module.functions)
    roots = input_roots(module)
    sites = [(parent, child) for parent, child, _ in record.sites]
    site_of: dict[tuple[int, int], int] = {}
    for k, (parent, child) in enumerate(sites):
        site_of.setdefault((id(parent), id(child)), k)

    nodes: dict[str, _Node] = {}
    edges: list[tuple[str, str, int | None]] = []  # (src, dst, copy site)
    cluster_names = [f"@{gv.name}" for gv, _ in module.functions] + (["@main"] if from_expr else [])

    # Which cluster each node is in: walk each root.
    cluster_of: dict[int, int] = {}
    for ci, root in enumerate(roots):
        stack = [root]
        while stack:
            n = stack.pop()
            if id(n) in cluster_of:
                continue
            cluster_of[id(n)] = ci
            if isinstance(n, Function) and n.is_primitive:
                continue
            stack.extend(children(n))
            if isinstance(n, Function):
                stack.extend(n.params)

    def node_for(expr: Expr) -> str | None:
        """The graph node of an expression that is one (created on demand)."""
        i = nid.get(id(expr))
        if i is None:
            return None
        kind: str | None = None
        label = ""
        entry = placed.get(i)
        if isinstance(expr, Call):
            if isinstance(expr.op, Op):
                if expr.op.name in ("on_device", "device_copy"):
                    return None
                kind, label = "op", expr.op.name
            elif isinstance(expr.op, GlobalVar):
                kind, label = "call", f"@{expr.op.name}"
            elif isinstance(expr.op, Var):
                kind, label = "call", f"%{expr.op.name}"
            else:
                kind, label = "call", "call"
            if entry is not None and entry.kind == "operator":
                kind = (
                    "op"  # a call of a primitive function runs one kernel: an operator, as the record has it
                )
        elif isinstance(expr, Var):
            kind, label = "param", f"%{expr.name}"
        elif isinstance(expr, If):
            kind, label = "if", "if"
        elif isinstance(expr, Match):
            kind, label = "match", "match"
        elif isinstance(expr, Constant):
            kind, label = "const", "constant"
        if kind is None:
            return None
        if entry is not None and kind in ("op", "call", "param"):
            # As the record names it, in the module's language (`lv3 = cls.f`, `R.matmul`).
            label = placement_head(entry.to_json())
        key = f"n{i}"
        if key not in nodes:
            nodes[key] = _Node(
                key,
                f"{label}\n#{i}",
                kind,
                devices.get(i, "?"),
                cluster_of.get(id(expr), 0),
                [i],
                i in pinned,
            )
        return key

    let_value: dict[int, Expr] = {}
    for n in ids:
        if isinstance(n, Let):
            let_value[id(n.var)] = n.value

    def sources(expr: Expr) -> list[tuple[str, int | None]]:
        """The graph nodes whose values flow into `expr`, each with the copy
        site crossed on the way (None for none)."""
        out: list[tuple[str, int | None]] = []
        stack: list[tuple[Expr, int | None]] = [(expr, None)]
        visited: set[int] = set()
        while stack:
            e, site = stack.pop()
            if id(e) in visited:
                continue
            visited.add(id(e))
            if isinstance(e, Var) and id(e) in let_value:
                value = let_value[id(e)]
                let_site = next(
                    (k for (p, c), k in site_of.items() if c == id(value) and _is_let_of(p, e)), None
                )
                stack.append((value, site if site is not None else let_site))
                continue
            key = node_for(e)
            if key is not None:
                out.append((key, site))
                continue
            inner: list[Expr] = []
            if isinstance(e, Call) and wrapper_op(e) is not None:
                inner = [e.args[0]]
            elif isinstance(e, ast.Tuple):
                inner = list(e.fields)
            elif isinstance(e, ast.TupleGetItem):
                inner = [e.tuple_value]
            elif isinstance(e, Let):
                inner = [e.body]
            elif isinstance(e, (RefCreate, ast.RefWrite)):
                inner = [e.value]
            elif isinstance(e, ast.RefRead):
                inner = [e.ref]
            for k in inner:
                stack.append((k, site if site is not None else site_of.get((id(e), id(k)))))
        return out

    let_nodes = {id(n.var): n for n in ids if isinstance(n, Let)}

    def _is_let_of(parent_id: int, var: Var) -> bool:
        let = let_nodes.get(id(var))
        return let is not None and id(let) == parent_id

    def inputs_of(expr: Expr) -> list[Expr]:
        if isinstance(expr, Call):
            return list(expr.args)
        if isinstance(expr, If):
            return [expr.cond, expr.true_branch, expr.false_branch]
        if isinstance(expr, Match):
            return [expr.data, *(c.rhs for c in expr.clauses)]
        return []

    arg_pos: dict[tuple[str, str], int] = {}  # (src, dst) -> first argument position
    for n in ids:
        key = node_for(n) if not isinstance(n, (Var, Constant)) else None
        if key is not None:
            for pos, arg in enumerate(inputs_of(n)):
                for src, site in sources(arg):
                    arg_pos.setdefault((src, key), pos)
                    edges.append((src, key, site if site is not None else site_of.get((id(n), id(arg)))))
        if isinstance(n, Function) and not n.is_primitive:
            i = nid[id(n)]
            key = f"r{i}"
            is_global = any(n is r for r in roots)
            nodes[key] = _Node(
                key,
                f"{'result' if is_global else 'fn result'}\n#{i}",
                "result",
                devices.get(i, "?"),
                cluster_of.get(id(n), 0),
                [i],
                i in pinned,
            )
            for src, site in sources(n.body):
                edges.append((src, key, site if site is not None else site_of.get((id(n), id(n.body)))))
        elif isinstance(n, Var) and any(n in f.params for f in roots if isinstance(f, Function)):
            node_for(n)

    # Mark each copy once (a copied value used twice is one copy); copies at
    # the same place (`f(%a, %a)` copies `%a` once per argument) each get an edge.
    # Edges carry copy indices from here on (`record.site_copy`: a language that
    # writes one copy per value and device merges sites).
    twins: dict[int, list[int]] = {}
    for k, (parent, child) in enumerate(sites):
        group = twins.setdefault(site_of[(id(parent), id(child))], [])
        if record.site_copy[k] not in group:
            group.append(record.site_copy[k])
    marked: set[int] = set()
    final_edges: list[tuple[str, str, int | None]] = []
    for src, dst, site in edges:
        free = [k for k in twins.get(site, ()) if k not in marked] if site is not None else []
        if free:
            marked.add(free[0])
            final_edges.append((src, dst, free[0]))
        else:
            final_edges.append((src, dst, None))

    # A copy into no drawn node (a value written into a reference, which the
    # data flow does not follow) gets a small node of its own: every copy has its edge.
    for k, c in enumerate(record.copies):
        source = f"n{c.from_nodes[0]}" if c.from_nodes else ""
        if k in marked or source not in nodes:
            continue
        nodes[f"u{k}"] = _Node(
            f"u{k}", "used by a reference", "use", c.dst, nodes[source].cluster, [c.from_nodes[0]]
        )
        marked.add(k)
        final_edges.append((source, f"u{k}", k))

    nodes, final_edges = _fold(nodes, final_edges, arg_pos)
    for drawn in nodes.values():
        entry = placed.get(drawn.members[0])
        if drawn.kind == "op" and entry is not None:
            drawn.ms = entry.predicted_ms
    groups = _collapse(nodes, final_edges, max_nodes, set(expand))
    return _emit(nodes, final_edges, groups, record.copies, cluster_names)


def _fold(
    nodes: dict[str, _Node],
    edges: list[tuple[str, str, int | None]],
    arg_pos: Mapping[tuple[str, str], int],
) -> tuple[dict[str, _Node], list[tuple[str, str, int | None]]]:
    """Weights and constants folded into their consumer: a constant,
    and a parameter whose one consumer is an operator that takes it after its
    first argument (a weight, bias, scale: `nn.conv2d(%data, %weight)` keeps
    `%data`), leaves the graph and is listed on the consumer instead. Pinned
    nodes and copied values are never folded (a copy stays a red edge)."""
    outs: dict[str, list[tuple[str, int | None]]] = {}
    for src, dst, site in edges:
        outs.setdefault(src, []).append((dst, site))
    drop: set[str] = set()
    for k, n in nodes.items():
        uses = outs.get(k, [])
        if n.pinned or not uses or any(site is not None for _, site in uses):
            continue
        targets = {dst for dst, _ in uses}
        if any(nodes[t].kind not in ("op", "call") for t in targets):
            continue
        if n.kind == "const" or (
            n.kind == "param" and len(targets) == 1 and min(arg_pos.get((k, t), 0) for t in targets) > 0
        ):
            short = n.label.split("\n", 1)[0]
            for t in sorted(targets):
                nodes[t].folded.append((n.members[0], short))
            drop.add(k)
    kept = {k: n for k, n in nodes.items() if k not in drop}
    return kept, [e for e in edges if e[0] not in drop]


def _collapse(
    nodes: dict[str, _Node],
    edges: list[tuple[str, str, int | None]],
    max_nodes: int,
    expand: set[int],
) -> dict[str, str]:
    """node key -> key of its group's head (chains of same-device operators)."""
    head = {k: k for k in nodes}
    ops = [n for n in nodes.values() if n.kind == "op"]
    if len(ops) <= max_nodes:
        return head
    ins: dict[str, list[tuple[str, int | None]]] = {}
    outs: dict[str, list[str]] = {}
    for src, dst, site in edges:
        ins.setdefault(dst, []).append((src, site))
        outs.setdefault(src, []).append(dst)

    def find(k: str) -> str:
        while head[k] != k:
            head[k] = head[head[k]]
            k = head[k]
        return k

    def open_node(n: _Node) -> bool:
        return n.kind != "op" or n.pinned or any(m in expand for m in n.members)

    for n in sorted(ops, key=lambda n: n.members[0]):
        preds = ins.get(n.key, [])
        if open_node(n) or len(preds) != 1:
            continue
        src, site = preds[0]
        prev = nodes[src]
        if (
            site is not None
            or open_node(prev)
            or len(outs.get(src, [])) != 1
            or prev.device != n.device
            or prev.cluster != n.cluster
        ):
            continue
        head[n.key] = find(src)
    return {k: find(k) for k in nodes}


def _colors(names: Sequence[str]) -> dict[str, str]:
    """A fill color per device: cpu and cuda always the same two, others in name order."""
    fixed = {"cpu": _PALETTE[0], "cuda": _PALETTE[1]}
    rest = iter(_PALETTE[2:] * (1 + len(names) // max(1, len(_PALETTE) - 2)))
    return {d: fixed[d] if d in fixed else next(rest) for d in names}


def _folded_text(folded: Sequence[tuple[int, str]]) -> str:
    return "folded: " + ", ".join(f"{label} #{i}" for i, label in folded)


def _ms_text(ms: float) -> str:
    return f"{ms:.3f} ms" if ms < 10 else f"{ms:.1f} ms"


# The legend's marks other than the devices: (id, label, DOT attributes).
_MARKS: tuple[tuple[str, str, str], ...] = (
    ("pinned", "pinned (annotation or request pin)", 'penwidth=3, color="#000000", fillcolor="#ffffff"'),
    (
        "collapsed",
        "N ops: a run on one device, click to expand",
        'peripheries=2, style="rounded,filled,bold", fillcolor="#ffffff"',
    ),
    ("folded", "+N weights: parameters and constants folded in", 'fillcolor="#ffffff"'),
    ("param", "parameter", 'shape=ellipse, fillcolor="#ffffff"'),
    ("result", "function result", 'shape=doubleoctagon, fillcolor="#ffffff"'),
)


def _emit(
    nodes: dict[str, _Node],
    edges: list[tuple[str, str, int | None]],
    groups: dict[str, str],
    copy_entries: Sequence[CopyEntry],
    cluster_names: list[str],
) -> Picture:
    names = sorted({n.device for n in nodes.values()}, key=lambda d: (d != "cpu", d))
    legend = _colors(names)
    dev_index = {d: i for i, d in enumerate(names)}
    members: dict[str, list[_Node]] = {}
    for k, n in nodes.items():
        members.setdefault(groups[k], []).append(n)
    lines = [
        "digraph placement {",
        (
            '  graph [rankdir=TB, fontname="DejaVu Sans", fontsize=11, nodesep=0.3, ranksep=0.4, '
            'newrank=true, id="placement"];'
        ),
        (
            '  node [fontname="DejaVu Sans", fontsize=10, shape=box, style="rounded,filled", penwidth=1, '
            'color="#555555", margin="0.08,0.04", height=0.3];'
        ),
        '  edge [fontname="DejaVu Sans", fontsize=10, color="#777777", arrowsize=0.6];',
    ]
    per_device: dict[str, int] = {}
    collapsed = 0
    folded_total = 0
    by_cluster: dict[int, list[str]] = {}
    for head, group in members.items():
        group.sort(key=lambda n: n.members[0])
        first = group[0]
        ops = sum(1 for n in group if n.kind == "op")
        if ops:
            per_device[first.device] = per_device.get(first.device, 0) + ops
        folded = [f for n in group for f in n.folded]
        folded_total += len(folded)
        color = legend.get(first.device, "#ffffff")
        classes = [first.kind, f"dev-{dev_index.get(first.device, 0)}"]
        shape = {"param": "ellipse", "result": "doubleoctagon", "const": "note", "use": "plaintext"}.get(
            first.kind, "box"
        )
        weights = f"+{len(folded)} weight{'s' if len(folded) != 1 else ''}" if folded else ""
        if len(group) > 1:
            collapsed += 1
            ids = [m for n in group for m in n.members]
            classes += ["collapsed", f"count-{ops}"]
            priced = [n.ms for n in group if n.ms is not None]
            time = f"\n{_ms_text(sum(priced))}" if priced else ""
            label = f"{ops} ops on {first.device}{time}\n#{min(ids)}..#{max(ids)}" + (
                f" {weights}" if weights else ""
            )
            key = f"g{min(ids)}"
            tip = "click to expand: " + " ".join(str(i) for i in ids)
            if folded:
                tip += "; " + _folded_text(folded)
            extra = f', style="rounded,filled,bold", peripheries=2, tooltip={_quote(tip)}'
        else:
            key = first.key
            label = first.label + (f" {weights}" if weights else "")
            tip = first.label.replace("\n", " ") + " on " + first.device
            if first.ms is not None:
                tip += f", {_ms_text(first.ms)}"
            if folded:
                tip += "; " + _folded_text(folded)
            extra = f", tooltip={_quote(tip)}"
        if folded:
            classes.append("folded")
            classes += [f"fold-{i}" for i, _ in folded]
        if first.pinned and len(group) == 1:
            classes.append("pinned")
            extra += ', penwidth=3, color="#000000"'
        lines_for = (
            f"  {_quote(head)} [id={_quote(key)}, class={_quote(' '.join(classes))}, "
            f'label={_quote(label)}, fillcolor="{color}", shape={shape}{extra}];'
        )
        by_cluster.setdefault(first.cluster, []).append(lines_for)
    for ci, entries in sorted(by_cluster.items()):
        name = cluster_names[ci] if ci < len(cluster_names) else f"#{ci}"
        lines.append(f"  subgraph cluster_{ci} {{")
        lines.append(
            f'    label={_quote(name)}; labeljust=l; style="rounded"; color="#999999"; '
            f'id="cluster_{ci}"; class="function";'
        )
        lines.extend("  " + e for e in entries)
        lines.append("  }")
    seen_edges: set[tuple[str, str]] = set()
    drawn: list[tuple[str, str]] = []
    copies = 0
    for src, dst, site in edges:
        a, b = groups[src], groups[dst]
        if site is None:
            if a == b or (a, b) in seen_edges:
                continue
            seen_edges.add((a, b))
            drawn.append((a, b))
            lines.append(f"  {_quote(a)} -> {_quote(b)};")
            continue
        copies += 1
        drawn.append((a, b))
        entry = copy_entries[site]
        tip = f"copy {entry.src} -> {entry.dst}, {bytes_text(entry.bytes)}"
        if entry.predicted_ms is not None:
            tip += f", {_ms_text(entry.predicted_ms)}"
        lines.append(
            f'  {_quote(a)} -> {_quote(b)} [id="copy{site}", class="copy", color="{_COPY_COLOR}", '
            f'penwidth=2.2, style=bold, arrowsize=0.9, fontcolor="{_COPY_COLOR}", fontsize=11, '
            f"tooltip={_quote(tip)}, label={_quote(' copy ' + bytes_text(entry.bytes))}];"
        )
    degree: dict[str, int] = {}
    for a, b in drawn:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
    densest = max(degree, key=lambda k: degree[k], default="")
    lines.append("  subgraph cluster_legend {")
    lines.append('    label="legend"; style="rounded"; color="#999999"; id="legend"; class="legend";')
    entries = [f"legend:{d}" for d in names]
    for d in names:
        lines.append(
            f"    {_quote('legend:' + d)} [id={_quote('legend-' + d)}, "
            f'class="legend-entry legend-device dev-{dev_index[d]}", '
            f'label={_quote(d)}, fillcolor="{legend[d]}"];'
        )
    lines.append(
        f'    "legend:copy" [id="legend-copy", class="legend-entry legend-mark", '
        f'label="copy: red edge, labelled with its bytes", shape=plaintext, style="", fontcolor="{_COPY_COLOR}"];'
    )
    entries.append("legend:copy")
    for mark, text, attrs in _MARKS:
        lines.append(
            f'    {_quote("legend:" + mark)} [id={_quote("legend-" + mark)}, class="legend-entry legend-mark", '
            f"label={_quote(text)}, {attrs}];"
        )
        entries.append("legend:" + mark)
    # One column, in this order.
    for a, b in itertools.pairwise(entries):
        lines.append(f"    {_quote(a)} -> {_quote(b)} [style=invis];")
    lines.append("  }")
    lines.append("}")
    return Picture(
        "\n".join(lines) + "\n",
        per_device,
        copies,
        collapsed,
        legend,
        folded_total,
        nodes=len(members),
        edges=len(drawn),
        max_edges_per_node=degree.get(densest, 0),
        densest_node=densest,
    )
