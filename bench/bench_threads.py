"""CPU threads beside other work: 03's training and 04's stream (the trees' fit included)
with --threads 1 and --threads <every core>, on an idle machine and beside one busy core,
on a demo of --users students (the demo recipe, --epochs epochs).

The busy core is a process this script starts (a Python loop that never sleeps), so the
figures do not depend on what else the machine runs. torch's and scikit-learn's OpenMP
threads meet at the end of every parallel step; when one of them shares its core with
other work, the others wait for it, and each step takes as long as its slowest thread.

    python -m bench.bench_threads            # the table: bench/results/threads.txt
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.benchlib import (
    BENCH_RUN,
    DEMO_FOLD_FLAGS,
    SMALL_DATA_RECIPE,
    WORK,
    Report,
    bench_fold,
    link_data,
    make_demo,
    results_flag,
    run,
    script,
)
from common.tables import markdown_table
from common.workspace import Workspace

SETTINGS = ("idle", "one core busy")


def run_folders(work_dir: Path, cores: int) -> dict[tuple[str, int], Path]:
    """Each setting's and thread count's fresh folder under `work_dir`; one that exists
    and was not written by this script (no 03.log) is refused before any work."""
    folders = {
        (setting, threads): work_dir / f"{setting.split()[0]}_{threads}"
        for setting in SETTINGS
        for threads in (1, cores)
    }
    for folder in folders.values():
        if folder.exists() and not (folder / "03.log").exists():
            raise SystemExit(f"{folder}: not a folder this benchmark wrote; choose --work-dir")
    return folders


def measure(prep: Workspace, folder: Path, threads: int, epochs: int, say: Report) -> list:
    """03 then 04 on fold 0 with --threads `threads`, in a fresh `folder`: 03's training
    interactions/s and wall seconds, 04's wall seconds and streamed rows/s. A `folder` left
    by an earlier run of this script (main checked it first: run_folders) is emptied."""
    shutil.rmtree(folder, ignore_errors=True)
    out = link_data(folder, prep)
    where = ("--output-dir", out.path, "--run", BENCH_RUN, "--threads", threads, "--no-progress")
    train = script("03_train.py", *where, *SMALL_DATA_RECIPE, "--epochs", epochs)
    train_s = run(train, folder / "03.log", label="03", say=say)
    with open(bench_fold(out).history) as f:
        rates = [float(row["interactions_per_s"]) for row in csv.DictReader(f)]
    stream = script("04_infer.py", *where, "--fold", 0, "--no-export")
    stream_s = run(stream, folder / "04.log", label="04", say=say)
    summary = json.loads(bench_fold(out).stream_summary.read_text())
    assert summary["torch_threads"] == threads, summary["torch_threads"]
    return [
        f"{sum(rates) / len(rates):,.0f}", f"{train_s:.1f}",
        f"{stream_s:.1f}", f"{summary['rows_per_s']:,.0f}",
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=1000, help="demo students (>= 100)")
    parser.add_argument("--epochs", type=int, default=1, help="03's epochs (>= 1)")
    parser.add_argument("--work-dir", type=Path, default=WORK / "threads")
    results_flag(parser, "threads")
    args = parser.parse_args()
    if args.users < 100 or args.epochs < 1:
        parser.error("--users: at least 100; --epochs: at least 1")
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        parser.error("one usable core: there is no thread count to choose")
    folders = run_folders(args.work_dir, cores)
    say = Report("threads", args.results)
    say.header("CPU threads beside other work (bench/bench_threads.py)", "torch", "scikit-learn")
    data = args.work_dir / f"demo{args.users}"
    prep = make_demo(data / "input", data / "out", args.users, 0, DEMO_FOLD_FLAGS, say=say)
    rows = []
    for setting in SETTINGS:
        busy = None
        if setting != "idle":
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for threads in (1, cores):
                say(f"{setting}, --threads {threads}")
                measured = measure(prep, folders[setting, threads], threads, args.epochs, say)
                rows.append([setting, str(threads), *measured])
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    head = ["other work", "--threads", "03 interactions/s", "03 s", "04 s (trees + stream)"]
    say()
    say(markdown_table([*head, "04 rows/s"], rows).rstrip("\n"))
    say(
        f"\n03: the demo recipe, {args.epochs} epoch(s), the training loop's interactions/s "
        "(history.csv) and the process's wall time; 04: fold 0 streamed through the API "
        "emulator after the trees' fit, the process's wall time and the stream's rows/s."
    )
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
