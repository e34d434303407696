"""The Relay text format (version 0.0.5): a hand-written lexer and parser.

The grammar, written once (EBNF; `seq` is what TVM's parser calls ParseExpr):

    module    ::= version? (defn | typedef)* seq? metadata?
    version   ::= '#[version = "0.0.5"]'
    defn      ::= 'def' GLOBAL fnsig
    typedef   ::= 'extern'? 'type' IDENT tparams? ('{' (ctor (',' ctor)* ','?)? '}')?
    ctor      ::= IDENT ('(' type (',' type)* ')')?
    fnsig     ::= tparams? '(' (param (',' param)*)? (',' attr)* ')' ('->' type)? '{' seq '}'
    tparams   ::= '[' IDENT (',' IDENT)* ']'
    param     ::= LOCAL ('{' attr (',' attr)* '}')? (':' type)?
    seq       ::= (stmt ';')* single
    stmt      ::= GRAPH '=' call | 'let' LOCAL (':' type)? '=' call
                | 'free_var' LOCAL (':' type)? | single       (a sequenced value)
    single    ::= '{' seq '}' | ('match' | 'match?') atom '{' clause (',' clause)* ','? '}' | call
    clause    ::= pattern '=>' seq
    pattern   ::= '_' | LOCAL (':' type)? | CTOR ('(' pattern (',' pattern)* ')')?
                | '(' (pattern (',' pattern)*)? ')'
    call      ::= atom ('(' (seq (',' seq)*)? (',' attr)* ')')*
    atom      ::= (INT | FLOAT | BOOL | LOCAL | GRAPH | GLOBAL | IDENT | META
                | 'fn' fnsig | 'if' '(' seq ')' '{' seq '}' 'else' '{' seq '}'
                | 'ref' '(' seq ')' | 'ref_read' '(' seq ')' | 'ref_write' '(' seq ',' seq ')'
                | '(' ')' | '(' seq ')' | '(' seq ',' (seq ','?)* ')') ('.' INT)?
    attr      ::= IDENT '=' value
    value     ::= INT | FLOAT | BOOL | STRING | META | 'None' | 'nullptr'
                | '[' (value (',' value)*)? ']' | '(' value ')'
    type      ::= '(' (type (',' type)* ','?)? ')' | 'fn' tparams? '(' (type (',' type)*)? ')' '->' type
                | 'Tensor' '[' '(' (dim (',' dim)*)? ')' ',' IDENT ']' | DTYPE | '_'
                | 'ref' '(' type ')' | IDENT ('[' (type (',' type)*)? ']')?
    dim       ::= INT | '?' | META | IDENT
    metadata  ::= '#[metadata]' JSON

Sequences of graph bindings and lets are parsed in a loop, so a chain of any
length costs constant stack. Syntactic nesting (parentheses, nested scopes) is
recursive and limited to `MAX_NESTING` levels, past which a ParseError says so.
"""

from __future__ import annotations

import bisect
import gc
import operator
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, cast

from . import ast as A
from .device import VirtualDevice
from .op_attrs import attrs_type_key as _attrs_type_key
from .span import ParseError, SourceText, Span, line_starts

MAX_NESTING = 1000
# Each nesting level costs a few Python frames; Python-to-Python calls use no
# C stack in 3.11, so a higher limit is safe.
_RECURSION_LIMIT = 20 * MAX_NESTING
if sys.getrecursionlimit() < _RECURSION_LIMIT:
    sys.setrecursionlimit(_RECURSION_LIMIT)

# Whitespace and comments are skipped inside the token pattern itself, so
# every match is one real token (the lexer loop runs once per token). Block
# comments use the unrolled form `/\*[^*]*\*+(?:[^/*][^*]*\*+)*/`, which
# scans a comment in runs instead of one lazy step per character (TVM's
# `/* ty=... */` annotations are 40% of a printed module). The alternatives
# come in order of frequency; only their relative order where two can match
# at the same offset matters (fatarrow before `=`, float before int and
# ident, meta and `match?` and tensor before ident, string before badstring).
#
# `tensor` is a whole `Tensor[(d, ...), dtype]` as TVM prints a parameter's or
# binder's annotation (right after `: `, plain decimal dimensions, a common
# dtype), one token instead of a dozen: annotations are a third of a printed
# model's tokens. Only a `:` token comes before one, and the parser reads
# what follows a `:` with _type, which takes it whole; so the same text
# spelled differently (a comment inside, `->` before it) parses the same,
# token by token.
_TOKEN_RE = re.compile(
    r"""
    (?:\s+|//[^\n]*|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/)*
    (?:
      (?P<punct>[()\[\]{},;:.?]|=(?!>))
    | (?P<graph>%[0-9]+(?![A-Za-z0-9_]))
    | (?P<local>%[A-Za-z0-9_]+)
    | (?P<float>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)(?:f16|f32|f64|f)?|-?\d+(?:f16|f32|f64|f)|-?inff|nanf)
    | (?P<int>-?\d+(?:i8|i16|i32|i64|u8|u16|u32|u64)?)
    | (?P<meta>meta\s*\[\s*[A-Za-z_][\w.]*\s*\]\s*\[\s*\d+\s*\])
    | (?P<pmatch>match\?)
    | (?P<tensor>(?<=:\ )Tensor\[\((?:[0-9]+(?:,\ [0-9]+)*)?\),\ (?:u?int(?:8|16|32|64)|float(?:16|32|64)|bool)\])
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    | (?P<global>@[A-Za-z0-9_][\w.]*)
    | (?P<arrow>->)
    | (?P<fatarrow>=>)
    | (?P<string>"(?:[^"\\\n]|\\.)*")
    | (?P<version>\#\[version\s*=\s*"[^"\n]*"\])
    | (?P<badcomment>/\*)
    | (?P<badstring>")
    | (?P<end>\Z)
    | (?P<error>.)
    )
    """,
    re.VERBOSE,
)
_META_RE = re.compile(r"meta\s*\[\s*([A-Za-z_][\w.]*)\s*\]\s*\[\s*(\d+)\s*\]")
_METADATA_RE = re.compile(r"^[ \t]*#\[metadata\][ \t]*\r?$", re.MULTILINE)
_KEYWORDS = frozenset(
    {
        "def",
        "fn",
        "let",
        "if",
        "else",
        "match",
        "type",
        "extern",
        "free_var",
        "ref",
        "ref_read",
        "ref_write",
        "True",
        "False",
    }
)
# A token whose text is a keyword or a punctuation mark has that text as its
# kind; the end of input (the only empty token) is EOF. Every other token's
# kind is its group name.
_KIND_BY_TEXT = {word: word for word in _KEYWORDS} | {mark: mark for mark in "()[]{},;:=.?"} | {"": "eof"}
_bisect_right = bisect.bisect_right
_LAST_GROUP = operator.attrgetter("lastgroup")
_LEX_ERRORS = {
    "badcomment": "unterminated /* comment",
    "badstring": "unterminated string literal",
    "error": "unexpected character",
}
_DTYPE_RE = re.compile(r"(?:u?int|float|bfloat|bool)\d*(?:x\d+)?$")
# Dtypes that _DTYPE_RE accepts, known without running it.
_COMMON_DTYPES = frozenset(
    f"{base}{bits}" for base in ("float", "int", "uint") for bits in (8, 16, 32, 64)
) | {"bool", "bfloat16"}
_INT_SUFFIX = {
    "": "int32",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
}
_FLOAT_SUFFIX = {"": "float32", "f": "float32", "f16": "float16", "f32": "float32", "f64": "float64"}

# Token kinds after classification.
EOF = "eof"
# Tokens quoted in messages are cut to this many characters (10 MB of garbage
# is one token, and a message is not the place to echo it).
MAX_EXCERPT_CHARS = 80
# More digits than Python's int() converts (sys.int_info.str_digits_check_threshold is 640,
# the default limit 4,300); far beyond any integer dtype either way.
_LONG_DIGITS = re.compile(r"[0-9]{4301,}")
_CLOSER = {"(": ")", "[": "]", "{": "}"}


def _excerpt(text: str) -> str:
    """`text`, or its first MAX_EXCERPT_CHARS - 1 characters and an ellipsis."""
    return text if len(text) <= MAX_EXCERPT_CHARS else text[: MAX_EXCERPT_CHARS - 1] + "\u2026"


class UnclosedBracketError(ParseError):
    """A `(`, `[` or `{` that was never closed, reported where it should have closed,
    with the opening bracket's location as a note (`notes`: (message, span) pairs)."""

    def __init__(self, message: str, span: Span | None, note: str, note_span: Span) -> None:
        super().__init__(message, span)
        self.notes: tuple[tuple[str, Span], ...] = ((note, note_span),)

    def __str__(self) -> str:
        out = super().__str__()
        for note, span in self.notes:
            out += "\nnote" + str(ParseError(note, span))[len("error") :]
        return out


def parse_text(
    text: str,
    name: str = "<string>",
    virtual_devices: list[VirtualDevice] | None = None,
    meta: dict[str, list[Any]] | None = None,
) -> A.Module:
    """Parse Relay text (as printed by TVM <= 0.19) into a Module.

    `virtual_devices` (and, more generally, `meta`) are tables supplied next
    to the text; their entries are appended after the text's own
    `#[metadata]` entries of the same kind, as TVM's parser does.
    Raises ParseError with the location of the first problem.
    """
    if not isinstance(text, str):
        raise ParseError("Relay text must be a string")
    source = SourceText(name, text)
    head, tables, has_section = _split_metadata(text, source)
    if meta:
        for kind, entries in meta.items():
            tables.setdefault(kind, []).extend(entries)
    if virtual_devices:
        tables.setdefault("VirtualDevice", []).extend(virtual_devices)
    # Everything the parser allocates lives as long as the module: the cyclic
    # collector would only rescan it (as in solver.plan).
    enabled = gc.isenabled()
    gc.disable()
    try:
        parser = _Parser(source, head, tables, has_section)
        try:
            return parser.parse_module()
        except ParseError as err:
            better = _bracket_error(parser, err)
            if better is None:
                raise
            raise better from None
        except ValueError as err:  # int() of a too long digit run
            located = parser._long_number_error()
            if located is None:
                raise
            raise located from err
    finally:
        if enabled:
            gc.enable()


def _split_metadata(text: str, source: SourceText) -> tuple[str, dict[str, list[Any]], bool]:
    match = _METADATA_RE.search(text)
    if match is None:
        return text, {}, False
    head = text[: match.start()]
    body = text[match.end() :]
    from .tvm_json import decode_meta_section

    try:
        tables = decode_meta_section(body)
    except ParseError as err:
        line = bisect.bisect_right(line_starts(text), match.start())
        raise ParseError(f"bad #[metadata] section: {err.message}", Span(source, line, 1, line, 12)) from None
    return head, {k: list(v) for k, v in tables.items()}, True


class _Parser:
    """Recursive descent over a token list; see the module docstring's grammar."""

    def __init__(
        self, source: SourceText, text: str, tables: dict[str, list[Any]], has_section: bool
    ) -> None:
        self.source = source
        self.text = text
        self.tables = tables
        self.has_section = has_section
        self.kinds: list[str] = []
        self.values: list[str] = []
        self.starts: list[int] = []
        self._tokenize()
        self.pos = 0
        self.line_starts = line_starts(text)
        self.graph: dict[int, A.Expr] = {}
        # Lexical scopes: a stack of bindings per name, and per open scope
        # the names it bound (so lookups are O(1) however deep the nesting).
        self.env: dict[str, list[A.Var]] = {}
        self.frames: list[list[str]] = [[]]
        self.free_vars: dict[str, A.Var] = {}
        self.globals: dict[str, A.GlobalVar] = {}
        self.type_names: dict[str, A.GlobalTypeVar] = {}
        self.ctors: dict[str, A.Constructor] = {}
        self.type_scopes: list[dict[str, A.TypeVar]] = []
        self.depth = 0
        self.constants: dict[int, A.Constant] = {}

    # ---------------------------------------------------------------- lexing

    def _tokenize(self) -> None:
        # map() over C methods: no bytecode runs per token outside the regex.
        matches = list(_TOKEN_RE.finditer(self.text))
        groups = list(map(_LAST_GROUP, matches))
        values = list(map(re.Match.__getitem__, matches, groups))
        starts = list(map(re.Match.start, matches, groups))
        kinds = cast(list[str], list(map(_KIND_BY_TEXT.get, values, groups)))  # every token has a kind
        # The last match is always the end of input (`\Z`), kind EOF, at len(text);
        # after trailing whitespace finditer finds it twice (once with the
        # whitespace, once empty), so keep one.
        if len(kinds) > 1 and kinds[-2] == EOF:
            del kinds[-1], values[-1], starts[-1]
        if not _LEX_ERRORS.keys().isdisjoint(kinds):
            for index, kind in enumerate(kinds):
                if kind in _LEX_ERRORS:
                    message = _LEX_ERRORS[kind]
                    if kind == "error":
                        message = f"{message} {_excerpt(values[index])!r}"
                    self._fail_at(starts[index], message)
        # One more EOF past the end, so `kinds[pos + 1]` (one token of lookahead
        # past a token that is not EOF) needs no bounds check.
        kinds.append(EOF)
        values.append("")
        starts.append(len(self.text))
        self.kinds, self.values, self.starts = kinds, values, starts

    # ---------------------------------------------------------------- positions

    def _line_col(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def _span_from(self, first: int) -> Span:
        """The span from token `first` to the last consumed token."""
        # _line_col inlined: this runs for most nodes.
        last = max(self.pos - 1, first)
        line_starts = self.line_starts
        start = self.starts[first]
        line = _bisect_right(line_starts, start)
        end = self.starts[last] + len(self.values[last])
        end_line = _bisect_right(line_starts, end)
        return Span(
            self.source,
            line,
            start - line_starts[line - 1] + 1,
            end_line,
            end - line_starts[end_line - 1] + 1,
        )

    def _token_span(self, index: int) -> Span:
        start = self.starts[index]
        line, col = self._line_col(start)
        end_line, end_col = self._line_col(start + max(1, len(self.values[index])))
        return Span(self.source, line, col, end_line, end_col)

    def _fail_at(self, offset: int, message: str) -> NoReturn:
        self.line_starts = getattr(self, "line_starts", None) or line_starts(self.text)
        line, col = self._line_col(offset)
        raise ParseError(message, Span(self.source, line, col, line, col + 1))

    def _fail(self, message: str, index: int | None = None) -> NoReturn:
        raise ParseError(message, self._token_span(self.pos if index is None else index))

    def _long_number_error(self) -> ParseError | None:
        """The error for the first token (up to the current one) with a run of more digits
        than Python's int() converts (4,300): a literal, a `%N` or a tensor shape."""
        for index in range(min(self.pos + 2, len(self.values))):
            run = _LONG_DIGITS.search(self.values[index])
            if run is not None:
                digits = run.end() - run.start()
                return ParseError(f"a number of {digits} digits is too long", self._token_span(index))
        return None

    def _describe(self, index: int) -> str:
        kind = self.kinds[index]
        if kind == EOF:
            return "end of input"
        return f"`{_excerpt(self.values[index])}`"

    # ---------------------------------------------------------------- token helpers

    def accept(self, kind: str) -> bool:
        if self.kinds[self.pos] == kind:
            self.pos += 1
            return True
        return False

    def expect(self, kind: str, what: str | None = None) -> str:
        if self.kinds[self.pos] != kind:
            self._fail(f"expected {what or '`' + kind + '`'}, found {self._describe(self.pos)}")
        value = self.values[self.pos]
        self.pos += 1
        return value

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            self._fail(f"expression nested more than {MAX_NESTING} levels deep; bind parts with `%N = ...;`")

    def _leave(self) -> None:
        self.depth -= 1

    def _push_scope(self) -> None:
        self.frames.append([])

    def _pop_scope(self) -> None:
        env = self.env
        for name in self.frames.pop():
            env[name].pop()

    def _bind(self, name: str, var: A.Var) -> None:
        self.env.setdefault(name, []).append(var)
        self.frames[-1].append(name)

    def _separated(self, close: str, item: Callable[[], Any]) -> list[Any]:
        """Items separated by commas up to `close` (consumed); trailing comma allowed."""
        items: list[Any] = []
        kinds = self.kinds
        while kinds[self.pos] != close:
            items.append(item())
            if kinds[self.pos] != ",":
                self.expect(close, f"`,` or `{close}`")
                return items
            self.pos += 1
        self.pos += 1
        return items

    # ---------------------------------------------------------------- module

    def parse_module(self) -> A.Module:
        if self.kinds[self.pos] == "version":
            version = self.values[self.pos]
            if '"0.0.5"' not in version:
                self._fail(
                    f'unsupported text format version {version[version.index("=") + 1 : -1].strip()}; expected "0.0.5"'
                )
            self.pos += 1
        functions: list[tuple[A.GlobalVar, A.Function]] = []
        type_defs: list[A.TypeData] = []
        defined: set[str] = set()
        while True:
            kind = self.kinds[self.pos]
            if kind == "def":
                start = self.pos
                self.pos += 1
                name_index = self.pos
                name = self.expect("global", "a global name like `@main`")[1:]
                if name in defined:
                    self._fail(f"global function @{name} is defined twice", name_index)
                defined.add(name)
                gv = self._global(name)
                func = self._function_rest(start)
                functions.append((gv, func))
            elif kind == "type" or (kind == "extern" and self.kinds[self.pos + 1] == "type"):
                type_defs.append(self._type_def())
            else:
                break
        expr = None
        if self.kinds[self.pos] != EOF:
            expr = self._seq()
        if self.kinds[self.pos] != EOF:
            self._fail(f"expected a definition or the end of input, found {self._describe(self.pos)}")
        for name, gv in self.globals.items():
            if name not in defined and expr is None:
                raise ParseError(f"call of undefined global function @{name}", gv.span)
        return A.Module(tuple(functions), tuple(type_defs), self.tables, expr, self.source)

    def _global(self, name: str) -> A.GlobalVar:
        gv = self.globals.get(name)
        if gv is None:
            gv = self.globals[name] = A.GlobalVar(name, span=self._token_span(self.pos - 1))
        return gv

    def _type_def(self) -> A.TypeData:
        start = self.pos
        self.accept("extern")
        self.expect("type")
        name_index = self.pos
        name = self.expect("ident", "a type name")
        header = self.type_names.get(name)
        if header is None:
            header = self.type_names[name] = A.GlobalTypeVar(name, span=self._token_span(name_index))
        type_vars: list[A.TypeVar] = []
        self.type_scopes.append({})
        try:
            if self.accept("["):
                type_vars = self._separated("]", self._bind_type_var)
            ctors: list[A.Constructor] = []
            if self.accept("{"):

                def ctor() -> A.Constructor:
                    index = self.pos
                    cname = self.expect("ident", "a constructor name")
                    inputs: list[A.Type] = []
                    if self.accept("("):
                        inputs = self._separated(")", self._type)
                    if cname in self.ctors:
                        self._fail(f"constructor {cname} is defined twice", index)
                    c = A.Constructor(cname, tuple(inputs), header, len(ctors), span=self._span_from(index))
                    self.ctors[cname] = c
                    ctors.append(c)
                    return c

                self._separated("}", ctor)
        finally:
            self.type_scopes.pop()
        return A.TypeData(header, tuple(type_vars), tuple(ctors), span=self._span_from(start))

    def _bind_type_var(self) -> A.TypeVar:
        index = self.pos
        name = self.expect("ident", "a type variable name")
        tv = A.TypeVar(name, span=self._token_span(index))
        self.type_scopes[-1][name] = tv
        return tv

    # ---------------------------------------------------------------- functions

    def _function_rest(self, start: int) -> A.Function:
        """Parse `[T](params, attrs) -> ret { body }` after `fn` / `def @name`."""
        self._enter()
        self._push_scope()
        self.type_scopes.append({})
        try:
            type_params: list[A.TypeVar] = []
            if self.accept("["):
                type_params = self._separated("]", self._bind_type_var)
            self.expect("(", "`(` to open the parameter list")
            params: list[A.Var] = []
            attrs: list[tuple[str, Any]] = []
            while not self.accept(")"):
                if self.kinds[self.pos] == "ident" and self.kinds[self.pos + 1] == "=":
                    attrs = self._attrs(")")
                    self.expect(")", "`)` to close the parameter list")
                    break
                params.append(self._param())
                if not self.accept(","):
                    self.expect(")", "`,` or `)` in the parameter list")
                    break
            ret_type = None
            if self.accept("arrow"):
                ret_type = self._type()
            self.expect("{", "`{` to open the function body")
            body = self._seq()
            self.expect("}", "`}` to close the function body")
        finally:
            self._pop_scope()
            self.type_scopes.pop()
            self._leave()
        device = None
        rest = []
        for key, value in attrs:
            if key == "virtual_device":
                device = self._device_value(value, start)
            else:
                rest.append((key, value))
        return A.Function(
            tuple(params),
            body,
            ret_type,
            tuple(type_params),
            tuple(rest),
            device,
            span=self._span_from(start),
        )

    def _device_value(self, value: Any, index: int) -> VirtualDevice | A.MetaRef:
        if isinstance(value, (VirtualDevice, A.MetaRef)):
            return value
        self._fail("virtual_device must be a meta[VirtualDevice][i] reference", index)

    def _param(self) -> A.Var:
        start = self.pos
        name = self.expect("local", "a parameter like `%x`")[1:]
        device = None
        if self.accept("{"):
            for key, value in self._attrs("}"):
                if key != "virtual_device":
                    self._fail(f"unknown parameter attribute `{key}` (only virtual_device is allowed)", start)
                device = self._device_value(value, start)
            self.expect("}", "`}` to close the parameter attributes")
        type_annotation = self._type() if self.accept(":") else None
        var = A.Var(name, type_annotation, device, span=self._span_from(start))
        self._bind(name, var)
        return var

    # ---------------------------------------------------------------- attributes

    def _attrs(self, close: str) -> list[tuple[str, Any]]:
        """`key=value` pairs separated by commas, up to (not including) `close`."""
        out: list[tuple[str, Any]] = []
        seen: set[str] = set()
        while self.kinds[self.pos] == "ident" and self.kinds[self.pos + 1] == "=":
            index = self.pos
            key = self.values[self.pos]
            self.pos += 2
            if key in seen:
                self._fail(f"attribute `{key}` is given twice", index)
            seen.add(key)
            out.append((key, self._attr_value()))
            if not self.accept(","):
                break
        if self.kinds[self.pos] != close:
            self._fail(f"expected an attribute `name=value` or `{close}`, found {self._describe(self.pos)}")
        return out

    def _attr_value(self) -> Any:
        kind = self.kinds[self.pos]
        index = self.pos
        value = self.values[index]
        if kind == "int":
            self.pos += 1
            return _int_literal(value)[0]
        if kind == "float":
            self.pos += 1
            return _float_literal(value)[0]
        if kind == "True" or kind == "False":
            self.pos += 1
            return kind == "True"
        if kind == "string":
            self.pos += 1
            return _unquote(value)
        if kind == "meta":
            self.pos += 1
            return self._meta(index)
        if kind == "ident" and value in ("None", "nullptr"):
            self.pos += 1
            return None
        if kind == "[":
            self.pos += 1
            self._enter()
            try:
                return tuple(self._separated("]", self._attr_value))
            finally:
                self._leave()
        if kind == "(":
            self.pos += 1
            self._enter()
            try:
                inner = self._attr_value()
            finally:
                self._leave()
            self.expect(")")
            return inner
        self._fail(f"expected an attribute value, found {self._describe(index)}")

    def _meta(self, index: int) -> Any:
        m = _META_RE.fullmatch(self.values[index])
        assert m is not None
        kind, i = m.group(1), int(m.group(2))
        table = self.tables.get(kind)
        if table is None:
            if self.has_section and kind != "VirtualDevice":
                self._fail(f"no `{kind}` entries in the metadata section", index)
            return A.MetaRef(kind, i)
        if i >= len(table):
            self._fail(f"meta[{kind}][{i}] is out of bounds: the table has {len(table)} entries", index)
        return table[i]

    # ---------------------------------------------------------------- types

    def _type(self) -> A.Type:
        start = self.pos
        kind = self.kinds[self.pos]
        self._enter()
        try:
            if kind == "tensor":  # see _TOKEN_RE
                value = self.values[start]
                dims, dtype = value[8:-1].rsplit("), ", 1)
                self.pos += 1
                sizes = tuple(map(int, dims.split(", "))) if dims else ()
                return A.TensorType(sizes, dtype, span=self._span_from(start))
            if kind == "(":
                self.pos += 1
                return A.TupleType(tuple(self._separated(")", self._type)), span=self._span_from(start))
            if kind == "fn":
                self.pos += 1
                self.type_scopes.append({})
                try:
                    tparams: list[A.TypeVar] = []
                    if self.accept("["):
                        tparams = self._separated("]", self._bind_type_var)
                    self.expect("(", "`(` to open the argument types")
                    args = self._separated(")", self._type)
                    self.expect("arrow", "`->` and a result type")
                    ret = self._type()
                finally:
                    self.type_scopes.pop()
                return A.FuncType(tuple(args), ret, tuple(tparams), span=self._span_from(start))
            if kind == "ref":
                self.pos += 1
                self.expect("(")
                inner = self._type()
                self.expect(")")
                return A.RefType(inner, span=self._span_from(start))
            if kind == "ident":
                name = self.values[self.pos]
                self.pos += 1
                if name == "Tensor":
                    # The expects below, checked in one go for the usual spelling
                    # `Tensor[(d, ...), float32]` (every parameter has one).
                    kinds, values = self.kinds, self.values
                    if kinds[self.pos] == "[" and kinds[self.pos + 1] == "(":
                        self.pos += 2
                    else:
                        self.expect("[", "`[` after Tensor")
                        self.expect("(", "`(` to open the shape")
                    shape = self._shape()
                    pos = self.pos
                    if (
                        kinds[pos] == ","
                        and kinds[pos + 1] == "ident"
                        and kinds[pos + 2] == "]"
                        and values[pos + 1] in _COMMON_DTYPES
                    ):
                        dtype = values[pos + 1]
                        self.pos = pos + 3
                    else:
                        self.expect(",", "`,` and a dtype")
                        dtype = self._dtype()
                        self.expect("]", "`]` to close the tensor type")
                    return A.TensorType(tuple(shape), dtype, span=self._span_from(start))
                if name == "_":
                    return A.IncompleteType(span=self._span_from(start))
                if _DTYPE_RE.match(name):
                    return A.TensorType((), name, span=self._span_from(start))
                for scope in reversed(self.type_scopes):
                    if name in scope:
                        head: A.Type = scope[name]
                        break
                else:
                    head = self.type_names.get(name) or A.GlobalTypeVar(name, span=self._span_from(start))
                    self.type_names.setdefault(name, head)
                type_args: list[A.Type] = []
                if self.accept("["):
                    type_args = self._separated("]", self._type)
                elif isinstance(head, A.TypeVar):
                    return head
                return A.TypeCall(head, tuple(type_args), span=self._span_from(start))
        finally:
            self._leave()
        self._fail(f"expected a type, found {self._describe(start)}")

    def _dtype(self) -> str:
        index = self.pos
        name = self.expect("ident", "a dtype like float32")
        if not _DTYPE_RE.match(name) and name not in ("handle", "void"):
            self._fail(f"unknown dtype `{name}`", index)
        return name

    def _shape(self) -> list[A.Dim]:
        """Dimensions up to `)` (consumed): `_separated(")", self._dim)` with
        plain decimal dimensions, nearly all of them, read in the loop."""
        kinds, values = self.kinds, self.values
        shape: list[A.Dim] = []
        while kinds[self.pos] != ")":
            value = values[self.pos]
            if kinds[self.pos] == "int" and value.isdecimal():
                shape.append(int(value))
                self.pos += 1
            else:
                shape.append(self._dim())
            if kinds[self.pos] != ",":
                self.expect(")", "`,` or `)`")
                return shape
            self.pos += 1
        self.pos += 1
        return shape

    def _dim(self) -> A.Dim:
        kind = self.kinds[self.pos]
        index = self.pos
        self.pos += 1
        if kind == "int":
            value, dtype = _int_literal(self.values[index])
            return value if dtype == "int32" else A.IntImm(value, dtype)
        if kind == "?":
            return A.ANY
        if kind == "ident":
            return self.values[index]
        if kind == "meta":
            return self._meta(index)  # type: ignore[no-any-return]
        self._fail(f"expected a dimension (integer or ?), found {self._describe(index)}", index)

    # ---------------------------------------------------------------- expressions

    def _seq(self) -> A.Expr:
        """Graph bindings, lets, free_var declarations and `;`-sequenced
        values, then one expression. Iterative in the number of bindings."""
        lets: list[tuple[A.Var, A.Expr, int]] = []
        self._push_scope()
        try:
            while True:
                kind = self.kinds[self.pos]
                if kind == "graph" and self.kinds[self.pos + 1] == "=":
                    index = self.pos
                    number = int(self.values[index][1:])
                    self.pos += 2
                    value = self._call()
                    self.expect(";", "`;` after the graph binding")
                    self.graph[number] = value
                    continue
                if kind == "let":
                    start = self.pos
                    self.pos += 1
                    var_index = self.pos
                    name = self.expect("local", "a variable like `%x` after let")[1:]
                    type_annotation = self._type() if self.accept(":") else None
                    var = A.Var(name, type_annotation, span=self._span_from(var_index))
                    self.expect("=", "`=` in the let binding")
                    value = self._call()
                    self.expect(";", "`;` after the let binding")
                    self._bind(name, var)
                    lets.append((var, value, start))
                    continue
                if kind == "free_var":
                    self.pos += 1
                    var_index = self.pos
                    name = self.expect("local", "a variable like `%x` after free_var")[1:]
                    type_annotation = self._type() if self.accept(":") else None
                    self.free_vars[name] = A.Var(name, type_annotation, span=self._span_from(var_index))
                    self.expect(";", "`;` after the free_var declaration")
                    continue
                start = self.pos
                value = self._single()
                if self.accept(";"):
                    lets.append((A.Var("", None, span=value.span), value, start))
                    continue
                body = value
                break
        finally:
            self._pop_scope()
        for var, value, start in reversed(lets):
            body = A.Let(var, value, body, span=self._span_from(start))
        return body

    def _single(self) -> A.Expr:
        kind = self.kinds[self.pos]
        start = self.pos
        if kind == "{":
            self.pos += 1
            self._enter()
            try:
                inner = self._seq()
            finally:
                self._leave()
            self.expect("}", "`}` to close the block")
            return inner
        if kind == "match" or kind == "pmatch":
            self.pos += 1
            self._enter()
            try:
                data = self._atom()
                self.expect("{", "`{` to open the match clauses")
                clauses = self._separated("}", self._clause)
            finally:
                self._leave()
            return A.Match(data, tuple(clauses), kind == "match", span=self._span_from(start))
        return self._call()

    def _clause(self) -> A.Clause:
        start = self.pos
        self._push_scope()
        try:
            pattern = self._pattern()
            self.expect("fatarrow", "`=>` after the pattern")
            rhs = self._seq()
        finally:
            self._pop_scope()
        return A.Clause(pattern, rhs, span=self._span_from(start))

    def _pattern(self) -> A.Pattern:
        start = self.pos
        kind = self.kinds[self.pos]
        self._enter()
        try:
            if kind == "ident" and self.values[start] == "_":
                self.pos += 1
                return A.PatternWildcard(span=self._span_from(start))
            if kind == "local":
                name = self.values[start][1:]
                self.pos += 1
                type_annotation = self._type() if self.accept(":") else None
                var = A.Var(name, type_annotation, span=self._span_from(start))
                self._bind(name, var)
                return A.PatternVar(var, span=self._span_from(start))
            if kind == "ident":
                name = self.values[start]
                ctor = self.ctors.get(name)
                if ctor is None:
                    self._fail(f"undefined constructor `{name}` (a pattern variable is written `%{name}`)")
                self.pos += 1
                sub: list[A.Pattern] = []
                if self.accept("("):
                    sub = self._separated(")", self._pattern)
                return A.PatternConstructor(ctor, tuple(sub), span=self._span_from(start))
            if kind == "(":
                self.pos += 1
                return A.PatternTuple(tuple(self._separated(")", self._pattern)), span=self._span_from(start))
        finally:
            self._leave()
        self._fail(f"expected a pattern, found {self._describe(start)}")

    def _call(self) -> A.Expr:
        start = self.pos
        expr = self._atom()
        kinds, values = self.kinds, self.values
        while kinds[self.pos] == "(":
            self.pos += 1
            self._enter()
            try:
                args: list[A.Expr] = []
                attrs: list[tuple[str, Any]] | None = None
                while kinds[self.pos] != ")":
                    kind = kinds[self.pos]
                    after = kinds[self.pos + 1]
                    if kind == "ident" and after == "=":
                        attrs = self._attrs(")")
                        self.expect(")")
                        break
                    if (kind == "graph" or kind == "local") and (after == "," or after == ")"):
                        # A plain variable, as most arguments are: what _seq would
                        # return for it, without its scope and loop.
                        args.append(self._variable(kind, values[self.pos], self.pos))
                        self.pos += 1
                    else:
                        args.append(self._seq())
                    if kinds[self.pos] != ",":
                        self.expect(")", "`,` or `)` in the argument list")
                        break
                    self.pos += 1
                else:
                    self.pos += 1
            finally:
                self._leave()
            call_attrs = None
            if isinstance(expr, A.Op):
                call_attrs = A.Attrs(tuple(attrs or ()), _attrs_type_key(expr.name))
            elif attrs:
                self._fail("only operator calls take attributes", start)
            expr = A.Call(expr, tuple(args), call_attrs, span=self._span_from(start))
        if isinstance(expr, A.Constructor):
            expr = A.Call(expr, (), span=self._span_from(start))
        # (`+`, `*` and `/` never get here: the lexer rejects them.)
        if kinds[self.pos] == "int" and values[self.pos].startswith("-"):
            self._fail("binary operators are not supported; write add(a, b), multiply(a, b), ...")
        return expr

    def _variable(self, kind: str, value: str, index: int) -> A.Expr:
        """What a `graph` or `local` token at `index` refers to."""
        if kind == "local":
            return self._lookup_local(value[1:], index)
        found = self.graph.get(int(value[1:]))
        if found is None:
            self._fail(f"graph variable {value} is used before it is defined", index)
        return found

    def _atom(self) -> A.Expr:
        start = self.pos
        kind = self.kinds[self.pos]
        value = self.values[start]
        expr: A.Expr
        if kind == "local" or kind == "graph":
            self.pos += 1
            expr = self._variable(kind, value, start)
        elif kind == "global":
            self.pos += 1
            expr = self._global(value[1:])
        elif kind == "int":
            self.pos += 1
            number, dtype = _int_literal(value)
            expr = A.Constant(A.NDArray.scalar(number, dtype), span=self._span_from(start))
        elif kind == "float":
            self.pos += 1
            fnumber, dtype = _float_literal(value)
            expr = A.Constant(A.NDArray.scalar(fnumber, dtype), span=self._span_from(start))
        elif kind == "True" or kind == "False":
            self.pos += 1
            expr = A.Constant(A.NDArray.scalar(kind == "True", "bool"), span=self._span_from(start))
        elif kind == "meta":
            self.pos += 1
            found_meta = self._meta(start)
            if isinstance(found_meta, A.MetaRef):
                if found_meta.kind != "relay.Constant":
                    self._fail(f"meta[{found_meta.kind}] cannot be used as an expression", start)
                expr = self.constants.get(found_meta.index) or A.Constant(
                    None, found_meta.index, span=self._span_from(start)
                )
                self.constants[found_meta.index] = expr
            elif isinstance(found_meta, A.Expr):
                expr = found_meta
            else:
                self._fail(f"{value} is not an expression", start)
        elif kind == "ident":
            self.pos += 1
            ctor = self.ctors.get(value)
            expr = ctor if ctor is not None else A.op(value)
        elif kind == "fn":
            self.pos += 1
            expr = self._function_rest(start)
        elif kind == "match" or kind == "pmatch":
            expr = self._single()  # TVM only allows match at the head of a sequence; we also take it here
        elif kind == "if":
            self.pos += 1
            self._enter()
            try:
                self.expect("(", "`(` after if")
                cond = self._seq()
                self.expect(")", "`)` after the condition")
                branches = []
                for word in ("then", "else"):
                    if word == "else":
                        self.expect("else", "`else`")
                    self.expect("{", f"`{{` to open the {word} branch")
                    branches.append(self._seq())
                    self.expect("}", f"`}}` to close the {word} branch")
            finally:
                self._leave()
            expr = A.If(cond, branches[0], branches[1], span=self._span_from(start))
        elif kind in ("ref", "ref_read", "ref_write"):
            self.pos += 1
            self._enter()
            try:
                self.expect("(", f"`(` after {kind}")
                first = self._seq()
                if kind == "ref_write":
                    self.expect(",", "`,` between the reference and the value")
                    second = self._seq()
                self.expect(")", f"`)` to close {kind}")
            finally:
                self._leave()
            if kind == "ref":
                expr = A.RefCreate(first, span=self._span_from(start))
            elif kind == "ref_read":
                expr = A.RefRead(first, span=self._span_from(start))
            else:
                expr = A.RefWrite(first, second, span=self._span_from(start))
        elif kind == "(":
            self.pos += 1
            self._enter()
            try:
                if self.accept(")"):
                    expr = A.Tuple((), span=self._span_from(start))
                else:
                    first = self._seq()
                    if self.accept(")"):
                        expr = first
                    else:
                        self.expect(",", "`,` or `)`")
                        fields = [first, *self._separated(")", self._seq)]
                        expr = A.Tuple(tuple(fields), span=self._span_from(start))
            finally:
                self._leave()
        else:
            self._fail(f"expected an expression, found {self._describe(start)}")
        if self.kinds[self.pos] == "." and self.kinds[self.pos + 1] == "int":
            self.pos += 1
            index_token = self.pos
            self.pos += 1
            index, dtype = _int_literal(self.values[index_token])
            if index < 0 or dtype != "int32":
                self._fail("a tuple index must be a non-negative integer", index_token)
            expr = A.TupleGetItem(expr, index, span=self._span_from(start))
        return expr

    def _lookup_local(self, name: str, index: int) -> A.Var:
        bound = self.env.get(name)
        if bound:
            return bound[-1]
        var = self.free_vars.get(name)
        if var is None:
            self._fail(f"unbound variable %{name}", index)
        return var


# -------------------------------------------------------------------- literals


def _int_literal(text: str) -> tuple[int, str]:
    if text.isdecimal():  # no sign, no suffix: the common case
        return int(text), "int32"
    m = re.fullmatch(r"(-?\d+)(\w*)", text)
    assert m is not None
    return int(m.group(1)), _INT_SUFFIX[m.group(2)]


def _float_literal(text: str) -> tuple[float, str]:
    for suffix in ("f16", "f32", "f64", "f"):
        if text.endswith(suffix):
            body = text[: -len(suffix)]
            if body in ("inf", "-inf", "nan"):
                return float(body), _FLOAT_SUFFIX[suffix]
            return float(body), _FLOAT_SUFFIX[suffix]
    return float(text), "float32"


def _unquote(text: str) -> str:
    body = text[1:-1]
    if "\\" not in body:
        return body
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def _bracket_error(parser: _Parser, err: ParseError) -> ParseError | None:
    """A better error for `err` when an unclosed bracket caused it, else None.

    The parser notices a missing `)` only where the text stops making sense, often
    lines later (`%0 = add(%x, %x;` is read on as the call's next argument). Scanning
    the tokens before the error for brackets still open there finds the cause:
    - a `(` or `[` that a `;` ended the statement inside, on a line before the error:
      "expected `)`" at that `;`, the line a person fixes;
    - a `{` still open at a `def` or at the end of input: "expected `}`" there;
    - otherwise, when the parser was already expecting the innermost open bracket's
      closer, the same error with the note added.
    Each comes with a note at the opening bracket. Runs only on errors (one pass).
    """
    span = err.span
    if span is None or span.source is not parser.source:
        return None
    line_starts = parser.line_starts
    if span.line > len(line_starts):
        return None
    offset = line_starts[span.line - 1] + span.column - 1
    kinds, starts = parser.kinds, parser.starts
    stack: list[int] = []  # token indexes of the brackets open so far
    ended_inside: dict[int, int] = {}  # open `(`/`[` -> the first `;` directly inside it
    stop = None  # a `def` inside an open `{`, or the end of input
    braces = 0  # `{` in the stack
    for index, kind in enumerate(kinds):
        if starts[index] >= offset and kind != EOF:
            if kind == "def" and braces:
                stop = index
            break
        if kind in _CLOSER:
            stack.append(index)
            braces += kind == "{"
        elif kind in (")", "]", "}"):
            if stack:
                opener = stack.pop()
                braces -= kinds[opener] == "{"
                ended_inside.pop(opener, None)
        elif kind == ";":
            if stack and kinds[stack[-1]] != "{" and stack[-1] not in ended_inside:
                ended_inside[stack[-1]] = index
        elif kind == EOF or (kind == "def" and braces):
            stop = index
            break
    if not stack:
        return None

    def note_for(opener: int) -> tuple[str, Span]:
        return f"the `{kinds[opener]}` opened here is not closed", parser._token_span(opener)

    ended = [(semi, opener) for opener, semi in ended_inside.items() if opener in stack]
    if ended:
        semi, opener = min(ended)
        if parser._line_col(starts[semi])[0] < span.line:
            closer = _CLOSER[kinds[opener]]
            return UnclosedBracketError(
                f"expected `{closer}`, found `;`", parser._token_span(semi), *note_for(opener)
            )
    if stop is not None and braces:
        opener = next(i for i in reversed(stack) if kinds[i] == "{")
        if kinds[stop] == EOF:
            where = _end_of_last_line(parser)
            return UnclosedBracketError("expected `}`, found end of input", where, *note_for(opener))
        return UnclosedBracketError("expected `}`, found `def`", parser._token_span(stop), *note_for(opener))
    innermost = stack[-1]
    if err.message.startswith("expected") and f"`{_CLOSER[kinds[innermost]]}`" in err.message:
        return UnclosedBracketError(err.message, span, *note_for(innermost))
    return None


def _end_of_last_line(parser: _Parser) -> Span:
    """Just past the last token of the text (where a missing closer at the end belongs)."""
    kinds = parser.kinds
    last = len(kinds) - 1
    while last > 0 and kinds[last] == EOF:
        last -= 1
    end = parser.starts[last] + len(parser.values[last])
    line, column = parser._line_col(end)
    return Span(parser.source, line, column, line, column + 1)
