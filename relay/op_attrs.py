"""Operator attribute schemas: which fields each operator's attributes have,
of what kind, in TVM's order, with TVM v0.19's defaults.

TVM's text printer shows only the fields that differ from their defaults,
while its JSON carries every field; TVM's JSON reader refuses a node with a
field missing. This table reconciles the two: the JSON writer completes
attributes with `complete_attrs`, the text printer shows
`non_default_fields`, and structural equality compares
`normalize_for_compare`. Facts are from `include/tvm/relay/attrs/*.h` at
tag v0.19.0 (field order is the `TVM_ATTR_FIELD` order).

Field kinds say how a value is stored in TVM JSON:

- plain (written as a string in the node's attrs): ``int``, ``bool``,
  ``float``, ``str`` (std::string), ``dtype`` (DataType; ``""`` is void);
- object references (a node index): ``String`` (runtime.String),
  ``IndexExpr`` / ``Integer`` (IntImm or null), ``IndexExprs`` / ``Integers``
  (Array of IntImm, or null), ``IntegersList`` (Array of Array of IntImm),
  ``FloatImms`` (Array of FloatImm), ``VirtualDevice``, ``IntOrInts``
  (split's Variant of runtime.BoxInt or Array of it), ``Bool`` (IntImm of
  dtype bool), ``Expr`` (a Relay expression, e.g. a Constant), ``Object``
  (anything else, kept as decoded).

Python values follow the team conventions: int, float, bool, str, None,
tuples for arrays, `relay.ast.IntImm` for an index of a dtype other than
int32, `VirtualDevice` (or a `MetaRef` placeholder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from .ast import Attrs, IntImm
from .device import VirtualDevice

PLAIN_KINDS: Final = frozenset({"int", "bool", "float", "str", "dtype"})
REF_KINDS: Final = frozenset(
    {
        "String",
        "IndexExpr",
        "Integer",
        "IndexExprs",
        "Integers",
        "IntegersList",
        "FloatImms",
        "VirtualDevice",
        "IntOrInts",
        "Bool",
        "Expr",
        "Object",
    }
)


class _Required:
    """Marker for a field TVM declares without a default (always printed)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


@dataclass(frozen=True, slots=True)
class AttrField:
    """One attribute field: name, storage kind and default (or REQUIRED)."""

    name: str
    kind: str
    default: Any = REQUIRED

    @property
    def is_ref(self) -> bool:
        return self.kind in REF_KINDS


@dataclass(frozen=True, slots=True)
class AttrsSchema:
    """The fields of one TVM attribute node type, in TVM's declaration order."""

    type_key: str
    fields: tuple[AttrField, ...]

    def field(self, name: str) -> AttrField | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


def _schema(type_key: str, *fields: tuple[Any, ...]) -> AttrsSchema:
    return AttrsSchema("relay.attrs." + type_key, tuple(AttrField(*f) for f in fields))


_R = REQUIRED
_UNCONSTRAINED = VirtualDevice()


def _conv(name: str, rank: int, data_layout: str, kernel_layout: str, *, transpose: bool) -> AttrsSchema:
    ones = (1,) * rank
    zeros = (0,) * rank
    # Conv1D's padding default has two entries in TVM (both sides of one axis).
    padding = (0, 0) if rank == 1 and not transpose else zeros
    layout_kind = "str" if transpose and rank == 2 or transpose and rank == 1 else "String"
    head: list[tuple[Any, ...]]
    if transpose:
        head = [
            ("channels", "IndexExpr", None),
            ("kernel_size", "IndexExprs", None),
            ("strides", "IndexExprs", ones),
            ("output_padding", "IndexExprs", zeros),
            ("padding", "IndexExprs", padding),
            ("dilation", "IndexExprs", ones),
            ("groups", "int", 1),
        ]
    else:
        head = [
            ("strides", "IndexExprs", ones),
            ("padding", "IndexExprs", padding),
            ("dilation", "IndexExprs", ones),
            ("groups", "int", 1),
            ("channels", "IndexExpr", None),
            ("kernel_size", "IndexExprs", None),
        ]
    tail = [
        ("data_layout", layout_kind, data_layout),
        ("kernel_layout", layout_kind, kernel_layout),
        ("out_layout", layout_kind, ""),
        ("out_dtype", "dtype", ""),
    ]
    return _schema(name, *head, *tail)


def _pool(name: str, rank: int, layout: str, layout_kind: str, *, avg: bool) -> AttrsSchema:
    fields: list[tuple[Any, ...]] = [
        ("pool_size", "IndexExprs", _R),
        ("strides", "IndexExprs", (1,) * rank),
        ("dilation", "IndexExprs", (1,) * rank),
        ("padding", "IndexExprs", (0,) * rank),
        ("layout", layout_kind, layout),
        ("out_layout", "String", ""),
        ("ceil_mode", "bool", False),
    ]
    if avg:
        fields.append(("count_include_pad", "bool", False))
    return _schema(name, *fields)


def _norm(name: str, axis: int) -> AttrsSchema:
    return _schema(
        name,
        ("axis", "int", axis),
        ("epsilon", "float", 1e-5),
        ("center", "bool", True),
        ("scale", "bool", True),
    )


def _resize(name: str, layout: str) -> AttrsSchema:
    return _schema(
        name,
        ("size", "IndexExprs", None),
        ("roi", "FloatImms", None),
        ("layout", "str", layout),
        ("method", "str", "linear"),
        ("coordinate_transformation_mode", "str", "half_pixel"),
        ("rounding_method", "str", "round"),
        ("cubic_alpha", "float", -0.5),
        ("cubic_exclude", "int", 0),
        ("extrapolation_value", "float", 0.0),
        ("out_dtype", "dtype", ""),
    )


_SCHEMA_LIST: tuple[AttrsSchema, ...] = (
    # device annotations
    _schema(
        "OnDeviceAttrs",
        ("virtual_device", "VirtualDevice", _UNCONSTRAINED),
        ("constrain_result", "bool", False),
        ("constrain_body", "bool", True),
    ),
    _schema(
        "DeviceCopyAttrs", ("src_virtual_device", "VirtualDevice"), ("dst_virtual_device", "VirtualDevice")
    ),
    # memory / vm dialect
    _schema("AllocStorageAttrs", ("dtype", "dtype", "float32"), ("virtual_device", "VirtualDevice")),
    _schema(
        "AllocTensorAttrs",
        ("dtype", "dtype", "float32"),
        ("const_shape", "Expr"),
        ("assert_shape", "IndexExprs"),
    ),
    _schema("ShapeOfAttrs", ("dtype", "dtype", "")),
    _schema("ReshapeTensorAttrs", ("newshape", "IndexExprs")),
    _schema("ShapeFuncAttrs", ("is_input", "Integers")),
    # convolutions
    _conv("Conv1DAttrs", 1, "NCW", "OIW", transpose=False),
    _conv("Conv2DAttrs", 2, "NCHW", "OIHW", transpose=False),
    _conv("Conv3DAttrs", 3, "NCDHW", "OIDHW", transpose=False),
    _conv("Conv1DTransposeAttrs", 1, "NCW", "IOW", transpose=True),
    _conv("Conv2DTransposeAttrs", 2, "NCHW", "IOHW", transpose=True),
    _conv("Conv3DTransposeAttrs", 3, "NCDHW", "IODHW", transpose=True),
    # dense / matmul
    _schema("DenseAttrs", ("units", "IndexExpr"), ("out_dtype", "dtype", "")),
    _schema(
        "MatmulAttrs",
        ("units", "IndexExpr"),
        ("out_dtype", "dtype", ""),
        ("transpose_a", "bool", False),
        ("transpose_b", "bool", False),
    ),
    _schema(
        "BatchMatmulAttrs",
        ("out_dtype", "dtype", ""),
        ("transpose_a", "bool", False),
        ("transpose_b", "bool", False),
    ),
    _schema("BiasAddAttrs", ("axis", "int", 1)),
    # normalisation
    _norm("BatchNormAttrs", 1),
    _norm("InstanceNormAttrs", 1),
    _norm("LayerNormAttrs", -1),
    _schema(
        "GroupNormAttrs",
        ("num_groups", "int", 0),
        ("axis", "int", 1),
        ("epsilon", "float", 1e-5),
        ("center", "bool", True),
        ("scale", "bool", True),
    ),
    _schema(
        "LRNAttrs",
        ("size", "int", 5),
        ("axis", "int", 1),
        ("bias", "float", 2.0),
        ("alpha", "float", 0.0001),
        ("beta", "float", 0.75),
    ),
    _schema("L2NormalizeAttrs", ("eps", "float"), ("axis", "Integers")),
    _schema("SoftmaxAttrs", ("axis", "int", -1)),
    _schema("DropoutAttrs", ("rate", "float", 0.5)),
    _schema("LeakyReluAttrs", ("alpha", "float", 0.25)),
    _schema("PReluAttrs", ("axis", "int", 1)),
    _schema("PadAttrs", ("pad_width", "IntegersList"), ("pad_mode", "String", "constant")),
    # pooling
    _pool("MaxPool1DAttrs", 1, "NCW", "str", avg=False),
    _pool("MaxPool2DAttrs", 2, "NCHW", "String", avg=False),
    _pool("MaxPool3DAttrs", 3, "NCDHW", "str", avg=False),
    _pool("AvgPool1DAttrs", 1, "NCW", "str", avg=True),
    _pool("AvgPool2DAttrs", 2, "NCHW", "String", avg=True),
    _pool("AvgPool3DAttrs", 3, "NCDHW", "str", avg=True),
    _schema("GlobalPool2DAttrs", ("layout", "String", "NCHW"), ("out_layout", "String", "")),
    _schema(
        "AdaptivePool1DAttrs",
        ("output_size", "IndexExprs", ()),
        ("layout", "str", "NCW"),
        ("out_layout", "String", ""),
    ),
    _schema(
        "AdaptivePool2DAttrs",
        ("output_size", "IndexExprs", ()),
        ("layout", "str", "NCHW"),
        ("out_layout", "String", ""),
    ),
    _schema(
        "AdaptivePool3DAttrs",
        ("output_size", "IndexExprs", ()),
        ("layout", "str", "NCDHW"),
        ("out_layout", "String", ""),
    ),
    _schema(
        "UpSamplingAttrs",
        ("scale_h", "float"),
        ("scale_w", "float"),
        ("layout", "String", "NCHW"),
        ("method", "String", "nearest_neighbor"),
        ("align_corners", "bool", False),
    ),
    _schema("SubPixelAttrs", ("block_size", "int", 1), ("layout", "str", "NCHW"), ("mode", "str", "DCR")),
    _schema("DilateAttrs", ("strides", "IndexExprs", (1, 1)), ("dilation_value", "float", 0.0)),
    # shape manipulation
    _schema("ConcatenateAttrs", ("axis", "int", 0)),
    _schema("StackAttrs", ("axis", "Integer", 0)),
    _schema("SplitAttrs", ("indices_or_sections", "IntOrInts"), ("axis", "int", 0)),
    _schema("ExpandDimsAttrs", ("axis", "int"), ("num_newaxis", "int", 1)),
    _schema("ReshapeAttrs", ("newshape", "Integers"), ("allowzero", "bool", False)),
    _schema(
        "ReshapeLikeAttrs",
        ("lhs_begin", "int", 0),
        ("lhs_end", "Integer", None),
        ("rhs_begin", "int", 0),
        ("rhs_end", "Integer", None),
    ),
    _schema("InitOpAttrs", ("shape", "Integers"), ("dtype", "dtype", "")),
    _schema("SqueezeAttrs", ("axis", "Integers")),
    _schema("TransposeAttrs", ("axes", "Integers")),
    _schema(
        "StridedSliceAttrs",
        ("begin", "Integers"),
        ("end", "Integers"),
        ("strides", "Integers"),
        ("slice_mode", "String", "end"),
        ("axes", "Integers"),
    ),
    _schema("TileAttrs", ("reps", "Integers")),
    _schema("RepeatAttrs", ("repeats", "Integer"), ("axis", "Integer", None)),
    _schema("ReverseAttrs", ("axis", "Integer", None)),
    _schema("TakeAttrs", ("batch_dims", "Integer", 0), ("axis", "Integer", None), ("mode", "String", "clip")),
    _schema("GatherAttrs", ("axis", "Integer", None)),
    _schema("OneHotAttrs", ("depth", "int", 1), ("axis", "int", -1), ("dtype", "dtype", "")),
    _schema("ClipAttrs", ("a_min", "float"), ("a_max", "float")),
    _schema("CastAttrs", ("dtype", "dtype")),
    _schema("LayoutTransformAttrs", ("src_layout", "str"), ("dst_layout", "str")),
    _schema("ArangeAttrs", ("start", "Expr"), ("stop", "Expr"), ("step", "Expr"), ("dtype", "dtype")),
    # reductions
    _schema(
        "ReduceAttrs", ("axis", "Integers", None), ("keepdims", "bool", False), ("exclude", "bool", False)
    ),
    _schema(
        "ArgReduceAttrs",
        ("axis", "Integers", None),
        ("keepdims", "bool", False),
        ("select_last_index", "bool", False),
        ("exclude", "bool", False),
    ),
    _schema(
        "VarianceAttrs",
        ("axis", "Integers", None),
        ("keepdims", "bool", False),
        ("exclude", "bool", False),
        ("unbiased", "bool", False),
    ),
    _schema("ArgsortAttrs", ("axis", "int", -1), ("is_ascend", "bool", True), ("dtype", "dtype", "")),
    _schema(
        "TopkAttrs",
        ("k", "Integer"),
        ("axis", "int", -1),
        ("ret_type", "str", "both"),
        ("is_ascend", "bool", False),
        ("dtype", "dtype", ""),
    ),
    # images
    _resize("Resize1DAttrs", "NCW"),
    _resize("Resize2DAttrs", "NCHW"),
    _resize("Resize3DAttrs", "NCDHW"),
)

# Quantized operators (include/tvm/relay/qnn/attrs.h).
_QNN_SCHEMAS: tuple[AttrsSchema, ...] = (
    _schema(
        "RequantizeAttrs",
        ("axis", "int", -1),
        ("rounding", "str", "None"),
        ("compute_dtype", "str", "None"),
        ("out_dtype", "dtype", ""),
    ),
    _schema("QuantizeAttrs", ("out_dtype", "dtype"), ("axis", "int", -1)),
    _schema("SimulatedQuantizeAttrs", ("axis", "int", -1)),
    _schema("DequantizeAttrs", ("out_dtype", "dtype"), ("axis", "int", -1)),
    _schema("BroadcastAttrs", ("lhs_axis", "int", -1), ("rhs_axis", "int", -1)),
)

# The other attribute types TVM 0.19 declares in include/tvm/relay/attrs/*.h,
# so that any Relay JSON it wrote loads (and writes back) field by field.
_MORE_SCHEMAS: tuple[AttrsSchema, ...] = (
    _schema("SearchSortedAttrs", ("right", "bool", False), ("dtype", "dtype", "int32")),
    _schema("CastHintAttrs", ("dtype", "dtype")),
    _schema("CompilerAttrs", ("compiler", "str")),
    _schema(
        "BitPackAttrs",
        ("bits", "int", 1),
        ("pack_axis", "int", 1),
        ("bit_axis", "int", -1),
        ("pack_type", "dtype", ""),
        ("name", "str", "BitPack"),
    ),
    _schema(
        "BinaryConv2DAttrs",
        ("strides", "IndexExprs", (1, 1)),
        ("padding", "IndexExprs", (0, 0)),
        ("kernel_size", "IndexExprs", (3, 3)),
        ("channels", "IndexExpr", None),
        ("activation_bits", "int", 1),
        ("weight_bits", "int", 1),
        ("data_layout", "str", "NCHW"),
        ("kernel_layout", "str", "OIHW"),
        ("pack_dtype", "dtype", ""),
        ("out_dtype", "dtype", ""),
        ("unipolar", "bool", True),
    ),
    _schema(
        "BinaryDenseAttrs",
        ("units", "IndexExpr"),
        ("data_bits", "int", 1),
        ("weight_bits", "int", 1),
        ("pack_dtype", "dtype", ""),
        ("out_dtype", "dtype", ""),
        ("unipolar", "bool", True),
    ),
    _schema("CallLoweredAttrs", ("metadata", "Object", None)),
    _schema("DebugAttrs", ("debug_func", "Object")),
    _schema(
        "CropAndResizeAttrs",
        ("crop_size", "IndexExprs", None),
        ("layout", "str", "NCHW"),
        ("method", "str", "bilinear"),
        ("extrapolation_value", "float", 0.0),
        ("out_dtype", "dtype", ""),
    ),
    _schema(
        "Dilation2DAttrs",
        ("strides", "IndexExprs", (1, 1)),
        ("padding", "IndexExprs", (0, 0)),
        ("dilations", "IndexExprs", (1, 1)),
        ("data_layout", "str", "NCHW"),
        ("kernel_layout", "str", "IHW"),
        ("out_dtype", "dtype", ""),
    ),
    _schema("AffineGridAttrs", ("target_shape", "IndexExprs")),
    _schema(
        "GridSampleAttrs",
        ("method", "String", "bilinear"),
        ("layout", "String", "NCHW"),
        ("padding_mode", "String", "zeros"),
        ("align_corners", "bool", True),
    ),
    _schema("ConvGemmWeightTransformAttrs", ("tile_N", "int"), ("tile_K", "int")),
    _schema(
        "Conv2DWinogradAttrs",
        ("tile_size", "int"),
        ("strides", "IndexExprs", (1, 1)),
        ("padding", "IndexExprs", (0, 0)),
        ("dilation", "IndexExprs", (1, 1)),
        ("groups", "int", 1),
        ("channels", "IndexExpr", None),
        ("kernel_size", "IndexExprs", None),
        ("data_layout", "String", "NCHW"),
        ("kernel_layout", "String", "OIHW"),
        ("out_layout", "String", ""),
        ("out_dtype", "dtype", ""),
    ),
    _schema(
        "Conv3DWinogradAttrs",
        ("tile_size", "int"),
        ("strides", "IndexExprs", (1, 1, 1)),
        ("padding", "IndexExprs", (0, 0, 0)),
        ("dilation", "IndexExprs", (1, 1, 1)),
        ("groups", "int", 1),
        ("channels", "IndexExpr", None),
        ("kernel_size", "IndexExprs", None),
        ("data_layout", "str", "NCDHW"),
        ("kernel_layout", "str", "OIDHW"),
        ("out_layout", "str", ""),
        ("out_dtype", "dtype", ""),
    ),
    _schema(
        "DensePackAttrs",
        ("units", "IndexExpr"),
        ("out_dtype", "dtype", ""),
        ("weight_layout", "String", "NC"),
    ),
    _schema("SparseDenseAttrs", ("sparse_lhs", "bool", False)),
    _schema("SparseTransposeAttrs"),
    _schema("SparseConv2DAttrs", ("layout", "str", "NHWC"), ("kernel_size", "IndexExprs", (1, 1))),
    _schema("FIFOBufferAttrs", ("axis", "int", 0)),
    _schema(
        "UpSampling3DAttrs",
        ("scale_d", "float"),
        ("scale_h", "float"),
        ("scale_w", "float"),
        ("layout", "str", "NCDHW"),
        ("method", "str", "nearest_neighbor"),
        ("coordinate_transformation_mode", "str", "half_pixel"),
    ),
    _schema("MirrorPadAttrs", ("mode", "str", "SYMMETRIC"), ("pad_width", "IntegersList")),
    _schema(
        "DeformableConv2DAttrs",
        ("strides", "IndexExprs", (1, 1)),
        ("padding", "IndexExprs", (0, 0)),
        ("dilation", "IndexExprs", (1, 1)),
        ("deformable_groups", "int", 1),
        ("groups", "int", 1),
        ("channels", "IndexExpr", None),
        ("kernel_size", "IndexExprs", None),
        ("data_layout", "str", "NCHW"),
        ("kernel_layout", "str", "OIHW"),
        ("out_layout", "str", ""),
        ("out_dtype", "dtype", ""),
    ),
    _schema(
        "CorrelationAttrs",
        ("kernel_size", "int", 1),
        ("max_displacement", "int", 1),
        ("stride1", "int", 1),
        ("stride2", "int", 1),
        ("padding", "IndexExprs", (0, 0)),
        ("is_multiply", "bool", True),
        ("layout", "String", "NCHW"),
    ),
    _schema(
        "SpaceToBatchNDAttrs",
        ("block_shape", "Integers", (1, 1)),
        ("paddings", "IntegersList"),
        ("pad_value", "float", 0.0),
    ),
    _schema("BatchToSpaceNDAttrs", ("block_shape", "Integers", (1, 1)), ("crops", "IntegersList")),
    _schema("NLLLossAttrs", ("reduction", "str", "mean"), ("ignore_index", "int")),
    _schema("ThreefryGenerateAttrs", ("out_shape", "Integers")),
    _schema("UniformAttrs", ("out_shape", "Integers"), ("out_dtype", "dtype", "")),
    _schema("NormalAttrs", ("out_shape", "Integers"), ("out_dtype", "dtype", "")),
    _schema("MultinomialAttrs", ("num_samples", "Integer", 1)),
    _schema("SlidingWindowAttrs", ("axis", "int"), ("window_shape", "Integers"), ("strides", "Integers")),
    _schema("DynExpandDimsAttrs", ("num_newaxis", "int", 1)),
    _schema("ScatterElementsAttrs", ("axis", "Integer", 0), ("reduction", "String", "update")),
    _schema("ScatterNDAttrs", ("mode", "String", "update")),
    _schema("GatherNDAttrs", ("batch_dims", "Integer", 0), ("index_rank", "Integer", None)),
    _schema("MeshgridAttrs", ("indexing", "str", "ij")),
    _schema("ReverseSequenceAttrs", ("seq_axis", "Integer", 1), ("batch_axis", "Integer", 0)),
    _schema("SliceLikeAttrs", ("axes", "Integers")),
    _schema("FixedPointMultiplyAttrs", ("multiplier", "int"), ("shift", "int")),
    _schema(
        "FixedPointMultiplyPerAxisAttrs",
        ("is_lshift_required", "bool", False),
        ("is_rshift_required", "bool", False),
        ("axes", "Integers"),
    ),
    _schema("SequenceMaskAttrs", ("mask_value", "float", 0.0), ("axis", "int", 0)),
    _schema("SparseToDenseAttrs", ("output_shape", "Integers")),
    _schema("NdarraySizeAttrs", ("dtype", "dtype", "")),
    _schema(
        "MatrixSetDiagAttrs",
        ("k1", "int", 0),
        ("k2", "int", 0),
        ("super_diag_right_align", "bool", True),
        ("sub_diag_right_align", "bool", False),
    ),
    _schema("ScanopAttrs", ("axis", "Integer", None), ("dtype", "dtype", ""), ("exclusive", "Bool", False)),
    _schema("UniqueAttrs", ("sorted", "bool", True), ("return_counts", "bool", False)),
    _schema("EinsumAttrs", ("equation", "String")),
    _schema(
        "StftAttrs",
        ("n_fft", "int", -1),
        ("hop_length", "int", -1),
        ("win_length", "int", -1),
        ("normalized", "bool", False),
        ("onesided", "bool", True),
    ),
    _schema("DFTAttrs", ("inverse", "Bool", False)),
    _schema("TriluAttrs", ("upper", "bool", True)),
    _schema(
        "MultiBoxPriorAttrs",
        ("sizes", "IndexExprs", (1.0,)),
        ("ratios", "IndexExprs", (1.0,)),
        ("steps", "IndexExprs", (-1.0, -1.0)),
        ("offsets", "IndexExprs", (0.5, 0.5)),
        ("clip", "bool", False),
    ),
    _schema(
        "MultiBoxTransformLocAttrs",
        ("clip", "bool", True),
        ("threshold", "float", 0.01),
        ("variances", "IndexExprs", (0.1, 0.1, 0.2, 0.2)),
        ("keep_background", "bool", False),
    ),
    _schema(
        "GetValidCountsAttrs",
        ("score_threshold", "Object"),
        ("id_index", "int", 0),
        ("score_index", "int", 1),
    ),
    _schema(
        "NonMaximumSuppressionAttrs",
        ("force_suppress", "bool", False),
        ("top_k", "int", -1),
        ("coord_start", "int", 2),
        ("score_index", "int", 1),
        ("id_index", "int", 0),
        ("return_indices", "bool", True),
        ("invalid_to_bottom", "bool", False),
    ),
    _schema(
        "ROIAlignAttrs",
        ("pooled_size", "IndexExprs"),
        ("spatial_scale", "float"),
        ("sample_ratio", "int", -1),
        ("layout", "str", "NCHW"),
        ("mode", "str", "avg"),
    ),
    _schema(
        "ROIPoolAttrs", ("pooled_size", "IndexExprs"), ("spatial_scale", "float"), ("layout", "str", "NCHW")
    ),
    _schema("YoloReorgAttrs", ("stride", "Integer", 1)),
    _schema(
        "ProposalAttrs",
        ("scales", "IndexExprs", (4.0, 8.0, 16.0, 32.0)),
        ("ratios", "IndexExprs", (0.5, 1.0, 2.0)),
        ("feature_stride", "int", 16),
        ("threshold", "float", 0.7),
        ("rpn_pre_nms_top_n", "int", 6000),
        ("rpn_post_nms_top_n", "int", 300),
        ("rpn_min_size", "int", 16),
        ("iou_loss", "bool", False),
    ),
)

SCHEMAS: Final[dict[str, AttrsSchema]] = {
    s.type_key: s for s in (*_SCHEMA_LIST, *_QNN_SCHEMAS, *_MORE_SCHEMAS)
}

# Operator name -> attribute type (ops registered with `set_attrs_type`).
_OP_TYPES: dict[str, str] = {
    "on_device": "OnDeviceAttrs",
    "device_copy": "DeviceCopyAttrs",
    "memory.alloc_storage": "AllocStorageAttrs",
    "memory.alloc_tensor": "AllocTensorAttrs",
    "vm.shape_of": "ShapeOfAttrs",
    "shape_of": "ShapeOfAttrs",
    "vm.reshape_tensor": "ReshapeTensorAttrs",
    "vm.shape_func": "ShapeFuncAttrs",
    "nn.conv1d": "Conv1DAttrs",
    "nn.conv2d": "Conv2DAttrs",
    "nn.conv3d": "Conv3DAttrs",
    "nn.conv1d_transpose": "Conv1DTransposeAttrs",
    "nn.conv2d_transpose": "Conv2DTransposeAttrs",
    "nn.conv3d_transpose": "Conv3DTransposeAttrs",
    "nn.dense": "DenseAttrs",
    "nn.matmul": "MatmulAttrs",
    "nn.batch_matmul": "BatchMatmulAttrs",
    "nn.bias_add": "BiasAddAttrs",
    "nn.batch_norm": "BatchNormAttrs",
    "nn.instance_norm": "InstanceNormAttrs",
    "nn.layer_norm": "LayerNormAttrs",
    "nn.group_norm": "GroupNormAttrs",
    "nn.lrn": "LRNAttrs",
    "nn.l2_normalize": "L2NormalizeAttrs",
    "nn.softmax": "SoftmaxAttrs",
    "nn.log_softmax": "SoftmaxAttrs",
    "nn.dropout": "DropoutAttrs",
    "nn.leaky_relu": "LeakyReluAttrs",
    "nn.prelu": "PReluAttrs",
    "nn.pad": "PadAttrs",
    "nn.max_pool1d": "MaxPool1DAttrs",
    "nn.max_pool2d": "MaxPool2DAttrs",
    "nn.max_pool3d": "MaxPool3DAttrs",
    "nn.avg_pool1d": "AvgPool1DAttrs",
    "nn.avg_pool2d": "AvgPool2DAttrs",
    "nn.avg_pool3d": "AvgPool3DAttrs",
    "nn.global_avg_pool2d": "GlobalPool2DAttrs",
    "nn.global_max_pool2d": "GlobalPool2DAttrs",
    "nn.adaptive_avg_pool1d": "AdaptivePool1DAttrs",
    "nn.adaptive_max_pool1d": "AdaptivePool1DAttrs",
    "nn.adaptive_avg_pool2d": "AdaptivePool2DAttrs",
    "nn.adaptive_max_pool2d": "AdaptivePool2DAttrs",
    "nn.adaptive_avg_pool3d": "AdaptivePool3DAttrs",
    "nn.adaptive_max_pool3d": "AdaptivePool3DAttrs",
    "nn.upsampling": "UpSamplingAttrs",
    "nn.depth_to_space": "SubPixelAttrs",
    "nn.space_to_depth": "SubPixelAttrs",
    "nn.dilate": "DilateAttrs",
    "concatenate": "ConcatenateAttrs",
    "stack": "StackAttrs",
    "split": "SplitAttrs",
    "expand_dims": "ExpandDimsAttrs",
    "reshape": "ReshapeAttrs",
    "reshape_like": "ReshapeLikeAttrs",
    "zeros": "InitOpAttrs",
    "ones": "InitOpAttrs",
    "full": "InitOpAttrs",
    "broadcast_to": "InitOpAttrs",
    "squeeze": "SqueezeAttrs",
    "transpose": "TransposeAttrs",
    "strided_slice": "StridedSliceAttrs",
    "tile": "TileAttrs",
    "repeat": "RepeatAttrs",
    "reverse": "ReverseAttrs",
    "take": "TakeAttrs",
    "gather": "GatherAttrs",
    "one_hot": "OneHotAttrs",
    "clip": "ClipAttrs",
    "cast": "CastAttrs",
    "layout_transform": "LayoutTransformAttrs",
    "arange": "ArangeAttrs",
    "sum": "ReduceAttrs",
    "mean": "ReduceAttrs",
    "max": "ReduceAttrs",
    "min": "ReduceAttrs",
    "prod": "ReduceAttrs",
    "all": "ReduceAttrs",
    "any": "ReduceAttrs",
    "logsumexp": "ReduceAttrs",
    "argmax": "ArgReduceAttrs",
    "argmin": "ArgReduceAttrs",
    "variance": "VarianceAttrs",
    "std": "VarianceAttrs",
    "argsort": "ArgsortAttrs",
    "topk": "TopkAttrs",
    "image.resize1d": "Resize1DAttrs",
    "image.resize2d": "Resize2DAttrs",
    "image.resize3d": "Resize3DAttrs",
    # less common operators, as TVM 0.19 registers them
    "qnn.add": "BroadcastAttrs",
    "qnn.avg_pool2d": "AvgPool2DAttrs",
    "qnn.batch_matmul": "BatchMatmulAttrs",
    "qnn.concatenate": "ConcatenateAttrs",
    "qnn.contrib_dense_pack": "DensePackAttrs",
    "qnn.conv2d": "Conv2DAttrs",
    "qnn.conv2d_transpose": "Conv2DTransposeAttrs",
    "qnn.dense": "DenseAttrs",
    "qnn.dequantize": "DequantizeAttrs",
    "qnn.leaky_relu": "LeakyReluAttrs",
    "qnn.mul": "BroadcastAttrs",
    "qnn.quantize": "QuantizeAttrs",
    "qnn.requantize": "RequantizeAttrs",
    "qnn.simulated_dequantize": "DequantizeAttrs",
    "qnn.simulated_quantize": "SimulatedQuantizeAttrs",
    "qnn.softmax": "SoftmaxAttrs",
    "qnn.subtract": "BroadcastAttrs",
    "call_lowered": "CallLoweredAttrs",
    "contrib_reverse_reshape": "ReshapeAttrs",
    "debug": "DebugAttrs",
    "dyn.broadcast_to": "InitOpAttrs",
    "dyn.full": "InitOpAttrs",
    "dyn.image.resize2d": "Resize2DAttrs",
    "dyn.nn.pad": "PadAttrs",
    "dyn.nn.upsampling": "UpSamplingAttrs",
    "dyn.nn.upsampling3d": "UpSampling3DAttrs",
    "dyn.one_hot": "OneHotAttrs",
    "dyn.ones": "InitOpAttrs",
    "dyn.squeeze": "SqueezeAttrs",
    "dyn.tile": "TileAttrs",
    "dyn.topk": "TopkAttrs",
    "dyn.zeros": "InitOpAttrs",
    "einsum": "EinsumAttrs",
    "fixed_point_multiply": "FixedPointMultiplyAttrs",
    "fixed_point_multiply_per_axis": "FixedPointMultiplyPerAxisAttrs",
    "gather_nd": "GatherNDAttrs",
    "image.affine_grid": "AffineGridAttrs",
    "image.crop_and_resize": "CropAndResizeAttrs",
    "image.dilation2d": "Dilation2DAttrs",
    "matrix_set_diag": "MatrixSetDiagAttrs",
    "meshgrid": "MeshgridAttrs",
    "ndarray_size": "NdarraySizeAttrs",
    "nn.avg_pool2d_grad": "MaxPool2DAttrs",
    "nn.batch_to_space_nd": "BatchToSpaceNDAttrs",
    "nn.bitpack": "BitPackAttrs",
    "nn.bitserial_conv2d": "BinaryConv2DAttrs",
    "nn.bitserial_dense": "BinaryDenseAttrs",
    "nn.contrib_conv2d_NCHWc": "Conv2DAttrs",
    "nn.contrib_conv2d_gemm_weight_transform": "ConvGemmWeightTransformAttrs",
    "nn.contrib_conv2d_gemm_without_weight_transform": "Conv2DAttrs",
    "nn.contrib_conv2d_winograd_without_weight_transform": "Conv2DWinogradAttrs",
    "nn.contrib_conv3d_winograd_without_weight_transform": "Conv3DWinogradAttrs",
    "nn.contrib_dense_pack": "DenseAttrs",
    "nn.contrib_depthwise_conv2d_NCHWc": "Conv2DAttrs",
    "nn.conv2d_backward_weight": "Conv2DAttrs",
    "nn.deformable_conv2d": "DeformableConv2DAttrs",
    "nn.fast_softmax": "SoftmaxAttrs",
    "nn.fifo_buffer": "FIFOBufferAttrs",
    "nn.internal.sparse_dense_padded": "SparseDenseAttrs",
    "nn.max_pool2d_grad": "MaxPool2DAttrs",
    "nn.mirror_pad": "MirrorPadAttrs",
    "nn.nll_loss": "NLLLossAttrs",
    "nn.space_to_batch_nd": "SpaceToBatchNDAttrs",
    "nn.sparse_conv2d": "SparseConv2DAttrs",
    "nn.sparse_dense": "SparseDenseAttrs",
    "nn.sparse_transpose": "SparseTransposeAttrs",
    "nn.upsampling3d": "UpSampling3DAttrs",
    "random.multinomial": "MultinomialAttrs",
    "random.normal": "NormalAttrs",
    "random.threefry_generate": "ThreefryGenerateAttrs",
    "random.uniform": "UniformAttrs",
    "reinterpret": "CastAttrs",
    "reverse_sequence": "ReverseSequenceAttrs",
    "searchsorted": "SearchSortedAttrs",
    "slice_like": "SliceLikeAttrs",
    "sliding_window": "SlidingWindowAttrs",
    "sort": "ArgsortAttrs",
    "sparse_to_dense": "SparseToDenseAttrs",
    "vision.multibox_prior": "MultiBoxPriorAttrs",
    "vision.multibox_transform_loc": "MultiBoxTransformLocAttrs",
    "vision.yolo_reorg": "YoloReorgAttrs",
}
OP_ATTRS_TYPE: Final[dict[str, str]] = {op: "relay.attrs." + key for op, key in _OP_TYPES.items()}


def attrs_type_key(op_name: str) -> str | None:
    """TVM's attribute node type for calls of `op_name`, or None when the
    operator takes no attributes or is not in the table."""
    return OP_ATTRS_TYPE.get(op_name)


def schema_for(op_name: str | None = None, type_key: str | None = None) -> AttrsSchema | None:
    """The schema by attribute type key (preferred) or by operator name."""
    if type_key is not None and type_key in SCHEMAS:
        return SCHEMAS[type_key]
    if op_name is not None:
        key = OP_ATTRS_TYPE.get(op_name)
        if key is not None:
            return SCHEMAS.get(key)
    return None


def _schema_of(op_name: str, attrs: Attrs | None) -> AttrsSchema | None:
    return schema_for(op_name, attrs.type_key if attrs is not None else None)


def zero_value(kind: str) -> Any:
    """The value a plain field holds when nothing was given (C++ zero)."""
    return {"int": 0, "bool": False, "float": 0.0, "str": "", "dtype": ""}.get(kind)


def complete_attrs(op_name: str, attrs: Attrs | None) -> Attrs:
    """All fields of `op_name`'s attributes in TVM's order, defaults filled.

    Fields the schema does not know are kept after the known ones. A
    required field that is missing becomes None (a null object) or, for a
    plain field, the C++ zero value. Operators without a schema get their
    attributes back unchanged (an empty `Attrs` for None).
    """
    schema = _schema_of(op_name, attrs)
    if schema is None:
        return attrs if attrs is not None else Attrs()
    given = attrs.as_dict() if attrs is not None else {}
    fields: list[tuple[str, Any]] = []
    for f in schema.fields:
        if f.name in given:
            value = given[f.name]
        elif f.default is REQUIRED:
            value = None if f.is_ref else zero_value(f.kind)
        else:
            value = f.default
        fields.append((f.name, value))
    known = set(schema.names)
    fields.extend((k, v) for k, v in (attrs.fields if attrs is not None else ()) if k not in known)
    complete = Attrs(tuple(fields), schema.type_key)
    if attrs is not None and attrs.fields == complete.fields and attrs.type_key == complete.type_key:
        return attrs
    return complete


def non_default_fields(op_name: str, attrs: Attrs | None) -> tuple[tuple[str, Any], ...]:
    """The fields TVM's text printer shows: those without a default or whose
    value differs from it, in TVM's field order (unknown fields last, as given)."""
    if attrs is None:
        return ()
    schema = _schema_of(op_name, attrs)
    if schema is None:
        return attrs.fields
    given = attrs.as_dict()
    out: list[tuple[str, Any]] = []
    for f in schema.fields:
        if f.name not in given:
            continue
        value = given[f.name]
        if f.default is not REQUIRED and _same(
            normalize_value(f.kind, value), normalize_value(f.kind, f.default)
        ):
            continue
        out.append((f.name, value))
    known = set(schema.names)
    out.extend((k, v) for k, v in attrs.fields if k not in known)
    return tuple(out)


def normalize_for_compare(op_name: str, attrs: Attrs | None) -> dict[str, Any]:
    """A canonical dict of the attributes for structural equality: every
    schema field present (defaults filled), values normalised per kind (bools
    as bool, floats as float, int32 IntImm as int, a boxed int as int, lists
    as tuples). Attributes given only as non-defaults (text) and in full
    (JSON) normalise to the same dict."""
    schema = _schema_of(op_name, attrs)
    if schema is None:
        if attrs is None:
            return {}
        return {k: normalize_value(None, v) for k, v in attrs.fields}
    complete = complete_attrs(op_name, attrs)
    out: dict[str, Any] = {}
    for name, value in complete.fields:
        f = schema.field(name)
        norm = normalize_value(f.kind if f is not None else None, value)
        if f is not None and f.kind == "float" and isinstance(norm, float):
            if f.default is not REQUIRED and floats_equal(norm, float(f.default)):
                norm = float(f.default)  # TVM treats values within 1e-9 as the default
            elif math.isnan(norm):
                norm = "nan"  # NaN equals NaN in TVM's structural equality
        out[name] = norm
    return out


FLOAT_ATOL: Final = 1e-9


def floats_equal(a: float, b: float) -> bool:
    """TVM's structural float equality: NaN equals NaN, otherwise |a-b| < 1e-9."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or -FLOAT_ATOL < a - b < FLOAT_ATOL


def normalize_value(kind: str | None, value: Any) -> Any:
    """One attribute value in canonical form (see `normalize_for_compare`)."""
    if value is None:
        return None
    if kind == "bool" or kind == "Bool":
        if isinstance(value, (bool, int)):
            return bool(value)
        return value
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return value
    if kind == "int":
        if isinstance(value, bool):
            return int(value)
        return value
    if kind in ("str", "dtype", "String"):
        return value
    return _normalize_generic(value)


def _normalize_generic(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, IntImm):
        if value.dtype == "int32":
            return value.value
        if value.dtype == "bool":
            return bool(value.value)
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_normalize_generic(v) for v in value)
    boxed = getattr(value, "boxed_value", None)
    if callable(boxed):
        unboxed = boxed()
        if unboxed is not None:
            return unboxed
    return value


def _same(a: Any, b: Any) -> bool:
    """Value equality that keeps bool, int and IntImm apart where TVM does."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return floats_equal(a, b)
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - exotic values compare unequal
        return False
