"""Inferred types equal TVM's: every `/* ty=... */` comment TVM 0.19 printed
in the corpus, and every `checked_type` in the corpus JSON.

A comment follows the text of the expression or binder it types, so it is
matched to the node whose span ends right before it (the innermost when
several do). The comment's type text is read with the relay parser's type
grammar and compared by value with `Types.of(node)`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import relay
from relay import ast as A
from relay.infer import infer_types, type_text

from .conftest import CORPUS, corpus_files

_TY_COMMENT = re.compile(r"/\* ty=(?P<ty>.*?)(?: span=\S*)? \*/")
_META_CONSTANT = re.compile(r"meta\[relay\.Constant\]\[(\d+)\]\s*\Z")


def _annotated_files() -> list[Path]:
    files = corpus_files("*.relay") + corpus_files("random/*.relay") + corpus_files("constructs/*.relay")
    return [p for p in files if "/* ty=" in p.read_text()]


TEXT_FILES = _annotated_files()
JSON_FILES = [p for p in corpus_files("*.json") if not p.name.endswith(".meta.json")]


def parse_type(text: str) -> A.Type:
    """A type in the text syntax, read by the relay parser."""
    module = relay.parse_text(f"def @t(%x: {text}) {{ %x }}")
    annotation = module["t"].params[0].type_annotation
    assert annotation is not None
    return annotation


def all_nodes(module: A.Module) -> Iterator[A.Expr]:
    """Every expression of the module and every binder (params, lets, pattern vars)."""
    roots: list[A.Expr] = [f for _, f in module.functions]
    if module.expr is not None:
        roots.append(module.expr)
    for node in relay.post_order(roots):
        yield node
        match node:
            case A.Function(params=params):
                yield from params
            case A.Let(var=var):
                yield var
            case A.Match(clauses=clauses):
                for clause in clauses:
                    yield from A.pattern_vars(clause.lhs)


def commented_nodes(text: str, module: A.Module) -> Iterator[tuple[int, int, A.Expr | None, str]]:
    """(line, column, node, type text) for each `/* ty=... */` comment; node
    is None when no node ends right before the comment."""
    ending: dict[tuple[int, int], A.Expr] = {}
    starts: dict[int, tuple[int, int]] = {}
    for node in all_nodes(module):
        span = node.span
        if span is None or span.source is None:
            continue
        key = (span.end_line, span.end_column)
        start = (span.line, span.column)
        best = ending.get(key)
        # The innermost node: the one starting last; post order puts inner
        # nodes first, so ties keep the first.
        if best is None or start > starts[id(best)]:
            ending[key] = node
            starts[id(node)] = start
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    for m in _TY_COMMENT.finditer(text):
        end = m.start()
        while end > 0 and text[end - 1] in " \t\n":
            end -= 1
        line = text.count("\n", 0, end) + 1
        column = end - line_starts[line - 1] + 1
        target: A.Expr | None = ending.get((line, column))
        if target is None:
            # `meta[relay.Constant][i]` is the table's node, which has no span.
            ref = _META_CONSTANT.match(text, max(0, text.rfind("meta[", 0, end)), end)
            if ref is not None:
                target = module.meta["relay.Constant"][int(ref.group(1))]
        yield line, column, target, m.group("ty")


def check_text_file(path: Path) -> int:
    text = path.read_text()
    module = relay.parse_text(text, name=path.name)
    types = infer_types(module)
    checked = 0
    problems: list[str] = []
    cache: dict[str, A.Type] = {}
    for line, column, node, ty_text in commented_nodes(text, module):
        if node is None:
            problems.append(f"{line}:{column}: no expression ends before the comment ty={ty_text}")
            continue
        expected = cache.get(ty_text)
        if expected is None:
            expected = cache[ty_text] = parse_type(ty_text)
        got = types.of(node)
        if got != expected:
            problems.append(
                f"{line}:{column}: {type(node).__name__} inferred {type_text(got)}, TVM says {ty_text}"
            )
        checked += 1
    assert not problems, f"{path.name}: {len(problems)} of {checked} differ:\n" + "\n".join(problems[:20])
    return checked


@pytest.mark.skipif(not TEXT_FILES, reason=f"corpus folder {CORPUS} is absent")
@pytest.mark.parametrize("path", TEXT_FILES, ids=[str(p.relative_to(CORPUS)) for p in TEXT_FILES])
def test_inferred_types_match_tvm_comments(path: Path) -> None:
    assert check_text_file(path) > 0


@pytest.mark.skipif(not JSON_FILES, reason=f"corpus folder {CORPUS} is absent")
@pytest.mark.parametrize("path", JSON_FILES, ids=[p.name for p in JSON_FILES])
def test_inferred_types_match_tvm_json_checked_types(path: Path) -> None:
    module = relay.load_json(path.read_text())
    types = infer_types(module)
    problems: list[str] = []
    checked = 0
    for node in all_nodes(module):
        expected = node.checked_type
        if expected is None or isinstance(expected, A.IncompleteType) or isinstance(node, A.Op):
            continue
        got = types.of(node)
        if got != expected:
            problems.append(
                f"{type(node).__name__} {getattr(node, 'name', '')}: "
                f"inferred {type_text(got)}, TVM says {type_text(expected)}"
            )
        checked += 1
    assert not problems, f"{path.name}: {len(problems)} of {checked} differ:\n" + "\n".join(problems[:20])
    assert checked > 0


ROUND_TRIP_FILES = corpus_files("constructs/*.relay") + corpus_files("random/*.relay")[:40]
_COMMENT = re.compile(r"/\*.*?\*/")
_LET_TYPE = re.compile(r"let (%\w+): [^=]*=")


def _without_result_types(module: A.Module) -> A.Module:
    def visit(old: A.Expr, new: A.Expr) -> A.Expr:
        return dataclasses.replace(new, ret_type=None) if isinstance(new, A.Function) else new

    functions = []
    for gv, func in module.functions:
        rewritten = relay.rewrite(func, visit)
        assert isinstance(rewritten, A.Function)
        functions.append((gv, rewritten))
    return dataclasses.replace(module, functions=tuple(functions))


def _types_in_post_order(module: A.Module, types: relay.Types) -> list[A.Type]:
    return [types.of(n) for n in relay.post_order([f for _, f in module.functions])]


@pytest.mark.skipif(not ROUND_TRIP_FILES, reason=f"corpus folder {CORPUS} is absent")
@pytest.mark.parametrize("path", ROUND_TRIP_FILES, ids=[str(p.relative_to(CORPUS)) for p in ROUND_TRIP_FILES])
def test_stripped_types_are_printed_back_and_reparse(path: Path) -> None:
    """Without its let and result types, a module infers the same types, and
    printing them writes annotations that parse to the same types again."""
    text = path.read_text()
    expected = _types_in_post_order(module := relay.parse_text(text), infer_types(module))
    bare = _LET_TYPE.sub(r"let \1 =", _COMMENT.sub("", text))
    assert "let %" not in text or _LET_TYPE.search(bare) is None
    stripped = _without_result_types(relay.parse_text(bare))
    types = infer_types(stripped)
    assert _types_in_post_order(stripped, types) == expected
    printed = relay.print_text(stripped, types=types)
    again = relay.parse_text(printed)
    assert _types_in_post_order(again, infer_types(again)) == expected
    for _, func in again.functions:
        assert func.ret_type is not None
