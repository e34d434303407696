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
                shown, caret, width = _excerpt(text, span.column - 1, width)
                out += f"\n{pad} |\n{gutter} | {shown}\n{pad} | {' ' * caret}{'^' * width}"
        return out


# The longest source line a report shows; a longer one is cut around the caret.
EXCERPT_COLUMNS = 120


def _excerpt(text: str, start: int, width: int) -> tuple[str, int, int]:
    """The part of a source line a report shows (at most EXCERPT_COLUMNS, `...`
    marking each cut end), the caret's offset in it and the caret run's width
    (cut to the shown part), so a megabyte line gives a report of a few lines."""
    if len(text) <= EXCERPT_COLUMNS:
        return text, start, width
    begin = max(0, min(start - EXCERPT_COLUMNS // 3, len(text) - EXCERPT_COLUMNS))
    end = begin + EXCERPT_COLUMNS
    head = "..." if begin > 0 else ""
    tail = "..." if end < len(text) else ""
    caret = len(head) + start - begin
    return head + text[begin:end] + tail, caret, max(1, min(width, end - start))


class ParseError(RelayError):
    """The text or JSON is not a well-formed Relay module."""


class VerifyError(RelayError):
    """The module parsed but is not well formed (unbound variable, bad arity, ...)."""
