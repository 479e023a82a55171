"""Stage 5: score every fold's streamed predictions against two baselines (and, on demo
data, the true probabilities) and write output/report.md with tables and figures (see
common/evaluate.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.baselines import BaselineConfig
from common.evaluate import EvaluateConfig, evaluate
from common.folds import FoldMismatchError
from common.schema import InputError

DEFAULTS = EvaluateConfig()
BASELINE_DEFAULTS = BaselineConfig()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--input-dir", type=Path, default=Path("input"), help="demo_truth.csv, if any")
    p.add_argument("--output-dir", type=Path, default=Path("output"))
    p.add_argument(
        "--folds",
        type=lambda text: [int(k) for k in text.split(",")],
        default=None,
        help="comma list (default: every fold{k}/ with stream_predictions.parquet)",
    )
    p.add_argument("--bootstrap", type=int, default=DEFAULTS.bootstrap, help="AUC resamples")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed)
    p.add_argument("--calibration-bins", type=int, default=DEFAULTS.calibration_bins)
    p.add_argument("--question-prior", type=float, default=BASELINE_DEFAULTS.question_prior)
    p.add_argument("--student-prior", type=float, default=BASELINE_DEFAULTS.student_prior)
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    config = EvaluateConfig(
        folds=args.folds,
        bootstrap=args.bootstrap,
        seed=args.seed,
        calibration_bins=args.calibration_bins,
        progress=not args.no_progress,
        baselines=BaselineConfig(args.question_prior, args.student_prior),
    )
    try:
        head = evaluate(args.output_dir, args.input_dir, config)
    except (InputError, FoldMismatchError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    interval = ""
    if args.bootstrap > 0:
        interval = f" (95% CI {head['auc_ci_low']:.4f}-{head['auc_ci_high']:.4f})"
    print(f"model AUC {head['auc']:.4f}{interval} on {head['rows']:,} rows, folds {head['folds']}")
    for name, auc in head["baselines"].items():
        print(f"{name} baseline AUC {auc:.4f} (lift {head['lift'][name]:+.4f})")
    if head["oracle_auc"] is not None:
        print(f"oracle AUC {head['oracle_auc']:.4f} on the same rows")
    print(head["selection"])
    print(f"report: {head['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
