"""03's training speed against an older checkout, like for like: whole 03_train.py epochs
of both codes on one demo, alternating, so that both see the same machine.

Each code preprocesses the same demo input (this code's 00, `--users` students, seed 0)
with its own 01 and 02, then trains fold 0 for one epoch per run, in rounds: before,
this code, before, this code ... Each run's rate is the epoch line's trained
interactions per second (03's own figure: the epoch's steps, validation excluded).

    git worktree add ../before 179d689     # the code before train-as-you-serve
    python -m bench.bench_train_before --before-code ../before --rounds 3
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench.benchlib import REPO, WORK, Report, make_demo, results_flag, script
from common.tables import markdown_table
from common.workspace import ModelFolder, Workspace

# 03's flags per config: the quick start's demo, and the reference size at SAINT's batch
CONFIGS = {
    "demo": "--d-model 64 --heads 4 --batch-size 64 --lr 2e-3",
    "d256": "--d-model 256 --heads 8 --batch-size 512 --lr 1e-3",
}
COMMON = "--model saint+ --layers 2 --window 100 --dropout 0.1 --warmup 100 --no-progress"
RATE = re.compile(r"^epoch 1: .*?([\d,]+) interactions/s", re.MULTILINE)


def epoch_rate(output: str) -> float:
    """The trained interactions/s of the epoch line 03 printed (either code's format)."""
    found = RATE.search(output)
    if found is None:
        raise ValueError(f"no epoch line with interactions/s in 03's output:\n{output[-2000:]}")
    return float(found.group(1).replace(",", ""))


def train_epoch(code: Path, out: Workspace, config: str, before: bool) -> float:
    """One 03 epoch of `code` on fold 0 of `out`; its rate. The before code has no --run:
    the fold folder it wrote last time (in the output dir itself, or in an older code's
    models/) is removed first."""
    flags = [*CONFIGS[config].split(), *COMMON.split(), "--fold", 0, "--epochs", 1]
    if before:
        fold = out.path / ModelFolder.name_of(0)
        for folder in (fold, out.path / "models", out.runs):
            shutil.rmtree(folder, ignore_errors=True)
    else:
        flags += ["--run", "bench_before", "--overwrite"]
    command = script("03_train.py", "--output-dir", out.path, *flags, code=code)
    done = subprocess.run(command, cwd=code, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(map(str, command))} failed:\n{done.stderr[-2000:]}")
    return epoch_rate(done.stdout)


def measure(before: Path, configs: list[str], rounds: int, users: int, say) -> list[list]:
    """Rows of the table: per config, each code's rates round by round and their median."""
    demo = WORK / "train_before" / f"input_{users}"
    codes = {"before": before, "this code": REPO}
    outs = {}
    for name, code in codes.items():  # this code's 00, each code's own 01 and 02
        out = WORK / "train_before" / f"{name.replace(' ', '_')}_{users}"
        folds = ("--n-folds", "5", "--seed", "0")
        outs[name] = make_demo(demo, out, users, 0, folds, say=say, code=code)
    rows = []
    for config in configs:
        rates: dict[str, list[float]] = {name: [] for name in codes}
        for _ in range(rounds):
            for name, code in codes.items():
                rates[name].append(train_epoch(code, outs[name], config, name == "before"))
                say(f"  {config} {name}: {rates[name][-1]:,.0f} interactions/s")
        median = {name: statistics.median(r) for name, r in rates.items()}
        rows.append([
            config,
            *(f"{median[n]:,.0f} ({', '.join(f'{r:,.0f}' for r in rates[n])})" for n in codes),
            f"{median['this code'] / median['before']:.2f}",
        ])  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before-code", type=Path, required=True, help="the older checkout")
    parser.add_argument("--configs", default="demo,d256", help=f"from {','.join(CONFIGS)}")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each code (>= 1)")
    parser.add_argument("--users", type=int, default=2000, help="demo students (>= 100)")
    results_flag(parser, "train_before")
    args = parser.parse_args()
    configs = args.configs.split(",")
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown or args.rounds < 1 or args.users < 100:
        parser.error(f"--configs from {sorted(CONFIGS)}, --rounds >= 1, --users >= 100")
    if not (args.before_code / "03_train.py").exists():
        parser.error(f"--before-code {args.before_code}: no 03_train.py there")
    report = Report("train_before", args.results)
    report.header("03 training speed against an older checkout (bench/bench_train_before.py)")
    commit = subprocess.run(
        ["git", "-C", str(args.before_code), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    report(f"before      the checkout of {commit or '?'}; a demo of {args.users:,} students")
    rows = measure(args.before_code.resolve(), configs, args.rounds, args.users, report)
    report()
    header = ["config", "before: median (runs)", "this code: median (runs)", "this / before"]
    report(markdown_table(header, rows))
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
