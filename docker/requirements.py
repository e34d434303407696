"""Print the pinned requirements of pyproject.toml, one per line, for a dependency-only image layer.

Why: the Dockerfile installs the dependencies in a layer of their own, before the source is copied,
so editing code does not re-download z3 or TVM. Only the standard library is used (tomllib, 3.11+),
because this runs in the bare base image before anything is installed.

Usage: python3 requirements.py PYPROJECT [EXTRA ...]
  no extra: [project].dependencies; each EXTRA: only [project.optional-dependencies].EXTRA
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The requirement strings of the core dependencies, or of the named extras when any are given."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    if not extras:
        return list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    missing = [name for name in extras if name not in optional]
    if missing:
        raise SystemExit(f"{pyproject}: no optional-dependencies named {', '.join(missing)}")
    return [req for name in extras for req in optional[name]]


def main(argv: list[str]) -> int:
    """Entry point: write the requirement lines to stdout."""
    if not argv:
        raise SystemExit(__doc__)
    for line in requirements(Path(argv[0]), argv[1:]):
        sys.stdout.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
