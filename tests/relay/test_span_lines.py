"""Lines as Python's tokenizer ends them (\\r\\n, \\r, \\n only): an error report shows the
line its location names even when a comment or a string literal before it holds a
character `str.splitlines` would also break at (\\x0c, \\u2028, ...), for Relay text and
for TVMScript."""

from __future__ import annotations

import pytest

import relay
from relay.span import SourceText, line_starts

# Each breaks a line for str.splitlines but not for Python's tokenizer.
NOT_BREAKS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
BREAKS = ["\n", "\r\n", "\r"]


@pytest.mark.parametrize("odd", NOT_BREAKS, ids=[f"U+{ord(c):04X}" for c in NOT_BREAKS])
def test_source_lines_do_not_break_at_other_separators(odd: str) -> None:
    source = SourceText("s", f"one {odd} still one\ntwo\n")
    assert len(f"one {odd} still one\ntwo\n".splitlines()) == 3  # what the old split saw
    assert source.line(1) == f"one {odd} still one"
    assert source.line(2) == "two"
    assert source.line(3) == ""


@pytest.mark.parametrize("brk", BREAKS, ids=["LF", "CRLF", "CR"])
def test_source_lines_break_where_python_does(brk: str) -> None:
    text = f"a{brk}bb{brk}{brk}c"
    source = SourceText("s", text)
    assert [source.line(n) for n in range(6)] == ["", "a", "bb", "", "c", ""]
    assert line_starts(text) == [0, 1 + len(brk), 3 + 2 * len(brk), 3 + 3 * len(brk)]


def test_python_agrees_on_the_line_of_each_statement() -> None:
    """The lines are those of Python's own ast (what TVMScript locations use)."""
    import ast

    text = 'a = "x\x0cy\u2028z"\r\nb = 1\rc = 2\nd = 3'
    source = SourceText("s", text)
    for node in ast.parse(text).body:
        assert isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        assert source.line(node.lineno).startswith(f"{node.targets[0].id} = ")


RELAY = '#[version = "0.0.5"]{brk}{before}def @main(%x: Tensor[(2), float32]) {{{brk}  %y{brk}}}{brk}'


@pytest.mark.parametrize(
    ("brk", "before"),
    [
        ("\n", "// a comment \u2028 with a separator\n"),
        ("\n", "// a form feed \x0c in a comment\n"),
        ("\r\n", ""),
        ("\r", ""),
        ("\r\n", "// a next-line \x85 in a comment\r\n"),
    ],
    ids=["u2028-comment", "form-feed-comment", "crlf", "cr", "crlf-nel-comment"],
)
def test_relay_error_reports_show_the_line_they_name(brk: str, before: str) -> None:
    """The lexer's lines and the report's are the same lines (a bare \r ends a line for
    both, as for Python and most editors)."""
    text = RELAY.format(brk=brk, before=before)
    with pytest.raises(relay.RelayError) as info:
        relay.parse_text(text)
    err = info.value
    assert "unbound variable %y" in err.message
    assert (err.line, err.column) == (3 + bool(before), 3)
    assert f"{err.line} |   %y\n" in str(err)


def test_relay_string_literal_with_a_form_feed_keeps_the_lines() -> None:
    text = (
        '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 2), float32]) {\n'
        '  %0 = nn.dense(%x, %x, out_dtype="a\x0cb\u2028c");\n  %y\n}\n'
    )
    with pytest.raises(relay.RelayError) as info:
        relay.parse_text(text)
    assert (info.value.line, info.value.column) == (4, 3)
    assert "4 |   %y\n" in str(info.value)


_TVMSCRIPT = (
    "@I.ir_module\n"
    "class Module:\n"
    "    @T.prim_func\n"
    '    def k(x: T.Buffer((4,), "float32")):\n'
    '        T.evaluate(T.call_extern("int32", "puts", "a\x0cb\u2028c\x1dd"))\n'
    "        T.evaluate(__import__)\n"
)


@pytest.mark.tvm
@pytest.mark.parametrize("brk", BREAKS, ids=["LF", "CRLF", "CR"])
def test_tvmscript_refusal_reports_show_the_line_they_name(brk: str) -> None:
    from tvm_bridge.relax_plan import read_relax

    text = _TVMSCRIPT.replace("\n", brk)
    with pytest.raises(relay.RelayError) as info:
        read_relax(text)
    err = info.value
    assert (err.line, err.column) == (6, 20)
    assert "6 |         T.evaluate(__import__)\n" in str(err)
