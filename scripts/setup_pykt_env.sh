#!/usr/bin/env bash
# Create .venv-pykt: pyKT's own environment for the KT peers benchmark (python -m
# bench.kt.peers), never a dependency of the pipeline. Prints which pyKT it holds.
#
#   scripts/setup_pykt_env.sh               # pyKT's source in ../shared/peers/ when present
#   PYKT_SOURCE=DIR scripts/setup_pykt_env.sh    # another checkout of pyKT's source
#   PYKT_SOURCE=pypi scripts/setup_pykt_env.sh   # pykt-toolkit 0.0.38 from PyPI
#
# Source (../shared/peers/pykt-toolkit-f766468, commit f766468, 2026-06-04): every peer of
# the bench (DKT, AKT, SAINT, simpleKT, sparseKT, stableKT). It is installed with --no-deps
# (its setup.py asks for wandb and entmax, which no model imports), then what the models
# really import: numpy, pandas, scikit-learn, einops, matplotlib, tqdm, beside the CPU build of
# torch the project uses. PyPI's pykt-toolkit 0.0.38 (built 2022-10, the only release) has
# DKT, AKT and SAINT only; the script falls back to it where the shared tree is absent.
# The venv is rebuilt when the wanted source changes; .venv-pykt/pykt-source.txt names it
# (bench/kt/pykt_peer.py writes it into each result).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-pykt
shared=../shared/peers/pykt-toolkit-f766468
source=${PYKT_SOURCE:-}
if [ -z "$source" ]; then
    if [ -f "$shared/setup.py" ]; then source=$shared; else source=pypi; fi
fi
if [ "$source" = pypi ]; then
    wanted="pykt-toolkit 0.0.38 (PyPI)"
else
    if [ ! -f "$source/setup.py" ] || [ ! -d "$source/pykt/models" ]; then
        echo "setup_pykt_env.sh: $source is not a pyKT source tree (no setup.py and pykt/models/)" >&2
        exit 1
    fi
    source=$(cd "$source" && pwd)
    commit=$(sed -n 's/^Source:.*commit \([0-9a-f]\{7\}\).*/\1/p' "$source/PROVENANCE.txt" 2>/dev/null | head -1)
    wanted="pykt-toolkit source ${commit:-of unknown commit} ($(basename "$source"))"
fi
stamp=$venv/pykt-source.txt
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] \
    && "$venv/bin/python" -c "import pykt.models, sklearn" 2>/dev/null; then
    echo "$venv: $wanted"
    exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)
"${pip[@]}" "torch==${TORCH_VERSION:-2.13.0}"
"${pip[@]}" numpy pandas scikit-learn
if [ "$source" = pypi ]; then
    "${pip[@]}" --no-deps pykt-toolkit==0.0.38
else
    # a copy, not the shared tree: pip builds in place and must not write there
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    cp -r "$source/setup.py" "$source/README.md" "$source/pykt" "$build/"
    "${pip[@]}" einops matplotlib tqdm
    "${pip[@]}" --no-deps "$build"
fi
"$venv/bin/python" -c "import pykt.models, sklearn"
echo "$wanted" > "$stamp"
echo "$venv: $wanted"
