#!/usr/bin/env bash
# Quick start, command 2: set up .venv (and .venv-kaggle2020) if needed, then lint and run
# the test suite on every core (pytest-xdist; each worker runs torch on one thread; an idle
# worker takes tests queued on a busy one). `./run_tests.sh -m "not slow"`
# is the edit loop (about a minute on 2 cores); extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup_env.sh
scripts/setup_kaggle2020_env.sh  # the competition's Python 3.7 stack, for tests/test_kaggle.py
. .venv/bin/activate
ruff check .
ruff format --check .
python -m pytest -n auto --dist worksteal "$@"
