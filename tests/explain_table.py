"""`--explain`'s per-device table read back: device -> {column: text}, the
`total` row included. Tests read the table by its header's column names."""

from __future__ import annotations

from collections.abc import Iterable

TITLE = "per device (cost model; kernels ms + copies ms = total ms; the last row is the predicted time):"
COLUMNS = ("operators", "weight bytes", "kernels ms", "copies ms", "total ms")


def device_rows(explanation: str | Iterable[str]) -> dict[str, dict[str, str]]:
    """The table's rows by device name ({} when there is no table). Device names
    may hold spaces (`cpu (target llvm ...)`): the figures are the last fields."""
    lines = explanation.splitlines() if isinstance(explanation, str) else list(explanation)
    if TITLE not in lines:
        return {}
    start = lines.index(TITLE)
    header = lines[start + 1]
    assert header.startswith("device ")
    columns = [c for c in COLUMNS if c in header]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 2 :]:
        fields = line.split()
        name = " ".join(fields[: len(fields) - len(columns)])
        rows[name] = dict(zip(columns, fields[len(fields) - len(columns) :], strict=True))
        if name == "total":
            break
    return rows
