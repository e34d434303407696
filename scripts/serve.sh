#!/usr/bin/env bash
# Set up .venv and start the service on http://127.0.0.1:8000 (DEVPLAN_* variables override).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/devplan serve "$@"
