"""TVM's JSON object graph (`tvm.ir.save_json`, TVM <= 0.19) <-> the Relay IR.

The format is a flat list of nodes, `{"type_key", "attrs", "keys", "data",
"repr_str" | "repr_b64"}`, whose attribute values are all strings: object
fields hold node indices, plain fields their value.

One module per job:
- `schema`: which fields of each type key are objects, in TVM's visit order;
- `document`: parsing a document and checking its structure (`RawDoc`);
- `values`: opaque objects (`TVMObject`), intermediate values, `Origins`;
- `decode`: nodes to IR, children-first with an explicit stack (`load_json`);
- `layout`: TVM's node numbering and dmlc's byte layout (`Writer`);
- `encode`: IR to nodes, copying unchanged raw subgraphs (`dump_json`);
- `memory`: the bounded memory of metadata constants' types;
- `meta`: the text format's `#[metadata]` section.

Every decoded object remembers the node it came from (`Module.raw`); writing
copies an unchanged object's original subgraph verbatim and encodes new ones
the way TVM's `SaveJSON` would: a pre-order walk numbering each object once,
operator attributes completed from `relay.op_attrs`, and dmlc's JSON layout.
"""

from __future__ import annotations

from .decode import load_json
from .document import RawDoc, RawRef, parse_document
from .encode import dump_json
from .meta import decode_meta_section, encode_meta_section
from .schema import CONTAINER_TYPES, NODE_FIELDS, REF, REPR_TYPES, TVM_VERSION, is_known_type_key, node_fields
from .values import ModuleRaw, Origins, TVMObject

__all__ = [
    "CONTAINER_TYPES",
    "NODE_FIELDS",
    "REF",
    "REPR_TYPES",
    "TVM_VERSION",
    "ModuleRaw",
    "Origins",
    "RawDoc",
    "RawRef",
    "TVMObject",
    "decode_meta_section",
    "dump_json",
    "encode_meta_section",
    "is_known_type_key",
    "load_json",
    "node_fields",
    "parse_document",
]
