"""The text format: corpus round trips, error locations, deep inputs, properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay
from relay import ast as A
from relay.device import VirtualDevice

from .conftest import CORPUS, corpus_files
from .programs import CPU, GPU, modules

TEXT_FILES = corpus_files("*.relay") + corpus_files("random/*.relay") + corpus_files("constructs/*.relay")


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(CORPUS)) for p in paths]


@pytest.mark.skipif(not TEXT_FILES, reason=f"corpus folder {CORPUS} is absent")
@pytest.mark.parametrize("path", TEXT_FILES, ids=_ids(TEXT_FILES))
def test_corpus_text_round_trip(path: Path) -> None:
    module = relay.parse_text(path.read_text(), name=path.name)
    relay.verify(module)
    printed = relay.print_text(module)
    again = relay.parse_text(printed, name="printed")
    assert relay.structural_equal(module, again)
    assert relay.print_text(again) == printed


def test_example_prints_as_tvm_does() -> None:
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = multiply(%x, %y) /* ty=Tensor[(4), float32] */;
  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0]);
  exp(%1)
}
"""
    module = relay.parse_text(text, virtual_devices=[CPU])
    call = module["main"].body
    assert isinstance(call, A.Call) and call.op is A.op("exp")
    props = A.on_device_props(call.args[0])
    assert props is not None and props.virtual_device == CPU
    assert props.constrain_body and not props.constrain_result
    printed = relay.print_text(module)
    assert "%1 = on_device(%0, virtual_device=meta[VirtualDevice][0]);" in printed
    assert "#[metadata]" in printed


def test_graph_bindings_are_sharing_not_lets() -> None:
    module = relay.parse_text(
        '#[version = "0.0.5"]\ndef @main(%x: float32) { %0 = exp(%x); add(%0, %0) }'
    )
    body = module["main"].body
    assert isinstance(body, A.Call) and body.args[0] is body.args[1]
    tree = relay.parse_text('#[version = "0.0.5"]\ndef @main(%x: float32) { add(exp(%x), exp(%x)) }')
    assert relay.structural_equal(module, tree)


def test_alpha_equivalence_and_differences() -> None:
    a = relay.parse_text('def @main(%x: float32) { let %y = exp(%x); add(%y, %x) }')
    b = relay.parse_text('def @main(%a: float32) { let %b = exp(%a); add(%b, %a) }')
    c = relay.parse_text('def @main(%a: float32) { let %b = exp(%a); add(%a, %b) }')
    d = relay.parse_text('def @main(%a: float64) { let %b = exp(%a); add(%b, %a) }')
    assert relay.structural_equal(a, b)
    assert not relay.structural_equal(a, c)
    assert not relay.structural_equal(a, d)


def test_scalar_literals() -> None:
    text = 'def @main() { (0, 1f, 2i64, 1.5f, 3f16, True, -2e-05f, 7f64) }'
    module = relay.parse_text(text)
    fields = module["main"].body.fields  # type: ignore[attr-defined]
    got = [(f.data.dtype, f.data.scalar_value()) for f in fields]
    assert got[0] == ("int32", 0)
    assert got[1] == ("float32", 1.0)
    assert got[2] == ("int64", 2)
    assert got[3] == ("float32", 1.5)
    assert got[4] == ("float16", 3.0)
    assert got[5] == ("bool", True)
    assert got[6][0] == "float32" and abs(got[6][1] + 2e-05) < 1e-9
    assert got[7] == ("float64", 7.0)
    printed = relay.print_text(module)
    assert "(0, 1f, 2i64, 1.5f, 3f16, True, -2e-05f, 7f64)" in printed


def test_adts_match_refs_and_types() -> None:
    text = """#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}

def @len(%l: List[float32]) -> int32 {
  match (%l) {
    Cons(_, %rest) => {
      add(1, @len(%rest))
    },
    Nil => {
      0
    },
  }
}

def @main(%x: float32, %f: fn (float32) -> float32, %t: (float32, Storage[])) -> (int32, ref(float32)) {
  let %r: ref(float32) = ref(%x);
  %0 = ref_write(%r, %f(%x));
  %1 = match? (%t) {
    (%a, _) => { %a },
  };
  (@len(Cons(%1, Nil)), %r)
}
"""
    module = relay.parse_text(text)
    relay.verify(module)
    assert [c.name for c in module.type_definitions[0].constructors] == ["Cons", "Nil"]
    again = relay.parse_text(relay.print_text(module))
    assert relay.structural_equal(module, again)
    main = module["main"]
    assert main.params[1].type_annotation == A.FuncType((A.TensorType((), "float32"),), A.TensorType((), "float32"))
    assert main.ret_type == A.TupleType((A.TensorType((), "int32"), A.RefType(A.TensorType((), "float32"))))


def test_function_and_param_attributes() -> None:
    text = """#[version = "0.0.5"]
def @main(%x {virtual_device=meta[VirtualDevice][1]}: Tensor[(5, 7), float32], virtual_device=meta[VirtualDevice][0]) {
  %0 = fn (%p0: Tensor[(5, 7), float32], Primitive=1, Composite="foo") -> Tensor[(5, 7), float32] {
    nn.relu(%p0)
  };
  %0(%x)
}
"""
    module = relay.parse_text(text, virtual_devices=[CPU, GPU])
    main = module["main"]
    assert main.virtual_device == CPU and main.params[0].virtual_device == GPU
    inner = main.body.op  # type: ignore[attr-defined]
    assert isinstance(inner, A.Function) and inner.is_primitive and inner.attr("Composite") == "foo"
    printed = relay.print_text(module)
    assert "%x {virtual_device=meta[VirtualDevice][1]}: Tensor[(5, 7), float32]" in printed
    assert "Primitive=1" in printed and 'Composite="foo"' in printed


def test_meta_indices_preserved_and_placeholders_kept() -> None:
    text = 'def @main(%x: float32) { on_device(%x, virtual_device=meta[VirtualDevice][3], constrain_result=True) }'
    module = relay.parse_text(text)
    props = A.on_device_props(module["main"].body)
    assert props is not None and props.virtual_device == A.MetaRef("VirtualDevice", 3)
    printed = relay.print_text(module)
    assert "meta[VirtualDevice][3]" in printed and "#[metadata]" not in printed
    const = relay.parse_text("def @main() { meta[relay.Constant][2] }")
    assert "meta[relay.Constant][2]" in relay.print_text(const)


def test_supplied_devices_are_appended_after_the_section() -> None:
    section_text = relay.print_text(
        relay.parse_text("def @main(%x: float32) { on_device(%x, virtual_device=meta[VirtualDevice][0]) }",
                         virtual_devices=[CPU])
    )
    module = relay.parse_text(section_text, virtual_devices=[GPU])
    assert module.meta["VirtualDevice"] == [CPU, GPU]
    new_ref = relay.parse_text(
        section_text.replace("meta[VirtualDevice][0])", "meta[VirtualDevice][1])"), virtual_devices=[GPU]
    )
    props = A.on_device_props(new_ref["main"].body)
    assert props is not None and props.virtual_device == GPU


def test_new_devices_are_appended_when_printing() -> None:
    module = relay.parse_text(
        "def @main(%x: float32) { on_device(%x, virtual_device=meta[VirtualDevice][0]) }", virtual_devices=[CPU]
    )
    main = module["main"]
    rebuilt = A.Function(main.params, A.device_copy(main.params[0], CPU, GPU), main.ret_type)
    out = A.Module(((module.functions[0][0], rebuilt),), meta=module.meta)
    printed = relay.print_text(out)
    assert "src_virtual_device=meta[VirtualDevice][0], dst_virtual_device=meta[VirtualDevice][1]" in printed
    assert relay.parse_text(printed).meta["VirtualDevice"] == [CPU, GPU]


# ------------------------------------------------------------------ errors

# A metadata section whose relay.Constant table is empty.
EMPTY_CONSTANT_TABLE = json.dumps(
    {
        "root": 1,
        "nodes": [{"type_key": ""}, {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]}, {"type_key": "Array"}],
        "b64ndarrays": [],
        "attrs": {"tvm_version": "0.19.0"},
    }
)


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("def @main(%x: float32) {\n  add(%x, %y)\n}", 2, 11, "unbound variable %y"),
        ("def @main(%x: float32) {\n  add(%x, %x\n}", 3, 1, "expected `,` or `)` in the argument list, found `}`"),
        ("def @main(%x: float32) {\n  %0 = exp(%x)\n  %0\n}", 3, 3, "expected `;` after the graph binding"),
        ("def @main(%x: Tensor[(4), floaty]) { %x }", 1, 27, "unknown dtype `floaty`"),
        ("def @main() { %3 }", 1, 15, "graph variable %3 is used before it is defined"),
        ("def @main() {\n  meta[relay.Constant][0]\n}\n#[metadata]\n" + EMPTY_CONSTANT_TABLE, 2, 3,
         "meta[relay.Constant][0] is out of bounds: the table has 0 entries"),
        ("def @main(%x: float32) { @f(%x) }", 1, 26, "call of undefined global function @f"),
        ("def @main() { 1 } def @main() { 2 }", 1, 23, "global function @main is defined twice"),
        ("def @main() { /* never closed", 1, 15, "unterminated /* comment"),
        ('def @main() { nn.conv2d(1, data_layout="NCHW) }', 1, 40, "unterminated string literal"),
        ("def @main() { 1 } $", 1, 19, "unexpected character '$'"),
        ('#[version = "0.0.4"]\ndef @main() { 1 }', 1, 1, 'unsupported text format version "0.0.4"'),
        ("def @main() { match (1) { Foo => { 1 } } }", 1, 27, "undefined constructor `Foo`"),
    ],
)
def test_error_locations(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(relay.ParseError) as info:
        relay.parse_text(text, name="case.relay")
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert err.message.startswith(message)


def test_error_report_shows_line_and_caret() -> None:
    with pytest.raises(relay.RelayError) as info:
        relay.parse_text("def @main(%x: float32) {\n  add(%x, %y)\n}", name="m.relay")
    report = str(info.value).splitlines()
    assert report[0] == "error: unbound variable %y"
    assert report[1] == " --> m.relay:2:11"
    assert report[3] == "2 |   add(%x, %y)"
    assert report[4] == "  |           ^^"


def test_error_report_cuts_a_long_line_around_the_caret() -> None:
    line = "x" * 5000 + " @@ " + "y" * 5000
    source = relay.SourceText("long.relay", line)
    err = relay.RelayError("unexpected `@@`", relay.Span(source, 1, 5002, 1, 5004))
    report = str(err).splitlines()
    shown, caret = report[3], report[4]
    assert len(str(err)) < 600
    assert shown.startswith("1 | ...") and shown.endswith("...")
    # the caret still points at the token, in the shown excerpt
    assert shown[caret.index("^") : caret.index("^") + 2] == "@@"
    assert caret.count("^") == 2


def test_verify_reports_scope_errors() -> None:
    x = A.Var("x", None)
    y = A.Var("y", None)
    bad = A.Module(((A.GlobalVar("main"), A.Function((x,), A.Call(A.op("add"), (x, y)))),))
    with pytest.raises(relay.VerifyError, match="unbound variable %y"):
        relay.verify(bad)
    ctor_module = relay.parse_text("type T { C(float32), }\ndef @main(%x: float32) { C(%x) }")
    relay.verify(ctor_module)
    main = ctor_module["main"]
    wrong = A.Function(main.params, A.Call(main.body.op, ()))  # type: ignore[attr-defined]
    broken = A.Module(((ctor_module.functions[0][0], wrong),), ctor_module.type_definitions)
    with pytest.raises(relay.VerifyError, match="constructor C takes 1 arguments, given 0"):
        relay.verify(broken)
    arity = relay.parse_text("def @f(%a: float32, %b: float32) { add(%a, %b) }\ndef @main(%x: float32) {\n  @f(%x)\n}")
    with pytest.raises(relay.VerifyError, match="@f takes 2 arguments, given 1") as info:
        relay.verify(arity)
    assert (info.value.line, info.value.column) == (3, 3)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_give_relay_errors(data: bytes) -> None:
    text = data.decode("latin-1")
    try:
        relay.parse_text(text)
    except relay.RelayError:
        pass


@pytest.mark.skipif(not TEXT_FILES, reason=f"corpus folder {CORPUS} is absent")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_truncated_corpus_text_gives_relay_errors(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(TEXT_FILES[:40]))
    text = path.read_text()
    cut = data.draw(st.integers(0, len(text) - 1))
    try:
        module = relay.parse_text(text[:cut])
    except relay.RelayError:
        return
    relay.verify(module)


# ------------------------------------------------------------------ deep inputs


@pytest.mark.parametrize("n", [20_000, pytest.param(200_000, marks=pytest.mark.slow)], ids=["20k", "200k"])
def test_long_chain_of_graph_bindings(n: int) -> None:
    """Far deeper than the recursion limit (20,000 bindings by default, 200,000 in the slow stage)."""
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(4), float32]) {", "  %0 = negative(%x);"]
    lines += [f"  %{i} = add(%{i - 1}, %x);" for i in range(1, n)]
    lines += [f"  %{n - 1}", "}"]
    module = relay.parse_text("\n".join(lines))
    relay.verify(module)
    printed = relay.print_text(module)
    again = relay.parse_text(printed)
    assert relay.structural_equal(module, again)
    depth = 0
    node = module["main"].body
    while isinstance(node, A.Call):
        depth += 1
        node = node.args[0]
    assert depth == n


def test_nested_lets() -> None:
    n = 20_000
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(4), float32]) {"]
    prev = "%x"
    for i in range(n):
        lines.append(f"  let %v{i} = add({prev}, %x);")
        prev = f"%v{i}"
    lines += [f"  {prev}", "}"]
    module = relay.parse_text("\n".join(lines))
    relay.verify(module)
    printed = relay.print_text(module)
    assert relay.structural_equal(module, relay.parse_text(printed))
    assert printed.count("let %") == n


def test_deep_syntactic_nesting_is_a_clear_error() -> None:
    text = "def @main(%x: float32) { " + "exp(" * 5000 + "%x" + ")" * 5000 + " }"
    with pytest.raises(relay.ParseError, match="nested more than"):
        relay.parse_text(text)


# ------------------------------------------------------------------ properties


@settings(max_examples=150, deadline=None)
@given(modules())
def test_print_parse_round_trip(module: A.Module) -> None:
    relay.verify(module)
    printed = relay.print_text(module)
    again = relay.parse_text(printed)
    relay.verify(again)
    assert relay.structural_equal(module, again), printed
    assert relay.print_text(again) == printed
    through_json = relay.load_json(relay.dump_json(module))
    relay.verify(through_json)
    assert relay.structural_equal(module, through_json), printed


def test_structural_equal_is_not_exponential_on_dags() -> None:
    x = A.Var("x", None)
    node: A.Expr = x
    for _ in range(200):
        node = A.Call(A.op("add"), (node, node))
    module = A.Module(((A.GlobalVar("main"), A.Function((x,), node)),))
    assert relay.structural_equal(module, relay.parse_text(relay.print_text(module)))


def test_virtual_device_join() -> None:
    partial = VirtualDevice(device_type=2)
    assert partial.compatible(GPU) and partial.join(GPU) == GPU
    assert not CPU.compatible(GPU) and CPU.join(GPU) is None
    assert VirtualDevice(memory_scope="global").join(VirtualDevice(device_type=1)) == VirtualDevice(
        1, None, None, "global"
    )


@pytest.mark.parametrize(
    "annotation",
    [
        "Tensor[(1, 2), float32]",  # TVM's spelling: the lexer reads it as one token
        "Tensor[(1,2), float32]",
        "Tensor[ (1, 2) ,float32 ]",
        "Tensor[(1, 2), float32 /* c */]",
        "Tensor[(1i32, 2), float32]",
    ],
)
def test_tensor_annotation_spellings_parse_alike(annotation: str) -> None:
    for sep in (": ", ":", " : ", ": /* c */ "):
        text = f"def @main(%x{sep}{annotation}) {{ %x }}"
        ((_, func),) = relay.parse_text(text).functions
        ty = func.params[0].type_annotation
        assert isinstance(ty, A.TensorType)
        assert (ty.shape, ty.dtype) == ((1, 2), "float32")
        assert ty.span is not None
        start = text.index("Tensor") + 1
        assert (ty.span.line, ty.span.column, ty.span.end_column) == (1, start, start + len(annotation))


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        (
            "def @main(%x: Tensor[(1), float32]) { %x: Tensor[(1), float32] }",
            41,
            "expected `}` to close the function body, found `:`",
        ),
        (
            "def @main(%x: Tensor[(1), float32]) { add(%x, : Tensor[(1), float32]) }",
            47,
            "expected an expression, found `:`",
        ),
        ("def @main(%x: : Tensor[(1), float32]) { %x }", 15, "expected a type, found `:`"),
        (
            "def @main(%x: Tensor[(1), float32]]) { %x }",
            35,
            "expected `,` or `)` in the parameter list, found `]`",
        ),
    ],
)
def test_errors_next_to_tensor_annotations(text: str, column: int, message: str) -> None:
    with pytest.raises(relay.ParseError) as info:
        relay.parse_text(text)
    assert (info.value.line, info.value.column, info.value.message) == (1, column, message)


def test_one_spelling_of_types_and_dimensions() -> None:
    # the printer, type inference's messages and the cost keys all write types through relay.typetext
    from relay.infer import dims, types
    from relay.typetext import type_text

    shape = (1, A.IntImm(3, "int64"), A.ANY, "n", True)
    ty = A.TupleType((A.TensorType(shape, "float32"), A.TensorType((), "int8")))
    assert type_text(ty) == "(Tensor[(1, 3i64, ?, n, 1), float32], int8)"
    assert types.type_text is type_text and dims.shape_text(shape) == "(1, 3i64, ?, n, 1)"
    module = relay.parse_text(f"def @main(%x: {type_text(ty)}) {{ %x }}")
    assert type_text(module.functions[0][1].params[0].type_annotation) == type_text(ty)
    assert f"%x: {type_text(ty)}" in relay.print_text(module)
