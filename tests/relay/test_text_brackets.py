"""An unclosed `(`, `[` or `{` is reported where it should have closed, as
"expected `)`" (or `]`, `}`), with the opening bracket's location as a note."""

from __future__ import annotations

import pytest

import relay
from relay.text import MAX_EXCERPT_CHARS, UnclosedBracketError

HEAD = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n'


def _error(text: str) -> relay.ParseError:
    with pytest.raises(relay.ParseError) as info:
        relay.parse_text(text, name="case.relay")
    return info.value


def test_missing_paren_is_reported_on_its_own_line() -> None:
    """The issue's case: TVM (and we, before) said "graph variable %0 is used before it
    is defined" at 4:12; a person fixes line 3."""
    err = _error(HEAD + "  %0 = add(%x, %x;\n  %1 = negative(%0);\n  %1\n}\n")
    assert isinstance(err, UnclosedBracketError)
    assert (err.line, err.column) == (3, 18)  # the `;` where `)` belongs
    assert err.message.startswith("expected `)`")
    ((note, span),) = err.notes
    assert (span.line, span.column) == (3, 11) and "`(`" in note
    report = str(err).splitlines()
    assert report[0] == "error: expected `)`, found `;`"
    assert " --> case.relay:3:18" in report
    assert "note: the `(` opened here is not closed" in report
    assert " --> case.relay:3:11" in report


def test_missing_paren_without_a_later_use_is_still_reported_on_its_line() -> None:
    # Here the parser reads on to the closing `}` before it fails.
    err = _error(HEAD + "  %0 = add(%x, %x;\n  %1 = negative(%x);\n  %1\n}\n")
    assert (err.line, err.column, err.message) == (3, 18, "expected `)`, found `;`")


def test_missing_paren_of_a_tuple() -> None:
    err = _error(HEAD + "  %0 = (%x, %x;\n  %1 = negative(%x);\n  %0.1\n}\n")
    assert (err.line, err.column, err.message) == (3, 15, "expected `)`, found `;`")
    assert isinstance(err, UnclosedBracketError)
    assert (err.notes[0][1].line, err.notes[0][1].column) == (3, 8)


def test_missing_square_bracket_of_an_attribute_list() -> None:
    err = _error(HEAD + "  %0 = sum(%x, axis=[0;\n  %1 = negative(%0);\n  %1\n}\n")
    assert err.line == 3 and err.message.startswith("expected `,` or `]`")
    assert isinstance(err, UnclosedBracketError)
    assert (err.notes[0][1].line, err.notes[0][1].column) == (3, 21)


def test_missing_brace_before_the_next_definition() -> None:
    text = (
        '#[version = "0.0.5"]\ndef @f(%x: Tensor[(4), float32]) {\n  negative(%x)\n\n'
        "def @main(%x: Tensor[(4), float32]) {\n  @f(%x)\n}\n"
    )
    err = _error(text)
    assert (err.line, err.column, err.message) == (5, 1, "expected `}`, found `def`")
    assert isinstance(err, UnclosedBracketError)
    assert (err.notes[0][1].line, err.notes[0][1].column) == (2, 34)


def test_missing_brace_at_the_end_is_reported_after_the_last_token() -> None:
    err = _error(HEAD + "  %0 = negative(%x);\n  %0\n\n\n")
    assert (err.line, err.column, err.message) == (4, 5, "expected `}`, found end of input")
    assert isinstance(err, UnclosedBracketError)
    assert (err.notes[0][1].line, err.notes[0][1].column) == (2, 37)


def test_error_at_the_closing_position_keeps_its_message_and_gains_the_note() -> None:
    err = _error("def @main(%x: float32) {\n  add(%x, %x\n}")
    assert (err.line, err.column) == (3, 1)
    assert err.message == "expected `,` or `)` in the argument list, found `}`"
    assert isinstance(err, UnclosedBracketError)
    assert (err.notes[0][1].line, err.notes[0][1].column) == (2, 6)


def test_balanced_brackets_leave_other_errors_alone() -> None:
    err = _error(HEAD + "  %0 = add(%x, %y);\n  %0\n}\n")
    assert not isinstance(err, UnclosedBracketError)
    assert (err.line, err.message) == (3, "unbound variable %y")


def test_sequences_inside_parentheses_are_not_mistaken_for_a_missing_paren() -> None:
    # `(a; b)` is a legal sequence; the later error is the real one.
    err = _error(HEAD + "  %0 = (%x; %x);\n  %1 = negative(%y);\n  %1\n}\n")
    assert not isinstance(err, UnclosedBracketError)
    assert (err.line, err.message) == (4, "unbound variable %y")


def test_long_tokens_are_cut_in_messages() -> None:
    garbage = "0x" + "deadbeef" * 1_000_000  # 8 MB, one token after the `0`
    err = _error(garbage)
    assert len(err.message) < 200
    quoted = err.message.split("`")[1]
    assert len(quoted) == MAX_EXCERPT_CHARS and quoted.endswith("\u2026")
    assert _error("def @main() { 1 } " + "$" * 1)  # the short case is unchanged
    assert len(_error("def @main() { " + "\x01" * 100 + " }").message) < 200


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("def @main(%x: Tensor[(4), float32]) { 1.2.3" + "9" * 1_000_000 + " }", 43),
        ("def @main() { " + "7" * 5000 + " }", 15),
        ("def @main() { nn.sum(1, axis=" + "7" * 5000 + ") }", 30),
        ("def @main(%x: Tensor[(" + "7" * 5000 + "), float32]) { %x }", 15),
        ("def @main(%x: Tensor[(4, " + "7" * 5000 + "), float32]) { %x }", 15),  # one `Tensor[...]` token
        ("def @main() {\n  %" + "7" * 5000 + " = 1;\n  1\n}", 3),
        ("def @main() { meta[relay.Constant][" + "7" * 5000 + "] }", 15),
    ],
)
def test_overlong_numbers_are_located_parse_errors(text: str, column: int) -> None:
    """The lead's find: Python's int() refuses more than 4,300 digits (a bare ValueError)."""
    err = _error(text)
    assert "digits is too long" in err.message
    assert err.column == column
    assert len(err.message) < 200
