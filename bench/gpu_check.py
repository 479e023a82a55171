"""The GPU check: one script, one table, under 10 minutes on one GPU.

Steps, each a process of its own (what a user runs):
  1. training throughput at the reference size (d_model 256, 2+2 layers, window 100,
     batch 512) in bf16, without and with torch.compile (bench_train.py --compile, which
     times both on the same batches), and the
     positions the CUDA batch plan computes per trained question (target at most 1.3);
  2. a short demo training on the device (03_train.py, 2 epochs of the small-data recipe;
     1 with --quick), every architecture family of the registry in one run (SAINT, the
     LSTM, the Last Query Transformer RNN: --arch): each one's interactions/s and
     inner-split AUC;
  3. streaming at d256 through 04_infer.py on the device, in groups like the real example
     test (bench_stream.py);
  4. streaming that demo run's blend of every family and the trees through 04_infer.py
     on the device: the Kaggle path's rows/s.
Every step reads one demo of --users students (40 with --quick), split as bench_stream.py
splits its own (fold 0 trains on the first 97.5% of rows by virtual time and streams the
rest).
Targets on one H200-class GPU: training at least 1M interactions/s at the reference size
(a full Riiid epoch of about 100M interactions in under 2 minutes), streaming at least
10,000 rows/s.

    python -m bench.gpu_check                       # on a machine with CUDA
    python -m bench.gpu_check --device cpu --quick  # the same steps, tiny, on a CPU
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import time
from pathlib import Path

import torch

from bench.bench_stream import STREAM_SPLIT
from bench.benchlib import (
    BENCH_RUN,
    SMALL_DATA_RECIPE,
    WORK,
    Report,
    bench_fold,
    link_data,
    make_demo,
    module,
    results_flag,
    run,
    script,
)
from common.device import autocast_dtype
from common.model.registry import ARCH_NAMES
from common.tables import markdown_table
from common.workspace import Workspace

TRAIN_TARGET = 1_000_000  # interactions/s at the reference size, one H200-class GPU
STREAM_TARGET = 10_000  # rows/s at d256
RIIID_INTERACTIONS = 101_230_332  # rows of the real train.csv (an epoch's upper bound)


def train_rates(
    args: argparse.Namespace, data_out: Workspace, say: Report
) -> tuple[float, float | None, float]:
    """bench_train.py's median interactions/s at the reference size, eager and (unless
    --no-compile) with torch.compile, measured in one process on the same batches, and
    the positions its CUDA batch plan computes per trained question."""
    config = "demo" if args.quick else "d256"
    steps = ("--steps", 2, "--warmup", 1, "--repeats", 1) if args.quick else ("--steps", 20)
    results = args.work_dir / "train.txt"
    command = module("bench.bench_train", "--data-dir", data_out.path, "--configs", config, *steps)
    command += ["--device", args.device, "--amp", args.amp, "--results", str(results)]
    command += ["--work-dir", str(args.work_dir / "train")]
    command += [] if args.no_compile else ["--compile"]
    run(command, say=say)
    text = results.read_text()

    def rate(pattern: str) -> float:
        found = re.search(rf"^{config}: {pattern}([\d,]+) interactions/s", text, re.M)
        return float(found.group(1).replace(",", ""))

    plan = re.search(rf"^{config}: CUDA plan ([\d.]+) positions", text, re.M)
    if args.no_compile:
        return rate(""), None, float(plan.group(1))
    return rate("eager "), rate(""), float(plan.group(1))


def demo_epochs(args: argparse.Namespace) -> int:
    return 1 if args.quick else 2


def demo_training(args: argparse.Namespace, data_out: Workspace, say: Report) -> dict:
    """03_train.py for 2 epochs (1 with --quick) on the device, every family of the
    registry in one run: each one's last epoch's interactions/s and AUC, by name."""
    out = link_data(args.work_dir / "demo_run", data_out)
    flags = ["--output-dir", out.path, "--run", BENCH_RUN]
    flags += ["--device", args.device, "--amp", args.amp]
    flags += [*SMALL_DATA_RECIPE, "--epochs", demo_epochs(args), "--no-progress"]  # the demo's
    flags += ["--arch", ",".join(ARCH_NAMES)]
    run(script("03_train.py", *flags), say=say)
    found = {}
    for i, arch in enumerate(ARCH_NAMES):
        folder = bench_fold(out) if i == 0 else bench_fold(out).member(arch)
        with open(folder.history) as f:
            last = list(csv.DictReader(f))[-1]
        found[arch] = {"rate": float(last["interactions_per_s"]), "auc": float(last["inner_auc"])}
    return found


def blend_stream(args: argparse.Namespace, say: Report) -> dict:
    """04_infer.py on the demo run of every family (demo_training's), on the device: the
    stacked blend of the families and the trees streamed (the Kaggle path's step)."""
    out = Workspace(args.work_dir / "demo_run")
    flags = ["--output-dir", out.path, "--run", BENCH_RUN, "--fold", 0, "--no-export"]
    run(script("04_infer.py", *flags, "--device", args.device, "--no-progress"), say=say)
    return json.loads(bench_fold(out).stream_summary.read_text())


def stream_rate(args: argparse.Namespace, data_out: Workspace, say: Report) -> dict:
    """bench_stream.py at d256 with 04_infer.py on the device, on fold 0 of the demo
    `data_out`: 04's stream summary (its rows/s, and its cache builds apart:
    common.stream.api_loop.stream_loop)."""
    config = "demo" if args.quick else "d256"
    command = module("bench.bench_stream", "--data-dir", data_out.path, "--configs", config)
    command += ["--work-dir", str(args.work_dir), "--results", str(args.work_dir / "stream.txt")]
    run([*command, "--", "--device", args.device], say=say)
    summary = bench_fold(Workspace(args.work_dir / f"stream_{config}")).stream_summary
    return json.loads(summary.read_text())


QUICK_USERS = 40  # --quick: enough for every step, and an epoch on a CPU takes seconds


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--amp", choices=("auto", "bf16", "fp16", "off"), default="auto",
        help="mixed precision (default auto: bf16 on a GPU that has it natively, as 03's; "
        "off on a CPU, whose bf16 is emulated: 2x slower here, and measuring nothing)",
    )  # fmt: skip
    parser.add_argument("--users", type=int, default=5000, help="demo students (>= 100)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled run")
    parser.add_argument("--work-dir", type=Path, default=WORK / "gpu_check")
    results_flag(parser, "gpu_check")
    args = parser.parse_args()
    if args.users < 100:
        parser.error(f"--users {args.users}: at least 100 demo students")
    return args


def main() -> int:
    args = parse()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    say = Report("gpu_check", args.results)
    say.header("GPU check (bench/gpu_check.py)")
    begin = time.perf_counter()
    users = QUICK_USERS if args.quick else args.users
    data = args.work_dir / f"demo{users}"
    data_out = make_demo(data / "input", data / "out", users, 0, STREAM_SPLIT, say=say)
    eager, compiled, plan = train_rates(args, data_out, say)
    demo = demo_training(args, data_out, say)
    stream = stream_rate(args, data_out, say)
    blend = blend_stream(args, say)

    def epoch_minutes(rate: float) -> str:
        return f"{RIIID_INTERACTIONS / rate / 60:.1f} min per Riiid epoch"

    size = "demo size (--quick)" if args.quick else "reference size"
    model = "demo" if args.quick else "d256"
    epochs = f"{demo_epochs(args)} epoch{'s' if demo_epochs(args) > 1 else ''}"
    rows = [
        [f"training, {size}, eager", f"{eager:,.0f} interactions/s", "≥ 1,000,000",
         epoch_minutes(eager)],
        [f"training, {size}, torch.compile",
         "—" if compiled is None else f"{compiled:,.0f} interactions/s", "≥ 1,000,000",
         "" if compiled is None else epoch_minutes(compiled)],
        ["03's CUDA batch plan", f"{plan:.3f} positions per trained question", "≤ 1.3",
         "context and padding included"],
        *([f"03 demo recipe, {arch}, {epochs}", f"{demo[arch]['rate']:,.0f} interactions/s",
           "—", f"inner AUC {demo[arch]['auc']:.4f}"] for arch in ARCH_NAMES),
        [f"04 streaming, {model}, groups of 18-33 rows", f"{stream['rows_per_s']:,.0f} rows/s",
         "≥ 10,000", f"{2_500_000 / stream['rows_per_s'] / 60:.0f} min for 2.5M rows; "
         f"{stream['cache_builds']:,} cache builds took {stream['build_seconds']:.1f} s "
         f"(without them {stream['rows_per_s_without_builds']:,.0f} rows/s)"],
        ["04 streaming, the demo run's blend of every family and the trees",
         f"{blend['rows_per_s']:,.0f} rows/s", "—",
         f"AUC {blend['auc']:.4f} (the model alone {blend['model_auc']:.4f})"],
    ]  # fmt: skip
    say()
    say(markdown_table(["step", "measured", "target", "reading"], rows).rstrip("\n"))
    amp = autocast_dtype(args.amp, torch.device(args.device))
    say(f"\ndevice {args.device}, amp {args.amp} ({amp or 'fp32'}); the whole check took "
        f"{time.perf_counter() - begin:.0f} s")  # fmt: skip
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
