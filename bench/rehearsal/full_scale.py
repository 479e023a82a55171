"""A Riiid-size rehearsal: every stage on a demo of the real train.csv's shape, timed and
its peak memory measured in a fresh process, against the targets.

    python -m bench.rehearsal.full_scale                 # full size: ~101M rows, 393,656 students
    python -m bench.rehearsal.full_scale --scale 0.01    # a hundredth, in minutes
    python -m bench.rehearsal.full_scale --skip generate,preprocess,folds   # reuse the work folder

Stages (bench/rehearsal/stages.py; the report: bench/rehearsal/report.py): the demo in parallel
chunks (common/inputs/demo_parallel.py), 01, 02 (one virtual-time fold: its tail is the Kaggle-like
stream), 03's training steps at the reference size (d256, 2+2 layers, batch 512) on its own
data path, 03's batch builder alone, 04 on the first --stream-rows question rows of the
stream (the emulated API, the model alone), the trees the Kaggle bundle ships (fitted on a
sample of students, bench/rehearsal/trees.py) and the bundle exported again with them, 04's
Kaggle path (the bundle's snapshot of every student: the model's and the trees' feature
state; the blend submitted) and that path under cProfile. A skipped stage reports the
figures its last run kept in the work folder. Writes the printed text to --results.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bench.benchlib import RSS_SOURCE, WORK, Report, load_average, results_flag
from bench.rehearsal import report, stages
from bench.rehearsal.stages import STAGES, Places


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="share of Riiid's students")
    parser.add_argument("--work-dir", type=Path, default=WORK / "full_scale")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="processes generating the demo")
    parser.add_argument("--chunk-users", type=int, default=20_000, help="students per chunk")
    parser.add_argument(
        "--threads", type=int, default=2, help="03's and 04's threads (and the trees')"
    )
    parser.add_argument("--valid-share", type=float, default=0.025, help="02's stream share")
    parser.add_argument("--train-steps", type=int, default=20, help="03's timed steps")
    parser.add_argument("--train-warmup", type=int, default=2, help="03's untimed steps")
    parser.add_argument("--batch-size", type=int, default=512, help="03's windows per step")
    parser.add_argument("--batch-seconds", type=float, default=60.0, help="builder's run")
    parser.add_argument(
        "--stream-rows",
        type=int,
        default=200_000,
        help="question rows 04 streams (0: the whole stream)",
    )
    parser.add_argument(
        "--tree-students",
        type=int,
        default=40_000,
        help="students whose training rows the trees are fitted on (0: all)",
    )
    parser.add_argument("--blend-weight", type=float, default=0.5, help="the model's weight")
    parser.add_argument(
        "--kaggle-rows", type=int, default=20_000, help="question rows of 04's Kaggle path"
    )
    parser.add_argument("--profile-rows", type=int, default=20_000, help="04 under cProfile")
    parser.add_argument("--count-groups", type=int, default=50, help="04's groups counted")
    parser.add_argument("--skip", default="", help=f"comma-separated, of {','.join(STAGES)}")
    parser.add_argument(
        "--clean", action="store_true", help="delete the work folder's data at the end"
    )
    results_flag(parser, "full_scale")
    args = parser.parse_args(argv)
    args.skip = set(filter(None, args.skip.split(",")))
    if unknown := args.skip - set(STAGES):
        parser.error(f"--skip: unknown stages {sorted(unknown)}; stages are {STAGES}")
    return args


def run_stages(args: argparse.Namespace, places: Places, say: Report) -> None:
    """Every stage not skipped, in order, each keeping its figures in the work folder."""
    recipe = {
        "generate": (stages.run_generate, args.scale, args.seed, args.jobs, args.chunk_users),
        "preprocess": (stages.run_preprocess,),
        "folds": (stages.run_folds, args.valid_share),
        "train": (
            stages.run_train, args.train_steps, args.train_warmup, args.batch_size, args.threads
        ),
        "batches": (stages.run_batches, args.batch_seconds, [args.jobs], args.batch_size),
        "stream": (stages.run_stream, args.stream_rows or None, args.threads),
        "trees": (stages.run_trees, args.tree_students, args.blend_weight, args.threads),
        "kaggle": (stages.run_kaggle, args.kaggle_rows, args.threads),
        "profile": (stages.run_profile, args.profile_rows, args.count_groups, args.threads),
    }  # fmt: skip
    for name in STAGES:
        if name not in args.skip:
            say(f"{name}:")
            stage, *stage_args = recipe[name]
            stage(places, *stage_args, say)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = Report("full_scale", args.results)
    places = Places(args.work_dir)
    say.header("Riiid-size rehearsal (bench/rehearsal/full_scale.py)", "torch", "numpy", "pyarrow")
    say(f"scale       {args.scale:g} of the real train.csv's students; work {args.work_dir}")
    say(f"peak RSS    {RSS_SOURCE}, and the sampled PSS sum over a stage's process tree")
    say()
    run_stages(args, places, say)
    say()
    report.report(say, places, args.scale)
    say(f"load avg    {load_average()} (1, 5, 15 min) at the end")
    if args.clean:
        for folder in (places.input, places.prep, places.stream, places.bundle):
            shutil.rmtree(folder, ignore_errors=True)
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
