"""Relay operators to Relax: `convert_map` from operator name to an emitter.

An emitter gets the lowered arguments (Relax expressions already bound by
the block builder, so their types are known) and the Relay call's
attributes, and returns the Relax expression for the call; the lowering
driver emits it. Attributes absent from the Relay text take Relay's
defaults (TVM v0.19 `relay.attrs.*`), so text and JSON inputs lower alike.
An operator missing from the table raises `UnsupportedOperator`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax

from relay.ast import Attrs, MetaRef
from relay.span import Span

from .errors import BridgeError, UnsupportedOperator


@dataclass(frozen=True)
class EmitContext:
    """What an emitter may need besides its arguments."""

    bb: relax.BlockBuilder
    op_name: str
    span: Span | None
    attrs: Attrs
    resolve_meta: Callable[[MetaRef], Any]

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute's plain Python value (meta references resolved), or `default`."""
        if name not in self.attrs:
            return default
        value = plain_value(self.attrs.get(name), self.resolve_meta)
        return default if value is None else value

    def ints(self, name: str, default: tuple[int, ...] | None = None) -> tuple[int, ...] | None:
        value = self.attr(name, default)
        if value is None:
            return None
        if isinstance(value, (int, np.integer)):
            return (int(value),)
        return tuple(int(v) for v in value)

    def error(self, detail: str) -> BridgeError:
        return BridgeError(f"{self.op_name}: {detail}", self.span)


Emitter = Callable[[EmitContext, list[relax.Expr]], relax.Expr]


def plain_value(value: Any, resolve_meta: Callable[[MetaRef], Any]) -> Any:
    """An attribute value as int/float/str/bool/None/tuple: meta references
    are resolved and boxed TVM scalars (`runtime.BoxInt`) unboxed."""
    if isinstance(value, MetaRef):
        value = resolve_meta(value)
    if isinstance(value, (list, tuple)):
        return tuple(plain_value(v, resolve_meta) for v in value)
    if isinstance(value, dict):
        if "repr_str" in value:
            return _number(value["repr_str"])
        if "value" in value:
            return plain_value(value["value"], resolve_meta)
    boxed = getattr(value, "boxed_value", None)
    if callable(boxed):  # relay.tvm_json's opaque runtime.Box* objects
        unboxed = boxed()
        if unboxed is not None:
            return unboxed
    for name in ("value", "repr_str"):
        inner = getattr(value, name, None)
        if inner is not None and not isinstance(value, (int, float, str, bool)):
            return _number(inner) if isinstance(inner, str) else inner
    return value


def _number(text: str) -> int | float | str:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def static_shape(expr: relax.Expr) -> tuple[int, ...]:
    """The static shape of a lowered tensor expression."""
    ty = expr.ty
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        raise BridgeError(f"expected a tensor of static shape, got {ty}")
    return tuple(int(v) for v in shape.values)


def _tensor_dtype(expr: relax.Expr) -> str:
    return str(expr.ty.dtype)


def _layout_or_none(value: Any) -> str | None:
    return value if value else None


def _pad(ctx: EmitContext, spatial: int) -> tuple[int, ...]:
    """Relay padding (1, `spatial` or 2*`spatial` ints) as begin..., end... ."""
    pad = ctx.ints("padding", (0,) * spatial) or (0,)
    if len(pad) == 1:
        return pad * (2 * spatial)
    if len(pad) == spatial:
        return pad + pad
    if len(pad) == 2 * spatial:
        return pad
    raise ctx.error(f"padding {pad} has the wrong length for {spatial} spatial dimensions")


def _spatial(ctx: EmitContext, name: str, spatial: int, default: int) -> tuple[int, ...]:
    value = ctx.ints(name, (default,) * spatial) or (default,)
    return value * spatial if len(value) == 1 else value


# --------------------------------------------------------------------------
# Elementwise


def _unary(fn: Callable[[relax.Expr], relax.Expr]) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        return fn(args[0])

    return emit


def _binary(fn: Callable[[relax.Expr, relax.Expr], relax.Expr]) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        return fn(args[0], args[1])

    return emit


def _copy(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    return args[0]


def _clip(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    return relax.op.clip(args[0], ctx.attr("a_min"), ctx.attr("a_max"))


def _leaky_relu(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    return relax.op.nn.leakyrelu(args[0], float(ctx.attr("alpha", 0.01)))


def _cast(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    return relax.op.astype(args[0], ctx.attr("dtype"))


# --------------------------------------------------------------------------
# Neural network operators


def _conv(spatial: int, data_layout: str, kernel_layout: str, fn: Callable[..., relax.Expr]) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        return fn(
            args[0],
            args[1],
            strides=_spatial(ctx, "strides", spatial, 1),
            padding=_pad(ctx, spatial),
            dilation=_spatial(ctx, "dilation", spatial, 1),
            groups=int(ctx.attr("groups", 1)),
            data_layout=ctx.attr("data_layout", data_layout) or data_layout,
            kernel_layout=ctx.attr("kernel_layout", kernel_layout) or kernel_layout,
            out_layout=_layout_or_none(ctx.attr("out_layout", "")),
            out_dtype=_layout_or_none(ctx.attr("out_dtype", "")),
        )

    return emit


def _conv2d_transpose(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    return relax.op.nn.conv2d_transpose(
        args[0],
        args[1],
        strides=_spatial(ctx, "strides", 2, 1),
        padding=_pad(ctx, 2),
        output_padding=_spatial(ctx, "output_padding", 2, 0),
        dilation=_spatial(ctx, "dilation", 2, 1),
        groups=int(ctx.attr("groups", 1)),
        data_layout=ctx.attr("data_layout", "NCHW") or "NCHW",
        kernel_layout=ctx.attr("kernel_layout", "IOHW") or "IOHW",
        out_layout=_layout_or_none(ctx.attr("out_layout", "")),
        out_dtype=_layout_or_none(ctx.attr("out_dtype", "")),
    )


def _dense(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    # Relay dense is x @ w.T with w of shape (units, in); Relax linear is the same.
    return relax.op.linear(args[0], args[1], out_dtype=_layout_or_none(ctx.attr("out_dtype", "")))


def _matmul(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    a, b = args
    if ctx.attr("transpose_a", False):
        a = relax.op.permute_dims(a, _swap_last(len(static_shape(a))))
    if ctx.attr("transpose_b", False):  # TVM 0.19's Matmul/BatchMatmulAttrs default (its Python builder passes True)
        b = relax.op.permute_dims(b, _swap_last(len(static_shape(b))))
    return relax.op.matmul(a, b, out_dtype=_layout_or_none(ctx.attr("out_dtype", "")))


def _swap_last(rank: int) -> list[int]:
    axes = list(range(rank))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return axes


def _batch_norm(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    # Relay's batch_norm is the inference form: it normalises with the moving statistics.
    return relax.op.nn.batch_norm(
        *args,
        axis=int(ctx.attr("axis", 1)),
        epsilon=float(ctx.attr("epsilon", 1e-5)),
        center=bool(ctx.attr("center", True)),
        scale=bool(ctx.attr("scale", True)),
        training=False,
    )


def _bias_add(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    data, bias = args
    rank = len(static_shape(data))
    axis = int(ctx.attr("axis", 1))
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise ctx.error(f"axis {ctx.attr('axis')} out of range for rank {rank}")
    if axis == rank - 1:
        return relax.op.add(data, bias)
    shape = [1] * (rank - axis)
    shape[0] = -1
    return relax.op.add(data, relax.op.reshape(bias, shape))


def _pool2d(fn: Callable[..., relax.Expr], with_count: bool) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        kwargs: dict[str, Any] = {
            "pool_size": _spatial(ctx, "pool_size", 2, 1),
            "strides": _spatial(ctx, "strides", 2, 1),
            "padding": _pad(ctx, 2),
            "dilation": _spatial(ctx, "dilation", 2, 1),
            "ceil_mode": bool(ctx.attr("ceil_mode", False)),
            "layout": ctx.attr("layout", "NCHW") or "NCHW",
            "out_layout": _layout_or_none(ctx.attr("out_layout", "")),
        }
        if with_count:
            kwargs["count_include_pad"] = bool(ctx.attr("count_include_pad", False))
        return fn(args[0], **kwargs)

    return emit


def _global_avg_pool2d(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    layout = ctx.attr("layout", "NCHW") or "NCHW"
    return relax.op.nn.adaptive_avg_pool2d(
        args[0], (1, 1), layout=layout, out_layout=_layout_or_none(ctx.attr("out_layout", ""))
    )


def _global_max_pool2d(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    layout = ctx.attr("layout", "NCHW") or "NCHW"
    axes = [layout.index("H"), layout.index("W")]
    return relax.op.max(args[0], axis=axes, keepdims=True)


def _adaptive_avg_pool(fn: Callable[..., relax.Expr], layout: str) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        size = ctx.ints("output_size", None)
        return fn(
            args[0],
            size,
            layout=ctx.attr("layout", layout) or layout,
            out_layout=_layout_or_none(ctx.attr("out_layout", "")),
        )

    return emit


def _softmax(fn: Callable[..., relax.Expr]) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        return fn(args[0], axis=int(ctx.attr("axis", -1)))

    return emit


def _batch_flatten(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    shape = static_shape(args[0])
    return relax.op.reshape(args[0], (shape[0], int(np.prod(shape[1:], dtype=np.int64))))


def _dropout(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    # Relay's dropout is a (result, mask) pair and the identity at inference,
    # which is how Relax legalizes it too.
    return relax.op.nn.dropout(args[0], rate=float(ctx.attr("rate", 0.5)))


def _pad_op(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    widths = ctx.attr("pad_width")
    flat = [int(v) for pair in widths for v in pair]
    value = 0.0
    if len(args) > 1:
        value_expr = args[1]
        if isinstance(value_expr, tvm.ir.expr.Constant):
            value = float(value_expr.data.numpy())
        else:
            raise ctx.error("a non-constant pad value is not supported")
    return relax.op.nn.pad(args[0], flat, pad_mode=ctx.attr("pad_mode", "constant"), pad_value=value)


# --------------------------------------------------------------------------
# Tensor manipulation


def _concatenate(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    return relax.op.concat(args[0], axis=int(ctx.attr("axis", 0)))


def _stack(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    return relax.op.stack(args[0], axis=int(ctx.attr("axis", 0)))


def _split(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    sections = ctx.attr("indices_or_sections")
    if sections is None:
        raise ctx.error("missing indices_or_sections")
    if isinstance(sections, tuple):
        sections = [int(v) for v in sections]
    else:
        sections = int(sections)
    return relax.op.split(args[0], sections, axis=int(ctx.attr("axis", 0)))


def _expand_dims(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    rank = len(static_shape(args[0]))
    axis = int(ctx.attr("axis", 0))
    count = int(ctx.attr("num_newaxis", 1))
    if axis < 0:
        axis += rank + 1
    if count == 0:
        return args[0]
    return relax.op.expand_dims(args[0], list(range(axis, axis + count)))


def _squeeze(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    axis = ctx.ints("axis", None)
    return relax.op.squeeze(args[0], list(axis) if axis is not None else None)


def _transpose(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    axes = ctx.ints("axes", None)
    return relax.op.permute_dims(args[0], list(axes) if axes else None)


def relay_reshape_shape(in_shape: tuple[int, ...], newshape: tuple[int, ...]) -> tuple[int, ...]:
    """Relay's `reshape` shape rules (0 copies, -1 infers, -2 copies the rest,
    -3 merges two, -4 splits one) on a static input shape."""
    out: list[int] = []
    src = 0
    infer_at = -1
    i = 0
    while i < len(newshape):
        value = newshape[i]
        if value > 0:
            out.append(value)
            src += 1
        elif value == 0:
            out.append(in_shape[src])
            src += 1
        elif value == -1:
            if infer_at >= 0:
                raise ValueError("reshape: more than one -1")
            infer_at = len(out)
            out.append(1)
            src += 1
        elif value == -2:
            out.extend(in_shape[src:])
            src = len(in_shape)
        elif value == -3:
            out.append(in_shape[src] * in_shape[src + 1])
            src += 2
        elif value == -4:
            first, second = newshape[i + 1], newshape[i + 2]
            whole = in_shape[src]
            if first == -1:
                first = whole // second
            if second == -1:
                second = whole // first
            out.extend((first, second))
            src += 1
            i += 2
        else:
            raise ValueError(f"reshape: bad dimension {value}")
        i += 1
    if infer_at >= 0:
        known = int(np.prod([d for j, d in enumerate(out) if j != infer_at], dtype=np.int64))
        out[infer_at] = int(np.prod(in_shape, dtype=np.int64)) // max(known, 1)
    return tuple(out)


def _reshape(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    newshape = ctx.ints("newshape", None)
    if newshape is None:
        raise ctx.error("missing newshape")
    try:
        shape = relay_reshape_shape(static_shape(args[0]), newshape)
    except (ValueError, IndexError) as exc:
        raise ctx.error(str(exc)) from exc
    return relax.op.reshape(args[0], shape)


def _reshape_like(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    data, like = static_shape(args[0]), static_shape(args[1])
    lb, le = int(ctx.attr("lhs_begin", 0)), ctx.attr("lhs_end", None)
    rb, re_ = int(ctx.attr("rhs_begin", 0)), ctx.attr("rhs_end", None)
    le = len(data) if le is None else int(le)
    re_ = len(like) if re_ is None else int(re_)
    shape = data[:lb] + like[rb:re_] + data[le:]
    return relax.op.reshape(args[0], shape)


def _strided_slice(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    shape = static_shape(args[0])
    begin = list(ctx.ints("begin", ()) or ())
    end = list(ctx.ints("end", ()) or ())
    strides = list(ctx.ints("strides", (1,)) or (1,))
    axes = ctx.ints("axes", None)
    axes_list = list(axes) if axes is not None else list(range(len(begin)))
    if len(strides) == 1:
        strides = strides * len(axes_list)
    if ctx.attr("slice_mode", "end") == "size":
        end = [b + s if s >= 0 else shape[a] for b, s, a in zip(begin, end, axes_list)]
    return relax.op.strided_slice(args[0], axes_list, begin, end, strides)


def _full(value: float) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        shape = ctx.ints("shape", ()) or ()
        dtype = ctx.attr("dtype", "float32") or "float32"
        # A constant keeps the value free of any device until it is used.
        return relax.const(np.full(shape, value, dtype=dtype))

    return emit


def _full_like(value: float) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        fn = relax.op.zeros_like if value == 0 else relax.op.ones_like
        return fn(args[0])

    return emit


def _reduce(fn: Callable[..., relax.Expr]) -> Emitter:
    def emit(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
        axis = ctx.ints("axis", None)
        rank = len(static_shape(args[0]))
        axes = None if axis is None else [a + rank if a < 0 else a for a in axis]
        if ctx.attr("exclude", False):
            axes = [a for a in range(rank) if axes is None or a not in axes]
        return fn(args[0], axis=axes, keepdims=bool(ctx.attr("keepdims", False)))

    return emit


def _where(ctx: EmitContext, args: list[relax.Expr]) -> relax.Expr:
    return relax.op.where(args[0], args[1], args[2])


R = relax.op
convert_map: dict[str, Emitter] = {
    # elementwise
    "add": _binary(R.add),
    "subtract": _binary(R.subtract),
    "multiply": _binary(R.multiply),
    "divide": _binary(R.divide),
    "floor_divide": _binary(R.floor_divide),
    "power": _binary(R.power),
    "maximum": _binary(R.maximum),
    "minimum": _binary(R.minimum),
    "equal": _binary(R.equal),
    "not_equal": _binary(R.not_equal),
    "less": _binary(R.less),
    "less_equal": _binary(R.less_equal),
    "greater": _binary(R.greater),
    "greater_equal": _binary(R.greater_equal),
    "logical_and": _binary(R.logical_and),
    "logical_or": _binary(R.logical_or),
    "negative": _unary(R.negative),
    "exp": _unary(R.exp),
    "log": _unary(R.log),
    "sqrt": _unary(R.sqrt),
    "rsqrt": _unary(R.rsqrt),
    "abs": _unary(R.abs),
    "sigmoid": _unary(R.sigmoid),
    "tanh": _unary(R.tanh),
    "erf": _unary(R.erf),
    "logical_not": _unary(R.logical_not),
    "copy": _copy,
    "clip": _clip,
    "cast": _cast,
    "where": _where,
    "nn.relu": _unary(R.nn.relu),
    "nn.leaky_relu": _leaky_relu,
    # neural network
    "nn.conv2d": _conv(2, "NCHW", "OIHW", R.nn.conv2d),
    "nn.conv3d": _conv(3, "NCDHW", "OIDHW", R.nn.conv3d),
    "nn.conv2d_transpose": _conv2d_transpose,
    "nn.dense": _dense,
    "nn.matmul": _matmul,
    "nn.batch_matmul": _matmul,
    "nn.batch_norm": _batch_norm,
    "nn.bias_add": _bias_add,
    "nn.max_pool2d": _pool2d(R.nn.max_pool2d, with_count=False),
    "nn.avg_pool2d": _pool2d(R.nn.avg_pool2d, with_count=True),
    "nn.global_avg_pool2d": _global_avg_pool2d,
    "nn.global_max_pool2d": _global_max_pool2d,
    "nn.adaptive_avg_pool2d": _adaptive_avg_pool(R.nn.adaptive_avg_pool2d, "NCHW"),
    "nn.adaptive_avg_pool3d": _adaptive_avg_pool(R.nn.adaptive_avg_pool3d, "NCDHW"),
    "nn.softmax": _softmax(R.nn.softmax),
    "nn.log_softmax": _softmax(R.nn.log_softmax),
    "nn.batch_flatten": _batch_flatten,
    "nn.dropout": _dropout,
    "nn.pad": _pad_op,
    # tensor manipulation
    "concatenate": _concatenate,
    "stack": _stack,
    "split": _split,
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "transpose": _transpose,
    "reshape": _reshape,
    "reshape_like": _reshape_like,
    "strided_slice": _strided_slice,
    "zeros": _full(0.0),
    "ones": _full(1.0),
    "zeros_like": _full_like(0.0),
    "ones_like": _full_like(1.0),
    "sum": _reduce(R.sum),
    "mean": _reduce(R.mean),
    "max": _reduce(R.max),
    "min": _reduce(R.min),
}
"""Relay operator name -> emitter. Extend it to support more operators."""


def lookup(name: str, span: Span | None) -> Emitter:
    """The emitter for `name`, or UnsupportedOperator."""
    emitter = convert_map.get(name)
    if emitter is None:
        raise UnsupportedOperator(name, span)
    return emitter
