#!/usr/bin/env bash
# Quick start, command 1: the whole pipeline on the embedded demo data (2 CPU cores, a few
# minutes): demo data -> 01 -> 02 -> 03 (a small SAINT+, fold 0) -> 04 -> 05, each stage
# set by its table of configs/demo.toml.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup_env.sh
. .venv/bin/activate
recipe=configs/demo.toml  # every stage's settings, a table per script
python 00_make_demo_input.py --config "$recipe"
python 01_preprocess.py --config "$recipe"
python 02_make_folds.py --config "$recipe"
python 03_train.py --config "$recipe" --overwrite  # each demo retrains its run
python 04_infer.py --config "$recipe"
python 05_evaluate.py --config "$recipe"
