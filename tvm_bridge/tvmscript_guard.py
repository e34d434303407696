"""TVMScript read, never evaluated: the allowlist check before TVM's parser.

TVM's TVMScript parser evaluates the Python expressions it meets (type
annotations, decorators, attribute chains, class-body statements) with
Python's builtins in scope, so a caller's text could run code. `check_tvmscript`
parses the text with Python's `ast` (no evaluation), walks it iteratively and
accepts only the constructs TVM 0.27 prints (docs/security.md): one
`@I.ir_module` class of `@R.function` / `@T.prim_func` functions, the
statements and expressions TVMScript uses, names the module binds itself, and
attribute chains from the generated table in `tvmscript_guard_table`. Anything
else is a `ParseError` at the offending node's line and column.

The check also prepares the text for TVM's parser (`Checked.script`): the
`from tvm.script import ...` lines and the `metadata = tvm.ir.load_json(...)`
header are blanked (lines keep their numbers; the header's JSON literal is
handed over as `Checked.metadata`, to be checked as JSON and loaded directly),
and the constants TVM prints but does not read back, `R.const("-inf", ...)`,
`"inf"` and `"nan"`, become float expressions it reads (`-1e999`, `1e999`,
`1e999-1e999`). No TVM import: the check is pure Python.
"""

from __future__ import annotations

import ast
import builtins
import io
import logging
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise

from relay.span import ParseError, SourceText, Span, line_starts

from . import tvmscript_guard_table as table
from .check import MAX_TUPLE_TENSORS

__all__ = [
    "MAX_DEPTH",
    "Checked",
    "attribute_chain",
    "check_tvmscript",
    "map_column",
]

log = logging.getLogger(__name__)

# The deepest expression nesting accepted (TVM 0.27's own prints of the corpus
# and its legalized TIR stay under 25); deeper text is refused before TVM's
# recursive parser sees it.
MAX_DEPTH = 100

# The names TVM's parser binds by default (tvm.script.parser.core.entry):
# namespaces, never values, and never rebound by the text.
PARSER_GLOBALS = frozenset({"tvm", "I", "ir", "T", "tir", "R", "relax", "Tx", "tirx", "Axis", "TypeVar"})
# Chain heads: the three TVMScript namespaces and `cls` (the module itself).
CHAIN_HEADS = frozenset({"I", "R", "T"})
# Every name Python resolves when the text does not bind it: a use of one is
# allowed only where the text bound it earlier in an enclosing block.
BUILTIN_NAMES = frozenset(dir(builtins))
# The imports TVM prints (commented out or not) that the reader accepts and blanks.
ALLOWED_IMPORTS = frozenset({("ir", "I"), ("relax", "R"), ("tir", "T"), ("tirx", "T")})
# TVM prints these float constants as strings and its parser refuses them;
# each becomes a float expression of the same value (same length where it can).
FLOAT_WORDS = {"inf": "1e999", "-inf": "-1e999", "+inf": "1e999", "nan": "1e999-1e999", "-nan": "1e999-1e999"}

# The decorator keywords TVM prints (`check_well_formed=False` would let a
# malformed module past TVM's own checks).
DECORATOR_KEYWORDS = {
    "I.ir_module": frozenset(),
    "R.function": frozenset({"private", "pure"}),
    "T.prim_func": frozenset({"private", "s_tir"}),
}
_BINDABLE_FORBIDDEN = PARSER_GLOBALS | {"cls", "metadata", "range"}
_LITERAL_TYPES = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Checked:
    """TVMScript that passed the check, ready for TVM's parser.

    `script` is the text with the allowed imports and the metadata header
    blanked and the float words rewritten (same line numbers); `metadata` is
    the header's JSON text (None without a header); `shifts` maps a line of
    `script` to the (column, added characters) of each rewrite on it, so that
    a column TVM reports maps back to the caller's text (`map_column`).
    """

    script: str
    metadata: str | None
    metadata_span: Span | None
    shifts: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)


def map_column(checked: Checked, line: int, column: int) -> int:
    """A 1-based column of `checked.script` on `line` as a column of the caller's text."""
    out = column
    for at, added in checked.shifts.get(line, ()):
        if column > at + added:
            out -= added
    return out


def attribute_chain(node: ast.expr) -> str | None:
    """`R.nn.conv2d` for the Attribute/Name nest it is written as; None when
    the chain does not start at a plain name (`f(x).y`)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _prefixes(chains: frozenset[str]) -> frozenset[str]:
    out: set[str] = set()
    for chain in chains:
        parts = chain.split(".")
        for i in range(1, len(parts)):
            out.add(".".join(parts[:i]))
    return frozenset(out)


_NAMESPACES = _prefixes(table.CHAINS)


class _Lines:
    """Line starts and byte-to-character columns of a text (ast columns are
    UTF-8 byte offsets; reports use 1-based character columns)."""

    def __init__(self, source: SourceText) -> None:
        self.source = source
        # Python's own line breaks only (relay.span.LINE_BREAK: `str.splitlines` also breaks
        # at \x0c, \u2028, ..., which may sit inside a string literal: offsets would then
        # miss the nodes they name).
        text = source.text
        self.starts = [*line_starts(text), len(text)]
        self.lines = [text[a:b] for a, b in pairwise(self.starts)]
        self.ascii = text.isascii()

    def column(self, line: int, byte_col: int) -> int:
        if self.ascii or not 1 <= line <= len(self.lines):
            return byte_col + 1
        return len(self.lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", "replace")) + 1

    def offset(self, line: int, byte_col: int) -> int:
        """0-based character offset in the text."""
        return self.starts[line - 1] + self.column(line, byte_col) - 1

    def span(self, node: ast.AST) -> Span:
        line = getattr(node, "lineno", 1)
        col = self.column(line, getattr(node, "col_offset", 0))
        end_line = getattr(node, "end_lineno", None) or line
        end_col = getattr(node, "end_col_offset", None)
        end = self.column(end_line, end_col) if end_col is not None else col + 1
        return Span(self.source, line, col, end_line, end)


class _Refused(Exception):
    """The check's own failure: what and where; turned into a ParseError."""

    def __init__(self, node: ast.AST, message: str) -> None:
        super().__init__(message)
        self.node = node
        self.message = message


@dataclass
class _Scope:
    """Names one function may read: `bound` by block (innermost last, each a
    set), `anywhere` (names bound somewhere in the function that are no
    builtin, so an unbound use can only fail in TVM's parser), the class's
    function names (for `cls.<name>`)."""

    blocks: list[set[str]]
    anywhere: frozenset[str]
    functions: frozenset[str]

    def visible(self, name: str) -> bool:
        if any(name in block for block in self.blocks):
            return True
        return name in self.anywhere and name not in BUILTIN_NAMES


def check_tvmscript(text: str, source: SourceText) -> Checked:
    """`text` checked against the allowlist (module docstring), or a ParseError
    at the first construct that is not allowed."""
    lines = _Lines(source)
    tree = _parse(text, source)
    try:
        return _Checker(lines).module(tree)
    except _Refused as refused:
        raise ParseError(refused.message, lines.span(refused.node)) from None


def _parse(text: str, source: SourceText) -> ast.Module:
    try:
        return ast.parse(text, filename=source.name)
    except SyntaxError as exc:
        line = exc.lineno or 1
        column = exc.offset or 1
        raise ParseError(
            f"TVMScript syntax error: {exc.msg}", Span(source, line, column, line, column + 1)
        ) from None
    except (RecursionError, MemoryError):
        line, column = _longest_statement(text)
        message = "TVMScript nests too deeply to read (Python's parser gave up on this statement)"
        raise ParseError(message, Span(source, line, column, line, column + 1)) from None
    except ValueError as exc:  # null bytes and the like
        raise ParseError(f"TVMScript cannot be read: {exc}", Span(source, 1, 1, 1, 2)) from None


def _longest_statement(text: str) -> tuple[int, int]:
    """(line, 1-based column) of the logical line with the most tokens: where
    a too-deep nest that made Python's parser give up most likely is.
    `tokenize` is iterative, so it reads what `ast.parse` could not."""
    best, best_at, count, start = -1, (1, 1), 0, None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if start is None and tok.type not in (
                tokenize.NL,
                tokenize.COMMENT,
                tokenize.INDENT,
                tokenize.DEDENT,
            ):
                start = (tok.start[0], tok.start[1] + 1)
            count += 1
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if start is not None and count > best:
                    best, best_at = count, start
                count, start = 0, None
    except (tokenize.TokenError, SyntaxError, IndentationError):
        if start is not None and count > best:
            best_at = start
    return best_at


class _Checker:
    """One check of one module (state: the text edits made so far)."""

    def __init__(self, lines: _Lines) -> None:
        self.lines = lines
        self.blank: list[ast.stmt] = []
        self.class_name = ""
        self.floats: list[tuple[ast.Constant, str]] = []

    # ------------------------------------------------------------ module level

    def module(self, tree: ast.Module) -> Checked:
        metadata: ast.Constant | None = None
        header: ast.stmt | None = None
        classes: list[ast.ClassDef] = []
        for stmt in tree.body:
            if isinstance(stmt, ast.Import | ast.ImportFrom) and not classes:
                self._import(stmt)
                self.blank.append(stmt)
            elif isinstance(stmt, ast.Assign) and _targets_name(stmt, "metadata"):
                if header is not None:
                    raise _Refused(stmt, "a second `metadata = ...` line is not allowed in TVMScript")
                if classes:
                    raise _Refused(
                        stmt, "the `metadata = tvm.ir.load_json(...)` line must come before the class"
                    )
                metadata = self._metadata(stmt)
                header = stmt
                self.blank.append(stmt)
            elif isinstance(stmt, ast.ClassDef):
                if classes:
                    raise _Refused(
                        stmt, "a second class is not allowed in TVMScript: one `@I.ir_module` class"
                    )
                classes.append(stmt)
            else:
                raise _Refused(stmt, f"{_describe(stmt)} is not allowed at the top of TVMScript")
        if not classes:
            node: ast.AST = tree.body[0] if tree.body else tree
            raise _Refused(node, "the TVMScript has no `@I.ir_module` class")
        self._class(classes[0], has_metadata=metadata is not None)
        return self._edited(metadata, header)

    def _import(self, stmt: ast.Import | ast.ImportFrom) -> None:
        names = {(a.name, a.asname) for a in stmt.names}
        if isinstance(stmt, ast.Import):
            allowed = names == {("tvm", None)}
        else:
            allowed = stmt.module == "tvm.script" and stmt.level == 0 and names <= ALLOWED_IMPORTS
        if not allowed:
            raise _Refused(
                stmt,
                "import is not allowed in TVMScript (only TVM's `from tvm.script import ir as I`, "
                "`relax as R`, `tir as T`, and `import tvm`)",
            )

    def _metadata(self, stmt: ast.Assign) -> ast.Constant:
        call = stmt.value
        if not (
            isinstance(call, ast.Call)
            and attribute_chain(call.func) == "tvm.ir.load_json"
            and len(call.args) == 1
            and not call.keywords
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            raise _Refused(
                stmt.value,
                'the metadata line must be exactly `metadata = tvm.ir.load_json("""...""")` '
                "with one string literal",
            )
        return call.args[0]

    def _class(self, node: ast.ClassDef, *, has_metadata: bool) -> None:
        if node.bases or node.keywords:
            raise _Refused(node, "a TVMScript class has no base classes or keywords")
        self._decorators(node, ("I.ir_module",))
        self.class_name = node.name
        functions = frozenset(s.name for s in node.body if isinstance(s, ast.FunctionDef))
        module_names = {node.name} | ({"metadata"} if has_metadata else set())
        if node.name in _BINDABLE_FORBIDDEN or node.name in BUILTIN_NAMES or node.name.startswith("_"):
            raise _Refused(node, f"the class name `{node.name}` is not allowed in TVMScript")
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef):
                self._function(stmt, module_names, functions)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                chain = attribute_chain(stmt.value.func)
                if chain not in table.CLASS_CALLS:
                    raise _Refused(
                        stmt, f"the class body allows only {_listed(table.CLASS_CALLS)} calls and functions"
                    )
                scope = _Scope([set(module_names)], frozenset(), functions)
                self._expressions([stmt.value], scope)
            else:
                raise _Refused(stmt, f"{_describe(stmt)} is not allowed in a TVMScript class body")

    def _decorators(self, node: ast.FunctionDef | ast.ClassDef, allowed: tuple[str, ...]) -> None:
        if len(node.decorator_list) != 1:
            raise _Refused(node, f"`{node.name}` needs exactly one decorator: {_listed(allowed)}")
        deco = node.decorator_list[0]
        call = deco if isinstance(deco, ast.Call) else None
        chain = attribute_chain(call.func if call is not None else deco)
        if chain not in allowed:
            shown = f"`@{chain}`" if chain is not None else "this decorator"
            raise _Refused(deco, f"{shown} is not allowed here: only {_listed(allowed)}")
        if call is not None:
            if call.args:
                raise _Refused(call.args[0], "decorator arguments must be keywords with literal values")
            for kw in call.keywords:
                if kw.arg is None or not _is_literal(kw.value):
                    raise _Refused(
                        kw.value if kw.arg is not None else kw,
                        "decorator arguments must be keywords with literal values",
                    )
                if kw.arg not in DECORATOR_KEYWORDS.get(chain, frozenset()):
                    allowed_kw = _listed(DECORATOR_KEYWORDS.get(chain, frozenset())) or "none"
                    raise _Refused(kw, f"`@{chain}` takes no keyword `{kw.arg}` here (allowed: {allowed_kw})")

    # ------------------------------------------------------------- functions

    def _function(self, node: ast.FunctionDef, outer: set[str], functions: frozenset[str]) -> None:
        """One function and its body: iterative over nested blocks."""
        self._decorators(node, tuple(sorted(table.DECORATORS)))
        args = node.args
        extra: list[ast.AST] = [*args.posonlyargs, *args.kwonlyargs]
        if args.vararg is not None:
            extra.append(args.vararg)
        if args.kwarg is not None:
            extra.append(args.kwarg)
        if extra:
            raise _Refused(extra[0], "TVMScript parameters are plain positional parameters")
        defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        if defaults:
            raise _Refused(defaults[0], "default arguments are not allowed in TVMScript")
        scope = _Scope([set(outer)], _bound_anywhere(node), functions)
        self.widths: dict[str, int] = {}  # name -> tensors its tuple value holds, flattened
        for arg in args.args:
            self._bind_name(arg, arg.arg, scope)
        for arg in args.args:
            if arg.annotation is not None:
                self._expressions([arg.annotation], scope)
        if node.returns is not None:
            self._expressions([node.returns], scope)
        self._body(node.body, scope, functions)

    def _body(self, body: list[ast.stmt], scope: _Scope, functions: frozenset[str]) -> None:
        """Statements in order, with an explicit stack; each nested block gets
        a frame of names that ends with it (TVM's parser scopes `with`, `for`
        and `if` bodies so too), and the names its head binds (a loop's
        variables, `with ... as x`) are bound in that frame, not around it."""
        work: list[ast.stmt | _Bind | str] = list(reversed(body))
        while work:
            item = work.pop()
            if isinstance(item, str):
                if item == _PUSH:
                    scope.blocks.append(set())
                else:
                    scope.blocks.pop()
                continue
            if isinstance(item, _Bind):
                self._target(item.target, scope, names_only=True, builtin_ok=item.builtin_ok)
                continue
            for block, binds in reversed(self._statement(item, scope, functions)):
                work.append(_POP)
                work.extend(reversed(block))
                work.extend(reversed(binds))
                work.append(_PUSH)

    def _statement(
        self, stmt: ast.stmt, scope: _Scope, functions: frozenset[str]
    ) -> list[tuple[list[ast.stmt], tuple[_Bind, ...]]]:
        """Check one statement's own parts (binding what it binds); its nested
        blocks come back to be walked in order, each with the targets to bind
        in its frame."""
        if isinstance(stmt, ast.Expr):
            call = stmt.value
            if not isinstance(call, ast.Call) or attribute_chain(call.func) not in table.CHAINS:
                raise _Refused(
                    stmt, "an expression statement must be a TVMScript call such as `R.output(...)`"
                )
            self._expressions([call], scope)
            return []
        if isinstance(stmt, ast.Assign) and _is_cls_binding(stmt, self.class_name):
            return []  # `cls = Module`, as TVM prints it: `cls.<function>` names a function of the class
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise _Refused(stmt, "chained assignment is not allowed in TVMScript")
            self._expressions([stmt.value], scope)
            _no_python_sequence(stmt.value)
            self._tuple_width(stmt.targets[0], stmt.value)
            self._target(stmt.targets[0], scope)
            return []
        if isinstance(stmt, ast.AnnAssign):
            self._expressions([stmt.annotation] + ([stmt.value] if stmt.value is not None else []), scope)
            if stmt.value is not None:
                _no_python_sequence(stmt.value)
            self._target(stmt.target, scope)
            return []
        if isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self._expressions([stmt.value], scope)
            return []
        if isinstance(stmt, ast.If):
            self._expressions([stmt.test], scope)
            return [(stmt.body, ()), (stmt.orelse, ())] if stmt.orelse else [(stmt.body, ())]
        if isinstance(stmt, ast.With):
            for item in stmt.items:
                self._head(item.context_expr, table.FRAMES, "with", scope)
            # `with ... as x`: whether TVM's parser binds x depends on the frame; a builtin name is refused.
            binds = tuple(_Bind(i.optional_vars, False) for i in stmt.items if i.optional_vars is not None)
            return [(stmt.body, binds)]
        if isinstance(stmt, ast.For):
            if stmt.orelse:
                raise _Refused(stmt.orelse[0], "`for ... else` is not allowed in TVMScript")
            self._head(stmt.iter, table.LOOPS, "for", scope)
            return [(stmt.body, (_Bind(stmt.target, True),))]
        if isinstance(stmt, ast.While):
            if stmt.orelse:
                raise _Refused(stmt.orelse[0], "`while ... else` is not allowed in TVMScript")
            self._expressions([stmt.test], scope)
            return [(stmt.body, ())]
        if isinstance(stmt, ast.Assert):
            self._expressions([stmt.test] + ([stmt.msg] if stmt.msg is not None else []), scope)
            return []
        if isinstance(stmt, ast.FunctionDef):
            # A local function (Relax closures): the same rules, the enclosing names visible.
            self._bind_name(stmt, stmt.name, scope, builtin_ok=False)
            outer = set().union(*scope.blocks)
            self._function(stmt, outer, functions)
            return []
        raise _Refused(stmt, f"{_describe(stmt)} is not allowed in TVMScript")

    def _tuple_width(self, target: ast.expr, value: ast.expr) -> None:
        """Refuse a tuple value that, flattened, holds more than MAX_TUPLE_TENSORS values,
        names bound to tuples counted as often as they appear: `t1 = (t0, t0)` forty times
        is 2**40 values to TVM's parser, which normalises every one (shared, never
        remembered) and does not end."""
        if not isinstance(value, ast.Tuple):
            if isinstance(target, ast.Name):
                self.widths.pop(target.id, None)
            return
        total = 0
        work: list[ast.expr] = [value]
        while work:
            item = work.pop()
            if isinstance(item, ast.Tuple):
                work.extend(item.elts)
            else:
                total += self.widths.get(item.id, 1) if isinstance(item, ast.Name) else 1
        if total > MAX_TUPLE_TENSORS:
            raise _Refused(
                value,
                f"this tuple holds {total} values once the tuples it names are counted each time, "
                f"more than {MAX_TUPLE_TENSORS}",
            )
        if isinstance(target, ast.Name):
            self.widths[target.id] = total

    def _head(self, node: ast.expr, allowed: frozenset[str], keyword: str, scope: _Scope) -> None:
        chain = attribute_chain(node.func) if isinstance(node, ast.Call) else None
        if chain not in allowed:
            raise _Refused(
                node,
                f"`{keyword}` takes one of TVMScript's own {keyword} heads "
                f"({_listed(allowed, 6)}), not this expression",
            )
        self._expressions([node], scope)

    def _target(
        self, node: ast.expr, scope: _Scope, *, names_only: bool = False, builtin_ok: bool = True
    ) -> None:
        """An assignment target: names (bound here), tuples of them, or a
        subscript store into an allowed expression."""
        work = [node]
        while work:
            target = work.pop()
            if isinstance(target, ast.Name):
                self._bind_name(target, target.id, scope, builtin_ok=builtin_ok)
            elif isinstance(target, ast.Tuple | ast.List):
                work.extend(target.elts)
            elif isinstance(target, ast.Subscript) and not names_only:
                self._expressions([target.value, target.slice], scope)
            else:
                raise _Refused(
                    target, f"{_describe(target)} is not allowed as an assignment target in TVMScript"
                )

    def _bind_name(self, node: ast.AST, name: str, scope: _Scope, *, builtin_ok: bool = True) -> None:
        """Bind `name` in the innermost frame. `builtin_ok` is False where TVM's
        parser may not bind it (a local function, `with ... as`): a builtin's
        name there would still mean the builtin to TVM."""
        if name in _BINDABLE_FORBIDDEN or name.startswith("__"):
            raise _Refused(node, f"the name `{name}` cannot be bound in TVMScript")
        if not builtin_ok and name in BUILTIN_NAMES:
            raise _Refused(node, f"the name `{name}` (a Python builtin) cannot be bound here in TVMScript")
        scope.blocks[-1].add(name)

    # ------------------------------------------------------------ expressions

    def _expressions(self, roots: list[ast.expr], scope: _Scope) -> None:
        """Every expression under `roots`, with an explicit stack (no recursion).
        A `_Later` refusal waits until the children yielded after it (the
        inner expression at fault, if any) have been checked."""
        work: list[tuple[ast.AST | _Later, int]] = [(root, 1) for root in reversed(roots)]
        while work:
            node, depth = work.pop()
            if isinstance(node, _Later):
                raise _Refused(node.node, node.message)
            if depth > MAX_DEPTH:
                raise _Refused(node, f"the expression nests deeper than {MAX_DEPTH} levels")
            children = list(self._expression(node, scope))
            for child in reversed(children):
                work.append((child, depth + 1))

    def _expression(self, node: ast.AST, scope: _Scope) -> Iterator[ast.AST | _Later]:
        """Check one expression node; yield the children still to check, in order."""
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, _LITERAL_TYPES):
                raise _Refused(node, f"a {type(node.value).__name__} literal is not allowed in TVMScript")
            return
        if isinstance(node, ast.Name):
            self._name(node, scope)
            return
        if isinstance(node, ast.Attribute):
            yield from self._chain(node, scope)
            return
        if isinstance(node, ast.Call):
            yield from self._call(node, scope)
            return
        if isinstance(node, ast.Tuple | ast.List):
            yield from self._no_starred(node.elts)
            return
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise _Refused(node, "`**` in a dict is not allowed in TVMScript")
            for k, v in zip(node.keys, node.values, strict=True):
                if k is not None:
                    yield k
                yield v
            return
        if isinstance(node, ast.UnaryOp):
            yield node.operand
            return
        if isinstance(node, ast.BinOp):
            _arithmetic(node)
            yield node.left
            yield node.right
            return
        if isinstance(node, ast.BoolOp):
            yield from node.values
            return
        if isinstance(node, ast.Compare):
            yield node.left
            yield from node.comparators
            return
        if isinstance(node, ast.Subscript):
            yield node.value
            yield node.slice
            return
        if isinstance(node, ast.Slice):
            yield from (p for p in (node.lower, node.upper, node.step) if p is not None)
            return
        if isinstance(node, ast.IfExp):
            yield node.test
            yield node.body
            yield node.orelse
            return
        raise _Refused(node, f"{_describe(node)} is not allowed in TVMScript")

    def _no_starred(self, items: list[ast.expr]) -> Iterator[ast.expr]:
        for item in items:
            if isinstance(item, ast.Starred):
                raise _Refused(item, "starred arguments (`*x`) are not allowed in TVMScript")
            yield item

    def _call(self, node: ast.Call, scope: _Scope) -> Iterator[ast.AST | _Later]:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id != "range":
                self._name(func, scope, called=True)
        elif isinstance(func, ast.Attribute):
            yield from self._chain(func, scope)
        else:
            yield func  # what is wrong inside it is the better message
            yield _Later(func, "only TVMScript functions, `cls.<function>` and local names may be called")
        if attribute_chain(func) == "R.const" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value in FLOAT_WORDS:
                self.floats.append((first, FLOAT_WORDS[first.value]))
        yield from self._no_starred(node.args)
        for kw in node.keywords:
            if kw.arg is None:
                raise _Refused(kw, "`**` arguments are not allowed in TVMScript")
            yield kw.value

    def _name(self, node: ast.Name, scope: _Scope, *, called: bool = False) -> None:
        name = node.id
        what = "call of" if called else "name"
        if name in PARSER_GLOBALS:
            raise _Refused(
                node, f"`{name}` is a namespace, not a value: write a whole TVMScript name such as `R.add`"
            )
        if name == "range":
            raise _Refused(node, "`range` is allowed only as a `for` loop's range")
        if name.startswith("__"):  # Python's and TVM's own (`__import__`, `__current_script_parser__`)
            raise _Refused(node, f"{what} `{name}` is not allowed in TVMScript")
        if name == "cls":
            raise _Refused(node, "`cls` is allowed only as `cls.<a function of this module>`")
        if scope.visible(name):
            return
        if name in BUILTIN_NAMES:
            raise _Refused(
                node,
                f"{what} `{name}` is not allowed in TVMScript: a Python builtin "
                "(only `range` is allowed), and not bound by this module before here",
            )
        raise _Refused(node, f"{what} `{name}` is not allowed in TVMScript: the module does not bind it")

    def _chain(self, node: ast.Attribute, scope: _Scope) -> Iterator[ast.AST | _Later]:
        root = _chain_root(node)
        parts = _attribute_parts(node)
        hidden = next((p for p in parts if p.startswith("_")), None)
        if not isinstance(root, ast.Name):
            if hidden is not None:
                raise _Refused(node, f"attribute `.{hidden}` is not allowed in TVMScript (a name starting with `_`)")
            yield root  # what is wrong inside it is the better message
            yield _Later(node, f"attribute `.{parts[0]}` of {_describe(root)} is not allowed in TVMScript")
            return
        chain = ".".join([root.id, *parts])
        if hidden is not None or root.id.startswith("_"):
            raise _Refused(node, f"attribute `{chain}` is not allowed in TVMScript (a name starting with `_`)")
        head = root.id
        if head == "cls":
            if len(parts) != 1 or parts[0] not in scope.functions:
                raise _Refused(node, f"attribute `{chain}` is not allowed in TVMScript: `cls.` names a function of this module")
            return
        if head in PARSER_GLOBALS and head not in CHAIN_HEADS:
            raise _Refused(node, f"attribute `{chain}` is not allowed in TVMScript (only `I.`, `R.` and `T.` names)")
        if head in CHAIN_HEADS:
            if chain in table.CHAINS:
                return
            if chain in _NAMESPACES:
                raise _Refused(node, f"`{chain}` is a namespace, not a value: write a whole TVMScript name")
            raise _Refused(node, f"attribute `{_first_unknown([head, *parts])}` is not allowed in TVMScript")
        # An attribute of a value the module bound (a buffer's `.data`, ...).
        if len(parts) == 1 and parts[0] in table.LOCAL_ATTRS and scope.visible(head):
            return
        raise _Refused(node, f"attribute `{chain}` is not allowed in TVMScript")

    # -------------------------------------------------------------- the edits

    def _region(self, node: ast.stmt | ast.expr, mode: str) -> tuple[int, int]:
        """The character range of `node` in the text, checked: it parses on its
        own to the same tree, so an edit there changes exactly what was checked."""
        start = self.lines.offset(node.lineno, node.col_offset)
        end_line = node.end_lineno or node.lineno
        end = self.lines.offset(end_line, node.end_col_offset or 0)
        chunk = self.lines.source.text[start:end]
        parsed: ast.AST | None = None
        try:
            tree = ast.parse(chunk, mode=mode)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if isinstance(tree, ast.Module) and len(tree.body) == 1:
            parsed = tree.body[0]
        elif isinstance(tree, ast.Expression):
            parsed = tree.body
        if parsed is None or ast.dump(parsed) != ast.dump(node):
            raise _Refused(node, "this statement cannot be located in the text exactly (unusual line breaks?)")
        return start, end

    def _edited(self, metadata: ast.Constant | None, header: ast.stmt | None) -> Checked:
        """The text for TVM's parser: blanked statements, rewritten floats."""
        text = self.lines.source.text
        edits: list[tuple[int, int, str, int]] = []  # (start, end, replacement, line)
        for stmt in self.blank:
            start, end = self._region(stmt, "exec")
            chunk = text[start:end]
            edits.append((start, end, "".join(ch if ch in "\r\n" else " " for ch in chunk), stmt.lineno))
        shifts: dict[int, list[tuple[int, int]]] = {}
        for node, replacement in self.floats:
            start, end = self._region(node, "eval")
            added = len(replacement) - (end - start)
            if added:
                shifts.setdefault(node.lineno, []).append(
                    (self.lines.column(node.lineno, node.col_offset), added)
                )
            edits.append((start, end, replacement, node.lineno))
        edits.sort()
        parts: list[str] = []
        at = 0
        for start, end, replacement, _ in edits:
            parts.append(text[at:start])
            parts.append(replacement)
            at = end
        parts.append(text[at:])
        script = "".join(parts)
        md_text = str(metadata.value) if metadata is not None else None
        md_span = self.lines.span(header) if header is not None else None
        frozen = {line: tuple(sorted(items)) for line, items in shifts.items()}
        if self.floats:
            log.debug("rewrote %d float constants TVM prints as strings", len(self.floats))
        return Checked(script, md_text, md_span, frozen)


# The largest literal exponent or shift TVM's parser may compute as a Python number.
MAX_LITERAL_EXPONENT = 64


def _arithmetic(node: ast.BinOp) -> None:
    """Refuse what would make TVM's parser compute a huge Python value (it folds
    literals as Python does): repeating a sequence literal (`[0] * 10**9`), a
    power or shift by anything but a small int literal (`10 ** 10 ** 9`), a
    power of anything but a number literal (`((2 ** 64) ** 64) ** 64 ...`:
    each level multiplies the digits by 64; five levels took TVM's parser 9 s,
    six would need 8 GiB)."""
    sequences = (ast.List, ast.Tuple, ast.Dict, ast.JoinedStr)
    if isinstance(node.op, ast.Mult) and any(
        isinstance(side, sequences) or (isinstance(side, ast.Constant) and isinstance(side.value, str | bytes))
        for side in (node.left, node.right)
    ):
        raise _Refused(node, "repeating a sequence or string (`*`) is not allowed in TVMScript")
    if isinstance(node.op, ast.Mod) and _string_valued(node.left):
        # `"%300000000s" % "0"` builds a 300 MB string in the parser, as `*` would.
        raise _Refused(node, "formatting a string with `%` is not allowed in TVMScript")
    if isinstance(node.op, ast.Pow | ast.LShift):
        right = node.right
        small = (
            isinstance(right, ast.Constant)
            and isinstance(right.value, int)
            and not isinstance(right.value, bool)
            and abs(right.value) <= MAX_LITERAL_EXPONENT
        )
        if not small:
            raise _Refused(node, f"`**` and `<<` need a literal integer of at most {MAX_LITERAL_EXPONENT} on the right in TVMScript")
    if isinstance(node.op, ast.Pow) and not _is_number_literal(node.left):
        raise _Refused(node.left, "`**` needs a number literal on the left in TVMScript (`2 ** 16`)")


def _string_valued(node: ast.expr) -> bool:
    """True when `node` is (or is built from, through subscripts and operators) a string or
    bytes literal or a sequence holding one: the left side of a `%` that formats text."""
    work: list[ast.expr] = [node]
    while work:
        item = work.pop()
        if isinstance(item, ast.Constant) and isinstance(item.value, str | bytes) or isinstance(item, ast.JoinedStr):
            return True
        if isinstance(item, ast.Subscript):
            work.append(item.value)
        elif isinstance(item, ast.BinOp):
            work.extend((item.left, item.right))
        elif isinstance(item, ast.Tuple | ast.List):
            work.extend(item.elts)
        elif isinstance(item, ast.IfExp):
            work.extend((item.body, item.orelse))
    return False


def _is_number_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool)


def _no_python_sequence(value: ast.expr) -> None:
    """Refuse an assignment whose value would be a Python string, list, dict or
    set: TVM's Relax parser binds such a value to the name as it is (numbers and
    tuples become Relax values), and its TIR parser turns a list into IR element
    by element, so `l1 = l0 + l0` repeated, or `m = l * 10 ** 7`, grows without
    bound from a few lines (24 doublings of `[1]` hold 255 MiB; TIR's `[1] *
    10 ** 7` kept its parser busy past a minute). TVM never prints such an
    assignment: its strings, lists and dicts are arguments of TVMScript calls
    (`T.axis.remap("SS", [i, j])`) or subscripts (`metadata["..."][0]`), which
    this does not look into."""
    work: list[ast.AST] = [value]
    while work:
        node = work.pop()
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) or isinstance(
            node, ast.List | ast.Dict | ast.Set
        ):
            what = "a string" if isinstance(node, ast.Constant) else _describe(node)
            raise _Refused(
                node, f"{what} is not allowed as (part of) an assigned value in TVMScript: only as a call's argument"
            )
        if isinstance(node, ast.Call):
            continue  # its arguments are a TVMScript function's to read
        if isinstance(node, ast.Subscript):
            work.append(node.value)  # an index is read by the subscripted value
            continue
        work.extend(ast.iter_child_nodes(node))


def _bound_anywhere(func: ast.FunctionDef) -> frozenset[str]:
    """Every name the function's body or parameters bind (iterative walk)."""
    names: set[str] = {a.arg for a in func.args.args}
    work: list[ast.AST] = list(func.body)
    while work:
        node = work.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        work.extend(ast.iter_child_nodes(node))
    return frozenset(names)


def _is_cls_binding(stmt: ast.Assign, class_name: str) -> bool:
    target = stmt.targets[0] if len(stmt.targets) == 1 else None
    value = stmt.value
    return (
        isinstance(target, ast.Name) and target.id == "cls" and isinstance(value, ast.Name) and value.id == class_name
    )


def _targets_name(stmt: ast.Assign, name: str) -> bool:
    return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)


def _is_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, _LITERAL_TYPES)


def _first_unknown(parts: list[str]) -> str:
    """The shortest prefix of a chain that is neither an allowed chain nor a
    namespace of one: what the caller wrote that TVMScript does not have."""
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix not in _NAMESPACES and prefix not in table.CHAINS:
            return prefix
        if prefix in table.CHAINS and i < len(parts):
            return ".".join(parts[: i + 1])
    return ".".join(parts)


def _attribute_parts(node: ast.Attribute) -> list[str]:
    """The attribute names of a chain, outermost last: ["nn", "conv2d"] for `R.nn.conv2d`."""
    parts: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    return parts[::-1]


@dataclass(frozen=True)
class _Bind:
    """A work item of `_body`: bind the names of a block's head in its frame
    (`builtin_ok`: whether a builtin's name may be bound there, see `_bind_name`)."""

    target: ast.expr
    builtin_ok: bool


@dataclass(frozen=True)
class _Later:
    """A refusal that waits for the checks of the children yielded before it."""

    node: ast.AST
    message: str


def _chain_root(node: ast.Attribute) -> ast.expr:
    root: ast.expr = node
    while isinstance(root, ast.Attribute):
        root = root.value
    return root


_DESCRIPTIONS = {
    "Lambda": "lambda",
    "ListComp": "a list comprehension",
    "SetComp": "a set comprehension",
    "DictComp": "a dict comprehension",
    "GeneratorExp": "a generator expression",
    "JoinedStr": "an f-string",
    "FormattedValue": "an f-string",
    "Starred": "a starred expression",
    "NamedExpr": "an assignment expression (`:=`)",
    "Await": "`await`",
    "Yield": "`yield`",
    "YieldFrom": "`yield from`",
    "Set": "a set",
    "List": "a list",
    "Dict": "a dict",
    "Import": "`import`",
    "ImportFrom": "`import`",
    "Global": "`global`",
    "Nonlocal": "`nonlocal`",
    "ClassDef": "a class",
    "AsyncFunctionDef": "an async function",
    "AsyncFor": "`async for`",
    "AsyncWith": "`async with`",
    "Try": "`try`",
    "TryStar": "`try`",
    "Raise": "`raise`",
    "Delete": "`del`",
    "AugAssign": "augmented assignment",
    "Match": "`match`",
    "Pass": "`pass`",
    "Break": "`break`",
    "Continue": "`continue`",
    "Expr": "an expression statement",
    "Assign": "an assignment",
    "FunctionDef": "a function",
    "Call": "a call",
    "Attribute": "an attribute",
    "Subscript": "a subscript",
}


def _describe(node: ast.AST) -> str:
    name = type(node).__name__
    return _DESCRIPTIONS.get(name, f"`{name}`")


def _listed(names: frozenset[str] | tuple[str, ...], limit: int = 8) -> str:
    shown = sorted(names)
    text = ", ".join(f"`{n}`" for n in shown[:limit])
    return text + (", ..." if len(shown) > limit else "")


_PUSH = "push"  # work items of `_body` besides statements
_POP = "pop"
