#!/usr/bin/env bash
# Quick start, command 2: set up .venv if needed, then lint and run the test suite.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup_env.sh
. .venv/bin/activate
ruff check .
ruff format --check .
python -m pytest "$@"
