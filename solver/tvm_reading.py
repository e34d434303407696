"""How TVM 0.19 reads a `device_copy` call: through directly nested copies.

TVM's `GetDeviceCopyProps` follows nesting: `device_copy(device_copy(e,
src=S, dst=T), src=T2, dst=U)` reads as a copy of `e` from `S` to `U`; the
outer copy's source `T2` and the inner copy's destination `T` are ignored.
Its conflicting-inputs walk, its constraint collection and its rewrite all
read copies this way, so the outer copy's argument (the inner copy) must be
on `S`, the inner copy's *source*, while the inner copy itself puts its
value on `T`. With `S != T` TVM therefore fails (an internal check when the
inner copy is first reached through the outer one, a device conflict when it
is first reached through another use), and with `S == T` it plans the copy
from `S` to `U` whatever `T2` says. The TVM mode reads copies the same way,
so it gives TVM's verdict; the optimize mode reads each copy on its own.
"""

from __future__ import annotations

from relay.ast import DeviceCopyProps, Expr, device_copy_props

__all__ = ["tvm_copy_props"]


def tvm_copy_props(expr: Expr) -> DeviceCopyProps | None:
    """`expr`'s copy as TVM 0.19 reads it (None unless it is a `device_copy`):
    the body and source of the innermost directly nested copy, the
    destination of the outermost."""
    outer = device_copy_props(expr)
    if outer is None:
        return None
    inner = outer
    while True:  # iterative: copies may nest deeply
        deeper = device_copy_props(inner.body)
        if deeper is None:
            break
        inner = deeper
    if inner is outer:
        return outer
    return DeviceCopyProps(inner.body, inner.src, outer.dst)
