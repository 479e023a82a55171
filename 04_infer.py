"""Stage 4: streaming inference under the competition's API rules (see common/inference.py).

Locally it streams fold k's validation rows through an emulator of the `riiideducation`
API and writes output/fold{k}/submission.csv, a metric table and the Kaggle bundle. In a
Kaggle notebook of the competition, where `riiideducation` is importable, the same loop
runs against the real API (or pass --competition).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

from common.checkpoint import CheckpointError
from common.folds import FoldMismatchError
from common.inference import InferConfig, export_kaggle, run_competition, run_emulated
from common.online import StateMemoryError
from common.schema import InputError

DEFAULTS = InferConfig()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--input-dir", type=Path, default=Path("input"), help="unused; for symmetry")
    p.add_argument("--output-dir", type=Path, default=Path("output"))
    p.add_argument("--fold", type=int, default=DEFAULTS.fold)
    p.add_argument("--checkpoint", default=DEFAULTS.checkpoint, help="file in output/fold{k}/")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=DEFAULTS.device)
    p.add_argument("--seed", type=int, default=DEFAULTS.seed, help="emulated group sizes")
    p.add_argument("--max-group-students", type=int, default=DEFAULTS.max_group_students)
    p.add_argument(
        "--cache-students",
        type=int,
        default=DEFAULTS.cache_students,
        help="students whose model cache stays in memory (LRU beyond)",
    )
    p.add_argument(
        "--max-state-memory",
        type=float,
        default=DEFAULTS.max_state_memory,
        metavar="GB",
        help="refuse, with a message, to let the online state (student rings + cache pool) "
        "grow past this many GB (default: unbounded; the total is in stream_summary.json)",
    )
    p.add_argument(
        "--kaggle-dir",
        type=Path,
        default=None,
        help="where to write the Kaggle bundle (default: the output dir)",
    )
    p.add_argument(
        "--kaggle-dataset-id",
        default=f"{os.environ.get('KAGGLE_USERNAME', 'your-kaggle-username')}/riiid-saint",
    )
    p.add_argument("--no-export", action="store_true", help="skip the Kaggle bundle")
    p.add_argument(
        "--competition",
        action="store_true",
        help="run against the real riiideducation API (automatic when importable)",
    )
    p.add_argument(
        "--model-dir",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="competition mode: the bundle's root (default: above this script)",
    )
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    try:
        return infer(args)
    except (
        CheckpointError,
        FoldMismatchError,
        StateMemoryError,
        InputError,
        FileNotFoundError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def infer(args: argparse.Namespace) -> int:
    config = InferConfig(
        fold=args.fold,
        device=args.device,
        seed=args.seed,
        max_group_students=args.max_group_students,
        cache_students=args.cache_students,
        checkpoint=args.checkpoint,
        progress=not args.no_progress,
        max_state_memory=args.max_state_memory,
    )
    if args.competition or importlib.util.find_spec("riiideducation") is not None:
        run_competition(
            args.model_dir, args.fold, args.device, args.cache_students, config.max_state_bytes
        )
        return 0
    summary = run_emulated(args.output_dir, config)
    fold_dir = args.output_dir / f"fold{args.fold}"
    print((fold_dir / "stream_metrics.md").read_text())
    print(json.dumps({k: summary[k] for k in ("auc", "rows", "groups", "rows_per_s")}))
    if not args.no_export:
        dest = export_kaggle(
            args.output_dir, args.fold, args.kaggle_dir or args.output_dir, args.kaggle_dataset_id
        )
        print(f"Kaggle bundle in {dest} (upload: kaggle datasets create -p {dest})")
    print(f"wrote {fold_dir / 'submission.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
