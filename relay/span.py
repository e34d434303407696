"""Source locations and the RelayError family."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The line breaks of Python's tokenizer (and so of TVMScript's locations): \r\n, \r
# and \n only. Not `str.splitlines`, which also breaks at \x0b, \x0c, \x1c-\x1e,
# \x85, \u2028 and \u2029: those may sit inside a string literal or a comment, and
# every line after one would be shown for the wrong line number.
LINE_BREAK = re.compile(r"\r\n?|\n")


def line_starts(text: str) -> list[int]:
    """The offset where each line of `text` starts (1-based line n at index n - 1),
    lines ending at LINE_BREAK."""
    if "\r" not in text:  # the common case: one C-level scan for the newlines
        return [0, *(m.end() for m in re.finditer("\n", text))]
    return [0, *(m.end() for m in LINE_BREAK.finditer(text))]


@dataclass(frozen=True, slots=True)
class SourceText:
    """A named source text; spans point into it so errors can show the line."""

    name: str
    text: str

    def line(self, number: int) -> str:
        """The 1-based line `number` of the text, without its line break ('' past the
        end), lines ending at LINE_BREAK as Python's tokenizer ends them."""
        if number < 1:
            return ""
        starts = line_starts(self.text)
        if number > len(starts):
            return ""
        end = starts[number] if number < len(starts) else len(self.text)
        return LINE_BREAK.sub("", self.text[starts[number - 1] : end], count=1)


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
