"""Stage 2: split students into cross-validation folds (see common/folds.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.folds import STRATEGIES, FoldConfig, make_folds
from common.schema import InputError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--input-dir",
        type=Path,
        default=Path("input"),
        help="read for --strategy dataset (user_folds.csv)",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("output"))
    parser.add_argument("--n-folds", type=int, default=FoldConfig.n_folds)
    parser.add_argument("--seed", type=int, default=FoldConfig.seed)
    parser.add_argument("--strategy", choices=STRATEGIES, default=FoldConfig.strategy)
    parser.add_argument(
        "--new-share",
        type=float,
        default=FoldConfig.new_share,
        help="user strategy: share of validation students that are new",
    )
    parser.add_argument(
        "--last-n",
        type=int,
        default=FoldConfig.last_n,
        help="last-n strategy: validation rows per student",
    )
    parser.add_argument(
        "--valid-share",
        type=float,
        default=FoldConfig.valid_share,
        help="virtual-time strategy: share of rows in the validation tail",
    )
    args = parser.parse_args()
    config = FoldConfig(
        n_folds=args.n_folds,
        seed=args.seed,
        strategy=args.strategy,
        new_share=args.new_share,
        last_n=args.last_n,
        valid_share=args.valid_share,
    )
    try:
        stats = make_folds(args.output_dir, config, args.input_dir)
    except (InputError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"strategy {config.strategy}, {config.n_folds} folds, seed {config.seed}")
    for s in stats:
        print(
            f"fold {s['fold']}: train rows {s['train_rows']:,}  valid rows {s['valid_rows']:,}  "
            f"valid students {s['valid_students']:,} (new {s['new_students']:,})  "
            f"questions {s['valid_question_share']:.3f}  correct {s['valid_share_correct']:.3f}"
        )
    print(f"wrote {args.output_dir / 'folds'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
