"""What planning returns, as plain data: `PlanResult` with its `PlanStats`,
the why-answers (`WhyResult`, `Answer`, `Step`) and the constraint log.

Nothing here plans; every module of the solver may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relay.ast import Module
from relay.device import VirtualDevice
from relay.span import Span

from .optimize.report import CostReport

MAX_ANSWERS = 50
"""Answers per selector; a selector matching more says it was truncated."""


@dataclass(frozen=True)
class PlanStats:
    """Sizes and timings of one planning run."""

    classes: int
    variables: int | None
    hard_constraints: int
    soft_constraints: int
    time_ms: dict[str, float] = field(default_factory=dict)
    nodes: int = 0
    z3_constraints: int | None = None
    z3_assumptions: int | None = None
    z3_checked: bool = False  # `variables`/`z3_*` are None when the check did not run


@dataclass(frozen=True)
class Step:
    """One constraint of a chain: its kind, what it says and where it is.

    `a`/`b` are the union-find elements it links (`b` is None for the pin
    that ends a chain); `cid` the planner's constraint id."""

    kind: str
    message: str
    line: int | None
    column: int | None
    node: int | None
    cid: int
    a: int
    b: int | None

    def to_json(self) -> dict[str, Any]:
        """The public fields (the union-find elements and constraint id stay internal)."""
        where = {"line": self.line, "column": self.column, "node": self.node}
        return {"kind": self.kind, "message": self.message, **where}


@dataclass(frozen=True)
class Answer:
    """The device of one expression and the chain that decided it."""

    node: int | None
    expression: str
    line: int | None
    column: int | None
    device: str
    chain: tuple[Step, ...]
    reason: str  # annotation | request pin | host rule | parameter attribute | function attribute | default | cost | none
    message: str
    element: int | None = None
    cost: Mapping[str, Any] | None = None
    # Node ids of other constraints that fix the same device (redundant pins).
    also: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "expression": self.expression,
            "line": self.line,
            "column": self.column,
            "device": self.device,
            "reason": self.reason,
            "message": self.message,
            "chain": public_chain(self.chain),
            "also": list(self.also),
        }
        if self.cost is not None:
            out["cost"] = dict(self.cost)
        return out

    def text(self) -> str:
        """The answer as a block of text (the CLI's stderr form)."""
        return "\n".join(answer_lines(self.to_json()))


def public_chain(chain: tuple[Step, ...]) -> list[dict[str, Any]]:
    """A chain as clients see it: each step once. The search walks union-find
    edges, and one constraint can make several in a row (an operator's "all
    the same" rule links its arguments through its result; a default that
    follows another element's device can meet a constraint again): those are
    one step to the user, shown where the chain first meets it. The internal
    chain keeps every edge (tests check it is a shortest path)."""
    out: list[dict[str, Any]] = []
    shown: set[tuple[Any, ...]] = set()
    for step in chain:
        key = (step.kind, step.message, step.line, step.column, step.node)
        if key not in shown:
            shown.add(key)
            out.append(step.to_json())
    return out


def answer_lines(answer: Mapping[str, Any], indent: str = "") -> list[str]:
    """An answer (its JSON form) as lines of text: the expression and device,
    the numbered chain, what decided it."""
    where = f" at {answer['line']}:{answer['column']}" if answer.get("line") is not None else ""
    lines = [f"{indent}node {answer['node']} {answer['expression']}{where}: on {answer['device']}"]
    for i, step in enumerate(answer["chain"], 1):
        loc = f"{step['line']}:{step['column']}" if step.get("line") is not None else "?"
        lines.append(f"{indent}  {i}. {loc} {step['kind']}: {step['message']}")
    lines.append(f"{indent}  decided by {answer['reason']}: {answer['message']}")
    return lines


@dataclass(frozen=True)
class WhyResult:
    """The answers for one selector (at most MAX_ANSWERS)."""

    selector: Mapping[str, Any]
    answers: tuple[Answer, ...]
    matches: int
    truncated: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "selector": dict(self.selector),
            "matches": self.matches,
            "truncated": self.truncated,
            "answers": [a.to_json() for a in self.answers],
        }
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class ConstraintLog:
    """The constraints the planner collected (the test hook): `edges[i] =
    (a, b, cid)`, `pins[i] = (element, device, cid)`, `kinds[cid]`, `hard[cid]`,
    and `follows[cid]`: for a default that copied another element's device, that element."""

    edges: tuple[tuple[int, int, int], ...]
    pins: tuple[tuple[int, VirtualDevice, int], ...]
    kinds: tuple[str, ...]
    hard: tuple[bool, ...]
    follows: Mapping[int, Mapping[int, int]]
    elements: Mapping[int, int]  # node id -> element of its result
    devices: Mapping[int, str]  # node id -> device name (relay.device_name)


@dataclass(frozen=True)
class PlanResult:
    """The planned module and what the planner decided."""

    module: Module
    virtual_devices: list[VirtualDevice]
    stats: PlanStats
    copies: list[tuple[Span | None, VirtualDevice, VirtualDevice]]
    functions: dict[str, dict[str, Any]]
    expressions_by_device: dict[str, int]
    # Optimize mode only: the predicted cost of the plan (None in TVM mode).
    cost: CostReport | None = None
    # `plan(..., why=[selector, ...])`: one result per selector (solver/explain/why.py).
    why: tuple[WhyResult, ...] = ()
    # `plan(..., record_constraints=True)`: the collected constraints (a test hook).
    constraints: ConstraintLog | None = None
    # TVM mode: the copies TVM 0.19's rewrite omits, which the plan
    # has (each is also in `copies`): nested annotations, tests/data/divergences/.
    divergences: list[tuple[Span | None, VirtualDevice, VirtualDevice]] = field(default_factory=list)
    # The registered operators the type check could not check (no type relation).
    unchecked_ops: tuple[str, ...] = ()
    # What the client should know about an accepted module (e.g. it has no @main).
    notices: tuple[str, ...] = ()
