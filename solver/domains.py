"""Device domains over a union-find of first-order classes.

A first-order domain is an element of the union-find; each class carries a
partial `VirtualDevice` (join on union, incompatible joins refused). A
higher-order domain `fn(D1..Dn):Dr` is a tuple of domains (result last).
Every union and pin is logged with the id of the constraint it came from, so
a conflict can be explained from the log (see `explain.py`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from relay.ast import Expr
from relay.device import Target, VirtualDevice

from .shapes import FnShape, Shape

Domain = int | tuple["Domain", ...]

FREE = VirtualDevice.unconstrained()
"""The fully unconstrained device (one object, so `is` tests are cheap)."""


class ConstraintTag(NamedTuple):
    """Where a constraint came from: its kind, expression and a short detail."""

    kind: str
    expr: Expr | None
    detail: str = ""
    hard: bool = True


class Incompatible(Exception):
    """Raised inside the union-find on an incompatible join (a hard conflict)."""

    def __init__(self, a: int, b: int | None, cid: int, pin: VirtualDevice | None) -> None:
        super().__init__("incompatible virtual devices")
        self.a = a
        self.b = b
        self.cid = cid
        self.pin = pin


class DomainSystem:
    """Union-find over first-order classes with partial virtual devices."""

    def __init__(self, targets: dict[int, Target]) -> None:
        self.parent: list[int] = []
        self.vd: list[VirtualDevice] = []
        self.targets = targets
        self.tags: list[ConstraintTag] = []
        # The log of first-order facts, for explanations: edges and pins.
        self.edge_a = array("i")
        self.edge_b = array("i")
        self.edge_c = array("i")
        self.pins: list[tuple[int, VirtualDevice, int]] = []
        self._canon: dict[VirtualDevice, VirtualDevice] = {}
        self._canon_id: dict[int, VirtualDevice] = {}
        self._undo: list[tuple[int, int, VirtualDevice]] | None = None
        self.logging = True
        # Parameters of global functions -> "@name", for messages.
        self.param_owner: dict[int, str] = {}
        self._default_memo: dict[tuple[int, int], VirtualDevice] = {}
        self._keep: list[Any] = []

    # ---- elements and classes

    def new(self) -> int:
        self.parent.append(len(self.parent))
        self.vd.append(FREE)
        return len(self.parent) - 1

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent[root] != root:
            root = parent[root]
        if self._undo is None:
            while parent[x] != root:
                parent[x], x = root, parent[x]
        return root

    def device(self, x: int) -> VirtualDevice:
        return self.vd[self.find(x)]

    def canonical(self, vd: VirtualDevice) -> VirtualDevice:
        """TVM's canonical form: a device type implies the configured target,
        a target implies its device type."""
        found = self._canon_id.get(id(vd))
        if found is not None:
            return found
        found = self._canon.get(vd)
        if found is not None:
            self._canon_id[id(vd)] = found
            self._keep.append(vd)
            return found
        out = vd
        if out.target is None and out.device_type is not None:
            target = self.targets.get(out.device_type)
            if target is not None:
                out = VirtualDevice(out.device_type, out.virtual_device_id, target, out.memory_scope)
        elif out.device_type is None and out.target is not None and out.target.device_type is not None:
            out = VirtualDevice(out.target.device_type, out.virtual_device_id, out.target, out.memory_scope)
        self._canon[vd] = out
        self._canon_id[id(vd)] = out
        self._keep.append(vd)
        return out

    def tag(self, kind: str, expr: Expr | None, detail: str = "", hard: bool = True) -> int:
        self.tags.append(ConstraintTag(kind, expr, detail, hard))
        return len(self.tags) - 1

    def _set(self, root: int, parent: int, vd: VirtualDevice) -> None:
        if self._undo is not None:
            self._undo.append((root, self.parent[root], self.vd[root]))
        self.parent[root] = parent
        self.vd[root] = vd

    def union(self, a: int, b: int, cid: int) -> None:
        if self.logging:
            self.edge_a.append(a)
            self.edge_b.append(b)
            self.edge_c.append(cid)
        parent = self.parent
        ra = a
        while parent[ra] != ra:
            ra = parent[ra]
        rb = b
        while parent[rb] != rb:
            rb = parent[rb]
        undo = self._undo
        if undo is None:  # path compression (not while a trial may be undone)
            x = a
            while parent[x] != ra:
                parent[x], x = ra, parent[x]
            x = b
            while parent[x] != rb:
                parent[x], x = rb, parent[x]
        if ra == rb:
            return
        vds = self.vd
        va, vb = vds[ra], vds[rb]
        if vb is va or vb is FREE or _is_free(vb):
            joined = va
        elif va is FREE or _is_free(va):
            joined = vb
        else:
            j = va.join(vb)
            if j is None:
                raise Incompatible(a, b, cid, None)
            joined = self.canonical(j)
        if ra < rb:
            ra, rb = rb, ra
        # keep the older root (smaller index) as representative: stable reading order
        if undo is not None:
            undo.append((ra, ra, vds[ra]))
            undo.append((rb, rb, vds[rb]))
        parent[ra] = rb
        vds[rb] = joined

    def pin(self, a: int, device: VirtualDevice, cid: int) -> None:
        if self.logging:
            self.pins.append((a, device, cid))
        r = self.find(a)
        cur = self.vd[r]
        if _is_free(device) or cur is device:
            return
        if _is_free(cur):
            self._set(r, r, device)
            return
        j = cur.join(device)
        if j is None:
            raise Incompatible(a, None, cid, device)
        self._set(r, r, self.canonical(j))

    # ---- domains

    def free(self, shape: Shape) -> Domain:
        if isinstance(shape, FnShape):
            return tuple(self.free(p) for p in shape.params) + (self.free(shape.result),)
        return self.new()

    def for_device(self, shape: Shape, device: VirtualDevice, cid: int) -> Domain:
        """TVM's ForVirtualDevice: a function's parameters free, its (innermost) result on `device`."""
        if isinstance(shape, FnShape):
            return tuple(self.free(p) for p in shape.params) + (self.for_device(shape.result, device, cid),)
        x = self.new()
        self.pin(x, device, cid)
        return x

    def unify(self, a: Domain, b: Domain, cid: int) -> None:
        stack: list[tuple[Domain, Domain]] = [(a, b)]
        while stack:
            x, y = stack.pop()
            if isinstance(x, int) and isinstance(y, int):
                self.union(x, y, cid)
            elif isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y):
                stack.extend(zip(x, y))
            elif isinstance(x, int):
                self.collapse(x, y, cid)
            elif isinstance(y, int):
                self.collapse(y, x, cid)
            else:
                # Arity mismatch (an ill-typed program): collapse both onto one class.
                fo = self.new()
                self.collapse(fo, x, cid)
                self.collapse(fo, y, cid)

    def collapse(self, first_order: int, d: Domain, cid: int) -> None:
        stack: list[Domain] = [d]
        while stack:
            x = stack.pop()
            if isinstance(x, int):
                self.union(first_order, x, cid)
            else:
                stack.extend(x)

    def unify_collapsed(self, a: Domain, b: Domain, cid: int) -> None:
        if isinstance(a, int):
            self.collapse(a, b, cid)
        elif isinstance(b, int):
            self.collapse(b, a, cid)
        else:
            self.unify(a, b, cid)

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Within the block, unions and pins are not logged (facts that no
        explanation should cite, or that the caller logs itself)."""
        logging, self.logging = self.logging, False
        try:
            yield
        finally:
            self.logging = logging

    def try_unify(self, a: Domain, b: Domain, cid: int) -> bool:
        """Unify if consistent, else leave everything as it was (TVM's OptionalUnify)."""
        self._undo = []
        logging = self.logging
        try:
            with self.quiet():
                self.unify(a, b, cid)
        except Incompatible:
            for root, parent, vd in reversed(self._undo):
                self.parent[root] = parent
                self.vd[root] = vd
            return False
        finally:
            self._undo = None
        if logging:
            # Record the accepted equality for explanations (as a soft fact).
            for x, y in _pairs(a, b):
                self.edge_a.append(x)
                self.edge_b.append(y)
                self.edge_c.append(cid)
        return True

    # ---- reading

    @staticmethod
    def result_of(d: Domain) -> int:
        while isinstance(d, tuple):
            d = d[-1]
        return d

    def result_device(self, d: Domain) -> VirtualDevice:
        return self.device(self.result_of(d))

    def is_fully_constrained(self, d: Domain) -> bool:
        stack = [d]
        while stack:
            x = stack.pop()
            if isinstance(x, int):
                if not self.device(x).is_fully_constrained:
                    return False
            else:
                stack.extend(x)
        return True

    def set_default(self, d: Domain, default: VirtualDevice, cid: int) -> None:
        """Fill the unconstrained fields of every class in `d` from `default`."""
        if default.is_fully_unconstrained:
            return
        dt, vid, tg, sc = default.device_type, default.virtual_device_id, default.target, default.memory_scope
        memo = self._default_memo
        stack = [d]
        while stack:
            x = stack.pop()
            if type(x) is tuple:
                stack.extend(reversed(x))
                continue
            r = self.find(x)  # type: ignore[arg-type]
            cur = self.vd[r]
            if cur is default:
                continue
            if not (
                (cur.device_type is None and dt is not None)
                or (cur.virtual_device_id is None and vid is not None)
                or (cur.target is None and tg is not None)
                or (cur.memory_scope is None and sc is not None)
            ):
                continue
            key = (id(cur), id(default))
            filled = memo.get(key)
            if filled is None:
                filled = self.canonical(cur.default_from(default))
                memo[key] = filled
                self._keep.append((cur, default))
            if self.logging:
                self.pin(r, filled, cid)
            else:
                self._set(r, r, filled)

    def set_result_default_then_params(self, d: Domain, default: VirtualDevice, cid: int) -> None:
        if isinstance(d, int):
            self.set_default(d, default, cid)
            return
        self.set_default(self.result_of(d), default, cid)
        self.set_default(d, self.result_device(d), cid)

    def classes(self) -> list[int]:
        return [i for i, p in enumerate(self.parent) if p == i]


def _is_free(vd: VirtualDevice) -> bool:
    return (
        vd.device_type is None
        and vd.virtual_device_id is None
        and vd.target is None
        and vd.memory_scope is None
    )


def _pairs(a: Domain, b: Domain) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    stack: list[tuple[Domain, Domain]] = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, int) and isinstance(y, int):
            out.append((x, y))
        elif isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y):
            stack.extend(zip(x, y))
    return out
