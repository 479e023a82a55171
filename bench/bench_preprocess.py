"""Throughput and peak memory of 01_preprocess.py on demo data of growing size.

    python -m bench.bench_preprocess                      # ~10M rows, plus 1M and 3M slices
    python -m bench.bench_preprocess --users 4200 --sizes 300000   # a quick look

Generates (or reuses) a demo train.csv of `--users` students with 00_make_demo_input.py
(42,000 students give about 10.1M rows), cuts slices of its first students (whole
students) at the `--sizes` row counts, and runs 01_preprocess.py on each as a
subprocess: wall time, rows/s and the child's own peak RSS (`os.wait4`'s rusage, so one
run's figure is not mixed with another's). Each size runs twice: with the file's increasing
row_ids, and with the first row_id raised above all others, which sends 01 down its
global row_id duplicate check (what a file with non-increasing row_ids costs). Prints
the machine, the commands and a projection of peak RSS to the real train.csv's 101M rows,
and writes the printed text to `--results`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv

from bench.benchlib import (
    GB,
    RSS_SOURCE,
    WORK,
    Report,
    load_average,
    make_demo_input,
    peak_rss_bytes,
    relative,
    results_flag,
    run,
    script,
    with_peak_rss,
)
from common.data.preprocess import PreprocessConfig

REAL_ROWS = 101_230_332  # rows of the competition's train.csv
REAL_STUDENTS = 393_656  # students in it
TARGET_ROWS_PER_S = 1_000_000  # on 2 cores (the target)
TARGET_RSS_GB_AT_10M = 3.0
BLOCK_SIZE = PreprocessConfig.block_size  # 01's default
READAHEAD_BLOCKS = 32  # kDefaultBackgroundMaxQ in arrow/util/async_generator.h
BYTES_PER_SEEN_USER = 100  # a Python int in a set, with the set's slack
ROW_ID_CHECK_BYTES_PER_ROW = 17


@dataclass
class Run:
    label: str
    rows: int
    students: int
    csv_bytes: int
    wall_s: float  # the whole subprocess, Python start-up included
    convert_s: float  # 01's own figure: reading, checking and writing train.csv
    peak_rss_bytes: int
    load_before: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.wall_s

    @property
    def convert_rows_per_s(self) -> float:  # 01 prints 0.00 s for a tiny file
        return self.rows / self.convert_s if self.convert_s else float("inf")


# ---------------------------------------------------------------------------------------
# data


def student_starts(train_csv: Path) -> np.ndarray:
    """0-based row indices where a new student begins, plus the row count at the end."""
    table = pacsv.read_csv(
        train_csv, convert_options=pacsv.ConvertOptions(include_columns=["user_id"])
    )
    user = table["user_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, user[1:] != user[:-1]])
    return np.append(starts, len(user))


def copy_lines(source: Path, dest: Path, n_lines: int, first_row_id: int | None = None) -> None:
    """Copy the first `n_lines` lines of `source`; optionally give data row 1 another
    row_id."""
    chunk = 64 << 20
    tmp = dest.with_name(f".{dest.name}.tmp")
    with open(source, "rb") as src, open(tmp, "wb") as out:
        header = src.readline()
        out.write(header)
        left = n_lines - 1
        if first_row_id is not None and left > 0:
            line = src.readline()
            out.write(str(first_row_id).encode() + line[line.index(b",") :])
            left -= 1
        while left > 0:
            block = src.read(chunk)
            if not block:
                break
            count = block.count(b"\n")
            if count >= left:
                newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n"))
                out.write(block[: newlines[left - 1] + 1])
                break
            out.write(block)
            left -= count
    os.replace(tmp, dest)


def make_input(
    full: Path, folder: Path, n_rows: int, first_row_id: int | None, say: Report
) -> None:
    """An input dir holding the first `n_rows` rows of `full`'s train.csv (or all of
    them), same questions and lectures."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("questions.csv", "lectures.csv"):
        shutil.copyfile(full / name, folder / name)
    marker = folder / "rows.json"
    wanted = {"rows": n_rows, "first_row_id": first_row_id}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return
    if first_row_id is None and n_rows == count_rows(full / "train.csv"):
        target = folder / "train.csv"
        target.unlink(missing_ok=True)
        os.link(full / "train.csv", target)  # the whole file, unchanged: no copy
    else:
        copy_lines(full / "train.csv", folder / "train.csv", n_rows + 1, first_row_id)
    marker.write_text(json.dumps(wanted))


_row_counts: dict[Path, int] = {}


def count_rows(train_csv: Path) -> int:
    if train_csv not in _row_counts:
        _row_counts[train_csv] = int(student_starts(train_csv)[-1])
    return _row_counts[train_csv]


# ---------------------------------------------------------------------------------------
# runs


def run_preprocess(label: str, input_dir: Path, output_dir: Path, students: int) -> Run:
    """01_preprocess.py on `input_dir` as a subprocess, its peak RSS from a launcher."""
    shutil.rmtree(output_dir, ignore_errors=True)
    log = output_dir.with_name(output_dir.name + ".log")
    rss_file = output_dir.with_name(output_dir.name + ".maxrss")
    flags = ["--input-dir", input_dir, "--output-dir", output_dir, "--no-progress"]
    load = os.getloadavg()[0]
    wall = run(with_peak_rss(script("01_preprocess.py", *flags), rss_file), log)
    text = log.read_text()
    rows = int(re.search(r"^rows ([\d,]+)", text, re.M)[1].replace(",", ""))
    convert_s = float(re.search(r"^([\d.]+) s  \(", text, re.M)[1])
    return Run(
        label=label,
        rows=rows,
        students=students,
        csv_bytes=(input_dir / "train.csv").stat().st_size,
        wall_s=wall,
        convert_s=convert_s,
        peak_rss_bytes=peak_rss_bytes(rss_file),
        load_before=load,
    )


def report_runs(say: Report, title: str, runs: list[Run]) -> None:
    say(title)
    say(
        f"{'rows':>12} {'students':>9} {'csv MB':>8} {'wall s':>7} {'rows/s':>11} "
        f"{'convert s':>9} {'conv rows/s':>11} {'peak RSS GB':>11} {'load':>5}"
    )
    for r in runs:
        say(
            f"{r.rows:>12,} {r.students:>9,} {r.csv_bytes / 1e6:>8.0f} {r.wall_s:>7.2f} "
            f"{r.rows_per_s:>11,.0f} {r.convert_s:>9.2f} {r.convert_rows_per_s:>11,.0f} "
            f"{r.peak_rss_bytes / GB:>11.3f} {r.load_before:>5.2f}"
        )


def readahead_bytes(run: Run) -> int:
    """Raw text pyarrow's streaming reader may hold: the whole file, up to READAHEAD_BLOCKS
    blocks."""
    return min(run.csv_bytes, READAHEAD_BLOCKS * BLOCK_SIZE)


def projection(say: Report, increasing: list[Run], not_increasing: list[Run]) -> None:
    cap = READAHEAD_BLOCKS * BLOCK_SIZE
    say("Peak RSS model: start-up + per-block working set + pyarrow's readahead, which")
    blocks = f"{READAHEAD_BLOCKS} x {BLOCK_SIZE >> 20} MiB"
    say(f"holds up to {READAHEAD_BLOCKS} blocks of raw text ({blocks}")
    say(f"= {cap / GB:.2f} GB; a smaller file is read ahead whole).")
    header = ("rows", "csv GB", "readahead GB", "peak RSS GB", "RSS - readahead")
    say(" ".join(f"{h:>{w}}" for h, w in zip(header, (12, 7, 12, 11, 15), strict=True)))
    for r in increasing:
        say(
            f"{r.rows:>12,} {r.csv_bytes / GB:>7.3f} {readahead_bytes(r) / GB:>12.3f} "
            f"{r.peak_rss_bytes / GB:>11.3f} {(r.peak_rss_bytes - readahead_bytes(r)) / GB:>15.3f}"
        )
    biggest = max(increasing, key=lambda r: r.rows)
    working_set = max(r.peak_rss_bytes - readahead_bytes(r) for r in increasing)
    csv_per_row = biggest.csv_bytes / biggest.rows
    real_csv = csv_per_row * REAL_ROWS
    readahead = min(real_csv, READAHEAD_BLOCKS * BLOCK_SIZE)
    seen_users = (REAL_STUDENTS - biggest.students) * BYTES_PER_SEEN_USER
    streaming = working_set + readahead + seen_users
    say()
    say(f"Projection to the real train.csv ({REAL_ROWS:,} rows, {REAL_STUDENTS:,} students,")
    say(f"~{real_csv / GB:.1f} GB of CSV at this demo's {csv_per_row:.0f} B/row):")
    say(f"  increasing row_ids (the real file): {working_set / GB:.2f} GB working set")
    say(
        f"  + {readahead / GB:.2f} GB readahead (capped) + {seen_users / GB:.2f} GB more seen users"
    )
    say(f"  = {streaming / GB:.2f} GB peak RSS: flat in rows once the file exceeds the cap.")
    check = ROW_ID_CHECK_BYTES_PER_ROW * REAL_ROWS
    say("  not increasing row_ids: after streaming, the row_id duplicate check holds")
    say(f"  {ROW_ID_CHECK_BYTES_PER_ROW} B/row (sorted copy 8, flags 1, memory-mapped row_id 8)")
    say(f"  = {check / GB:.2f} GB; at most {(streaming + check) / GB:.2f} GB if nothing")
    say("  from streaming were returned to the OS first.")
    say(f"  time: {REAL_ROWS / biggest.rows_per_s:.0f} s at the largest run's end-to-end rate")
    say(f"  ({biggest.rows_per_s:,.0f} rows/s).")
    say("What grows with rows, and what does not (common/data/preprocess.py):")
    say("  - pyarrow's readahead: with the file until it reaches the cap, then flat.")
    say("  - per-block buffers (parsed columns, null masks, checks, the parquet batch,")
    say("    one block queued by the prefetch thread): fixed by block_size.")
    say("  - seen users (_RowChecker.seen_users, a Python set) and the per-block student")
    say(f"    boundaries: grow with students, ~{BYTES_PER_SEEN_USER} B each.")
    say("  - parquet writer: a row group per block; only its footer metadata grows (KB).")
    say("  - the flat arrays go to disk block by block: page cache, not RSS.")
    say("  - the row_id duplicate check (only when row_ids are not increasing): 17 B/row,")
    say("    the one term linear in rows; the real train.csv's row_ids are 0..N-1.")
    compare = {r.rows: r for r in not_increasing}
    worst = max((compare[r.rows].peak_rss_bytes - r.peak_rss_bytes for r in increasing), default=0)
    say(f"  measured here: the check adds at most {worst / GB:+.3f} GB to the peak (its")
    say("    17 B/row stay below the streaming peak at these sizes).")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=WORK / "preprocess")
    parser.add_argument("--users", type=int, default=42_000, help="students in the demo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=[1_000_000, 3_000_000],
        help="row counts of the slices (rounded up to whole students); the full file runs too",
    )
    results_flag(parser, "preprocess")
    return parser.parse_args(argv)


def slice_sizes(starts: np.ndarray, sizes: list[int]) -> list[tuple[int, int]]:
    """(rows, students) of each slice of whole students at least `sizes` rows long, and
    of the whole file (`starts`: student_starts of it)."""
    total = int(starts[-1])
    chosen = []
    for size in sorted(set(sizes)):
        if size < total:
            cut = int(starts[np.searchsorted(starts, size)])  # rounded up to a student's end
            chosen.append((cut, int(np.searchsorted(starts, cut))))
    chosen.append((total, len(starts) - 1))
    return chosen


def measure_sizes(
    work: Path, full: Path, sizes: list[tuple[int, int]], say: Report
) -> dict[str, list[Run]]:
    """01 on each slice, with increasing row_ids and with the first one raised."""
    results: dict[str, list[Run]] = {"increasing": [], "non-increasing": []}
    for rows, students in sizes:
        for kind, first_row_id in (("increasing", None), ("non-increasing", 10**12)):
            folder = work / f"rows_{rows}_{kind}"
            make_input(full, folder / "input", rows, first_row_id, say)
            measured = run_preprocess(kind, folder / "input", folder / "output", students)
            results[kind].append(measured)
            shutil.rmtree(folder / "output")
    return results


def report_targets(say: Report, biggest: Run) -> None:
    """The largest run against the rate and memory targets."""
    say(
        f"targets     >= {TARGET_ROWS_PER_S:,} rows/s on 2 cores: "
        f"{'met' if biggest.rows_per_s >= TARGET_ROWS_PER_S else 'MISSED'} "
        f"({biggest.rows_per_s:,.0f} end to end, {biggest.convert_rows_per_s:,.0f} convert)"
    )
    rss_10m = biggest.peak_rss_bytes / GB
    say(
        f"            peak RSS <= {TARGET_RSS_GB_AT_10M} GB at ~10M rows: "
        f"{'met' if rss_10m <= TARGET_RSS_GB_AT_10M else 'MISSED'} "
        f"({rss_10m:.2f} GB at {biggest.rows:,} rows)"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = Report("preprocess", args.results)
    full = args.work_dir / "full"

    say.header("01_preprocess.py benchmark (bench/bench_preprocess.py)", "numpy", "pyarrow")
    say(f"peak RSS    of the 01_preprocess.py process, from {RSS_SOURCE}")
    make_demo_input(full, args.users, args.seed, say=say)

    starts = student_starts(full / "train.csv")
    total = int(starts[-1])
    _row_counts[full / "train.csv"] = total
    sizes = slice_sizes(starts, args.sizes)
    say(f"demo        {total:,} rows, {len(starts) - 1:,} students in {relative(full)}/train.csv")
    say(
        "command     python 01_preprocess.py --input-dir <work>/<size>/input "
        "--output-dir <work>/<size>/output --no-progress"
    )
    say()

    results = measure_sizes(args.work_dir, full, sizes, say)
    report_runs(say, "row_ids increasing (as in the real train.csv)", results["increasing"])
    say()
    report_runs(
        say,
        "row_ids not increasing (first row_id raised: the global duplicate check runs)",
        results["non-increasing"],
    )
    say()
    say("wall s / rows/s: the whole subprocess (Python and library start-up, questions.csv,")
    say("train.csv, summary); convert s: 01's own figure for train.csv alone.")
    say()
    projection(say, results["increasing"], results["non-increasing"])
    say()
    report_targets(say, max(results["increasing"], key=lambda r: r.rows))
    say(f"load avg    {load_average()} (1, 5, 15 min) at the end")
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
