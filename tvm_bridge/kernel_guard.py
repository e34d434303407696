"""A caller's own kernels (`T.prim_func`) checked for what would put the caller's text
into the code TVM generates, where it would run when the library is *loaded* (before the
run check's seccomp filter, docs/security.md) or when it is compiled.

TVM 0.27 hands some TIR straight to its code generators:

- `pragma_import_llvm` (an `AttrStmt`, or a loop or block annotation lowered to one)
  is LLVM IR that the llvm code generator parses and links into the library: its
  `@llvm.global_ctors` run at load (measured: a constructor calling `abort` killed the
  process loading the library built for the default `llvm` target); a value ending in
  `.ll` or `.bc` is a file read from the server's disk. `pragma_import_c` is C source
  the C code generator pastes in.
- The C-family code generators (the `c` target, CUDA, OpenCL, Metal) print strings
  (`T.call_extern("int32", f, "...")`), external function names, global symbols and
  variable names as they are, unescaped: a `"` in a string closes the C literal, and
  what follows is code (measured: with the `c` target, a string argument declared a
  constructor that ran `system()` when the run check loaded the library).

So every string of every kernel must be printable text without `"`, `\\` or control
characters, no string may name an import pragma, a global symbol is a C identifier, a
variable's name is word characters and dots, and no kernel is bound to the `c` target.
Every refusal is a ParseError naming the kernel (located at its `def` line when the
caller's TVMScript is at hand).
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

import tvm

from relay.span import ParseError, SourceText, Span, line_starts

__all__ = ["REFUSED_TARGET_KINDS", "check_kernels", "def_span"]

# Targets whose host code is C source compiled on the server: every name and string of
# the caller's kernels would be pasted into it.
REFUSED_TARGET_KINDS = frozenset({"c"})
_IMPORT_PRAGMA = "pragma_import"
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME = re.compile(r"[\w.]*")
# Objects whose `name_hint` (or `name`) a code generator prints as an identifier.
_NAMED = ("Var", "Buffer", "BufferType", "SizeVar")


def _bad_text(text: str) -> str | None:
    """What in `text` could end a C string literal or line, None when nothing."""
    for ch in text:
        if ch in '"\\':
            return f"a {ch!r}"
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"the control character {ch!r}"
    return None


def check_kernels(mod: Any, source: SourceText | None = None) -> None:
    """Refuse (ParseError) the first kernel of `mod` with a construct of the module
    docstring; `source`, the caller's TVMScript, locates it."""
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        name = str(gv.name_hint)
        problem = _problem(func)
        if problem is not None:
            raise ParseError(f"kernel {name!r}: {problem}", def_span(source, name))


def _problem(func: Any) -> str | None:
    attrs = func.attrs if func.attrs is not None else {}
    symbol = attrs.get("global_symbol")
    if symbol is not None and not _C_IDENTIFIER.fullmatch(str(symbol)):
        return f"its global_symbol {str(symbol)!r} is not a C identifier"
    target = attrs.get("target")
    for t in (target, target.host if target is not None else None):
        if t is not None and str(t.kind.name) in REFUSED_TARGET_KINDS:
            return f"target kind {t.kind.name!r} is not accepted (its code is C source with the kernel's text pasted in)"
    graph = json.loads(tvm.ir.save_json(func))
    nodes: list[dict[str, Any]] = graph["nodes"]
    for node in nodes:
        data = node.get("data")
        if node["type"] == "ffi.String" and isinstance(data, str):
            if data.startswith(_IMPORT_PRAGMA):
                return f"`{data}` is not accepted (TVM links or pastes its text into the library as code)"
            bad = _bad_text(data)
            if bad is not None:
                return f"the string {_short(data)} holds {bad}, which TVM would print into generated code unescaped"
        elif node["type"].rsplit(".", 1)[-1] in _NAMED and isinstance(data, dict):
            for field in ("name_hint", "name"):
                ref = data.get(field)
                if isinstance(ref, int) and 0 <= ref < len(nodes):
                    text = nodes[ref].get("data")
                    if isinstance(text, str) and not _NAME.fullmatch(text):
                        return f"the name {_short(text)} is not word characters and dots"
    return None


def def_span(source: SourceText | None, name: str) -> Span | None:
    """Where the caller's TVMScript defines the function `name` (its `def` line; None
    for JSON input, which has no lines, or a name the text does not define)."""
    if source is None:
        return None
    found = re.search(rf"^([ \t]*)def[ \t]+{re.escape(name)}[ \t]*\(", source.text, re.MULTILINE)
    if found is None:
        return None
    line = bisect.bisect_right(line_starts(source.text), found.start())
    column = len(found.group(1)) + 1
    return Span(source, line, column, line, column + len("def ") + len(name))


def _short(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."
