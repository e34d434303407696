"""Errors the planner raises: conflicts (with explanations), time-outs, bad configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

from relay.span import RelayError, Span


@dataclass(frozen=True)
class ConflictConstraint:
    """One constraint of a minimal conflicting set.

    `kind` names the rule it came from ("annotation", "copy", "call site",
    "parameter attribute", "function attribute", "host operator",
    "constraint #k", ...); `devices` the devices this constraint imposes or links.
    """

    kind: str
    description: str
    expr_text: str
    span: Span | None
    devices: list[str] = field(default_factory=list)

    @property
    def location(self) -> str:
        if self.span is None:
            return "?"
        return f"{self.span.line}:{self.span.column}"

    def __str__(self) -> str:
        return f"{self.location}: {self.kind}: {self.description}"


class PlanningConflict(RelayError):
    """The device constraints of the module (and request) cannot all hold.

    `constraints` is a minimal unsatisfiable subset, each with kind and span.
    """

    def __init__(self, message: str, constraints: list[ConflictConstraint], span: Span | None = None) -> None:
        if span is None:
            span = next((c.span for c in constraints if c.span is not None), None)
        super().__init__(message, span)
        self.constraints = constraints


class SolverTimeout(Exception):
    """The planner's deadline passed (`reason` "deadline") or Z3 answered
    `unknown` (time or resource limit); never reported as a plan."""

    def __init__(self, message: str, reason: str = "timeout") -> None:
        super().__init__(message)
        self.reason = reason


class PlanConfigError(ValueError):
    """A bad device spec, an unknown meta reference or a selector that matches nothing."""
