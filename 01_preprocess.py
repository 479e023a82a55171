"""Stage 1: train/questions/lectures CSV -> parquet and flat arrays under <output-dir>/data/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.preprocess import PreprocessConfig, preprocess
from common.schema import InputError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input-dir", type=Path, default=Path("input"))
    parser.add_argument("--output-dir", type=Path, default=Path("output"))
    parser.add_argument(
        "--assign-row-ids",
        action="store_true",
        help="number rows 0..N-1 in file order (for dumps whose row_id is blank)",
    )
    parser.add_argument(
        "--max-memory",
        type=float,
        default=None,
        metavar="GB",
        help="refuse input whose estimated peak memory exceeds this (default: the memory "
        "available now; 0: no check); the estimate is in data/preprocess_summary.json",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args()
    config = PreprocessConfig(
        input_dir=args.input_dir,
        output_dir=args.output_dir,
        assign_row_ids=args.assign_row_ids,
        progress=not args.no_progress,
        max_memory=args.max_memory,
    )
    try:
        summary = preprocess(config)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary.report())
    print(f"wrote {args.output_dir / 'data'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
