"""Errors raised by the bridge: all are `relay.RelayError`s, so the service
maps them to problem+json with the offending span."""

from __future__ import annotations

from relay.span import RelayError, Span


class BridgeError(RelayError):
    """The planned module cannot be lowered or compiled."""


class UnsupportedConstruct(BridgeError):
    """A Relay construct with no Relax counterpart (ADTs, references, match,
    higher-order or recursive functions)."""

    def __init__(self, construct: str, span: Span | None = None, detail: str = "") -> None:
        message = f"{construct} cannot be lowered to Relax"
        if detail:
            message += f": {detail}"
        super().__init__(message, span)
        self.construct = construct


class UnsupportedOperator(BridgeError):
    """A Relay operator that the bridge's `convert_map` does not know."""

    def __init__(self, name: str, span: Span | None = None, detail: str = "") -> None:
        message = f"operator {name!r} is not supported by the TVM bridge"
        if detail:
            message += f": {detail}"
        super().__init__(message, span)
        self.name = name


class TargetError(BridgeError):
    """A target string or dict that TVM 0.27 does not accept."""
