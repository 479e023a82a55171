"""What 02's folds/row_folds.csv costs at Riiid's size: common.data.folds.write_row_folds over
a synthetic layout of the real train.csv's shape (101,230,332 rows, 393,656 students,
rows spread at random over the students; 5 user folds, each student in one, cut at a
random row), written to a temporary folder. Prints the wall time, the file's size and the
process's peak RSS (the synthetic arrays included: row ids alone are 0.8 GB).

    python -m bench.bench_row_folds          # bench/results/row_folds.txt
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import numpy as np

from bench.benchlib import Report, peak_gb, results_flag
from common.data.arrays import TrainArrays
from common.data.fold_data import Fold
from common.data.folds import write_row_folds
from common.workspace import FoldsFolder

ROWS, STUDENTS, FOLDS = 101_230_332, 393_656, 5


def synthetic_folds(rows: int, students: int, n_folds: int) -> tuple[TrainArrays, list[Fold]]:
    rng = np.random.default_rng(0)
    lengths = rng.multinomial(rows - students, np.full(students, 1 / students)) + 1
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    columns = {"row_id": np.arange(rows, dtype=np.int64)}
    arrays = TrainArrays(np.arange(students, dtype=np.int32), offsets, columns)
    owner = rng.integers(0, n_folds, students)
    folds = []
    for k in range(n_folds):
        cut = lengths.copy()
        mine = owner == k
        cut[mine] = (rng.random(mine.sum()) * lengths[mine]).astype(np.int64)
        empty = np.zeros(0, dtype=np.int64)
        folds.append(Fold(k, cut, np.zeros(students, dtype=np.int64), empty))
    return arrays, folds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS, help="(default: %(default)s)")
    parser.add_argument("--students", type=int, default=STUDENTS, help="(default: %(default)s)")
    results_flag(parser, "row_folds")
    args = parser.parse_args(argv)
    say = Report("row_folds", args.results)
    say.header("02's row_folds.csv at Riiid's size (bench/bench_row_folds.py)", "pyarrow")
    arrays, folds = synthetic_folds(args.rows, args.students, FOLDS)
    say(f"synthetic layout: {args.rows:,} rows, {args.students:,} students, {FOLDS} user "
        f"folds; peak RSS {peak_gb():.2f} GB")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = FoldsFolder(folder).row_folds
        start = time.perf_counter()
        write_row_folds(path, arrays, folds)
        seconds = time.perf_counter() - start
        size = path.stat().st_size
    say(f"write_row_folds: {seconds:.1f} s ({args.rows / seconds:,.0f} rows/s), "
        f"{size / 1e9:.2f} GB of CSV; peak RSS {peak_gb():.2f} GB")  # fmt: skip
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
