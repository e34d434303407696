#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install devplan editable with the given extras.
# Usage: scripts/bootstrap.sh [EXTRAS]   e.g. scripts/bootstrap.sh test,tvm
# Re-running is cheap: the install is skipped while pyproject.toml and the extras are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then python="$candidate"; break; fi
  done
fi
if [[ -z "$python" ]] || ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "bootstrap: need Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  echo "bootstrap: creating .venv with $("$python" --version)" >&2
  "$python" -m venv .venv
fi
spec="."
[[ -n "$extras" ]] && spec=".[${extras}]"
stamp=".venv/.devplan-install-$(echo "$extras" | tr ',' '-')"
want="$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
echo "bootstrap: pip install -e '$spec'" >&2
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install --quiet -e "$spec"
echo "$want" > "$stamp"
