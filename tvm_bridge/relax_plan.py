"""Relax IRModules in and out: read with TVM, printed back, stripped of devices.

`read_relax` reads TVMScript text (what `mod.script()` prints; its
`from tvm.script import ...` lines may be there, commented out or not) or
`tvm.ir.save_json` JSON, each checked before TVM reads it (`tvmscript_guard`,
`json_guard`), with parse errors as `relay.ParseError` located at
TVMScript's line and column. `print_relax` gives the output in either
encoding. Planning joins this bridge with the solver, so it lives in
`service.relax_planning` (the bridge never imports the solver).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import tvm
from tvm import relax
from tvm.script.parser import ir as script_ir
from tvm.script.parser import relax as script_relax
from tvm.script.parser import tirx as script_tir

from relay import ast
from relay.span import ParseError, SourceText, Span

from .json_guard import load_checked_json
from .kernel_guard import check_kernels
from .relax_translate import Translation, real_node, translate
from .relax_write import CONSTANT_COPY
from .tvmscript_guard import check_tvmscript, map_column

__all__ = [
    "print_relax",
    "read_relax",
    "relax_op_calls",
    "strip_devices",
    "translate",
]

log = logging.getLogger(__name__)

SOURCE_NAME = "<relax>"
# The copies of inline constants `write_back` adds (`const_to_cuda0`, `const_to_cuda02`).
_CONSTANT_COPY_RE = re.compile(rf"^{CONSTANT_COPY}_to_[a-z]+\d+$")
_LOCATION_RE = re.compile(r"-->\s*(?P<name>[^:\n]*):(?P<line>\d+):(?P<column>\d+)")


def read_relax(text: str, fmt: str = "text") -> tuple[Any, SourceText | None]:
    """A Relax IRModule from TVMScript (`fmt="text"`) or TVM JSON, checked
    before TVM sees it (docs/security.md): TVMScript against the allowlist of
    `tvmscript_guard` (TVM's parser evaluates what it reads), JSON by
    `json_guard` (TVM's loader trusts its references). Any refusal or TVM
    error is a ParseError, located where the input has a location."""
    if fmt == "json":
        mod = _module_of(load_checked_json(text), "the JSON")
        check_kernels(mod)
        return mod, None
    source = SourceText(SOURCE_NAME, text)
    checked = check_tvmscript(text, source)
    # TVM's parser gets only the three TVMScript namespaces (not its default
    # `tvm`, `ir`, `tir`, ...) and the metadata, loaded from the checked JSON.
    extra: dict[str, Any] = {"I": script_ir, "R": script_relax, "T": script_tir}
    if checked.metadata is not None:
        try:
            extra["metadata"] = load_checked_json(checked.metadata)
        except ParseError as err:
            raise ParseError(f"the metadata line: {err.message}", checked.metadata_span) from None
    try:
        mod = tvm.script.from_source(checked.script, extra_vars=extra)
    except SyntaxError as exc:
        line = exc.lineno or 1
        column = map_column(checked, line, exc.offset or 1)
        raise ParseError(f"TVMScript syntax error: {exc.msg}", Span(source, line, column, line, column + 1)) from None
    except Exception as exc:  # noqa: BLE001 - TVMScript's diagnostics
        message = str(exc)
        found = _LOCATION_RE.search(message)
        span = None
        if found is not None:
            line = int(found.group("line"))
            column = map_column(checked, line, int(found.group("column")))
            span = Span(source, line, column, line, column + 1)
        raise ParseError(f"TVMScript: {_message(message)}", span) from None
    mod = _module_of(mod, "the TVMScript")
    check_kernels(mod, source)
    return mod, source


def _module_of(mod: Any, what: str) -> Any:
    if not isinstance(mod, tvm.IRModule):
        raise ParseError(f"{what} holds a {type(mod).__name__}, not an IRModule")
    return mod


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def _message(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("error:"):
            return line[len("error:"):].strip()
    return _first_line(Exception(text))


def relax_op_calls(translation: Translation) -> dict[str, list[ast.Expr]]:
    """Relax operator name (`relax.nn.softmax`) -> the translated Relay node of
    each of its calls, in binding order (what a request pin on a Relax operator
    selects), looking through the pins the translation wrapped around them."""
    calls: dict[str, list[ast.Expr]] = {}
    for b in translation.bindings.values():
        value = b.value
        if b.node is None or not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            continue
        calls.setdefault(str(value.op.name), []).append(real_node(b.node))
    return calls


def print_relax(mod: Any, fmt: str = "text") -> str:
    """TVMScript or TVM JSON of a module. The TVMScript carries its metadata
    (constants too large to print inline) so that it reads back."""
    if fmt == "json":
        return str(tvm.ir.save_json(mod))
    return str(mod.script(show_meta=True))


def strip_devices(mod: Any) -> Any:
    """`mod` without devices: no `global_infos["vdevice"]`, no vdevice in any
    type, and bindings of `R.hint_on_device(a)`, `R.to_vdevice(a)` or `a`
    itself dropped (their uses read `a`). Tests compare a plan's output and
    its input this way: a plan changes a module only where devices go."""
    remap: dict[int, Any] = {}

    def ty_of(ty: Any) -> Any:
        if isinstance(ty, relax.TensorType):
            if ty.shape is not None:
                return relax.TensorType(ty.shape, ty.dtype)
            return relax.TensorType(None, ty.dtype, ndim=ty.ndim)
        if isinstance(ty, relax.TupleType):
            return relax.TupleType([ty_of(f) for f in ty.fields])
        return ty

    def new_var(var: Any) -> Any:
        cls = relax.DataflowVar if isinstance(var, relax.DataflowVar) else relax.Var
        new = cls(var.name, ty_of(var.ty))
        remap[hash(var)] = new
        return new

    def expr(e: Any) -> Any:
        if isinstance(e, relax.Var):
            return remap.get(hash(e), e)
        if isinstance(e, relax.Tuple):
            return relax.Tuple([expr(f) for f in e.fields])
        if isinstance(e, relax.TupleGetItem):
            return relax.TupleGetItem(expr(e.tuple_value), e.index)
        if isinstance(e, relax.Call):
            if isinstance(e.op, tvm.ir.Op) and e.op.name in ("relax.hint_on_device", "relax.to_vdevice"):
                return expr(e.args[0])
            op = gvars.get(hash(e.op), e.op) if isinstance(e.op, relax.GlobalVar) else e.op
            return relax.Call(op, [expr(a) for a in e.args], e.attrs, [ty_of(a) for a in e.ty_args])
        if isinstance(e, relax.If):
            return relax.If(expr(e.cond), seq(e.true_branch), seq(e.false_branch))
        if isinstance(e, relax.SeqExpr):
            return seq(e)
        return e

    def seq(s: Any) -> Any:
        blocks = []
        for block in s.blocks:
            bindings = []
            for b in block.bindings:
                value = expr(b.value)
                if isinstance(value, relax.Var) or _CONSTANT_COPY_RE.match(str(b.var.name)) and isinstance(
                    value, tvm.ir.expr.Constant
                ):  # an alias, a hint, a copy or a constant written back inline: dropped
                    remap[hash(b.var)] = value
                    continue
                bindings.append(relax.VarBinding(new_var(b.var), value))
            cls = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
            blocks.append(cls(bindings))
        return relax.SeqExpr(blocks, expr(s.body))

    funcs = {}
    # New GlobalVars: each carries its function's type, which loses its devices.
    gvars = {hash(gv): relax.GlobalVar(str(gv.name_hint)) for gv in mod.get_global_vars()
             if isinstance(mod[gv], relax.Function)}
    update_type = tvm.get_global_func("relax.UpdateType")
    for gv in mod.get_global_vars():
        f = mod[gv]
        if isinstance(f, relax.Function):
            params = [new_var(p) for p in f.params]
            new_gv = gvars[hash(gv)]
            funcs[new_gv] = new_f = relax.Function(params, seq(f.body), ty_of(f.ret_ty), f.is_pure, f.attrs)
            update_type(new_gv, new_f.ty)
        else:
            funcs[gv] = f
    infos = {k: v for k, v in mod.global_infos.items() if k != "vdevice"} if mod.global_infos else {}
    return relax.transform.Normalize()(tvm.IRModule(funcs, mod.attrs, infos))
