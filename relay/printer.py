"""Print a Module in the Relay text format that TVM <= 0.19 parses.

Every non-atomic node gets a graph binding `%N = ...;` (numbered across the
module, as TVM does), so printed text is flat however deep the program is.
A binding is placed in the innermost scope (function body, `if` branch,
match clause, parenthesised let block) that encloses all of its uses, and
emitted just before its first use there. Nested scopes are printed through
a generator trampoline, so scope nesting costs no Python stack either.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from . import ast as A
from .device import VirtualDevice
from .traverse import children, post_order
from .typetext import type_text

if TYPE_CHECKING:
    from .infer import Types

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_INLINE_DTYPES = {"float32": "f", "float16": "f16", "float64": "f64", "int32": "", "int64": "i64", "bool": ""}

Lines = list[str]


def print_text(module: A.Module, *, types: Types | None = None) -> str:
    """The module as Relay text, with a `#[metadata]` section when meta
    entries are known. Meta indices of known entries are kept; new entries
    are appended to their table.

    With `types` (from `relay.infer_types(module)`), parameters, let binders,
    pattern variables and function results without a written type get their
    inferred one as an annotation, where it is fully known.
    """
    return _Printer(module, types).print_module()


def _trampoline(gen: Generator[Any, Any, Any]) -> Any:
    """Run a generator-based recursion with an explicit stack."""
    stack = [gen]
    value: Any = None
    while stack:
        try:
            sub = stack[-1].send(value)
        except StopIteration as stop:
            stack.pop()
            value = stop.value
            continue
        stack.append(sub)
        value = None
    return value


class _Scope:
    """A printed block: its root expression, the lets printed as `let`
    lines (the spine) and the expression that ends the block."""

    __slots__ = ("depth", "parent", "result", "root", "spine")

    def __init__(self, parent: _Scope | None, root: A.Expr) -> None:
        self.parent = parent
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.root = root
        self.spine: list[A.Let] = []
        self.result: A.Expr = root


def _lca(a: _Scope, b: _Scope) -> _Scope:
    while a.depth > b.depth:
        a = a.parent  # type: ignore[assignment]
    while b.depth > a.depth:
        b = b.parent  # type: ignore[assignment]
    while a is not b:
        a = a.parent  # type: ignore[assignment]
        b = b.parent  # type: ignore[assignment]
    return a


_OPENS_BLOCKS = (A.Function, A.If, A.Match, A.Let)


_ATOMIC_TYPES = frozenset({A.Var, A.GlobalVar, A.Op, A.Constructor, A.Constant})


def _is_atomic(expr: A.Expr) -> bool:
    return type(expr) in _ATOMIC_TYPES


class _Printer:
    def __init__(self, module: A.Module, types: Types | None = None) -> None:
        self.module = module
        self.types = types
        self.tables: dict[str, list[Any]] = {k: list(v) for k, v in module.meta.items()}
        self.index_cache: dict[str, dict[int, int]] = {}
        self.counter = 0
        self.names: dict[int, str] = {}  # id(node) -> printed name (%N or %var)
        self.used_names: set[str] = set()
        self.scope_of: dict[int, _Scope] = {}  # where a node's graph binding goes
        self.spine_of: dict[int, _Scope] = {}  # the block a `let` line belongs to
        self.let_blocks: set[int] = set()  # lets printed as `( let ...; body )`
        self.inner: dict[int, list[_Scope]] = {}  # scopes opened by fn / if / match / let block
        self.refcount: dict[int, int] = {}
        self.kids: dict[int, tuple[A.Expr, ...]] = {}
        self.emitted: set[int] = set()

    # ---------------------------------------------------------------- module

    def print_module(self) -> str:
        out = ['#[version = "0.0.5"]']
        for typedef in self.module.type_definitions:
            out.append(self._type_def(typedef))
        for gv, func in self.module.functions:
            out.append("def @" + gv.name + _trampoline(self._function(func, None)))
        if self.module.expr is not None:
            out.append(_trampoline(self._toplevel_expr(self.module.expr)))
        text = "\n".join(out) + "\n"
        if any(self.tables.values()):
            from .tvm_json import encode_meta_section

            text += "\n#[metadata]\n" + encode_meta_section(self.tables) + "\n"
        return text

    def _type_def(self, typedef: A.TypeData) -> str:
        head = typedef.header.name
        if typedef.type_vars:
            head += "[" + ", ".join(tv.name for tv in typedef.type_vars) + "]"
        lines = [f"type {head} {{"]
        for ctor in typedef.constructors:
            if ctor.inputs:
                lines.append(f"  {ctor.name}({', '.join(self.type(t) for t in ctor.inputs)}),")
            else:
                lines.append(f"  {ctor.name},")
        if not typedef.constructors:
            lines.append("  ")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _toplevel_expr(self, expr: A.Expr) -> Generator[Any, Any, str]:
        from .traverse import free_vars

        lines = []
        for var in free_vars(expr):
            name = self._bind_name(var)
            annotation = self._annotation(var)
            lines.append(f"free_var {name}{annotation};")
        root = self._assign_scopes(expr, None)
        body: Lines = yield self._block(root)
        return "\n".join(lines + body)

    # ---------------------------------------------------------------- scopes

    def _assign_scopes(self, body: A.Expr, parent: _Scope | None) -> _Scope:
        """Decide, for every non-atomic node under `body`, the block its
        binding is printed in: the innermost block enclosing all its uses.
        Returns the block of `body` itself."""
        nodes = post_order(body)
        refcount = self.refcount
        kids_of = self.kids
        for node in nodes:
            kids = kids_of[id(node)] = children(node)
            for kid in kids:
                refcount[id(kid)] = refcount.get(id(kid), 0) + 1
        refcount[id(body)] = refcount.get(id(body), 0) + 1
        top = self._open(parent, body, None)
        for node in reversed(nodes):  # parents before children
            key = id(node)
            if key in self.spine_of and key not in self.let_blocks:
                block = self.spine_of[key]
                let = node  # a `let` line of `block`
                assert isinstance(let, A.Let)
                self._use(let.value, block)
                continue
            here = self.scope_of.get(key)
            if here is None:
                continue
            match node:
                case A.Function(body=inner):
                    self.inner[key] = [self._open(here, inner, node)]
                case A.If(cond=c, true_branch=t, false_branch=f):
                    self._use(c, here)
                    self.inner[key] = [self._open(here, t, node), self._open(here, f, node)]
                case A.Match(data=data, clauses=clauses):
                    self._use(data, here)
                    self.inner[key] = [self._open(here, clause.rhs, node) for clause in clauses]
                case A.Let(value=value):
                    self.let_blocks.add(key)
                    block = self._open(here, node, node)
                    self.inner[key] = [block]
                    self._use(value, block)
                case _:
                    for kid in kids_of[key]:
                        self._use(kid, here)
        return top

    def _open(self, parent: _Scope | None, root: A.Expr, owner: A.Expr | None) -> _Scope:
        """A new block for `root`; its leading single-use lets become its spine."""
        scope = _Scope(parent, root)
        node = root
        while isinstance(node, A.Let) and (self.refcount.get(id(node), 0) == 1 or node is owner):
            scope.spine.append(node)
            self.spine_of[id(node)] = scope
            node = node.body
        scope.result = node
        self._use(node, scope)
        return scope

    def _use(self, kid: A.Expr, scope: _Scope) -> None:
        if _is_atomic(kid):
            return
        found = self.scope_of.get(id(kid))
        self.scope_of[id(kid)] = scope if found is None else _lca(found, scope)

    # ---------------------------------------------------------------- blocks

    def _block(self, scope: _Scope) -> Generator[Any, Any, Lines]:
        """The lines of a block: bindings and lets, then the result."""
        lines: Lines = []
        for let in scope.spine:
            yield from self._emit_deps(let.value, scope, lines)
            var = let.var
            name = self._bind_name(var)
            annotation = self._annotation(var)
            value_text = yield self._ref(let.value, scope, inline=True)
            lines.append(f"let {name}{annotation} = {value_text};")
        yield from self._emit_deps(scope.result, scope, lines)
        lines.append((yield self._ref(scope.result, scope, inline=True)))
        return lines

    def _emit_deps(self, root: A.Expr, scope: _Scope, lines: Lines) -> Generator[Any, Any, None]:
        """Emit, in dependency order, the bindings of this block that `root`
        needs (looking through nested blocks). `root` itself is left for the
        caller to print inline when this is its only use."""
        inline_root = self.refcount.get(id(root), 0) <= 1
        scope_of, spine_of, let_blocks, emitted = self.scope_of, self.spine_of, self.let_blocks, self.emitted

        def enter(node: A.Expr) -> bool:
            """Look inside nodes bound in this block or a nested one, not yet printed."""
            key = id(node)
            if key in emitted or _is_atomic(node):
                return False
            where = spine_of[key] if key in spine_of and key not in let_blocks else scope_of.get(key)
            return where is not None and where.depth >= scope.depth

        for node in post_order(root, enter=enter):
            key = id(node)
            if (node is root and inline_root) or scope_of.get(key) is not scope or key in emitted:
                continue
            if key in spine_of and key not in let_blocks:
                continue
            emitted.add(key)
            if isinstance(node, _OPENS_BLOCKS):
                text = yield self._render(node, scope)
            else:
                text = self._render_simple(node)
            lines.append(f"{self._graph_name(node)} = {text};")

    def _ref(self, node: A.Expr, scope: _Scope, *, inline: bool = False) -> Generator[Any, Any, str]:
        """How `node` is written where it is used: an atomic form, its graph
        name, or in an inline position (let value, block result) its text."""
        if _is_atomic(node):
            return self._atomic(node)
        name = self.names.get(id(node))
        if name is not None:
            return name
        if not inline:
            raise AssertionError(f"{type(node).__name__} used before its binding was printed")
        text: str = yield self._text(node, scope)
        return text

    def _graph_name(self, node: A.Expr) -> str:
        name = f"%{self.counter}"
        self.counter += 1
        self.names[id(node)] = name
        return name

    # ---------------------------------------------------------------- nodes

    def _name(self, node: A.Expr) -> str:
        """How an already printed (or atomic) node is referred to."""
        if _is_atomic(node):
            return self._atomic(node)
        name = self.names.get(id(node))
        if name is None:
            raise AssertionError(f"{type(node).__name__} used before its binding was printed")
        return name

    def _text(self, node: A.Expr, scope: _Scope) -> Generator[Any, Any, str]:
        """The text of a non-atomic node; only nodes that open blocks recurse."""
        if isinstance(node, _OPENS_BLOCKS):
            text: str = yield self._render(node, scope)
            return text
        return self._render_simple(node)

    def _render_simple(self, node: A.Expr) -> str:
        """The text of a node whose children are all named or atomic."""
        name = self._name
        match node:
            case A.Call(op=callee, args=args, attrs=attrs):
                parts = [name(arg) for arg in args]
                if attrs is not None and attrs.fields:
                    parts.extend(self._call_attrs(callee, attrs))
                return f"{name(callee)}({', '.join(parts)})"
            case A.Tuple(fields=fields):
                if len(fields) == 1:
                    return f"({name(fields[0])},)"
                return "(" + ", ".join(name(f) for f in fields) + ")"
            case A.TupleGetItem(tuple_value=t, index=i):
                return f"{name(t)}.{i}"
            case A.RefCreate(value=v):
                return f"ref({name(v)})"
            case A.RefRead(ref=r):
                return f"ref_read({name(r)})"
            case A.RefWrite(ref=r, value=v):
                return f"ref_write({name(r)}, {name(v)})"
        raise TypeError(f"cannot print {type(node).__name__}")

    def _render(self, node: A.Expr, scope: _Scope) -> Generator[Any, Any, str]:
        """The text of a node that opens blocks (function, if, match, let block)."""
        match node:
            case A.Function():
                text: str = yield self._function(node, scope)
                return "fn " + text
            case A.If(cond=c):
                cond = self._name(c)
                then_scope, else_scope = self.inner[id(node)]
                then_lines = yield self._block(then_scope)
                else_lines = yield self._block(else_scope)
                return f"if ({cond}) {{\n{_indent(then_lines)}\n}} else {{\n{_indent(else_lines)}\n}}"
            case A.Match(data=data, clauses=clauses, complete=complete):
                head = self._name(data)
                out = [f"{'match' if complete else 'match?'} ({head}) {{"]
                for clause, clause_scope in zip(clauses, self.inner[id(node)]):
                    pattern = self._pattern(clause.lhs)
                    body = yield self._block(clause_scope)
                    out.append(f"  {pattern} => {{\n{_indent(body, 4)}\n  }},")
                out.append("})")
                return "(" + "\n".join(out)
            case A.Let():
                body_lines = yield self._block(self.inner[id(node)][0])
                return "(\n" + _indent(body_lines) + "\n)"
        raise TypeError(f"cannot print {type(node).__name__}")

    def _function(self, func: A.Function, scope: _Scope | None) -> Generator[Any, Any, str]:
        head = ""
        if func.type_params:
            head += "[" + ", ".join(tv.name for tv in func.type_params) + "]"
        params = []
        for p in func.params:
            text = self._bind_name(p)
            if p.virtual_device is not None and not _unconstrained(p.virtual_device):
                text += f" {{virtual_device={self.meta_ref('VirtualDevice', p.virtual_device)}}}"
            params.append(text + self._annotation(p))
        for key, value in func.attrs:
            params.append(f"{key}={self.attr_value(value)}")
        if func.virtual_device is not None and not _unconstrained(func.virtual_device):
            params.append(f"virtual_device={self.meta_ref('VirtualDevice', func.virtual_device)}")
        head += "(" + ", ".join(params) + ")"
        ret_type = func.ret_type
        if ret_type is None and self.types is not None and func in self.types:
            func_type = self.types.of(func)
            ret_type = _printable(func_type.ret_type) if isinstance(func_type, A.FuncType) else None
        if ret_type is not None:
            head += " -> " + self.type(ret_type)
        if scope is None:
            inner = self._assign_scopes(func.body, None)
        else:
            inner = self.inner[id(func)][0]
        body: Lines = yield self._block(inner)
        return head + " {\n" + _indent(body) + "\n}"

    def _annotation(self, var: A.Var) -> str:
        """`: T` for a binder: its written type, else its inferred one."""
        ty = var.type_annotation
        if ty is None and self.types is not None and var in self.types:
            ty = _printable(self.types.of(var))
        return "" if ty is None else ": " + self.type(ty)

    def _pattern(self, pattern: A.Pattern) -> str:
        match pattern:
            case A.PatternWildcard():
                return "_"
            case A.PatternVar(var=var):
                return self._bind_name(var) + self._annotation(var)
            case A.PatternConstructor(constructor=ctor, patterns=ps):
                if not ps:
                    return ctor.name
                return f"{ctor.name}({', '.join(self._pattern(p) for p in ps)})"
            case A.PatternTuple(patterns=ps):
                return "(" + ", ".join(self._pattern(p) for p in ps) + ")"
        raise TypeError(f"cannot print pattern {type(pattern).__name__}")

    def _bind_name(self, var: A.Var) -> str:
        found = self.names.get(id(var))
        if found is not None:
            return found
        base = var.name if _PLAIN_NAME.match(var.name) else (re.sub(r"\W", "_", var.name) or "x")
        if base[0].isdigit():
            base = "v" + base
        name = base
        suffix = 1
        while name in self.used_names:
            name = f"{base}{suffix}"
            suffix += 1
        self.used_names.add(name)
        self.names[id(var)] = "%" + name
        return "%" + name

    def _atomic(self, node: A.Expr) -> str:
        match node:
            case A.Var():
                found = self.names.get(id(node))
                return found if found is not None else self._bind_name(node)
            case A.GlobalVar(name=name):
                return "@" + name
            case A.Op(name=name):
                return name
            case A.Constructor(name=name):
                return name
            case A.Constant(data=data, meta_index=meta_index):
                if data is None:
                    return f"meta[relay.Constant][{meta_index}]"
                literal = _scalar_literal(data)
                if literal is not None:
                    return literal
                return self.meta_ref("relay.Constant", node)
        raise TypeError(f"not atomic: {type(node).__name__}")

    # ---------------------------------------------------------------- attrs, meta, types

    def _call_attrs(self, callee: A.Expr, attrs: A.Attrs | None) -> list[str]:
        if attrs is None or not attrs.fields:
            return []
        fields = attrs.fields
        if isinstance(callee, A.Op):
            fields = _non_default_fields(callee.name, attrs)
        return [f"{key}={self.attr_value(value)}" for key, value in fields]

    def attr_value(self, value: Any) -> str:
        if value is None:
            return "None"
        if isinstance(value, bool):
            return "True" if value else "False"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            return _double_literal(value) + "f"
        if isinstance(value, str):
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        if isinstance(value, tuple):
            return "[" + ", ".join(self.attr_value(v) for v in value) + "]"
        if isinstance(value, A.MetaRef):
            return f"meta[{value.kind}][{value.index}]"
        if isinstance(value, VirtualDevice):
            return self.meta_ref("VirtualDevice", value)
        for kind, table in self.tables.items():
            for i, entry in enumerate(table):
                if entry is value:
                    return f"meta[{kind}][{i}]"
        kind = getattr(value, "type_key", None) or type(value).__name__
        return self.meta_ref(kind, value)

    def meta_ref(self, kind: str, value: Any) -> str:
        """`meta[kind][i]` for a table entry: its own index when it is in the
        table (by identity, or by value for virtual devices), else appended."""
        if isinstance(value, A.MetaRef):
            return f"meta[{value.kind}][{value.index}]"
        table = self.tables.setdefault(kind, [])
        cache = self.index_cache.setdefault(kind, {})
        index = cache.get(id(value))
        if index is None:
            for i, entry in enumerate(table):
                if entry is value:
                    index = i
                    break
            else:
                if isinstance(value, VirtualDevice):
                    for i, entry in enumerate(table):
                        if entry == value:
                            index = i
                            break
            if index is None:
                index = len(table)
                table.append(value)
            cache[id(value)] = index
        return f"meta[{kind}][{index}]"

    def type(self, ty: A.Type) -> str:
        return type_text(ty)


# -------------------------------------------------------------------- helpers


def _printable(ty: A.Type) -> A.Type | None:
    """An inferred type to write as an annotation: None when part of it is
    unknown (the parser has no syntax for that)."""
    from .infer.types import is_known

    return ty if is_known(ty) else None


def _unconstrained(device: Any) -> bool:
    return isinstance(device, VirtualDevice) and device.is_fully_unconstrained


def _indent(lines: Lines, width: int = 2) -> str:
    pad = " " * width
    return "\n".join(pad + line.replace("\n", "\n" + pad) if line else line for line in lines)


def _double_literal(value: float) -> str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if math.isnan(value):
        return "nan"
    text = repr(value)
    text = text.removesuffix(".0")
    return text


def _float32_literal(value: float) -> str:
    """The shortest decimal that reads back as the same float32."""
    if math.isinf(value) or math.isnan(value):
        return _double_literal(value)
    packed = struct.pack("<f", value)
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        if struct.pack("<f", float(text)) == packed:
            break
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = exponent[0] if exponent[0] in "+-" else ""
        digits = exponent.lstrip("+-").rjust(2, "0")
        text = f"{mantissa}e{sign}{digits}"
    return text


def _scalar_literal(data: A.NDArray) -> str | None:
    if data.shape != () or data.dtype not in _INLINE_DTYPES:
        return None
    value = data.scalar_value()
    if data.dtype == "bool":
        return "True" if value else "False"
    if data.dtype == "float32":
        text = _float32_literal(value)
        return None if text in ("inf", "-inf", "nan") else text + "f"
    if data.dtype in ("float16", "float64"):
        text = _double_literal(value) if data.dtype == "float64" else _float32_literal(value)
        if text in ("inf", "-inf", "nan"):
            return None
        return text + _INLINE_DTYPES[data.dtype]
    return f"{value}{_INLINE_DTYPES[data.dtype]}"


def _non_default_fields(op_name: str, attrs: A.Attrs) -> tuple[tuple[str, Any], ...]:
    try:
        from .op_attrs import non_default_fields
    except ImportError:
        return attrs.fields
    return non_default_fields(op_name, attrs)
