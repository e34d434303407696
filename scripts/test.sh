#!/usr/bin/env bash
# Set up .venv with the test and tvm extras and run the whole test suite in two stages:
# the default run (tests not marked `slow`; bare `pytest` runs this stage too, pyproject addopts),
# then the `slow` tests (`-m slow` overrides the addopts), printing each stage's time.
# With arguments, runs a single pytest invocation with them instead
# (e.g. `scripts/test.sh tests/relay -x`, `scripts/test.sh -m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh test,tvm
if [[ $# -gt 0 ]]; then
  exec .venv/bin/python -m pytest "$@"
fi
status=0
start=$SECONDS
.venv/bin/python -m pytest -m "not slow" || status=$?
default_s=$((SECONDS - start))
start=$SECONDS
slow_status=0
.venv/bin/python -m pytest -m slow || slow_status=$?
slow_s=$((SECONDS - start))
echo "test stages: default ${default_s}s (exit ${status}), slow ${slow_s}s (exit ${slow_status})"
if [[ $status -ne 0 ]]; then exit "$status"; fi
exit "$slow_status"
