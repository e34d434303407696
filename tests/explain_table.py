"""`--explain`'s per-device table read back: device -> {column: text}, the
`total` row included. Tests read the table by its header's column names."""

from __future__ import annotations

from collections.abc import Iterable

TITLE = "per device (cost model; "
"""How the table's title line starts (it goes on with how the columns add up)."""
COLUMNS = ("operators", "weight bytes", "peak bytes", "kernels ms", "copies ms", "hidden ms", "total ms")


def device_rows(explanation: str | Iterable[str]) -> dict[str, dict[str, str]]:
    """The table's rows by device name ({} when there is no table). Device names
    may hold spaces (`cpu (target llvm ...)`): the figures are the last fields."""
    lines = explanation.splitlines() if isinstance(explanation, str) else list(explanation)
    titles = [i for i, line in enumerate(lines) if line.startswith(TITLE)]
    if not titles:
        return {}
    (start,) = titles
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
