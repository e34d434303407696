"""Source locations and the RelayError family."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourceText:
    """A named source text; spans point into it so errors can show the line."""

    name: str
    text: str

    def line(self, number: int) -> str:
        """The 1-based line `number` of the text, without its newline ('' past the end)."""
        lines = self.text.splitlines()
        return lines[number - 1] if 1 <= number <= len(lines) else ""


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a source text: 1-based lines and columns, end exclusive."""

    source: SourceText | None
    line: int
    column: int
    end_line: int
    end_column: int

    @property
    def source_name(self) -> str:
        return self.source.name if self.source is not None else "<unknown>"

    def __str__(self) -> str:
        return f"{self.source_name}:{self.line}:{self.column}"


class RelayError(Exception):
    """An error about a Relay module, located by an optional span.

    `str()` gives a compiler-style report: the message, the location and the
    offending source line with a caret under the column.
    """

    def __init__(self, message: str, span: Span | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.span = span

    @property
    def line(self) -> int | None:
        return self.span.line if self.span is not None else None

    @property
    def column(self) -> int | None:
        return self.span.column if self.span is not None else None

    def __str__(self) -> str:
        out = f"error: {self.message}"
        span = self.span
        if span is None:
            return out
        out += f"\n --> {span}"
        if span.source is not None:
            text = span.source.line(span.line)
            if text:
                gutter = str(span.line)
                pad = " " * len(gutter)
                width = 1
                if span.end_line == span.line and span.end_column > span.column:
                    width = span.end_column - span.column
                out += f"\n{pad} |\n{gutter} | {text}\n{pad} | {' ' * (span.column - 1)}{'^' * width}"
        return out


class ParseError(RelayError):
    """The text or JSON is not a well-formed Relay module."""


class VerifyError(RelayError):
    """The module parsed but is not well formed (unbound variable, bad arity, ...)."""
