"""Seeds of one recipe, averaged: what a bag of N training seeds would add to the streamed
blend, measured before the product bags anything.

For each of --seeds, bench.kt.run runs the same recipe (--kt: its flags, one data set and
one model) with --seed S in its own work folder (a fold it finished is skipped, so a
stopped run continues). Then, on the rows every seed streamed, this prints each seed's
AUC of the submitted predictions (04's oof.parquet: the blend where 04 fitted trees), the
AUC of their mean probability, and the mean's gain over the seeds' mean AUC.

    python -m bench.bench_seeds --seeds 0,1 --kt "--datasets assist2015 --folds 0 ..."
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.benchlib import WORK, Report, bench_run, module, results_flag, run
from common.metrics import auc_or_nan
from common.tables import markdown_table
from common.workspace import Workspace


def seed_predictions(folder: Path) -> pd.DataFrame:
    """The submitted prediction and label of every row the one run under `folder` streamed
    (bench.kt.run's layout: <data set>/<model>/ is 03's output dir, its run `bench`)."""
    candidates = (bench_run(Workspace(out)).oof for out in sorted(folder.glob("*/*")))
    found = [path for path in candidates if path.exists()]
    if len(found) != 1:
        raise SystemExit(f"{folder}: expected one run's out-of-fold predictions, found {found}")
    oof = pd.read_parquet(found[0])
    return oof.set_index(["fold", "row_id"])[["prediction", "label"]]


def seed_rows(frames: dict[int, pd.DataFrame]) -> tuple[int, list[list[str]]]:
    """On the rows every seed's predictions hold (matched by fold and row id): how many,
    and the table's rows: each seed's AUC, then the AUC of their mean probability and its
    gain over the seeds' mean AUC. Refuses seeds whose labels disagree there."""
    first = next(iter(frames.values()))
    shared = first.index
    for frame in frames.values():
        shared = shared.intersection(frame.index)
    labels = first.loc[shared, "label"].to_numpy()
    for seed, frame in frames.items():
        if not np.array_equal(frame.loc[shared, "label"].to_numpy(), labels):
            raise SystemExit(f"seed {seed}: its labels differ on the shared rows")
    scores = {seed: frame.loc[shared, "prediction"].to_numpy() for seed, frame in frames.items()}
    aucs = {seed: auc_or_nan(labels, score) for seed, score in scores.items()}
    bag = auc_or_nan(labels, np.mean(list(scores.values()), axis=0))
    single = float(np.mean(list(aucs.values())))
    rows = [[f"seed {seed}", f"{auc:.4f}", ""] for seed, auc in aucs.items()]
    rows.append(
        [f"mean of {len(frames)} seeds' probabilities", f"{bag:.4f}", f"{bag - single:+.4f}"]
    )
    return len(shared), rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="0,1", help="comma list of training seeds (>= 2)")
    parser.add_argument("--kt", required=True, help="bench.kt.run flags: one data set, model")
    parser.add_argument("--work-dir", type=Path, default=WORK / "seeds")
    results_flag(parser, "seeds")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if len(set(seeds)) < 2:
        parser.error("--seeds: at least two distinct seeds")
    say = Report("seeds", args.results)
    say.header("Seeds of one recipe, averaged (bench/bench_seeds.py)")
    frames = {}
    for seed in seeds:
        folder = args.work_dir / f"seed{seed}"
        flags = [*shlex.split(args.kt), "--seed", seed, "--bootstrap", 0]
        flags += ["--work-dir", folder, "--results", folder / "kt_run.md"]
        run(module("bench.kt.run", *flags), folder / "kt_run.log", label=f"seed {seed}", say=say)
        frames[seed] = seed_predictions(folder)
    shared, rows = seed_rows(frames)
    say()
    say(f"{shared:,} rows streamed by every seed")
    say(markdown_table(["predictions", "AUC", "− the seeds' mean AUC"], rows).rstrip("\n"))
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
