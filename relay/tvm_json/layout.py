"""Writing TVM JSON: TVM's node numbering and dmlc's text layout.

`Writer` numbers objects the way TVM's `NodeIndexer` does (a pre-order walk
that gives each object one index, children in field order) and lays the
nodes out exactly as dmlc's JSON writer does, so an unchanged document is
reproduced byte for byte. This base class copies raw subgraphs only;
`encode.Encoder` adds objects encoded from the IR.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable
from typing import Any

from ..span import RelayError
from .document import RawDoc
from .schema import CONTAINER_TYPES, TVM_VERSION, plain_fields, ref_order

Item = tuple[str, Any]  # (slot, value): how to encode `value`; ("raw", (doc, index)) copies a node


class Spec:
    """One output node before indices are known: children are identity keys."""

    __slots__ = ("data", "keys", "plain", "refs", "repr", "type_key")

    def __init__(self, type_key: str) -> None:
        self.type_key = type_key
        self.repr: str | None = None
        self.plain: dict[str, str] = {}
        self.refs: list[tuple[str, Any]] = []  # (field, child key or None)
        self.data: list[Any] | None = None  # child keys
        self.keys: list[str] | None = None


class Writer:
    """Numbers objects in TVM's order and lays out the JSON like dmlc.

    Objects are identified by keys: ("raw", id(doc), index) for a node of a
    raw document, anything else for what a subclass encodes (`key`,
    `encode_fresh`); None is TVM's null.
    """

    def __init__(self) -> None:
        self.specs: list[Spec | None] = [None]  # index 0: null
        self.index: dict[Any, int] = {}
        self.tensors: list[str] = []
        self.tensor_index: dict[Any, int] = {}
        self.keep: list[Any] = []

    # -- identity

    def key(self, item: Item) -> Any:
        """The identity of the object `item` encodes, or None for null."""
        slot, value = item
        if slot != "raw":
            raise RelayError(f"internal: this writer copies raw nodes only, not {slot}")
        return raw_key(value)

    def raw_of(self, value: Any) -> tuple[RawDoc, int]:
        """The raw node of a value whose key is a raw key (subclasses)."""
        raise RelayError(f"internal: no raw node for a {type(value).__name__}")

    def encode_fresh(self, slot: str, value: Any, children: list[tuple[Item, Any]]) -> Spec:
        """A node for `value` encoded from the IR (subclasses)."""
        raise RelayError(f"internal: this writer copies raw nodes only, not {slot}")

    # -- numbering

    def add(self, root: Item) -> int:
        """Number `root` and everything it references; returns its index."""
        # Not relay.traverse: items are (slot, value) pairs of any kind, and an
        # object is one node per key (by value for ops, devices, targets,
        # dimensions; by raw node for copies), not per Python object.
        root_key = self.key(root)
        stack: list[tuple[Item, Any]] = [(root, root_key)]
        keep = self.keep
        while stack:
            item, key = stack.pop()
            if key is None or key in self.index:
                continue
            if key[0] == "obj":  # identified by id(): keep the object alive while numbering
                keep.append(item)
            spec, children = self._spec(item, key)
            self.index[key] = len(self.specs)
            self.specs.append(spec)
            stack.extend(reversed(children))
        return 0 if root_key is None else self.index[root_key]

    def child(
        self, spec_refs: list[tuple[str, Any]], children: list[tuple[Item, Any]], name: str, item: Item
    ) -> None:
        key = self.key(item)
        spec_refs.append((name, key))
        children.append((item, key))

    def _spec(self, item: Item, key: Any) -> tuple[Spec, list[tuple[Item, Any]]]:
        slot, value = item
        if key[0] == "raw":
            return self._raw_spec(value if slot == "raw" else self.raw_of(value))
        children: list[tuple[Item, Any]] = []
        spec = self.encode_fresh(slot, value, children)
        return spec, children

    def _raw_spec(self, ref: tuple[RawDoc, int]) -> tuple[Spec, list[tuple[Item, Any]]]:
        doc, index = ref
        nodes = doc.nodes
        node = nodes[index]
        type_key = node["type_key"]
        spec = Spec(type_key)
        children: list[tuple[Item, Any]] = []
        if "repr_str" in node or "repr_b64" in node:
            spec.repr = doc.repr_text(index)
            return spec, children
        doc_id = id(doc)
        targets = doc.children(index)
        keys: list[Any] = []
        for j in targets:
            k = None if nodes[j]["type_key"] == "" else ("raw", doc_id, j)
            keys.append(k)
            children.append((("raw", (doc, j)), k))
        if type_key in CONTAINER_TYPES:
            spec.data = keys
            if node.get("keys"):
                spec.keys = list(node["keys"])
            return spec, children
        attrs = node.get("attrs", {})
        for name, kind in plain_fields(type_key):
            if kind == "ndarray":
                tensor = int(attrs[name])
                spec.plain[name] = str(
                    self.tensor(
                        ("raw", doc_id, tensor), functools.partial(doc.b64ndarrays.__getitem__, tensor)
                    )
                )
            else:
                spec.plain[name] = attrs[name]
        spec.refs = list(zip(ref_order(type_key), keys))
        return spec, children

    def tensor(self, key: Any, make: Callable[[], str]) -> int:
        found = self.tensor_index.get(key)
        if found is None:
            found = self.tensor_index[key] = len(self.tensors)
            self.tensors.append(make())
        return found

    # -- output

    def to_json(self, root: int) -> str:
        """The document in dmlc's layout (as TVM writes it, byte for byte)."""
        out: list[str] = ['{\n  "root": ', str(root), ', \n  "nodes": [\n    {\n      "type_key": ""\n    }']
        append = out.append
        index = self.index
        quote = json_string
        for spec in self.specs[1:]:
            assert spec is not None
            append(', \n    {\n      "type_key": ' + quote(spec.type_key))
            if spec.repr:
                if _PRINTABLE.fullmatch(spec.repr):
                    append(', \n      "repr_str": ' + quote(spec.repr))
                else:
                    raw = spec.repr.encode("utf-8", errors="surrogateescape")
                    append(', \n      "repr_b64": "' + base64.b64encode(raw).decode("ascii") + '"')
            # Field names are identifiers and node indices digits: only plain values need escaping.
            fields = [(k, quote(v)) for k, v in spec.plain.items()]
            fields.extend((k, '"0"' if c is None else '"' + str(index[c]) + '"') for k, c in spec.refs)
            if fields:
                fields.sort()
                if len(fields) == 1:
                    append(', \n      "attrs": {"' + fields[0][0] + '": ' + fields[0][1] + "}")
                else:
                    append(', \n      "attrs": {')
                    append(", ".join(['\n        "' + k + '": ' + v for k, v in fields]))
                    append("\n      }")
            if spec.keys:
                append(', \n      "keys": [')
                append(", ".join(["\n        " + quote(k) for k in spec.keys]))
                append("\n      ]")
            if spec.data:
                numbers = ["0" if k is None else str(index[k]) for k in spec.data]
                if len(numbers) > 10:  # dmlc writes arrays of more than 10 numbers one per line
                    append(', \n      "data": [\n        ' + ", \n        ".join(numbers) + "\n      ]")
                else:
                    append(', \n      "data": [' + ", ".join(numbers) + "]")
            append("\n    }")
        append('\n  ], \n  "b64ndarrays": [')
        if self.tensors:
            append(", ".join(["\n    " + quote(t) for t in self.tensors]))
            append("\n  ]")
        else:
            append("]")
        append(', \n  "attrs": {"tvm_version": "' + TVM_VERSION + '"}\n}')
        return "".join(out)


# TVM writes repr bytes as a string when every byte is printable ASCII (isprint).
_PRINTABLE = re.compile(r"[ -~]*")
_ESCAPES = {"\r": "\\r", "\n": "\\n", "\\": "\\\\", "\t": "\\t", '"': '\\"'}


def json_string(text: str) -> str:
    """A JSON string as dmlc writes it: only \\r \\n \\t \\\\ \\" escaped."""
    if '"' in text or "\\" in text or "\n" in text or "\r" in text or "\t" in text:
        text = "".join(_ESCAPES.get(ch, ch) for ch in text)
    return '"' + text + '"'


def raw_key(ref: tuple[RawDoc, int]) -> Any:
    """The key of raw node `ref`: None for a null node."""
    doc, index = ref
    if doc.nodes[index]["type_key"] == "":
        return None
    return ("raw", id(doc), index)
