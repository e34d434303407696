"""relay.infer_types: located type errors, every construct, unknown
operators, printing inferred types, and inputs too deep for recursion."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings

import relay
from relay import ast as A
from relay.infer import UNKNOWN, TypeInferenceError, type_text

from .programs import modules

T23 = A.TensorType((2, 3), "float32")


def infer(text: str, **kwargs: bool) -> tuple[A.Module, relay.Types]:
    module = relay.parse_text(text)
    return module, relay.infer_types(module, **kwargs)


def error_of(text: str) -> TypeInferenceError:
    module = relay.parse_text(text)
    with pytest.raises(TypeInferenceError) as info:
        relay.infer_types(module)
    return info.value


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        pytest.param(
            "def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(4, 3), float32]) {\n  add(%a, %b)\n}",
            2,
            3,
            "add: shapes (2, 3) and (4, 3) do not broadcast "
            "(argument types: Tensor[(2, 3), float32], Tensor[(4, 3), float32])",
            id="add",
        ),
        pytest.param(
            "def @main(%a: Tensor[(1, 784), float32], %w: Tensor[(128, 700), float32]) {\n"
            "  %0 = nn.relu(%a);\n"
            "  nn.dense(%0, %w, units=128)\n}",
            3,
            3,
            "nn.dense: data has 784 input units, weight has 700 "
            "(argument types: Tensor[(1, 784), float32], Tensor[(128, 700), float32])",
            id="nn.dense",
        ),
        pytest.param(
            "def @main(%x: Tensor[(1, 3, 32, 32), float32], %w: Tensor[(16, 4, 3, 3), float32]) {\n"
            "  %0 = nn.relu(%x);\n"
            "  %1 = nn.conv2d(%0, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);\n"
            "  nn.relu(%1)\n}",
            3,
            8,
            "nn.conv2d: weight has shape (16, 4, 3, 3), expected (16, 3, 3, 3) "
            "(argument types: Tensor[(1, 3, 32, 32), float32], Tensor[(16, 4, 3, 3), float32])",
            id="nn.conv2d",
        ),
        pytest.param(
            "def @f(%a: Tensor[(2), float32], %b: Tensor[(2), float32]) -> Tensor[(2), float32] {\n"
            "  add(%a, %b)\n}\n"
            "def @main(%x: Tensor[(2), float32]) {\n  %0 = negative(%x);\n  @f(%0)\n}",
            6,
            3,
            "wrong call arity: the callee takes 2 arguments "
            "(fn (Tensor[(2), float32], Tensor[(2), float32]) -> Tensor[(2), float32]), the call gives 1",
            id="arity-global",
        ),
        pytest.param(
            "def @main(%x: Tensor[(2), float32]) {\n"
            "  let %f = fn (%p: Tensor[(2), float32]) { %p };\n"
            "  %f(%x, %x)\n}",
            3,
            3,
            "wrong call arity: the callee takes 1 arguments "
            "(fn (Tensor[(2), float32]) -> Tensor[(2), float32]), the call gives 2",
            id="arity-local",
        ),
        pytest.param(
            "def @main(%x: Tensor[(2), float32]) {\n  %0 = fn (%p: Tensor[(3), float32]) { %p };\n  %0(%x)\n}",
            3,
            3,
            "argument 0 of the call has type Tensor[(2), float32], the callee expects Tensor[(3), float32]",
            id="argument",
        ),
        pytest.param(
            "def @main(%c: bool, %x: Tensor[(2), float32], %y: Tensor[(3), float32]) {\n"
            "  if (%c) { %x } else { %y }\n}",
            2,
            3,
            "the branches of `if` disagree: Tensor[(2), float32] and Tensor[(3), float32]",
            id="if-branches",
        ),
        pytest.param(
            "def @main(%x: Tensor[(2), float32]) {\n  let %y: Tensor[(3), float32] = negative(%x);\n  %y\n}",
            2,
            7,
            "let %y is annotated Tensor[(3), float32] but has type Tensor[(2), float32]",
            id="let-annotation",
        ),
        pytest.param(
            "def @main(%x: Tensor[(2), float32]) -> Tensor[(2), int32] {\n  negative(%x)\n}",
            1,
            40,
            "the function's result is annotated Tensor[(2), int32] but has type Tensor[(2), float32]",
            id="result-annotation",
        ),
        pytest.param(
            "def @main(%x: Tensor[(2), float32]) {\n  %0 = (%x, %x);\n  %0.2\n}",
            3,
            3,
            "index 2 is out of range for a tuple of type (Tensor[(2), float32], Tensor[(2), float32])",
            id="tuple-index",
        ),
    ],
)
def test_type_errors_are_located(text: str, line: int, column: int, message: str) -> None:
    err = error_of(text)
    assert (err.line, err.column, err.message) == (line, column, message)
    assert isinstance(err, relay.RelayError)
    assert f"<string>:{line}:{column}" in str(err)


def test_annotation_error_carries_both_types() -> None:
    err = error_of(
        "def @main(%x: Tensor[(2), float32]) {\n  let %y: Tensor[(3), float32] = negative(%x);\n  %y\n}"
    )
    assert err.expected == A.TensorType((3,), "float32")
    assert err.actual == A.TensorType((2,), "float32")


def test_unchecked_annotations_are_not_errors() -> None:
    text = "def @main(%x: Tensor[(2), float32]) {\n  let %y: Tensor[(3), float32] = negative(%x);\n  %y\n}"
    _module, types = infer(text, check_annotations=False)
    assert types.function("main").ret_type == A.TensorType((2,), "float32")


# ------------------------------------------------------------------ constructs


def test_model_types_and_function_lookup() -> None:
    module, types = infer(
        "def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {\n"
        "  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], kernel_size=[3, 3]);\n"
        "  %1 = nn.max_pool2d(%0, pool_size=[2, 2], strides=[2, 2]);\n"
        "  %2 = nn.batch_flatten(%1);\n"
        "  %3 = split(%2, indices_or_sections=2, axis=1);\n"
        "  %3.1\n}"
    )
    main = types.function("@main")
    assert main == types.function("main") == types.of(module["main"])
    assert main.ret_type == A.TensorType((1, 32), "float32")
    tgi = module["main"].body
    assert isinstance(tgi, A.TupleGetItem)
    assert types.of(tgi.tuple_value) == A.TupleType((A.TensorType((1, 32), "float32"),) * 2)
    assert types.unknown_ops == frozenset()


def test_unknown_operator_gives_unknown_not_an_error() -> None:
    text = (
        "def @main(%x: Tensor[(2, 3), float32]) {\n"
        "  %0 = my.custom_op(%x);\n"
        "  %1 = add(%0, %x);\n"
        "  %2 = negative(%x);\n"
        "  (%1, %2)\n}"
    )
    module, types = infer(text)
    assert types.unknown_ops == frozenset({"my.custom_op"})
    result = types.function("main").ret_type
    assert result == A.TupleType((UNKNOWN, T23))
    relay.verify(module)  # unknown types are reported only when asked
    with pytest.raises(relay.VerifyError) as info:
        relay.verify(module, check_types=True)
    assert (info.value.line, info.value.column) == (2, 8)
    assert "my.custom_op has no type relation" in info.value.message


def test_verify_check_types_reports_type_errors() -> None:
    module = relay.parse_text(
        "def @main(%a: Tensor[(2), float32], %b: Tensor[(3), float32]) {\n  add(%a, %b)\n}"
    )
    relay.verify(module)
    with pytest.raises(TypeInferenceError):
        relay.verify(module, check_types=True)


def test_globals_in_dependency_order_and_recursion() -> None:
    # @main is defined first and calls @g, whose result type is not written.
    _module, types = infer(
        "def @main(%x: Tensor[(2, 3), float32]) {\n  @g(%x)\n}\n"
        "def @g(%y: Tensor[(2, 3), float32]) {\n  %0 = transpose(%y);\n  nn.relu(%0)\n}\n"
        "def @loop(%n: int32, %acc: Tensor[(2), float32]) -> Tensor[(2), float32] {\n"
        "  %1 = equal(%n, 0);\n"
        "  if (%1) { %acc } else { %2 = subtract(%n, 1); %3 = exp(%acc); @loop(%2, %3) }\n}"
    )
    assert types.function("main").ret_type == A.TensorType((3, 2), "float32")
    assert types.function("loop") == A.FuncType(
        (A.TensorType((), "int32"), A.TensorType((2,), "float32")), A.TensorType((2,), "float32")
    )


MUTUAL = (
    "def @even(%n: int32, %x: Tensor[(2), float32]) {\n"
    "  %0 = equal(%n, 0);\n"
    "  if (%0) { %x } else { %1 = subtract(%n, 1); @odd(%1, %x) }\n}\n"
    "def @odd(%m: int32, %y: Tensor[(2), float32]) {\n"
    "  %2 = subtract(%m, 1);\n  %3 = @even(%2, %y);\n  nn.relu(%3)\n}"
)


def test_mutual_recursion_without_written_result_types() -> None:
    module, types = infer(MUTUAL)
    t2 = A.TensorType((2,), "float32")
    assert types.function("odd") == types.function("even") == A.FuncType((A.TensorType((), "int32"), t2), t2)
    odd_body = module["odd"].body
    assert isinstance(odd_body, A.Call)
    assert types.of(odd_body.args[0]) == t2  # the call of @even, typed on the second pass


def test_mutual_recursion_type_error() -> None:
    # @odd returns a pair, so @even's branches (a tensor, @odd's result) disagree.
    err = error_of(MUTUAL.replace("nn.relu(%3)", "%4 = nn.relu(%3);\n  (%4, %4)"))
    assert (err.line, err.column) == (3, 3)
    assert "branches of `if` disagree" in err.message


def test_adt_match_and_polymorphic_constructors() -> None:
    module, types = infer(
        "type List[A] {\n  Cons(A, List[A]),\n  Nil,\n}\n"
        "def @main(%x: Tensor[(2, 3), float32]) {\n"
        "  %0 = Cons(%x, Nil);\n"
        "  match (%0) {\n"
        "    Cons(%h, %t) => { (%h, %t) },\n"
        "    Nil => { (%x, Nil) },\n"
        "  }\n}"
    )
    list_type = A.TypeCall(module.type_definitions[0].header, (T23,))
    assert types.function("main").ret_type == A.TupleType((T23, list_type))
    cons = module["main"].body
    assert isinstance(cons, A.Match) and isinstance(cons.data, A.Call)
    nil_arg = cons.data.args[1]
    assert types.of(nil_arg) == list_type  # `Nil` typed from the context
    head = next(A.pattern_vars(cons.clauses[0].lhs))
    assert types.of(head) == T23


def test_polymorphic_global_function() -> None:
    _module, types = infer(
        "def @id[A](%v: A) -> A {\n  %v\n}\n"
        "def @main(%x: Tensor[(2, 3), float32], %c: bool) {\n"
        "  %0 = @id(%x);\n  %1 = @id(%c);\n  (%0, %1)\n}"
    )
    assert types.function("main").ret_type == A.TupleType((T23, A.TensorType((), "bool")))


def test_refs_tuples_lets_and_closures() -> None:
    module, types = infer(
        "def @main(%x: Tensor[(2, 3), float32]) {\n"
        "  let %r = ref(%x);\n"
        "  %0 = ref_read(%r);\n"
        "  %1 = ref_write(%r, %0);\n"
        "  let %f = fn (%p: Tensor[(2, 3), float32]) { (%p, %1) };\n"
        "  %f(%x)\n}"
    )
    body = module["main"].body
    assert isinstance(body, A.Let)
    assert types.of(body.var) == A.RefType(T23)
    assert types.function("main").ret_type == A.TupleType((T23, A.TupleType(())))


def test_unannotated_parameters_learn_from_calls() -> None:
    module, types = infer(
        "def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {\n"
        "  let %y = nn.dense(%x, %w);\n"
        "  let %f = fn (%a) { negative(%a) };\n"
        "  let %g = fn (%b, %c) { %f(add(%b, %c)) };\n"
        "  %0 = fn (%d) { exp(%d) }(%y);\n"
        "  %g(%y, %0)\n}"
    )
    t24 = A.TensorType((2, 4), "float32")
    assert types.function("main").ret_type == t24
    params = [
        p for node in relay.post_order(module["main"]) if isinstance(node, A.Function) for p in node.params
    ]
    assert sorted(p.name for p in params if types.of(p) == t24) == ["a", "b", "c", "d"]


def test_constants_and_meta_constants() -> None:
    module, types = infer(
        'def @main(%x: Tensor[(2, 3), float32]) {\n  %0 = multiply(%x, 2f);\n  cast(%0, dtype="int8")\n}'
    )
    assert types.function("main").ret_type == A.TensorType((2, 3), "int8")
    json_module = relay.load_json(relay.dump_json(relay.parse_text(relay.print_text(module))))
    assert relay.infer_types(json_module).function("main").ret_type == A.TensorType((2, 3), "int8")


def test_types_of_a_foreign_node_is_a_key_error() -> None:
    _, types = infer("def @main(%x: Tensor[(2, 3), float32]) {\n  negative(%x)\n}")
    with pytest.raises(KeyError):
        types.of(A.Var("elsewhere"))


# ------------------------------------------------------------------ printing inferred types


def test_printed_types_are_annotations_the_parser_reads() -> None:
    module, types = infer(
        "def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {\n"
        "  let %y = nn.dense(%x, %w);\n"
        "  let %f = fn (%p: Tensor[(2, 4), float32]) { negative(%p) };\n"
        "  %f(%y)\n}"
    )
    text = relay.print_text(module, types=types)
    assert "let %y: Tensor[(2, 4), float32] = " in text
    assert re.search(r"let %f: fn \(Tensor\[\(2, 4\), float32\]\) -> Tensor\[\(2, 4\), float32\] = ", text)
    assert "-> Tensor[(2, 4), float32] {" in text
    again = relay.parse_text(text)
    assert again["main"].ret_type == A.TensorType((2, 4), "float32")
    assert relay.infer_types(again).function("main") == types.function("main")
    assert relay.print_text(module) != text  # without `types`, nothing is added


def test_a_wrong_printed_annotation_fails_with_a_located_error() -> None:
    module, types = infer(
        "def @main(%x: Tensor[(2, 3), float32]) {\n  let %y = negative(%x);\n  let %z = exp(%y);\n  %z\n}"
    )
    text = relay.print_text(module, types=types)
    assert "let %z: Tensor[(2, 3), float32] = " in text
    wrong = text.replace("let %z: Tensor[(2, 3), float32]", "let %z: Tensor[(3, 2), float32]")
    err = error_of(wrong)
    line = next(i for i, s in enumerate(wrong.splitlines(), 1) if s.strip().startswith("let %z"))
    assert (err.line, err.column) == (line, wrong.splitlines()[line - 1].index("%z") + 1)
    assert "Tensor[(3, 2), float32]" in err.message and "Tensor[(2, 3), float32]" in err.message


def _types_in_order(module: A.Module, types: relay.Types) -> list[str]:
    return [type_text(types.of(node)) for _, func in module.functions for node in relay.post_order(func)]


def _well_typed(module: A.Module) -> A.Module:
    """The generated programs use scalar constants where a 4x4 tensor is
    needed (a branch, an argument, a result); make every constant 4x4."""

    def visit(old: A.Expr, new: A.Expr) -> A.Expr:
        if isinstance(new, A.Constant) and new.data is not None and new.data.dtype == "float32":
            data = new.data
            return A.Constant(A.NDArray(data.dtype, (4, 4), data.data * 16), span=new.span)
        return new

    functions = []
    for gv, func in module.functions:
        rewritten = relay.rewrite(func, visit)
        assert isinstance(rewritten, A.Function)
        functions.append((gv, rewritten))
    return A.Module(tuple(functions), module.type_definitions, module.meta)


@settings(max_examples=60, deadline=None)
@given(modules().map(_well_typed))
def test_hypothesis_programs_print_with_types_and_infer_the_same(module: A.Module) -> None:
    types = relay.infer_types(module)
    text = relay.print_text(module, types=types)
    again = relay.parse_text(text)
    types_again = relay.infer_types(again)
    for gv, _ in module.functions:
        assert types_again.function(gv.name) == types.function(gv.name)
    assert _types_in_order(again, types_again) == _types_in_order(module, types)
    # Every binder of the re-parsed text now carries its type.
    for _, func in again.functions:
        for node in relay.post_order(func):
            if isinstance(node, A.Let):
                assert node.var.type_annotation == types_again.of(node.var)


# ------------------------------------------------------------------ depth


def _nested_lets(count: int) -> A.Module:
    x = A.Var("x", A.TensorType((4, 4), "float32"))
    binders = [A.Var(f"v{i}") for i in range(count)]
    body: A.Expr = binders[-1]
    for i in range(count - 1, -1, -1):
        value = A.Call(A.op("negative" if i % 2 else "exp"), (binders[i - 1] if i else x,), A.Attrs())
        body = A.Let(binders[i], value, body)
    return A.Module(functions=((A.GlobalVar("main"), A.Function((x,), body)),))


def test_twenty_thousand_nested_lets() -> None:
    module = _nested_lets(20_000)
    types = relay.infer_types(module)
    assert types.function("main").ret_type == A.TensorType((4, 4), "float32")


@pytest.mark.slow
def test_chain_of_two_hundred_thousand_bindings() -> None:
    x = A.Var("x", A.TensorType((4, 1), "float32"))
    y = A.Var("y", A.TensorType((1, 4), "float32"))
    expr: A.Expr = x
    for i in range(200_000):
        expr = A.Call(A.op("add" if i % 3 else "multiply"), (expr, y if i == 7 else x), A.Attrs())
    module = A.Module(functions=((A.GlobalVar("main"), A.Function((x, y), expr)),))
    types = relay.infer_types(module)
    # One broadcast with %y at step 7 turns (4, 1) into (4, 4) for the rest.
    assert types.function("main").ret_type == A.TensorType((4, 4), "float32")
