"""Errors raised by the bridge: all are `relay.RelayError`s, so the service
maps them to problem+json with the offending span."""

from __future__ import annotations

from relay.span import RelayError, Span


class BridgeError(RelayError):
    """The planned module cannot be lowered or compiled."""


def _with_detail(message: str, detail: str) -> str:
    """`message`, followed by `: detail` where there is one."""
    return f"{message}: {detail}" if detail else message


class UnsupportedConstruct(BridgeError):
    """A Relay construct with no Relax counterpart (ADTs, references, match,
    higher-order or recursive functions)."""

    def __init__(self, construct: str, span: Span | None = None, detail: str = "") -> None:
        super().__init__(_with_detail(f"{construct} cannot be lowered to Relax", detail), span)
        self.construct = construct


class UnsupportedOperator(BridgeError):
    """A Relay operator that the bridge's `convert_map` does not know."""

    def __init__(self, name: str, span: Span | None = None, detail: str = "") -> None:
        super().__init__(_with_detail(f"operator {name!r} is not supported by the TVM bridge", detail), span)
        self.name = name


class TargetError(BridgeError):
    """A target string or dict that TVM 0.27 does not accept."""
