"""Ours against pyKT's SAINT as whole training processes: one epoch each, back to back, on
the same training questions, at equal width (d_model 256, feed-forward 256, 2+2 layers,
8 heads, window 100, dropout 0.1), at equal batch sizes: 512 windows (SAINT's) and 64
(pyKT's fastest on a 2-core CPU: bench/results/pykt_saint.txt).

- Data: a demo of --users students (00 -> 01 -> 02, 02's default folds); fold 0.
- Ours: `03_train.py --model saint --d-ff 256 ... --epochs 1` from start to exit: loading,
  the epoch's steps, scoring the inner split and the fold, the checkpoint and its files.
- pyKT: bench/pykt_saint_epoch.py under --pykt-python (a venv with pykt-toolkit; set-up in
  bench/pykt_saint_throughput.py) from start to exit: pyKT's KTDataset and DataLoader, its
  SAINT, Adam, train_model for one epoch (its steps, its evaluation of the validation fold,
  the checkpoint). Its data are exactly the questions ours trains on (each student's
  questions before 03's inner split, in pyKT's windows of --window), its validation fold
  the fold's validation questions. pyKT's cached dataset is built first, untimed, as 01's
  arrays are for ours.

The ratio is pyKT's wall time over ours on the same training questions (a rate: training
questions per second of the whole process); also step against step (each loop's steps,
scoring apart).

    python -m bench.bench_vs_pykt --pykt-python <venv>/bin/python    # bench/results/vs_pykt.txt
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.benchlib import (
    BENCH_RUN,
    WORK,
    Report,
    bench_fold,
    link_data,
    load_average,
    make_demo,
    relative,
    results_flag,
    run,
    script,
)
from bench.pykt_saint_epoch import SEQUENCES, TRAIN_FOLD, VALID_FOLD
from common.data.fold_data import load_fold_data
from common.tables import markdown_table
from common.train.config import TrainConfig
from common.workspace import Workspace

WIDTH = dict(d_model=256, d_ff=256, layers=2, heads=8, window=100, dropout=0.1)


def pykt_rows(sequences, students, begin, end, fold: int, window: int) -> list[list]:
    """pyKT's sequence rows (fold, uid, questions, concepts, responses, selectmasks) of
    questions begin..end-1 of each student, cut into windows of `window` (the last padded
    with -1), as pyKT's preprocessing writes them; windows of one question (nothing to
    predict) are left out, as pyKT leaves out sequences under its minimum length."""

    def field(values: np.ndarray, pad: list[str]) -> str:
        return ",".join([*map(str, values.astype(np.int64).tolist()), *pad])

    rows = []
    for student, first, last in zip(students, begin, end, strict=True):
        base = sequences.offsets[student]
        for start in range(first, last, window):
            flat = np.arange(base + start, base + min(start + window, last))
            if len(flat) < 2:
                continue
            pad = ["-1"] * (window - len(flat))
            rows.append(
                [fold, int(student), field(sequences.question[flat], pad),
                 field(sequences.part[flat], pad), field(sequences.response[flat], pad),
                 ",".join(["1"] * len(flat) + pad)]
            )  # fmt: skip
    return rows


def write_pykt_data(prep: Workspace, folder: Path, config: TrainConfig) -> dict:
    """pyKT's sequences file of fold 0: the questions 03 trains on (before its inner split,
    as 03 cuts it with `config`'s share and seed), and the fold's validation questions."""
    data = load_fold_data(prep, 0, config.inner_share, config.seed)
    seq = data.sequences
    everyone = np.arange(seq.n_students)
    fit = data.fit_length
    tails = data.fold_tails
    rows = pykt_rows(seq, everyone, np.zeros_like(fit), fit, TRAIN_FOLD, WIDTH["window"])
    rows += pykt_rows(seq, tails.students, tails.history, tails.end, VALID_FOLD, WIDTH["window"])
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(SEQUENCES + "*.pkl"):
        stale.unlink()
    with open(folder / SEQUENCES, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["fold", "uid", "questions", "concepts", "responses", "selectmasks"])
        writer.writerows(rows)
    return {
        "training_questions": int(fit.sum()),
        "num_q": int(data.n_questions),
        "num_c": int(seq.part.max()) + 1,
    }


def run_ours(prep: Workspace, work: Path, batch: int, args, say) -> dict:
    out = link_data(work / f"ours_b{batch}", prep)
    flags = ["--output-dir", out.path, "--run", BENCH_RUN, "--overwrite", "--fold", 0]
    flags += ["--model", "saint", "--d-model", WIDTH["d_model"], "--d-ff", WIDTH["d_ff"]]
    flags += ["--layers", WIDTH["layers"], "--heads", WIDTH["heads"]]
    flags += ["--window", WIDTH["window"], "--dropout", WIDTH["dropout"]]
    flags += ["--batch-size", batch, "--epochs", 1, "--no-progress"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    seconds = run(script("03_train.py", *flags), work / f"ours_b{batch}.log", env=env, say=say)
    epoch = pd.read_csv(bench_fold(out).history).iloc[0]
    return {
        "seconds": seconds,
        "steps_seconds": float(epoch["train_seconds"]),
        "scoring_seconds": float(epoch["valid_seconds"]),
        "trained": float(epoch["interactions_per_s"] * epoch["train_seconds"]),
    }


def run_pykt(folder: Path, work: Path, shape: dict, batch: int, args, say) -> dict:
    figures = work / f"pykt_b{batch}.json"
    command = [args.pykt_python, "-m", "bench.pykt_saint_epoch", "--data-dir", folder]
    command += ["--json", figures, "--num-q", shape["num_q"], "--num-c", shape["num_c"]]
    command += ["--batch-size", batch, "--seq-len", WIDTH["window"]]
    command += ["--d-model", WIDTH["d_model"], "--layers", WIDTH["layers"]]
    command += ["--heads", WIDTH["heads"], "--dropout", WIDTH["dropout"]]
    command += ["--threads", args.threads]
    command = list(map(str, command))
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if not any(folder.glob(SEQUENCES + "*.pkl")):
        run([*command, "--prepare"], work / "pykt_prepare.log", env=env, say=say)
    seconds = run(command, work / f"pykt_b{batch}.log", env=env, say=say)
    return json.loads(figures.read_text()) | {"seconds": seconds}


def batch_sizes(text: str) -> list[int]:
    sizes = [int(v) for v in text.split(",") if v.strip()]
    if not sizes or min(sizes) < 1:
        raise ValueError(text)
    return sizes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pykt-python", required=True, help="a Python with pykt-toolkit")
    parser.add_argument("--users", type=int, default=3000, help="the demo's students (>= 2)")
    parser.add_argument("--seed", type=int, default=0, help="the demo's seed (>= 0)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (>= 1)")
    parser.add_argument(
        "--batch-sizes",
        default="512,64",
        help="each (>= 1) a pair of runs, ours and pyKT's, comma-separated (512: SAINT's; "
        "64: pyKT's fastest on a 2-core CPU, bench/results/pykt_saint.txt)",
    )
    parser.add_argument("--work-dir", type=Path, default=WORK / "vs_pykt")
    results_flag(parser, "vs_pykt")
    args = parser.parse_args(argv)
    if args.users < 2 or args.seed < 0 or args.threads < 1:
        parser.error("--users must be >= 2, --seed >= 0 and --threads >= 1")
    if shutil.which(args.pykt_python) is None:
        parser.error(f"--pykt-python: no Python at {args.pykt_python!r}")
    try:
        args.batch_sizes = batch_sizes(args.batch_sizes)
    except ValueError:
        parser.error(f"--batch-sizes: positive integers, comma-separated, not {args.batch_sizes!r}")
    return args


def report(say, questions: int, pairs: list[tuple[int, dict, dict]]) -> None:
    """The table of (batch, ours, pyKT's) runs and their ratios."""
    rows = []
    for batch, ours, pykt in pairs:
        for name, r in ((f"ours: 03_train.py, batch {batch}", ours),
                        (f"pyKT: train_model, batch {batch}", pykt)):  # fmt: skip
            steps, scoring = r["steps_seconds"], r["scoring_seconds"]
            rest = r["seconds"] - steps - scoring
            rows.append(
                [name, f"{r['seconds']:.1f}", f"{steps:.1f}", f"{scoring:.1f}", f"{rest:.1f}",
                 f"{questions / r['seconds']:,.0f}", f"{questions / steps:,.0f}"]
            )  # fmt: skip
    say()
    say(f"Training questions (each student's questions before 03's inner split): {questions:,}.")
    trained = ", ".join(f"{ours['trained']:,.0f}" for _, ours, _ in pairs)
    say(f"Ours trained {trained} of them in its epoch's steps (03's count);")
    covered = pairs[0][2]["trained"]
    say(f"pyKT's loss covered {covered:,} (the first of each window is not predicted).")
    say("Scoring: ours the inner split and the fold's validation questions, pyKT its")
    say("validation fold. The rest: start-up, loading, the checkpoint and the run's files.")
    header = ["process", "wall s", "steps s", "scoring s", "the rest s"]
    header += ["training questions/s: whole process", "steps alone"]
    say(markdown_table(header, rows, "lrrrrrr").rstrip("\n"))
    say()
    for batch, ours, pykt in pairs:
        whole = pykt["seconds"] / ours["seconds"]
        step = pykt["steps_seconds"] / ours["steps_seconds"]
        ratios = f"{whole:.2f}x as whole processes, {step:.2f}x step against step"
        say(f"batch {batch}: ours / pyKT {ratios}")
    best = min(pykt["seconds"] for _, _, pykt in pairs)
    fastest = min(ours["seconds"] for _, ours, _ in pairs)
    say(f"each at its fastest batch size: ours / pyKT {best / fastest:.2f}x as whole processes")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = Report("vs_pykt", args.results)
    say.header("Ours against pyKT's SAINT, whole training processes (bench/bench_vs_pykt.py)")
    work = args.work_dir
    prep = make_demo(work / "input", work / "prep", args.users, args.seed, logs=work, say=say)
    shape = write_pykt_data(prep, work / "pykt_data", TrainConfig())
    say(f"data        {args.users:,} demo students (seed {args.seed}), fold 0")
    say(f"width       {WIDTH}, 1 epoch, {args.threads} threads")
    say(f"load avg    {load_average()} at start")
    pairs = []
    for batch in args.batch_sizes:
        ours = run_ours(prep, work, batch, args, say)
        pykt = run_pykt(work / "pykt_data", work, shape, batch, args, say)
        pykt["steps_seconds"] = pykt["train_model_seconds"] - pykt["scoring_seconds"]
        pairs.append((batch, ours, pykt))
    say(f"load avg    {load_average()} at the end")
    report(say, shape["training_questions"], pairs)
    say(f"logs: {relative(work)}/ours_b*.log, pykt_b*.log")
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
