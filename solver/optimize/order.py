"""The order the classes of an optimisation problem run in (producers before
consumers), shared by liveness and the searches. It reads only a problem's
`allowed` and `edges`, so it sits below `problem` and `memory`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Ordered(Protocol):
    """What the order reads of a `problem.Problem`."""

    @property
    def allowed(self) -> Sequence[Sequence[int]]: ...

    @property
    def edges(self) -> Sequence[tuple[int, int, int, int]]: ...


def topological_order(problem: Ordered) -> list[int]:
    """The classes in an order where producers come before consumers, close
    to the program's: Tarjan's strongly connected components (iterative) over
    the walk from each consumer to its producers, started at the last classes
    (those nothing consumes) in index order. A component is complete only
    after every producer outside it, so components come out in topological
    order, and a class's weights and operands come right before it.

    Hard unions can close a cycle over classes: in densenet every
    concatenation of a dense block is one class, which each layer of the
    block both reads and feeds. Such a cycle's classes come out together (the
    latest found first), after everything the cycle reads. Every class
    appears once."""
    n = len(problem.allowed)
    producers: list[list[int]] = [[] for _ in range(n)]
    consumed = [False] * n
    for u, v, _b, _uses in problem.edges:
        producers[u].append(v)
        consumed[v] = True
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    order: list[int] = []
    count = 0
    for root in [c for c in range(n) if not consumed[c]] + list(range(n)):
        if index[root] >= 0:
            continue
        walk = [(root, 0)]
        while walk:
            c, i = walk[-1]
            if i == 0 and index[c] < 0:
                index[c] = low[c] = count
                count += 1
                stack.append(c)
                on_stack[c] = True
            ins = producers[c]
            while i < len(ins) and index[ins[i]] >= 0:
                if on_stack[ins[i]]:
                    low[c] = min(low[c], index[ins[i]])
                i += 1
            if i < len(ins):
                walk[-1] = (c, i + 1)
                walk.append((ins[i], 0))
                continue
            walk.pop()
            if walk:
                parent = walk[-1][0]
                low[parent] = min(low[parent], low[c])
            if low[c] == index[c]:  # c closes a component: pop it
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    order.append(member)
                    if member == c:
                        break
    # Sources (weights, inputs) wait until just before their first consumer.
    placed = [False] * n
    out: list[int] = []
    for c in order:
        if not producers[c] and consumed[c]:
            continue
        for v in producers[c]:
            if not placed[v] and not producers[v]:
                placed[v] = True
                out.append(v)
        placed[c] = True
        out.append(c)
    out.extend(c for c in order if not placed[c])
    return out
