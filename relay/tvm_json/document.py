"""Raw TVM JSON documents: parsing, the structural checks, node access.

`parse_document` checks the outer structure and every node's shape (types
of `attrs`, `data`, `keys`, known type keys); `RawDoc` resolves and checks
object references lazily and locates errors at the offending node.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import gc
import json
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, ParamSpec, TypeVar

from ..span import ParseError, SourceText, Span
from .schema import CONTAINER_TYPES, REPR_TYPES, is_known_type_key, node_fields, ref_order


class RawDoc:
    """A parsed TVM JSON document: its nodes and base64 tensors, checked."""

    __slots__ = ("_children", "_fields", "attrs", "b64ndarrays", "nodes", "root", "source")

    def __init__(
        self,
        nodes: list[dict[str, Any]],
        b64: list[str],
        attrs: dict[str, str],
        root: int,
        source: SourceText,
    ):
        self.nodes = nodes
        self.b64ndarrays = b64
        self.attrs = attrs
        self.root = root
        self.source = source
        self._children: list[tuple[int, ...] | None] = [None] * len(nodes)
        self._fields: list[dict[str, int] | None] = [None] * len(nodes)

    def error(self, index: int | None, message: str) -> ParseError:
        """A ParseError about node `index`, located at that node in the text."""
        if index is None:
            return ParseError(message, Span(self.source, 1, 1, 1, 2))
        type_key = self.nodes[index].get("type_key", "?") if 0 <= index < len(self.nodes) else "?"
        return ParseError(f"node {index} ({type_key or 'null'}): {message}", self.node_span(index))

    def node_span(self, index: int) -> Span:
        """Where node `index` starts in the text: its `"type_key"` entry (one
        per node, in order, in everything TVM writes); line 1 if not found."""
        text = self.source.text
        pos = -1
        for _ in range(index + 1):
            pos = text.find('"type_key"', pos + 1)
            if pos < 0:
                return Span(self.source, 1, 1, 1, 2)
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        return Span(self.source, line, column, line, column + len('"type_key"'))

    def ref(self, index: int, name: str) -> int:
        """The node index held by object field `name` of node `index`."""
        fields = self._fields[index]
        if fields is not None:
            found = fields.get(name)
            if found is not None:
                return found
        return self._parse_ref(index, name)

    def _parse_ref(self, index: int, name: str) -> int:
        node = self.nodes[index]
        attrs = node.get("attrs")
        if attrs is None or name not in attrs:
            raise self.error(index, f"missing field '{name}'")
        text = attrs[name]
        try:
            target = int(text)
        except ValueError:
            raise self.error(index, f"field '{name}' should be a node index, got {text!r}") from None
        if not 0 <= target < len(self.nodes):
            raise self.error(
                index, f"field '{name}' refers to node {target}, but there are {len(self.nodes)} nodes"
            )
        return target

    def plain(self, index: int, name: str) -> str:
        attrs = self.nodes[index].get("attrs")
        if attrs is None or name not in attrs:
            raise self.error(index, f"missing field '{name}'")
        return str(attrs[name])

    def children(self, index: int) -> tuple[int, ...]:
        """Referenced node indices in TVM's visit order (validated, cached)."""
        found = self._children[index]
        if found is not None:
            return found
        node = self.nodes[index]
        type_key = node["type_key"]
        out: list[int] = []
        if type_key in CONTAINER_TYPES:
            size = len(self.nodes)
            for j in node.get("data", ()):
                if not 0 <= j < size:
                    raise self.error(index, f"refers to node {j}, but there are {size} nodes")
                out.append(j)
        elif type_key and type_key not in REPR_TYPES:
            fields = node_fields(type_key)
            if fields is None:
                raise self.error(index, f"unknown type_key '{type_key}'")
            fieldmap: dict[str, int] = {}
            for name in ref_order(type_key):
                target = fieldmap[name] = self._parse_ref(index, name)
                out.append(target)
            self._fields[index] = fieldmap
        result = tuple(out)
        self._children[index] = result
        return result

    def repr_text(self, index: int) -> str:
        node = self.nodes[index]
        if "repr_str" in node:
            return str(node["repr_str"])
        if "repr_b64" in node:
            try:
                raw = base64.b64decode(node["repr_b64"].encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError, ValueError):
                raise self.error(index, "bad base64 in repr_b64") from None
            return raw.decode("utf-8", errors="surrogateescape")
        return ""


class RawRef(NamedTuple):
    """Node number `node` of a raw document."""

    doc: RawDoc
    node: int

    @property
    def type_key(self) -> str:
        return str(self.doc.nodes[self.node]["type_key"])


def parse_document(text: str | bytes, name: str = "<json>") -> RawDoc:
    """Parse and check the outer structure of a TVM JSON document."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            source = SourceText(name, "")
            raise ParseError(
                f"TVM JSON is not UTF-8 text: {exc.reason} at byte {exc.start}", Span(source, 1, 1, 1, 2)
            ) from None
    if not isinstance(text, str):
        raise ParseError(f"TVM JSON must be text, not {type(text).__name__}")
    source = SourceText(name, text)
    try:
        data = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"malformed JSON: {exc.msg}", Span(source, exc.lineno, exc.colno, exc.lineno, exc.colno + 1)
        ) from None
    except RecursionError:
        raise ParseError("malformed TVM JSON: nesting too deep", Span(source, 1, 1, 1, 2)) from None
    top = Span(source, 1, 1, 1, 2)
    if not isinstance(data, dict):
        raise ParseError(
            f"TVM JSON must be an object with 'root' and 'nodes', got {type(data).__name__}", top
        )
    if "nodes" not in data or "root" not in data:
        missing = "nodes" if "nodes" not in data else "root"
        raise ParseError(f"TVM JSON lacks '{missing}'", top)
    nodes = data["nodes"]
    root = data["root"]
    b64 = data.get("b64ndarrays", [])
    attrs = data.get("attrs", {})
    if not isinstance(nodes, list) or not nodes:
        raise ParseError("TVM JSON 'nodes' must be a non-empty list", top)
    if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < len(nodes):
        raise ParseError(f"TVM JSON root {root!r} is not a node index (there are {len(nodes)} nodes)", top)
    if not isinstance(b64, list) or not all(isinstance(s, str) for s in b64):
        raise ParseError("TVM JSON 'b64ndarrays' must be a list of strings", top)
    if not isinstance(attrs, dict):
        raise ParseError("TVM JSON 'attrs' must be an object", top)
    doc = RawDoc(nodes, b64, attrs, root, source)
    for i, node in enumerate(nodes):
        _check_node(doc, i, node)
    return doc


def _check_node(doc: RawDoc, i: int, node: Any) -> None:
    if not isinstance(node, dict):
        raise doc.error(None, f"node {i} is not an object")
    type_key = node.get("type_key", "")
    if not isinstance(type_key, str):
        raise doc.error(None, f"node {i}: type_key must be a string")
    if "type_key" not in node:
        node["type_key"] = ""
    if not is_known_type_key(type_key):
        raise doc.error(i, f"unknown type_key '{type_key}'")
    attrs = node.get("attrs")
    if attrs is not None and (
        not isinstance(attrs, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items())
    ):
        raise doc.error(i, "'attrs' must map names to strings")
    data = node.get("data")
    if data is not None and (
        not isinstance(data, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in data)
    ):
        raise doc.error(i, "'data' must be a list of node indices")
    keys = node.get("keys")
    if keys is not None and (not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)):
        raise doc.error(i, "'keys' must be a list of strings")
    for key in ("repr_str", "repr_b64"):
        if key in node and not isinstance(node[key], str):
            raise doc.error(i, f"'{key}' must be a string")
    if type_key == "Map":
        if keys and len(keys) != len(data or ()):
            raise doc.error(i, f"map has {len(keys)} keys but {len(data or ())} values")
        if not keys and len(data or ()) % 2:
            raise doc.error(i, "map with object keys needs an even number of entries")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def without_gc(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """`func` run with the cyclic garbage collector paused (see `gc_paused`)."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with gc_paused():
            return func(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Building or walking a big graph allocates millions of small objects
    and no cycles; the cyclic collector would rescan the heap many times."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
