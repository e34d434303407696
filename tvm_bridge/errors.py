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


class UnscheduledKernel(BridgeError):
    """A kernel placed on a GPU whose loops are not bound to GPU threads, and
    that dlight's default schedules do not apply to: it cannot run there as it is.
    `kernel` is its name in the caller's module (for the TVMScript line)."""

    def __init__(self, kernel: str, target: str, reason: str, span: Span | None = None) -> None:
        super().__init__(
            f"kernel {kernel!r} needs a GPU schedule for {target}: its loops are not bound to GPU "
            f"threads and dlight's default schedules do not apply to it ({reason}); bind its loops "
            "(T.thread_binding) or write it with T.sblock so dlight can schedule it, or place it on the cpu",
            span,
        )
        self.kernel = kernel
        self.target = target
        self.reason = reason

    def located(self, span: Span | None) -> UnscheduledKernel:
        """The same error at `span` (the kernel's line in the caller's text)."""
        return UnscheduledKernel(self.kernel, self.target, self.reason, span)
