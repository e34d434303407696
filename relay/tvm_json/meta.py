"""The `#[metadata]` section of the text format: TVM JSON of a map from
kind to array (`decode_meta_section`, `encode_meta_section`)."""

from __future__ import annotations

from typing import Any

from .. import ast as A
from ..device import VirtualDevice
from ..span import SourceText
from .decode import Decoder
from .document import RawDoc, RawRef, parse_document, without_gc
from .encode import Encoder
from .memory import TYPE_MEMORY
from .values import MapValue, TVMObject


@without_gc
def decode_meta_section(json_text: str, name: str = "<metadata>") -> dict[str, list[Any]]:
    """Decode the JSON after `#[metadata]`: a map from kind to an array.

    `VirtualDevice` entries become `VirtualDevice` values, `relay.Constant`
    entries `Constant` nodes (with `meta_index` set to their position), and
    anything else a `TVMObject` kept verbatim. Raises ParseError.
    """
    doc = parse_document(json_text, name)
    decoder = Decoder(doc)
    root = decoder.decode(doc.root)
    if not isinstance(root, MapValue) or not (root.str_keys or not root.items):
        raise doc.error(doc.root, "the metadata root should be a map from kind to array")
    root_node = doc.nodes[doc.root]
    tensorless = RawDoc(doc.nodes, [], {}, doc.root, SourceText(doc.source.name, ""))
    tables: dict[str, list[Any]] = {}
    types: list[tuple[A.TensorType, RawRef]] = []
    for kind, array_index in zip(root_node.get("keys", []), root_node.get("data", [])):
        array_node = doc.nodes[array_index]
        if array_node["type_key"] != "Array":
            raise doc.error(array_index, f"meta[{kind}] should be an array")
        entries: list[Any] = []
        for position, entry_index in enumerate(array_node.get("data", [])):
            value = decoder.values[entry_index]
            if kind == "VirtualDevice":
                if not isinstance(value, VirtualDevice):
                    raise doc.error(entry_index, f"meta[VirtualDevice][{position}] is not a virtual device")
            elif kind == "relay.Constant":
                if not isinstance(value, A.Constant):
                    raise doc.error(entry_index, f"meta[relay.Constant][{position}] is not a constant")
                checked = value.checked_type
                if isinstance(checked, A.TensorType):
                    origin = decoder.origins.find(checked)
                    if origin is not None:
                        types.append((checked, RawRef(tensorless, origin.node)))
                value = A.Constant(value.data, position, span=value.span, checked_type=checked)
            elif not isinstance(value, TVMObject):
                value = TVMObject(doc.nodes[entry_index]["type_key"], RawRef(doc, entry_index))
            entries.append(value)
        tables[kind] = entries
    TYPE_MEMORY.remember(types, len(json_text) - sum(map(len, doc.b64ndarrays)))
    return tables


@without_gc
def encode_meta_section(tables: dict[str, list[Any]]) -> str:
    """The JSON TVM prints after `#[metadata]` for these meta tables.

    Targets read from JSON are written back verbatim; virtual devices and
    targets created here are written in TVM's complete form.
    """
    writer = Encoder(None)
    writer.share_dims = True
    items = []
    for kind, entries in tables.items():
        items.append((kind, ("array", ("meta_entry", tuple(entries)))))
    root = writer.add(("objmap_str", tuple(items)))
    return writer.to_json(root)
