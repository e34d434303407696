"""Which language and encoding a module's text is in, without TVM.

Relay comes as `mod.astext()` text (`#[version = "0.0.5"]`, `def @main(...)`)
or TVM <= 0.19's JSON (nodes with `"type_key"`). Relax comes as TVMScript
(`@I.ir_module` / `@R.function` Python syntax, what `mod.script()` prints) or
the JSON of TVM's FFI (`"root_index"`, nodes with `"type"`, `relax.` node
types); TVMScript that starts with a `metadata = tvm.ir.load_json(` line is
Relax however long that line is. The service uses this when a request says
nothing, so a Relay request never needs TVM.
"""

from __future__ import annotations

import re
from typing import Literal

Language = Literal["relay", "relax"]
Encoding = Literal["text", "json"]

LANGUAGES: tuple[Language, ...] = ("relay", "relax")

# A TVMScript decorator or import at the start of a line (after indentation).
_TVMSCRIPT_RE = re.compile(
    r"^[ \t]*(?:@(?:I|tvm\.script)\.ir_module\b|@(?:R|relax)\.function\b|#?[ \t]*from[ \t]+tvm\.script[ \t]+import\b)",
    re.MULTILINE,
)
# `mod.script(show_meta=True)` starts with this line when the module has
# constants; its JSON string can run past any head we would scan.
_METADATA_HEADER_RE = re.compile(r"\A(?:[ \t]*(?:#[^\n]*)?\r?\n)*[ \t]*metadata[ \t]*=[ \t]*tvm\.ir\.load_json\(")
_RELAY_TEXT_RE = re.compile(r"^[ \t]*(?:#\[version|def[ \t]+@|fn[ \t]*\(|free_var[ \t]+%)", re.MULTILINE)
_HEAD = 65_536  # detection looks at the first 64 KiB only: it must stay cheap on huge inputs


def detect_encoding(text: str) -> Encoding:
    """JSON starts with `{` after optional whitespace; anything else is text."""
    return "json" if text.lstrip()[:1] == "{" else "text"


def detect_language(text: str, encoding: Encoding | None = None) -> Language:
    """`relax` for TVMScript or FFI JSON, `relay` otherwise (Relay is the
    default: an unrecognised text gets Relay's parse errors)."""
    encoding = encoding or detect_encoding(text)
    head = text[:_HEAD]
    if encoding == "json":
        if '"type_key"' in head:
            return "relay"
        if '"root_index"' in head or re.search(r'"type"\s*:\s*"relax\.', head):
            return "relax"
        return "relay"
    if _METADATA_HEADER_RE.match(head):
        return "relax"  # TVMScript whatever the length of its metadata line
    relax_at = _first(_TVMSCRIPT_RE, head)
    relay_at = _first(_RELAY_TEXT_RE, head)
    if relax_at is not None and (relay_at is None or relax_at < relay_at):
        return "relax"
    return "relay"


def _first(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    return found.start() if found is not None else None
