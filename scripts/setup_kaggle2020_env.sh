#!/usr/bin/env bash
# Create .venv-kaggle2020 (once): Python 3.7 with requirements-kaggle2020.txt, the
# competition's 2020 environment, in which tests/test_kaggle.py runs the exported notebook
# cell. Python 3.7 is taken from $PYTHON37, the PATH, or pyenv; without one this prints why
# and exits 0 (that test then skips, or fails where RIIID_REQUIRE_KAGGLE2020=1, as in CI).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-kaggle2020
python=
for candidate in ${PYTHON37:-} python3.7 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.7*/bin/python3.7; do
    # (a pyenv shim named python3.7 exists even where it cannot run)
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 7)' 2>/dev/null; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    echo "setup_kaggle2020_env: no Python 3.7 found (set PYTHON37); skipping $venv" >&2
    exit 0
fi
stamp=$venv/.requirements.sha256
wanted=$(sha256sum requirements-kaggle2020.txt | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
    exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r requirements-kaggle2020.txt
echo "$wanted" > "$stamp"
