#!/usr/bin/env bash
# Quick start, command 1: the whole pipeline on the embedded demo data (2 CPU cores, a few
# minutes): demo data -> 01 -> 02 -> 03 (a small SAINT+, fold 0) -> 04 -> 05.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup_env.sh
. .venv/bin/activate
input=input/demo
output=output/demo
python 00_make_demo_input.py --users 2000 --seed 0 --output-dir "$input"
python 01_preprocess.py --input-dir "$input" --output-dir "$output" --no-progress
python 02_make_folds.py --output-dir "$output" --n-folds 5 --seed 0
python 03_train.py --output-dir "$output" --run demo --overwrite --fold 0 --model saint+ \
    --d-model 64 --layers 2 --heads 4 --window 100 --dropout 0.1 \
    --batch-size 64 --lr 2e-3 --warmup 100 --epochs 5 --no-progress
python 04_infer.py --output-dir "$output" --run demo --fold 0 --no-progress
python 05_evaluate.py --input-dir "$input" --output-dir "$output" --run demo --bootstrap 200
