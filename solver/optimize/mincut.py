"""Minimum s-t cut by Dinic's max-flow, iterative (no recursion), for the
optimize mode's two-device case (Stone, 1977): a class on the source side
takes device 0, on the sink side device 1. The flow value certifies the cut
is minimal (max-flow min-cut duality)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


class FlowGraph:
    """A directed graph with integer capacities (Python ints: no overflow)."""

    def __init__(self, nodes: int) -> None:
        self.n = nodes
        self.adj: list[list[int]] = [[] for _ in range(nodes)]
        self.to: list[int] = []
        self.cap: list[int] = []

    def add_edge(self, u: int, v: int, cap: int, rev_cap: int = 0) -> None:
        """Edge u->v with capacity `cap` (and v->u with `rev_cap`)."""
        if u == v or (cap <= 0 and rev_cap <= 0):
            return
        self.adj[u].append(len(self.to))
        self.to.append(v)
        self.cap.append(cap)
        self.adj[v].append(len(self.to))
        self.to.append(u)
        self.cap.append(rev_cap)

    def _levels(self, s: int, t: int) -> list[int] | None:
        level = [-1] * self.n
        level[s] = 0
        queue = deque([s])
        adj, to, cap = self.adj, self.to, self.cap
        while queue:
            u = queue.popleft()
            lu = level[u] + 1
            for e in adj[u]:
                v = to[e]
                if cap[e] > 0 and level[v] < 0:
                    level[v] = lu
                    queue.append(v)
        return level if level[t] >= 0 else None

    def max_flow(self, s: int, t: int) -> int:
        """The maximum flow value from s to t (capacities become residuals)."""
        total = 0
        adj, to, cap = self.adj, self.to, self.cap
        while True:
            level = self._levels(s, t)
            if level is None:
                return total
            it = [0] * self.n
            while True:
                # One augmenting path in the level graph (iterative DFS with
                # current-arc pointers; dead ends leave the level graph).
                path: list[int] = []  # edge ids from s
                u = s
                while u != t:
                    edges = adj[u]
                    i = it[u]
                    nxt = level[u] + 1
                    while i < len(edges) and not (cap[edges[i]] > 0 and level[to[edges[i]]] == nxt):
                        i += 1
                    it[u] = i
                    if i < len(edges):
                        e = edges[i]
                        path.append(e)
                        u = to[e]
                        continue
                    if u == s:
                        break
                    level[u] = -1
                    e = path.pop()
                    u = to[e ^ 1]
                    it[u] += 1
                if u != t:
                    break
                push = min(cap[e] for e in path)
                for e in path:
                    cap[e] -= push
                    cap[e ^ 1] += push
                total += push

    def source_side(self, s: int) -> list[bool]:
        """After max_flow: the nodes reachable from s in the residual graph."""
        seen = [False] * self.n
        seen[s] = True
        stack = [s]
        adj, to, cap = self.adj, self.to, self.cap
        while stack:
            u = stack.pop()
            for e in adj[u]:
                v = to[e]
                if cap[e] > 0 and not seen[v]:
                    seen[v] = True
                    stack.append(v)
        return seen


def two_device_cut(
    unary: Sequence[tuple[int | None, int | None]],
    pairs: Sequence[tuple[int, int, int, int]],
) -> tuple[int, list[int]]:
    """Minimise sum of unary[c][x_c] + pairwise costs over x in {0, 1}^n.

    `unary[c]` is (cost on device 0, cost on device 1), None = forbidden (at
    least one must be allowed). `pairs` are (a, b, cost if x_a=0 and x_b=1,
    cost if x_a=1 and x_b=0). Returns (optimal value, assignment).
    """
    n = len(unary)
    s, t = n, n + 1
    finite = sum(c for u in unary for c in u if c is not None) + sum(p[2] + p[3] for p in pairs)
    inf = finite + 1
    g = FlowGraph(n + 2)
    constant = 0
    for c, (c0, c1) in enumerate(unary):
        a0 = inf if c0 is None else c0
        a1 = inf if c1 is None else c1
        m = min(a0, a1)
        constant += m
        # s->c is cut when c is on the sink side (device 1); c->t when on device 0.
        g.add_edge(s, c, a1 - m)
        g.add_edge(c, t, a0 - m)
    for a, b, cost01, cost10 in pairs:
        # a on source (0), b on sink (1): cut a->b; a on sink, b on source: cut b->a.
        g.add_edge(a, b, cost01, cost10)
    flow = g.max_flow(s, t)
    side = g.source_side(s)
    assignment = [0 if side[c] else 1 for c in range(n)]
    return constant + flow, assignment
