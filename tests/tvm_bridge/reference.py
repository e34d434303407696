"""Plain numpy definitions of the Relay operators the bridge lowers, written
from the operator semantics (NCHW / OIHW layouts) for small shapes."""

from __future__ import annotations

import itertools

import numpy as np


def pad_spatial(x: np.ndarray, pads: tuple[int, ...], value: float = 0.0) -> np.ndarray:
    """Pad the trailing spatial axes; `pads` = begins..., ends..."""
    k = len(pads) // 2
    widths = [(0, 0)] * (x.ndim - k) + [(pads[i], pads[k + i]) for i in range(k)]
    return np.pad(x, widths, constant_values=value)


def conv(x: np.ndarray, w: np.ndarray, strides, pads, dilation, groups: int = 1) -> np.ndarray:
    """N-d convolution, data (N, C, *S), weight (O, C/groups, *K)."""
    k = w.ndim - 2
    xp = pad_spatial(x, pads)
    n, channels = x.shape[:2]
    o = w.shape[0]
    ksize = w.shape[2:]
    out_sp = [(xp.shape[2 + i] - dilation[i] * (ksize[i] - 1) - 1) // strides[i] + 1 for i in range(k)]
    out = np.zeros((n, o, *out_sp), dtype=np.float64)
    cg, og = channels // groups, o // groups
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        ws = w[g * og : (g + 1) * og]
        for kpos in itertools.product(*[range(s) for s in ksize]):
            sl = tuple(
                slice(kpos[i] * dilation[i], kpos[i] * dilation[i] + strides[i] * out_sp[i], strides[i])
                for i in range(k)
            )
            patch = xs[(slice(None), slice(None), *sl)]
            wk = ws[(slice(None), slice(None), *kpos)]
            out[:, g * og : (g + 1) * og] += np.einsum("nc...,oc->no...", patch, wk)
    return out.astype(x.dtype)


def conv2d_transpose(x, w, strides, pads, output_padding=(0, 0)) -> np.ndarray:
    """Transposed 2-d convolution, weight (I, O, KH, KW), groups 1, dilation 1."""
    n, _, h, wd = x.shape
    o, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    full_h = (h - 1) * strides[0] + kh
    full_w = (wd - 1) * strides[1] + kw
    full = np.zeros((n, o, full_h + output_padding[0], full_w + output_padding[1]))
    for i, j in itertools.product(range(kh), range(kw)):
        contrib = np.einsum("nchw,co->nohw", x, w[:, :, i, j])
        full[:, :, i : i + strides[0] * h : strides[0], j : j + strides[1] * wd : strides[1]] += contrib
    top, left, bottom, right = pads
    out_h = full_h - top - bottom + output_padding[0]
    out_w = full_w - left - right + output_padding[1]
    return full[:, :, top : top + out_h, left : left + out_w].astype(x.dtype)


def pool2d(x, size, strides, pads, kind: str, count_include_pad: bool = False) -> np.ndarray:
    n, c, h, w = x.shape
    fill = -np.inf if kind == "max" else 0.0
    xp = pad_spatial(x.astype(np.float64), pads, fill)
    ones = pad_spatial(np.ones((1, 1, h, w)), pads, 0.0)
    oh = (xp.shape[2] - size[0]) // strides[0] + 1
    ow = (xp.shape[3] - size[1]) // strides[1] + 1
    out = np.zeros((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        win = xp[:, :, i * strides[0] : i * strides[0] + size[0], j * strides[1] : j * strides[1] + size[1]]
        if kind == "max":
            out[:, :, i, j] = win.max(axis=(2, 3))
        else:
            count = (
                size[0] * size[1]
                if count_include_pad
                else ones[
                    :, :, i * strides[0] : i * strides[0] + size[0], j * strides[1] : j * strides[1] + size[1]
                ].sum()
            )
            out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out.astype(x.dtype)


def batch_norm(x, gamma, beta, mean, var, axis=1, epsilon=1e-5, center=True, scale=True):
    shape = [1] * x.ndim
    shape[axis] = -1
    out = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon)
    if scale:
        out = out * gamma.reshape(shape)
    if center:
        out = out + beta.reshape(shape)
    return out.astype(x.dtype)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))
