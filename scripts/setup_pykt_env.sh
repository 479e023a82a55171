#!/usr/bin/env bash
# Create .venv-pykt (once): pyKT's own environment for the KT peers benchmark
# (python -m bench.kt.peers), never a dependency of the pipeline. pykt-toolkit 0.0.38 is the
# release on PyPI; it is installed without its dependencies (it asks for wandb, which the
# peers do not use), beside the CPU build of torch this machine installs for the project.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-pykt
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import pykt.models, sklearn" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "torch==${TORCH_VERSION:-2.13.0}"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps pykt-toolkit==0.0.38
"$venv/bin/pip" install --quiet --disable-pip-version-check numpy pandas scikit-learn
