"""Operator attribute schemas: TVM's fields, order and defaults, checked
against what TVM 0.19 wrote (JSON: every field) and printed (text: only
non-default fields) for the corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import relay
from relay import ast as A
from relay import op_attrs
from relay.device import VirtualDevice, parse_target

from .conftest import corpus_files

PAIRS = [
    p
    for p in corpus_files("*.json")
    if not p.name.endswith(".meta.json") and p.with_suffix(".relay").exists()
]


def _calls(expr: A.Expr) -> list[A.Call]:
    return [n for n in relay.post_order(expr) if isinstance(n, A.Call) and isinstance(n.op, A.Op)]


def _module_calls(module: A.Module) -> list[A.Call]:
    out: list[A.Call] = []
    for _, fn in module.functions:
        out.extend(_calls(fn))
    return out


def test_corpus_attrs_types_match_the_table(corpus: Path) -> None:
    """Each operator's attribute node type in TVM's JSON is the one we name,
    and its fields are exactly our schema's fields."""
    seen: set[str] = set()
    for path in corpus_files("*.json"):
        if path.name.endswith(".meta.json"):
            continue
        doc = json.loads(path.read_text())
        nodes = doc["nodes"]
        for node in nodes:
            if node["type_key"] != "relay.Call":
                continue
            op = nodes[int(node["attrs"]["op"])]
            attrs = nodes[int(node["attrs"]["attrs"])]
            if op["type_key"] != "Op":
                continue
            name = op["repr_str"]
            if attrs["type_key"] == "":
                continue
            assert op_attrs.attrs_type_key(name) == attrs["type_key"], name
            schema = op_attrs.SCHEMAS[attrs["type_key"]]
            assert set(schema.names) == set(attrs.get("attrs", {})), name
            seen.add(name)
    expected = {
        "nn.conv2d",
        "nn.conv3d",
        "nn.conv2d_transpose",
        "nn.dense",
        "nn.batch_norm",
        "nn.bias_add",
        "nn.max_pool2d",
        "nn.avg_pool2d",
        "nn.global_avg_pool2d",
        "nn.adaptive_avg_pool3d",
        "nn.softmax",
        "nn.dropout",
        "concatenate",
        "split",
        "expand_dims",
        "reshape",
        "reshape_like",
        "zeros",
        "on_device",
        "device_copy",
    }
    assert expected <= seen


def test_every_corpus_operator_with_attributes_is_known(corpus: Path) -> None:
    for path in corpus_files("**/*.relay"):
        module = relay.parse_text(path.read_text(), name=path.name)
        for call in _module_calls(module):
            if call.attrs is not None and call.attrs.fields:
                assert op_attrs.attrs_type_key(call.op.name) is not None, (path.name, call.op.name)


@pytest.mark.parametrize("path", PAIRS, ids=[p.name for p in PAIRS])
def test_non_default_fields_are_what_tvm_printed(path: Path) -> None:
    """For every call, the fields TVM's printer showed are exactly our
    non-default fields of the complete JSON attributes, in the same order."""
    from_json = relay.load_json(path.read_text())
    from_text = relay.parse_text(path.with_suffix(".relay").read_text(), name=path.name)
    json_calls = _module_calls(from_json)
    text_calls = _module_calls(from_text)
    assert len(json_calls) == len(text_calls)
    for jc, tc in zip(json_calls, text_calls):
        assert jc.op.name == tc.op.name
        printed = tuple(name for name, _ in (tc.attrs.fields if tc.attrs is not None else ()))
        ours = tuple(name for name, _ in op_attrs.non_default_fields(jc.op.name, jc.attrs))
        assert ours == printed, jc.op.name
        assert op_attrs.normalize_for_compare(jc.op.name, jc.attrs) == op_attrs.normalize_for_compare(
            tc.op.name, tc.attrs
        ), jc.op.name


def test_complete_attrs_fills_defaults_in_tvm_order() -> None:
    attrs = A.Attrs((("channels", 64), ("padding", (1, 1))), None)
    full = op_attrs.complete_attrs("nn.conv2d", attrs)
    assert full.type_key == "relay.attrs.Conv2DAttrs"
    assert full.fields == (
        ("strides", (1, 1)),
        ("padding", (1, 1)),
        ("dilation", (1, 1)),
        ("groups", 1),
        ("channels", 64),
        ("kernel_size", None),
        ("data_layout", "NCHW"),
        ("kernel_layout", "OIHW"),
        ("out_layout", ""),
        ("out_dtype", ""),
    )
    assert op_attrs.complete_attrs("nn.conv2d", full) is full


def test_on_device_order_and_defaults() -> None:
    dev = VirtualDevice(1, 0, parse_target("llvm"), None)
    call = A.on_device(A.Var("x"), dev)
    full = op_attrs.complete_attrs("on_device", call.attrs)
    assert [n for n, _ in full.fields] == ["virtual_device", "constrain_result", "constrain_body"]
    assert op_attrs.non_default_fields("on_device", call.attrs) == (("virtual_device", dev),)
    flipped = A.on_device(A.Var("x"), dev, constrain_result=True, constrain_body=False)
    assert op_attrs.non_default_fields("on_device", flipped.attrs) == (
        ("virtual_device", dev),
        ("constrain_result", True),
        ("constrain_body", False),
    )
    default = op_attrs.complete_attrs("on_device", A.Attrs())
    assert default.get("virtual_device") == VirtualDevice()


def test_required_fields_are_always_shown() -> None:
    attrs = A.Attrs((("pool_size", (2, 2)), ("strides", (1, 1))), "relay.attrs.MaxPool2DAttrs")
    assert op_attrs.non_default_fields("nn.max_pool2d", attrs) == (("pool_size", (2, 2)),)
    dense = A.Attrs((("units", None), ("out_dtype", "")), "relay.attrs.DenseAttrs")
    assert op_attrs.non_default_fields("nn.dense", dense) == (("units", None),)
    copy = A.device_copy(A.Var("x"), VirtualDevice(1), VirtualDevice(2))
    assert [n for n, _ in op_attrs.non_default_fields("device_copy", copy.attrs)] == [
        "src_virtual_device",
        "dst_virtual_device",
    ]


def test_floats_within_tvm_tolerance_count_as_default() -> None:
    near = A.Attrs((("epsilon", 1.0000001e-05),), None)
    assert op_attrs.non_default_fields("nn.batch_norm", near) == ()
    far = A.Attrs((("epsilon", 2e-05),), None)
    assert op_attrs.non_default_fields("nn.batch_norm", far) == (("epsilon", 2e-05),)
    assert op_attrs.normalize_for_compare("nn.batch_norm", near) == op_attrs.normalize_for_compare(
        "nn.batch_norm", A.Attrs()
    )


def test_int32_intimm_and_bools_normalise() -> None:
    a = A.Attrs((("strides", (A.IntImm(2, "int32"), 2)),), None)
    b = A.Attrs((("strides", (2, 2)),), None)
    assert op_attrs.normalize_for_compare("nn.conv2d", a) == op_attrs.normalize_for_compare("nn.conv2d", b)
    c = A.Attrs((("strides", (A.IntImm(2, "int64"), 2)),), None)
    assert op_attrs.normalize_for_compare("nn.conv2d", c) != op_attrs.normalize_for_compare("nn.conv2d", b)
    assert op_attrs.non_default_fields("nn.conv2d", A.Attrs((("strides", (A.IntImm(1, "int64"), 1)),))) != ()
    assert op_attrs.normalize_for_compare(
        "nn.batch_norm", A.Attrs((("scale", 0),))
    ) == op_attrs.normalize_for_compare("nn.batch_norm", A.Attrs((("scale", False),)))


def test_unknown_operators_pass_through() -> None:
    attrs = A.Attrs((("foo", 1), ("bar", "x")), None)
    assert op_attrs.attrs_type_key("my.custom_op") is None
    assert op_attrs.complete_attrs("my.custom_op", attrs) is attrs
    assert op_attrs.non_default_fields("my.custom_op", attrs) == attrs.fields
    assert op_attrs.normalize_for_compare("my.custom_op", attrs) == {"foo": 1, "bar": "x"}
    assert (
        op_attrs.complete_attrs("add", None) == A.Attrs() or op_attrs.complete_attrs("add", None).fields == ()
    )


def test_unknown_fields_are_kept_last() -> None:
    attrs = A.Attrs((("mystery", 3), ("axis", 2)), None)
    full = op_attrs.complete_attrs("nn.softmax", attrs)
    assert full.fields == (("axis", 2), ("mystery", 3))
    assert op_attrs.non_default_fields("nn.softmax", attrs) == (("axis", 2), ("mystery", 3))


@pytest.mark.parametrize(
    "op,field,default",
    [
        ("nn.conv2d_transpose", "kernel_layout", "IOHW"),
        ("nn.conv3d", "data_layout", "NCDHW"),
        ("nn.avg_pool2d", "count_include_pad", False),
        ("nn.global_avg_pool2d", "layout", "NCHW"),
        ("nn.adaptive_avg_pool3d", "output_size", ()),
        ("nn.dropout", "rate", 0.5),
        ("nn.leaky_relu", "alpha", 0.25),
        ("nn.bias_add", "axis", 1),
        ("nn.softmax", "axis", -1),
        ("concatenate", "axis", 0),
        ("split", "axis", 0),
        ("expand_dims", "num_newaxis", 1),
        ("reshape", "allowzero", False),
        ("reshape_like", "lhs_end", None),
        ("zeros", "dtype", ""),
        ("strided_slice", "slice_mode", "end"),
        ("sum", "keepdims", False),
        ("memory.alloc_storage", "dtype", "float32"),
        ("nn.pad", "pad_mode", "constant"),
        ("take", "mode", "clip"),
    ],
)
def test_selected_defaults(op: str, field: str, default: object) -> None:
    schema = op_attrs.schema_for(op)
    assert schema is not None
    found = schema.field(field)
    assert found is not None and found.default == default


def test_every_tvm_attrs_type_round_trips_through_json() -> None:
    """Each of TVM 0.19's attribute types, with its defaults, writes and reads
    back to equal attributes (so any Relay JSON TVM wrote loads)."""
    x = A.Var("x", A.TensorType((1, 4), "float32"))
    calls = []
    for op_name, type_key in sorted(op_attrs.OP_ATTRS_TYPE.items()):
        schema = op_attrs.SCHEMAS[type_key]
        fields = []
        for f in schema.fields:
            if f.default is not op_attrs.REQUIRED:
                continue
            sample = {
                "int": 2,
                "bool": True,
                "float": 0.5,
                "str": "NCHW",
                "dtype": "int64",
                "String": "x",
            }.get(f.kind)
            if f.kind in ("IndexExprs", "Integers"):
                sample = (1, 2)
            elif f.kind in ("IndexExpr", "Integer"):
                sample = 3
            elif f.kind == "IntegersList":
                sample = ((0, 1), (1, 0))
            elif f.kind == "VirtualDevice":
                sample = VirtualDevice(2, 0, parse_target("cuda"), None)
            elif f.kind == "IntOrInts":
                sample = 2
            fields.append((f.name, sample))
        calls.append(A.Call(A.op(op_name), (x,), A.Attrs(tuple(fields), type_key)))
    module = A.Module(((A.GlobalVar("main"), A.Function((x,), A.Tuple(tuple(calls)))),))
    out = relay.dump_json(module)
    back = relay.load_json(out)
    for before, after in zip(calls, back["main"].body.fields):
        assert after.attrs is not None and after.attrs.type_key == before.attrs.type_key
        assert op_attrs.normalize_for_compare(before.op.name, before.attrs) == op_attrs.normalize_for_compare(
            after.op.name, after.attrs
        ), before.op.name
    assert relay.dump_json(back) == out
    nodes = json.loads(out)["nodes"]
    for node in nodes:
        schema = op_attrs.SCHEMAS.get(node["type_key"])
        if schema is not None:
            assert set(node.get("attrs", {})) == set(schema.names), node["type_key"]
