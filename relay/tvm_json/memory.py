"""Tensor types of metadata constants, remembered with the nodes they came from.

TVM shares dimension nodes between the types in a `#[metadata]` section in
ways the IR does not record (a bias's shape shares the weight's output
channel node, two equal dimensions of one weight do not). A section decoded
by `decode_meta_section` and re-encoded later, after a text round trip that
keeps the constants (and so their type objects) but none of our tables,
should come out byte for byte the same, so each constant's type is
remembered with its raw node.

The memory is bounded by bytes, not entries: each section's cost is
estimated from its JSON text without tensors (the node dicts it keeps
alive), and whole sections are forgotten, least recently used first, once
the total passes `max_bytes`. A type whose section was forgotten is
encoded afresh: valid TVM JSON, only its dimension sharing may differ.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from .. import ast as A
from .document import RawRef

# What a remembered section keeps alive (its parsed node dicts, the document's
# per-node caches once written, the types) per byte of its JSON text without
# tensors: 5.2 measured with tracemalloc on sections of 16 constants
# (benchmarks/json_memory.py's requests), 3.5 for squeezenet's parsed nodes.
BYTES_PER_TEXT_BYTE = 6


class TypeMemory:
    """Remembered types by identity: id(type) -> (type, raw node, section).

    Entries hold the type itself, so its id stays unique while remembered.
    Thread-safe (service threads decode and encode concurrently).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._lock = threading.Lock()
        self._types: dict[int, tuple[A.TensorType, RawRef, int]] = {}
        self._sections: OrderedDict[int, tuple[int, tuple[int, ...]]] = OrderedDict()  # -> (bytes, ids)
        self._next_section = 0

    def remember(self, types: Sequence[tuple[A.TensorType, RawRef]], text_bytes: int) -> None:
        """Remember one section's types; `text_bytes` is the length of its
        JSON text without tensors. The newest section is always kept."""
        if not types:
            return
        size = text_bytes * BYTES_PER_TEXT_BYTE
        with self._lock:
            section = self._next_section
            self._next_section += 1
            for ty, ref in types:
                self._types[id(ty)] = (ty, ref, section)
            self._sections[section] = (size, tuple(id(ty) for ty, _ in types))
            self.bytes += size
            while self.bytes > self.max_bytes and len(self._sections) > 1:
                old, (freed, ids) = self._sections.popitem(last=False)
                self.bytes -= freed
                for key in ids:
                    entry = self._types.get(key)
                    if entry is not None and entry[2] == old:
                        del self._types[key]

    def find(self, ty: A.TensorType) -> RawRef | None:
        """The raw node `ty` was decoded from, if remembered (marks its
        section recently used)."""
        with self._lock:
            found = self._types.get(id(ty))
            if found is None or found[0] is not ty:
                return None
            self._sections.move_to_end(found[2])
            return found[1]

    def __len__(self) -> int:
        with self._lock:
            return len(self._types)

    def clear(self) -> None:
        with self._lock:
            self._types.clear()
            self._sections.clear()
            self.bytes = 0


# One per process: 8 MiB holds the sections of a few dozen bound models.
TYPE_MEMORY = TypeMemory(8 << 20)
