#!/usr/bin/env bash
# Create .venv (once) and install the project's requirements into it (again only when a
# requirements file changed). torch is installed first as a pinned release, so that the
# ranges in requirements.txt are already met and pip pulls no other build of it.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.requirements.sha256
wanted=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    if ! python -c "import torch" 2>/dev/null; then
        pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
    fi
    pip install --quiet -r requirements.txt -r requirements-dev.txt
    echo "$wanted" > "$stamp"
fi
