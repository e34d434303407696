#!/usr/bin/env bash
# Set up .venv with the tvm extra (Relax input and /compile need TVM; Relay planning never imports it)
# and start the service on http://127.0.0.1:8000 (DEVPLAN_* variables override).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh tvm
exec .venv/bin/devplan serve "$@"
