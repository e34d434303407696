#!/usr/bin/env bash
# Set up .venv with the test and tvm extras and run the test suite (slow tests excluded;
# `scripts/test.sh -m slow` runs those). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh test,tvm
exec .venv/bin/python -m pytest -m "not slow" "$@"
