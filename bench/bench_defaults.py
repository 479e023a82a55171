"""Defaults that train at any data size: 03_train.py with no flag but --epochs, against
the README's small-data recipe, on the same fold of a 3,000-student demo, as a new user
would run them (00 -> 01 -> 02 with their defaults, 03, 04 on best.pt chosen on the inner
split). Target: the defaults within 0.01 streamed AUC of the recipe.

    python bench/bench_defaults.py
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.evaluate import markdown_table  # noqa: E402
from common.files import cpu_model, write_marked_section  # noqa: E402

MARKER = "defaults-benchmark"
# the README's recipe for small data sets (run_demo.sh's 03 flags)
RECIPE = (
    "--model", "saint+", "--d-model", "64", "--layers", "2", "--heads", "4", "--window",
    "100", "--dropout", "0.1", "--batch-size", "64", "--lr", "2e-3", "--warmup", "100",
    "--epochs", "5",
)  # fmt: skip
RUNS = {"defaults": ("--epochs", "10"), "small-data recipe": RECIPE}


def run(command: list[str], log: Path) -> str:
    """Run one step; its output is appended to `log` (a resumed run keeps both parts)."""
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): see {log}")
    return done.stdout


def prepare(work: Path, users: int) -> Path:
    prep = work / "prep"
    if not (prep / "folds" / "fold0.npz").exists():
        python, data = sys.executable, work / "input"
        run([python, "00_make_demo_input.py", "--users", str(users), "--seed", "0",
             "--output-dir", str(data)], work / "00.log")  # fmt: skip
        run([python, "01_preprocess.py", "--input-dir", str(data), "--output-dir", str(prep),
             "--no-progress"], work / "01.log")  # fmt: skip
        run([python, "02_make_folds.py", "--output-dir", str(prep)], work / "02.log")
    return prep


def train_and_stream(work: Path, prep: Path, name: str, flags: tuple[str, ...]) -> dict:
    out = work / name.replace(" ", "-")
    out.mkdir(parents=True, exist_ok=True)
    for link in ("data", "folds"):
        if not (out / link).exists():
            os.symlink(prep.resolve() / link, out / link)
    summary = out / "fold0" / "stream_summary.json"
    if not summary.exists():
        python = sys.executable
        # --resume: an interrupted benchmark continues after its last whole epoch
        run([python, "03_train.py", "--output-dir", str(out), "--fold", "0", *flags,
             "--resume", "--no-progress"], out / "train.log")  # fmt: skip
        run([python, "04_infer.py", "--output-dir", str(out), "--fold", "0", "--no-export",
             "--no-progress"], out / "infer.log")  # fmt: skip
    printed = (out / "train.log").read_text()
    schedule = re.search(r"^schedule: .*$", printed, re.M).group(0)
    batches = re.search(r"batches of (\d+)", printed).group(1)
    history = pd.read_csv(out / "fold0" / "history.csv")
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
    p.add_argument("--work-dir", type=Path, default=REPO / "bench" / "out" / "defaults")
    p.add_argument("--benchmarks-file", type=Path, default=REPO / "BENCHMARKS.md")
    args = p.parse_args()
    prep = prepare(args.work_dir, args.users)
    results = {name: train_and_stream(args.work_dir, prep, name, f) for name, f in RUNS.items()}
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
        f"{cpu_model()}, {os.cpu_count()} cores, CPU. Both runs stream best.pt, chosen on "
        "the inner split of the training students.\n\n"
        + markdown_table(header, body, "ll" + "r" * (len(header) - 2))
        + f"\nDefaults minus recipe: {gap:+.4f} AUC (target: at least -0.01): "
        + ("met" if gap >= -0.01 else "not met")
        + ".\n"
    )
    print(text)
    write_marked_section(args.benchmarks_file, MARKER, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
