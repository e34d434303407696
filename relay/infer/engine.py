"""Type inference over a whole module: one iterative walk per global function.

Types flow forward: a variable gets its type where it is bound (a
parameter's annotation, a let's value or annotation, the part of a matched
value a pattern variable stands for), an operator call gets the type its
relation in `RELATIONS` gives, a call of a function or constructor the
callee's result type with its type parameters bound by the arguments.
Annotations are checked against the inferred types where both exist. What
cannot be inferred (an operator with no relation and everything that
depends on it) is `UNKNOWN`; that is not an error.

Global functions are inferred callees first, so a call of a global whose
result type is not written gets the inferred one; in a cycle of globals
the calls made before the callee is done use its written signature, and a
second pass uses the inferred ones. A parameter of a local function with
no written type takes the argument type of the first call of that function
where it is known (one more walk of the enclosing global per round). Where
the context fixes an unknown part of a type (`Nothing` in one branch,
`Just(%x)` in the other), that part is filled in afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import ast, op_attrs
from ..ast import UNKNOWN, Call, Expr, Function, FuncType, GlobalVar, Let, Match, Op, TupleType, Type, TypeVar
from ..span import Span
from ..traverse import post_order, walk
from .relations import RELATIONS, RelationError
from .types import TypeInferenceError, is_known, substitute, type_text, unify

__all__ = ["Types", "infer_types"]

_UNIT = TupleType(())
_BOOL_SCALAR = ast.TensorType((), "bool")


@dataclass(frozen=True, eq=False)
class Types:
    """The inferred types of one module's expressions, by node identity.

    Holds the module so the nodes (and their ids) stay alive. `unknown_ops`
    names the operators seen that have no type relation.
    """

    module: ast.Module = field(repr=False)
    _by_id: Mapping[int, Type] = field(repr=False)
    _functions: Mapping[str, FuncType] = field(repr=False)
    unknown_ops: frozenset[str] = frozenset()

    def of(self, expr: Expr) -> Type:
        """The type of `expr`, a node of this module (`UNKNOWN` when it cannot
        be inferred). Raises KeyError for a node that is not in the module."""
        try:
            return self._by_id[id(expr)]
        except KeyError:
            if isinstance(expr, Op):
                return UNKNOWN
            raise KeyError(f"{type(expr).__name__} is not an expression of this module") from None

    def function(self, name: str) -> FuncType:
        """The type of global function `name` (`"main"` or `"@main"`)."""
        return self._functions[name.removeprefix("@")]

    def __contains__(self, expr: Expr) -> bool:
        return id(expr) in self._by_id


def infer_types(module: ast.Module, *, check_annotations: bool = True) -> Types:
    """Infer the type of every expression of `module`.

    Raises `TypeInferenceError` (a `RelayError` with the span and both
    types) for an ill-typed module. With `check_annotations=False`, written
    types that disagree with the inferred ones are not errors (the inferred
    type wins where it is known).
    """
    engine = _Engine(module, check_annotations)
    engine.run()
    return Types(module, engine.types, engine.signatures, frozenset(engine.unknown_ops))


def _written(annotation: Type | None) -> Type:
    """A written type, UNKNOWN where there is none (absent or `_`)."""
    return UNKNOWN if annotation is None or isinstance(annotation, ast.IncompleteType) else annotation


def _declared(func: Function) -> FuncType:
    """A function's written signature; missing parts are UNKNOWN."""
    return FuncType(
        tuple(_written(p.type_annotation) for p in func.params), _written(func.ret_type), func.type_params
    )


def _complete_signature(func: Function) -> bool:
    return func.ret_type is not None and all(p.type_annotation is not None for p in func.params)


class _Engine:
    def __init__(self, module: ast.Module, check_annotations: bool) -> None:
        self.module = module
        self.check = check_annotations
        self.types: dict[int, Type] = {}
        self.signatures: dict[str, FuncType] = {gv.name: _declared(f) for gv, f in module.functions}
        self.unknown_ops: set[str] = set()
        self.done: set[str] = set()  # globals inferred at least once
        # Parameters without a written type learn it from the first call of
        # their function (a literal, or let-bound) whose argument type is known.
        self.hints: dict[int, Type] = {}
        self.new_hints = False
        self.let_functions: dict[int, Function] = {}
        self.early_reads: dict[str, FuncType] = {}  # globals used before that, as seen then
        self.attrs_by_id: dict[tuple[str, int], Mapping[str, Any]] = {}
        self.attrs_by_fields: dict[tuple[str, Any], Mapping[str, Any]] = {}
        self.ctor_types: dict[int, FuncType] = {}
        for typedef in module.type_definitions:
            self._add_typedef(typedef)
        self.post: dict[type, Callable[[Any], Type]] = {
            Call: self._call,
            ast.Var: self._var,
            GlobalVar: self._global,
            ast.Constant: self._constant,
            Op: lambda node: UNKNOWN,
            ast.Constructor: self._constructor,
            Function: self._function,
            Let: self._let,
            ast.If: self._if,
            ast.Tuple: lambda node: TupleType(tuple(self.types[id(f)] for f in node.fields)),
            ast.TupleGetItem: self._tuple_get_item,
            ast.RefCreate: lambda node: ast.RefType(self.types[id(node.value)]),
            ast.RefRead: self._ref_read,
            ast.RefWrite: self._ref_write,
            Match: self._match,
        }

    # ------------------------------------------------------------ driver

    def run(self) -> None:
        order = self._global_order()
        for gv, func in order:
            self._infer_global(gv, func)
        # Globals that recurse (alone or in a cycle) were called before their
        # result type was known; once more with the inferred signatures.
        if any(self.signatures[name] != early for name, early in self.early_reads.items()):
            for gv, func in order:
                self._infer_global(gv, func)
        for gv, _ in self.module.functions:
            self.types[id(gv)] = self.signatures[gv.name]
        if self.module.expr is not None:
            self._walk_until_settled(self.module.expr)

    def _walk_until_settled(self, root: Expr) -> None:
        """Walk `root`; again while calls taught unannotated parameters of
        local functions their types (each pass fixes at least one more)."""
        while True:
            self.new_hints = False
            self._walk(root)
            if not self.new_hints:
                return

    def _infer_global(self, gv: GlobalVar, func: Function) -> None:
        self.types[id(gv)] = self.signatures[gv.name]
        self._walk_until_settled(func)
        sig = self.types[id(func)]
        assert isinstance(sig, FuncType)
        self.signatures[gv.name] = sig
        self.done.add(gv.name)

    def _global_order(self) -> list[tuple[GlobalVar, Function]]:
        """Globals with callees first (definition order where nothing needs to
        move: every signature is written, or no global calls another)."""
        functions = list(self.module.functions)
        if len(functions) < 2 or all(_complete_signature(f) for _, f in functions):
            return functions
        index = {gv.name: i for i, (gv, _) in enumerate(functions)}
        deps: list[list[int]] = []
        for _, func in functions:
            called = {index[n.name] for n in post_order(func) if isinstance(n, GlobalVar) and n.name in index}
            deps.append(sorted(called))
        order: list[int] = []
        state = [0] * len(functions)  # 0 new, 1 on the stack, 2 done
        for root in range(len(functions)):
            if state[root]:
                continue
            stack = [(root, 0)]
            state[root] = 1
            while stack:
                node, next_dep = stack[-1]
                if next_dep < len(deps[node]):
                    stack[-1] = (node, next_dep + 1)
                    dep = deps[node][next_dep]
                    if state[dep] == 0:
                        state[dep] = 1
                        stack.append((dep, 0))
                    continue
                stack.pop()
                state[node] = 2
                order.append(node)
        return [functions[i] for i in order]

    def _walk(self, root: Expr) -> None:
        types = self.types
        post = self.post

        def pre(node: Expr) -> bool:
            if type(node) is Let and type(node.value) is Function:
                # A let-bound function may call itself: give the binder the
                # written signature before the function's body is inferred.
                var = node.var
                self.let_functions[id(var)] = node.value
                if var.type_annotation is not None:
                    types[id(var)] = var.type_annotation
                else:
                    types[id(var)] = _declared(node.value)
            return True

        relations = RELATIONS
        completed_attrs = self._completed_attrs

        def after(node: Expr) -> None:
            # Operator calls are most nodes: their fast path is inline.
            if type(node) is Call:
                callee = node.op
                if type(callee) is Op:
                    relation = relations.get(callee.name)
                    if relation is not None:
                        args = tuple([types[id(a)] for a in node.args])
                        try:
                            result = relation(args, completed_attrs(callee.name, node.attrs))
                        except RelationError as err:
                            raise _relation_error(node, args, err) from None
                        except (ArithmeticError, ValueError) as err:
                            raise _number_error(node, callee.name, args, err) from None
                        if type(result) is ast.TensorType and not _dims_in_range(result.shape):
                            raise _size_error(node, callee.name, args, result)
                        types[id(node)] = result
                        return
            types[id(node)] = post[type(node)](node)

        walk(root, pre=pre, post=after, bind=self._bind)

    # ------------------------------------------------------------ binders

    def _bind(self, node: Expr, index: int) -> None:
        types = self.types
        match node:
            case Function(params=params):
                hints = self.hints
                for p in params:
                    written = _written(p.type_annotation)
                    oversized = _oversized(written)
                    if oversized is not None:
                        raise TypeInferenceError(
                            f"parameter %{p.name}: {_size_text(oversized.shape)}", p.span or node.span
                        )
                    types[id(p)] = hints.get(id(p), written) if written is UNKNOWN else written
            case Let(var=var, value=value):
                inferred = types[id(value)]
                annotation = var.type_annotation
                if annotation is None:
                    types[id(var)] = inferred
                else:
                    types[id(var)] = self._agree(
                        annotation, inferred, var.span or node.span, f"let %{var.name}"
                    )
                    self._refine(value, types[id(var)])
            case Match(data=data, clauses=clauses):
                self._bind_pattern(clauses[index].lhs, types[id(data)])

    def _agree(self, written: Type, inferred: Type, span: Span | None, what: str) -> Type:
        """The type of something with a written type: the written one, checked
        against the inferred one (unified with it, so `?` and `_` get filled)."""
        merged = unify(written, inferred)
        if merged is None:
            if self.check:
                raise TypeInferenceError(
                    f"{what} is annotated {type_text(written)} but has type {type_text(inferred)}",
                    span,
                    expected=written,
                    actual=inferred,
                )
            return inferred if not isinstance(inferred, ast.UnknownType) else written
        return merged

    def _bind_pattern(self, pattern: ast.Pattern, data_type: Type) -> None:
        stack: list[tuple[ast.Pattern, Type]] = [(pattern, data_type)]
        while stack:
            p, t = stack.pop()
            match p:
                case ast.PatternVar(var=var):
                    if var.type_annotation is None:
                        self.types[id(var)] = t
                    else:
                        self.types[id(var)] = self._agree(
                            var.type_annotation, t, var.span or p.span, f"%{var.name}"
                        )
                case ast.PatternConstructor(constructor=ctor, patterns=subs):
                    inputs = self._constructor_inputs(ctor, t, p.span)
                    stack.extend(zip(subs, inputs))
                case ast.PatternTuple(patterns=subs):
                    if isinstance(t, TupleType):
                        if len(t.fields) != len(subs):
                            raise TypeInferenceError(
                                f"tuple pattern of {len(subs)} fields matches a value of type {type_text(t)}",
                                p.span,
                                actual=t,
                            )
                        stack.extend(zip(subs, t.fields))
                    else:
                        self._require_unknown(t, "a tuple", p.span)
                        stack.extend((s, UNKNOWN) for s in subs)
                case ast.PatternWildcard():
                    pass

    def _constructor_inputs(self, ctor: ast.Constructor, t: Type, span: Span | None) -> tuple[Type, ...]:
        """The types of a constructor's fields in a value of ADT type `t`."""
        ctor_type = self._constructor(ctor)
        result = ctor_type.ret_type
        subst: dict[TypeVar, Type] = {}
        if unify(result, t, frozenset(ctor_type.type_params), subst) is None:
            raise TypeInferenceError(
                f"constructor {ctor.name} of {type_text(result)} matches a value of type {type_text(t)}",
                span,
                expected=result,
                actual=t,
            )
        return tuple(substitute(a, subst) for a in ctor_type.arg_types)

    def _require_unknown(self, t: Type, what: str, span: Span | None) -> None:
        if not isinstance(t, ast.UnknownType):
            raise TypeInferenceError(f"expected {what}, got a value of type {type_text(t)}", span, actual=t)

    def _refine(self, node: Expr, t: Type) -> None:
        """Fill the unknown parts of `node`'s type from `t`, the type its
        context gives it (`Nothing` in a branch whose other branch is a
        `Maybe[float32]`), through lets, branches, clauses and tuples."""
        types = self.types
        stack: list[tuple[Expr, Type]] = [(node, t)]
        while stack:
            n, want = stack.pop()
            current = types.get(id(n))
            if current is None or is_known(current):
                continue
            merged = unify(current, want)
            if merged is None or merged == current:
                continue
            types[id(n)] = merged
            match n:
                case Let(body=body):
                    stack.append((body, merged))
                case ast.If(true_branch=then, false_branch=other):
                    stack.append((then, merged))
                    stack.append((other, merged))
                case Match(clauses=clauses):
                    stack.extend((c.rhs, merged) for c in clauses)
                case ast.Tuple(fields=fields) if isinstance(merged, TupleType):
                    stack.extend(zip(fields, merged.fields))

    # ------------------------------------------------------------ nodes

    def _var(self, var: ast.Var) -> Type:
        found = self.types.get(id(var))
        if found is not None:
            return found
        # A free variable (module.expr's free_var) or one used out of scope.
        return var.type_annotation if var.type_annotation is not None else UNKNOWN

    def _global(self, gv: GlobalVar) -> Type:
        found = self.signatures.get(gv.name)
        if found is None:
            return UNKNOWN
        if gv.name not in self.done:
            self.early_reads.setdefault(gv.name, found)
        return found

    def _constant(self, node: ast.Constant) -> Type:
        data = node.data
        if data is None and node.meta_index is not None:
            table = self.module.meta.get("relay.Constant") or ()
            entry = table[node.meta_index] if node.meta_index < len(table) else None
            if isinstance(entry, ast.Constant):
                data = entry.data
        if data is None:
            return node.checked_type if isinstance(node.checked_type, ast.TensorType) else UNKNOWN
        return ast.TensorType(tuple(data.shape), data.dtype)

    def _add_typedef(self, typedef: ast.TypeData) -> None:
        result = ast.TypeCall(typedef.header, typedef.type_vars)
        for ctor in typedef.constructors:
            self.ctor_types[id(ctor)] = FuncType(ctor.inputs, result, typedef.type_vars)

    def _constructor(self, ctor: ast.Constructor) -> FuncType:
        found = self.ctor_types.get(id(ctor))
        if found is None:
            # A constructor whose definition is not in the module: its type
            # parameters are the type variables its inputs mention.
            tvars: list[TypeVar] = []
            stack: list[Type] = list(ctor.inputs)
            while stack:
                t = stack.pop()
                if isinstance(t, TypeVar) and t not in tvars:
                    tvars.append(t)
                elif isinstance(t, (TupleType, ast.TypeCall)):
                    stack.extend(t.fields if isinstance(t, TupleType) else t.args)
                elif isinstance(t, FuncType):
                    stack.extend((*t.arg_types, t.ret_type))
                elif isinstance(t, ast.RefType):
                    stack.append(t.value)
            found = FuncType(ctor.inputs, ast.TypeCall(ctor.belong_to, tuple(tvars)), tuple(tvars))
            self.ctor_types[id(ctor)] = found
        return found

    def _function(self, func: Function) -> Type:
        types = self.types
        body = types[id(func.body)]
        if func.ret_type is not None:
            body = self._agree(func.ret_type, body, func.ret_type.span or func.span, "the function's result")
            self._refine(func.body, body)
        return FuncType(tuple(types[id(p)] for p in func.params), body, func.type_params)

    def _let(self, node: Let) -> Type:
        return self.types[id(node.body)]

    def _if(self, node: ast.If) -> Type:
        types = self.types
        cond = types[id(node.cond)]
        if unify(_BOOL_SCALAR, cond) is None:
            raise TypeInferenceError(
                f"the condition of `if` must be a bool scalar, got {type_text(cond)}",
                node.cond.span or node.span,
                expected=_BOOL_SCALAR,
                actual=cond,
            )
        then, other = types[id(node.true_branch)], types[id(node.false_branch)]
        merged = unify(then, other)
        if merged is None:
            raise TypeInferenceError(
                f"the branches of `if` disagree: {type_text(then)} and {type_text(other)}",
                node.span,
                expected=then,
                actual=other,
            )
        self._refine(node.true_branch, merged)
        self._refine(node.false_branch, merged)
        return merged

    def _match(self, node: Match) -> Type:
        result: Type = UNKNOWN
        for clause in node.clauses:
            t = self.types[id(clause.rhs)]
            merged = unify(result, t)
            if merged is None:
                raise TypeInferenceError(
                    f"the clauses of `match` disagree: {type_text(result)} and {type_text(t)}",
                    clause.span or node.span,
                    expected=result,
                    actual=t,
                )
            result = merged
        for clause in node.clauses:
            self._refine(clause.rhs, result)
        return result

    def _tuple_get_item(self, node: ast.TupleGetItem) -> Type:
        t = self.types[id(node.tuple_value)]
        if isinstance(t, TupleType):
            if not 0 <= node.index < len(t.fields):
                raise TypeInferenceError(
                    f"index {node.index} is out of range for a tuple of type {type_text(t)}",
                    node.span,
                    actual=t,
                )
            return t.fields[node.index]
        self._require_unknown(t, "a tuple", node.span)
        return UNKNOWN

    def _ref_read(self, node: ast.RefRead) -> Type:
        t = self.types[id(node.ref)]
        if isinstance(t, ast.RefType):
            return t.value
        self._require_unknown(t, "a reference", node.span)
        return UNKNOWN

    def _ref_write(self, node: ast.RefWrite) -> Type:
        t = self.types[id(node.ref)]
        value = self.types[id(node.value)]
        if isinstance(t, ast.RefType):
            if unify(t.value, value) is None:
                raise TypeInferenceError(
                    f"ref_write of a value of type {type_text(value)} into {type_text(t)}",
                    node.span,
                    expected=t.value,
                    actual=value,
                )
        else:
            self._require_unknown(t, "a reference", node.span)
        return _UNIT

    # ------------------------------------------------------------ calls

    def _call(self, node: Call) -> Type:
        callee = node.op
        types = self.types
        args = tuple(types[id(a)] for a in node.args)
        if type(callee) is Op:
            return self._op_call(node, callee.name, args)
        if type(callee) is ast.Constructor:
            ftype: Type = self._constructor(callee)
        else:
            ftype = types[id(callee)]
            literal = callee if type(callee) is Function else self.let_functions.get(id(callee))
            if literal is not None and len(literal.params) == len(args):
                self._learn_parameter_types(literal, args)
        if isinstance(ftype, ast.UnknownType):
            return UNKNOWN
        if not isinstance(ftype, FuncType):
            raise TypeInferenceError(f"a value of type {type_text(ftype)} is called", node.span, actual=ftype)
        if len(ftype.arg_types) != len(args):
            raise TypeInferenceError(
                f"wrong call arity: the callee takes {len(ftype.arg_types)} arguments "
                f"({type_text(ftype)}), the call gives {len(args)}",
                node.span,
                expected=ftype,
                actual=FuncType(args, UNKNOWN),
            )
        params = frozenset(ftype.type_params)
        subst: dict[TypeVar, Type] = {}
        if params and node.type_args:
            subst.update(zip(ftype.type_params, node.type_args))
        for i, (want, got) in enumerate(zip(ftype.arg_types, args)):
            if unify(want, got, params, subst) is None:
                want_text = type_text(substitute(want, subst))
                raise TypeInferenceError(
                    f"argument {i} of the call has type {type_text(got)}, the callee expects {want_text}",
                    node.span,
                    expected=want,
                    actual=got,
                )
        for arg, want, got in zip(node.args, ftype.arg_types, args):
            if not is_known(got):
                self._refine(arg, substitute(want, subst))
        result = substitute(ftype.ret_type, subst)
        if params:
            result = _unbound_to_unknown(result, params)
        return result

    def _learn_parameter_types(self, func: Function, args: tuple[Type, ...]) -> None:
        hints = self.hints
        for param, arg in zip(func.params, args):
            if _written(param.type_annotation) is UNKNOWN and id(param) not in hints and is_known(arg):
                hints[id(param)] = arg
                self.new_hints = True

    def _op_call(self, node: Call, name: str, args: tuple[Type, ...]) -> Type:
        relation = RELATIONS.get(name)
        if relation is None:
            self.unknown_ops.add(name)
            return UNKNOWN
        try:
            result = relation(args, self._completed_attrs(name, node.attrs))
        except RelationError as err:
            raise _relation_error(node, args, err) from None
        except (ArithmeticError, ValueError) as err:
            raise _number_error(node, name, args, err) from None
        if type(result) is ast.TensorType and not _dims_in_range(result.shape):
            raise _size_error(node, name, args, result)
        return result

    def _completed_attrs(self, name: str, attrs: ast.Attrs | None) -> Mapping[str, Any]:
        """A call's attributes with TVM's defaults, as a dict; cached per
        Attrs object (alive as long as the module) and per distinct field
        values (most calls share them)."""
        by_id = self.attrs_by_id
        key = (name, id(attrs))
        found = by_id.get(key)
        if found is not None:
            return found
        fields_key = (name, attrs.fields if attrs is not None else ())
        try:
            found = self.attrs_by_fields.get(fields_key)
            hashable = True
        except TypeError:  # an unhashable attribute value (an opaque meta object)
            hashable = False
        if found is None:
            found = op_attrs.complete_attrs(name, attrs).as_dict()
            if hashable:
                self.attrs_by_fields[fields_key] = found
        by_id[key] = found
        return found


def _relation_error(node: Call, args: tuple[Type, ...], err: RelationError) -> TypeInferenceError:
    shown = ", ".join(type_text(a) for a in args)
    return TypeInferenceError(f"{err.message} (argument types: {shown})", node.span, actual=TupleType(args))


# The largest dimension a tensor may have: TVM's shapes are int64.
MAX_DIM = (1 << 63) - 1


def _dims_in_range(shape: tuple[Any, ...]) -> bool:
    """Every constant dimension, and the element count of the constant ones, fits TVM's int64
    (symbolic and `?` dimensions always do): sizes past it overflow the cost model's floats."""
    elements = 1
    for d in shape:
        if type(d) is int:
            if not 0 <= d <= MAX_DIM:
                return False
            elements *= d
            if elements > MAX_DIM:
                return False
    return True


def _size_text(shape: tuple[Any, ...]) -> str:
    """Which bound a shape that fails `_dims_in_range` breaks, its numbers shortened."""

    def short(n: int) -> str:
        digits = str(n)
        return digits if len(digits) <= 24 else f"a {len(digits)}-digit number"

    bad = next((d for d in shape if type(d) is int and not 0 <= d <= MAX_DIM), None)
    if bad is not None:
        return f"a dimension of {short(bad)} is outside 0..{MAX_DIM} (int64)"
    elements = 1
    for d in shape:
        if type(d) is int:
            elements *= d
    return f"its element count ({short(elements)}) is more than {MAX_DIM} (int64)"


def _oversized(t: Type) -> ast.TensorType | None:
    """A tensor inside `t` (tuples walked iteratively) whose size fails `_dims_in_range`."""
    stack = [t]
    while stack:
        item = stack.pop()
        if type(item) is ast.TensorType:
            if not _dims_in_range(item.shape):
                return item
        elif type(item) is TupleType:
            stack.extend(item.fields)
    return None


def _number_error(node: Call, name: str, args: tuple[Type, ...], err: Exception) -> TypeInferenceError:
    """A caller's number that the operator's shape rule cannot compute with (a scale of 1e308 makes an
    infinite size): a type error at the call, naming the operator, never a crash."""
    shown = ", ".join(type_text(a) for a in args)
    return TypeInferenceError(
        f"{name}: its attributes give no representable result shape ({type(err).__name__}: {err}) "
        f"(argument types: {shown})",
        node.span,
        actual=TupleType(args),
    )


def _size_error(node: Call, name: str, args: tuple[Type, ...], result: ast.TensorType) -> TypeInferenceError:
    """A result dimension past int64 (or negative): what TVM could never allocate or index."""
    shown = ", ".join(type_text(a) for a in args)
    return TypeInferenceError(
        f"{name}: in its result, {_size_text(result.shape)} (argument types: {shown})",
        node.span,
        actual=TupleType(args),
    )


def _unbound_to_unknown(t: Type, params: frozenset[TypeVar]) -> Type:
    """A result that still mentions the callee's type parameters (`Nil`: a
    `List[A]` with `A` unbound) has those parts unknown."""
    return substitute(t, {p: UNKNOWN for p in params})
