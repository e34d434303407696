"""devplan's Relay: the language of TVM <= 0.19 in pure Python.

Read and write the text format (`parse_text`, `print_text`) and TVM's JSON
(`load_json`, `dump_json`), compare programs (`structural_equal`) and check
them (`verify`), infer their types (`infer_types`). No TVM import anywhere
in this package.
"""

from . import op_attrs
from .ast import (
    ANY,
    UNKNOWN,
    AnyDim,
    Attrs,
    Call,
    Clause,
    Constant,
    Constructor,
    DeviceCopyProps,
    Expr,
    Function,
    FuncType,
    GlobalTypeVar,
    GlobalVar,
    If,
    IncompleteType,
    IntImm,
    Let,
    Match,
    MetaRef,
    Module,
    NDArray,
    OnDeviceProps,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefType,
    RefWrite,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    TypeCall,
    TypeData,
    TypeVar,
    UnknownType,
    Var,
    device_copy,
    device_copy_props,
    on_device,
    on_device_props,
    op,
    pattern_vars,
)
from .device import (
    Target,
    VirtualDevice,
    canonical_device_name,
    device_name,
    device_type_name,
    parse_target,
    target_options,
)
from .equal import structural_equal
from .infer import TypeInferenceError, Types, infer_types
from .printer import print_text
from .span import ParseError, RelayError, SourceText, Span, VerifyError
from .text import parse_text
from .traverse import children, free_vars, post_order, pre_order, rewrite, with_children
from .tvm_json import TVMObject, decode_meta_section, encode_meta_section
from .verify import verify


def load_json(text: str) -> Module:
    """Read a module saved by TVM <= 0.19's `tvm.ir.save_json`."""
    from .tvm_json import load_json as _load

    return _load(text)


def dump_json(module: Module) -> str:
    """Write a module in the JSON form TVM 0.19's `tvm.ir.load_json` reads."""
    from .tvm_json import dump_json as _dump

    return _dump(module)


__all__ = [
    "ANY",
    "UNKNOWN",
    "AnyDim",
    "Attrs",
    "Call",
    "Clause",
    "Constant",
    "Constructor",
    "DeviceCopyProps",
    "Expr",
    "FuncType",
    "Function",
    "GlobalTypeVar",
    "GlobalVar",
    "If",
    "IncompleteType",
    "IntImm",
    "Let",
    "Match",
    "MetaRef",
    "Module",
    "NDArray",
    "OnDeviceProps",
    "Op",
    "ParseError",
    "Pattern",
    "PatternConstructor",
    "PatternTuple",
    "PatternVar",
    "PatternWildcard",
    "RefCreate",
    "RefRead",
    "RefType",
    "RefWrite",
    "RelayError",
    "SourceText",
    "Span",
    "TVMObject",
    "Target",
    "TensorType",
    "Tuple",
    "TupleGetItem",
    "TupleType",
    "Type",
    "TypeCall",
    "TypeData",
    "TypeInferenceError",
    "TypeVar",
    "Types",
    "UnknownType",
    "Var",
    "VerifyError",
    "VirtualDevice",
    "canonical_device_name",
    "children",
    "decode_meta_section",
    "device_copy",
    "device_copy_props",
    "device_name",
    "device_type_name",
    "dump_json",
    "encode_meta_section",
    "free_vars",
    "infer_types",
    "load_json",
    "on_device",
    "on_device_props",
    "op",
    "op_attrs",
    "parse_target",
    "parse_text",
    "pattern_vars",
    "post_order",
    "pre_order",
    "print_text",
    "rewrite",
    "structural_equal",
    "target_options",
    "verify",
    "with_children",
]
