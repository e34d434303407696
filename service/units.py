"""Byte sizes, spelled the same on every surface: an integer, or a number and a
unit such as `8GiB`, `60MB`, `1.5KiB`, in requests, settings and flags alike.

`ByteSize` is the pydantic type (request fields, settings); its JSON schema says both
forms, with the pattern the parser accepts, so the schema and the server agree.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
# ASCII digits only and one optional space before the unit: the same language in Python
# and in the schema's (ECMA) regular expression.
PATTERN = r"^[0-9]+(\.[0-9]+)? ?([bB]|[kKmMgGtT][iI]?[bB])?$"
_SIZE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?) ?(?P<unit>[bB]|[kKmMgGtT][iI]?[bB])?")
EXAMPLES = "8GiB, 512MiB, 60MB, 1.5KiB, 1000000"


def parse_bytes(text: str) -> int:
    """`8GiB`, `512MiB`, `1.5GB`, `1000000` -> bytes (decimal units are powers of 1000,
    binary ones of 1024); ValueError when it is none of those or not positive."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size (e.g. {EXAMPLES})")
    value = int(float(match["number"]) * UNITS[(match["unit"] or "").lower()])
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


def coerce_bytes(value: Any) -> Any:
    """A pydantic before-validator: a size string becomes its bytes (an all-digit string
    its integer, so `0` stays possible where the field allows it); others pass through."""
    if isinstance(value, str):
        if value.isascii() and value.isdigit():
            return int(value)
        return parse_bytes(value)
    return value


def byte_size_schema(minimum: int) -> dict[str, Any]:
    """The JSON schema of a ByteSize whose integer form is at least `minimum`."""
    return {
        "anyOf": [
            {"type": "integer", "minimum": minimum},
            {"type": "string", "pattern": PATTERN},
        ],
        "description": f"Bytes: an integer, or a number and a unit ({EXAMPLES}).",
    }


ByteSize = Annotated[int, BeforeValidator(coerce_bytes), Field(gt=0), WithJsonSchema(byte_size_schema(1))]
"""A positive byte size in a request: `8GiB` or `8589934592`."""


def bytes_text(n: int | None) -> str:
    """A byte count for people: `1.5 MiB`, `512 B`, `? B` when unknown."""
    if n is None:
        return "? B"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
