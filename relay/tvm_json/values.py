"""What decoding produces besides IR nodes, and where decoded objects came from.

`TVMObject` wraps objects the IR does not model; `MapValue`,
`DictAttrsValue` and `ModuleValue` are intermediate values of maps,
dictionary attributes and modules; `Origins` maps decoded objects back to
their raw nodes so the writer can copy unchanged subgraphs verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import ast as A
from ..device import VirtualDevice
from .document import RawDoc, RawRef
from .layout import Writer


@dataclass(frozen=True, slots=True, eq=False)
class TVMObject:
    """A TVM object the IR does not model (a boxed int used as
    `meta[runtime.BoxInt][i]`, a source map, ...), kept as its JSON subgraph
    and written back verbatim. Equal when the subgraphs are equal."""

    type_key: str
    raw: RawRef

    def boxed_value(self) -> int | float | bool | None:
        """The Python value of a `runtime.Box*` object, else None."""
        text = self.raw.doc.repr_text(self.raw.node)
        try:
            if self.type_key == "runtime.BoxInt":
                return int(text)
            if self.type_key == "runtime.BoxFloat":
                return float(text)
            if self.type_key == "runtime.BoxBool":
                return text == "true"
        except ValueError:
            return None
        return None

    def canonical(self) -> str:
        """The subgraph as TVM JSON text (deterministic), for comparisons."""
        writer = Writer()
        root = writer.add(("raw", self.raw))
        return writer.to_json(root)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TVMObject):
            return NotImplemented
        return self is other or (self.type_key == other.type_key and self.canonical() == other.canonical())

    def __hash__(self) -> int:
        return hash(self.type_key)

    def __repr__(self) -> str:
        boxed = self.boxed_value()
        return f"TVMObject({self.type_key}{'' if boxed is None else ', ' + repr(boxed)})"


@dataclass(frozen=True, slots=True)
class MapValue:
    """A decoded Map: (key, value) pairs in stored order; keys str when `str_keys`."""

    items: tuple[tuple[Any, Any], ...]
    str_keys: bool


@dataclass(frozen=True, slots=True)
class DictAttrsValue:
    """Decoded DictAttrs: (name, value) pairs in stored order."""

    items: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class ModuleValue:
    """A decoded IRModule's fields, by field name."""

    fields: dict[str, Any]


UNSET = object()
UNCONSTRAINED = VirtualDevice()
UNCONSTRAINED_KEY = ("vd", UNCONSTRAINED)


class Origins:
    """Which raw node each decoded object came from.

    Holds the objects themselves, so `id()` keys stay valid. Virtual devices
    are values, so they are also found by value (first node wins).
    """

    __slots__ = ("by_id", "doc", "vd_by_value")

    def __init__(self, doc: RawDoc) -> None:
        self.doc = doc
        self.by_id: dict[int, tuple[Any, int]] = {}
        self.vd_by_value: dict[VirtualDevice, int] = {}

    def note(self, obj: Any, index: int) -> None:
        self.by_id.setdefault(id(obj), (obj, index))

    def find(self, obj: Any) -> RawRef | None:
        found = self.by_id.get(id(obj))
        if found is not None and found[0] is obj:
            return RawRef(self.doc, found[1])
        return None


TRACKED = (A.Expr, A.Type, A.Attrs, A.TypeData, A.Clause, A.Pattern)


@dataclass(frozen=True, slots=True, eq=False)
class ModuleRaw:
    """What `Module.raw` holds for a module read from TVM JSON."""

    origins: Origins
    module_index: int | None
    fields: dict[str, Any] = field(default_factory=dict)  # IRModule field -> node index
    gv_order: tuple[str, ...] = ()
    gtv_order: tuple[str, ...] = ()


def describe(value: Any) -> str:
    """A decoded value's kind, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, TVMObject):
        return value.type_key
    return type(value).__name__
