"""Defaults that train at any data size: 03_train.py with no flag but --epochs, against
the README's small-data recipe, on the same fold of a 3,000-student demo, as a new user
would run them (00 -> 01 -> 02 with their defaults, 03, 04 on best.pt chosen on the inner
split). Target: the defaults within 0.01 streamed AUC of the recipe.

    python -m bench.bench_defaults      # output: bench/results/defaults.txt

Each run's figures come from the files 03 and 04 write: best.pt (its train_config and
resolved settings: the batch and the schedule), history.csv (epochs and training time)
and stream_summary.json (the streamed checkpoint's epoch and the AUC).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.benchlib import (
    SMALL_DATA_RECIPE,
    WORK,
    Report,
    link_data,
    machine,
    make_demo,
    results_flag,
)
from bench.fold_run import FoldRun, train_and_stream
from common.tables import markdown_table
from common.workspace import Workspace

RUNS = {"defaults": ("--epochs", "10"), "small-data recipe": SMALL_DATA_RECIPE}


def schedule_text(config: dict, resolved: dict) -> str:
    """The learning-rate schedule of a run's train_config and resolved settings, worded as
    03 prints it at the start (common/train/trainer.py, Trainer.describe)."""
    automatic = "" if config["warmup"] else " (automatic: a tenth of the run, at most 4,000)"
    steps = resolved["total_steps"]
    return (
        f"{config['schedule']}, lr {config['lr']:g} after a warm-up of {resolved['warmup']:,}"
        f"{automatic} of {steps:,} steps ({steps // max(config['epochs'], 1):,} per epoch)"
    )


def run_figures(fold: FoldRun, flags: tuple[str, ...]) -> dict:
    """What the table shows of one trained and streamed run."""
    best = fold.best_checkpoint()
    history = fold.history()
    resumed = fold.resumed_after()
    stream = fold.stream_summary()
    return {
        "flags": " ".join(flags),
        "batch": int(best["resolved"]["batch_size"]),
        "schedule": schedule_text(best["train_config"], best["resolved"]),
        "epochs run": str(len(history)) + (f" (resumed after {resumed[0]})" if resumed else ""),
        "best epoch": stream["checkpoint_epoch"],
        "selected on": stream["checkpoint_selected_on"],
        "train seconds": round((history["train_seconds"] + history["valid_seconds"]).sum()),
        "streamed AUC": stream["auc"],
    }


def train_and_read(work: Path, prep: Workspace, name: str, flags: tuple[str, ...], say) -> dict:
    """03 (resumed where it stopped) and 04 on fold 0 in work/<name> (on the data and
    folds of the workspace `prep`), unless streamed; then the run's figures."""
    out = link_data(work / name.replace(" ", "-"), prep)
    fold = FoldRun(out)
    if not fold.streamed():
        train_and_stream(fold, flags, logs=out.path, say=say)
    return run_figures(fold, flags)


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
    results = {name: train_and_read(work, prep, name, f, say) for name, f in RUNS.items()}
    gap = results["defaults"]["streamed AUC"] - results["small-data recipe"]["streamed AUC"]
    header = ["run", "03 flags", "batch", "schedule", "epochs run", "best epoch (inner)"]
    header += ["training s", "streamed AUC"]
    body = [
        [name, f"`{r['flags']}`", str(r["batch"]), r["schedule"], r["epochs run"],
         str(r["best epoch"]), f"{r['train seconds']:,}", f"{r['streamed AUC']:.4f}"]
        for name, r in results.items()
    ]  # fmt: skip
    text = (
        "`python -m bench.bench_defaults` (output: `bench/results/defaults.txt`): a "
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
