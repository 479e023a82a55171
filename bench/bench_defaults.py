"""Defaults that train at any data size: 03_train.py with no flag but --epochs, against
the README's small-data recipe, on the same fold of a 3,000-student demo, as a new user
would run them (00 -> 01 -> 02 with their defaults, 03, 04 on best.pt chosen on the inner
split). Target: the defaults within 0.01 streamed AUC of the recipe.

    python bench/bench_defaults.py      # output: bench/results/defaults.txt
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd
from benchlib import (
    BENCH_RUN,
    WORK,
    Report,
    bench_fold,
    link_data,
    machine,
    make_demo,
    results_flag,
    run,
    script,
)

from common.tables import markdown_table

# the README's recipe for small data sets (run_demo.sh's 03 flags)
RECIPE = (
    "--model", "saint+", "--d-model", "64", "--layers", "2", "--heads", "4", "--window",
    "100", "--dropout", "0.1", "--batch-size", "64", "--lr", "2e-3", "--warmup", "100",
    "--epochs", "5",
)  # fmt: skip
RUNS = {"defaults": ("--epochs", "10"), "small-data recipe": RECIPE}


def train_and_stream(work: Path, prep: Path, name: str, flags: tuple[str, ...], say) -> dict:
    """03 (resumed where it stopped) and 04 on fold 0 in work/<name>, unless streamed."""
    out = link_data(work / name.replace(" ", "-"), prep)
    summary = bench_fold(out) / "stream_summary.json"
    if not summary.exists():
        fold = ("--output-dir", out, "--run", BENCH_RUN, "--fold", "0")
        # --resume: an interrupted benchmark continues after its last whole epoch
        train = script("03_train.py", *fold, *flags, "--resume", "--no-progress")
        run(train, out / "train.log", append=True, say=say)
        infer = script("04_infer.py", *fold, "--no-export", "--no-progress")
        run(infer, out / "infer.log", append=True, say=say)
    printed = (out / "train.log").read_text()
    schedule = re.search(r"^schedule: .*$", printed, re.M).group(0)
    batches = re.search(r"batches of (\d+)", printed).group(1)
    history = pd.read_csv(bench_fold(out) / "history.csv")
    seconds = round((history["train_seconds"] + history["valid_seconds"]).sum())
    resumed = re.search(r"^resumed after epoch (\d+)", printed, re.M)
    stream = json.loads(summary.read_text())
    return {
        "flags": " ".join(flags),
        "batch": int(batches),
        "schedule": schedule.removeprefix("schedule: "),
        "epochs run": str(len(history)) + (f" (resumed after {resumed[1]})" if resumed else ""),
        "best epoch": stream["checkpoint_epoch"],
        "selected on": stream["checkpoint_selected_on"],
        "train seconds": seconds,
        "streamed AUC": stream["auc"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--users", type=int, default=3000)
    p.add_argument("--work-dir", type=Path, default=WORK / "defaults")
    results_flag(p, "defaults")
    args = p.parse_args()
    say = Report("defaults", args.results)
    say.header("03's defaults against the small-data recipe (bench/bench_defaults.py)")
    work = args.work_dir
    prep = make_demo(work / "input", work / "prep", args.users, 0, logs=work, say=say)
    results = {name: train_and_stream(work, prep, name, f, say) for name, f in RUNS.items()}
    gap = results["defaults"]["streamed AUC"] - results["small-data recipe"]["streamed AUC"]
    header = ["run", "03 flags", "batch", "schedule", "epochs run", "best epoch (inner)"]
    header += ["training s", "streamed AUC"]
    body = [
        [name, f"`{r['flags']}`", str(r["batch"]), r["schedule"], r["epochs run"],
         str(r["best epoch"]), f"{r['train seconds']:,}", f"{r['streamed AUC']:.4f}"]
        for name, r in results.items()
    ]  # fmt: skip
    text = (
        "`python bench/bench_defaults.py` (output: `bench/results/defaults.txt`): a "
        f"{args.users:,}-student demo (seed 0), 02's default folds, fold 0; "
        f"{machine()}, CPU. Both runs stream best.pt, chosen on the inner split of the "
        "training students.\n\n"
        + markdown_table(header, body, "ll" + "r" * (len(header) - 2))
        + f"\nDefaults minus recipe: {gap:+.4f} AUC (target: at least -0.01): "
        + ("met" if gap >= -0.01 else "not met")
        + ".\n"
    )
    say()
    say(text.rstrip("\n"))
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
