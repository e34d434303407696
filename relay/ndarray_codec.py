"""TVM's binary NDArray layout (`SaveDLTensor`), base64 wrapped as in TVM JSON.

Layout, little-endian: u64 magic 0xDD5E40F096B4A13F, u64 reserved (0),
device (i32 type, i32 id), i32 ndim, dtype (u8 code, u8 bits, u16 lanes),
i64 shape[ndim], i64 byte count, then the raw data.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct

from .ast import NDArray

NDARRAY_MAGIC = 0xDD5E40F096B4A13F
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "handle", 4: "bfloat"}
_NAME_CODES = {name: code for code, name in _CODE_NAMES.items()}
_DTYPE_RE = re.compile(r"^(int|uint|float|handle|bfloat)(\d+)(?:x(\d+))?$")


class NDArrayFormatError(ValueError):
    """The bytes are not a TVM NDArray."""


def dtype_to_dl(dtype: str) -> tuple[int, int, int]:
    """`float32` -> (code, bits, lanes) as DLPack stores it."""
    if dtype == "bool":
        return (1, 1, 1)
    m = _DTYPE_RE.match(dtype)
    if m is None:
        raise NDArrayFormatError(f"unsupported tensor dtype {dtype!r}")
    lanes = int(m.group(3)) if m.group(3) else 1
    return (_NAME_CODES[m.group(1)], int(m.group(2)), lanes)


def dl_to_dtype(code: int, bits: int, lanes: int) -> str:
    """(code, bits, lanes) -> TVM's dtype string."""
    if code == 1 and bits == 1 and lanes == 1:
        return "bool"
    name = _CODE_NAMES.get(code)
    if name is None:
        raise NDArrayFormatError(f"unsupported DLPack type code {code}")
    return f"{name}{bits}" + (f"x{lanes}" if lanes != 1 else "")


def element_bytes(dtype: str) -> int:
    _code, bits, lanes = dtype_to_dl(dtype)
    return (bits * lanes + 7) // 8


def ndarray_to_bytes(array: NDArray, device_type: int = 1, device_id: int = 0) -> bytes:
    """Serialize `array` in TVM's NDArray layout (on a CPU device, as TVM saves)."""
    code, bits, lanes = dtype_to_dl(array.dtype)
    expected = math.prod(array.shape) * element_bytes(array.dtype)
    if len(array.data) != expected:
        raise NDArrayFormatError(
            f"tensor data has {len(array.data)} bytes, shape {array.shape} of {array.dtype} needs {expected}"
        )
    head = struct.pack(
        "<QQiiiBBH", NDARRAY_MAGIC, 0, device_type, device_id, len(array.shape), code, bits, lanes
    )
    shape = struct.pack(f"<{len(array.shape)}q", *array.shape)
    return head + shape + struct.pack("<q", len(array.data)) + array.data


def ndarray_from_bytes(blob: bytes) -> NDArray:
    """Parse TVM's NDArray layout; NDArrayFormatError when it is not one."""
    fixed = struct.calcsize("<QQiiiBBH")
    if len(blob) < fixed:
        raise NDArrayFormatError(f"NDArray blob of {len(blob)} bytes is too short")
    magic, _reserved, _dev_type, _dev_id, ndim, code, bits, lanes = struct.unpack_from("<QQiiiBBH", blob)
    if magic != NDARRAY_MAGIC:
        raise NDArrayFormatError(f"bad NDArray magic 0x{magic:016X}")
    if not 0 <= ndim <= 64:
        raise NDArrayFormatError(f"bad NDArray rank {ndim}")
    dtype = dl_to_dtype(code, bits, lanes)
    pos = fixed
    if len(blob) < pos + 8 * ndim + 8:
        raise NDArrayFormatError("NDArray blob truncated in its shape")
    shape = struct.unpack_from(f"<{ndim}q", blob, pos)
    pos += 8 * ndim
    if any(d < 0 for d in shape):
        raise NDArrayFormatError(f"negative NDArray dimension in {shape}")
    (nbytes,) = struct.unpack_from("<q", blob, pos)
    pos += 8
    expected = math.prod(shape) * ((bits * lanes + 7) // 8)
    if nbytes != expected:
        raise NDArrayFormatError(
            f"NDArray says {nbytes} data bytes, shape {shape} of {dtype} needs {expected}"
        )
    data = blob[pos : pos + nbytes]
    if len(data) != nbytes:
        raise NDArrayFormatError(f"NDArray data truncated: {len(data)} of {nbytes} bytes")
    return NDArray(dtype, tuple(shape), bytes(data))


def ndarray_to_b64(array: NDArray) -> str:
    return base64.b64encode(ndarray_to_bytes(array)).decode("ascii")


def ndarray_from_b64(text: str) -> NDArray:
    try:
        blob = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise NDArrayFormatError(f"bad base64 NDArray: {exc}") from None
    return ndarray_from_bytes(blob)
