#!/usr/bin/env bash
# Create .venv (once) and install the project's requirements into it, then the project
# itself as an editable package (`common`, importable from anywhere); again only when a
# requirements file or pyproject.toml changed. torch is installed first as a pinned
# release, so that the ranges in requirements.txt are already met and pip pulls no other
# build of it.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.requirements.sha256
wanted=$(cat requirements.txt requirements-dev.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    if ! python -c "import torch" 2>/dev/null; then
        pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
    fi
    pip install --quiet -r requirements.txt -r requirements-dev.txt
    pip install --quiet --no-deps -e .
    echo "$wanted" > "$stamp"
fi
