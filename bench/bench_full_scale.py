"""A Riiid-size rehearsal: every stage on a demo of the real train.csv's shape, timed and
its peak memory measured in a fresh process, against the targets.

    python bench/bench_full_scale.py                    # full size: ~101M rows, 393,656 students
    python bench/bench_full_scale.py --scale 0.01       # a hundredth, in minutes
    python bench/bench_full_scale.py --skip generate,preprocess,folds   # reuse the work folder

Stages (bench/rehearsal.py; the report: bench/rehearsal_report.py): the demo in parallel
chunks (common/inputs/demo_parallel.py), 01, 02 (one virtual-time fold: its tail is the Kaggle-like
stream), 03's training steps at the reference size (d256, 2+2 layers, batch 512) on its own
data path, 03's batch builder alone, 04 on the first --stream-rows question rows of the
stream (the emulated API; then its Kaggle path with the bundle's snapshot of every student)
and 04's loop under cProfile. A skipped stage reports the figures its last run kept in the
work folder. Writes the printed text to --results.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import rehearsal
import rehearsal_report
from benchlib import RSS_SOURCE, WORK, Report, load_average, results_flag

STAGES = ("generate", "preprocess", "folds", "train", "batches", "stream", "kaggle", "profile")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="share of Riiid's students")
    parser.add_argument("--work-dir", type=Path, default=WORK / "full_scale")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="processes generating the demo")
    parser.add_argument("--chunk-users", type=int, default=20_000, help="students per chunk")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of 03 and 04")
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
    skip = set(filter(None, args.skip.split(",")))
    if unknown := skip - set(STAGES):
        parser.error(f"--skip: unknown stages {sorted(unknown)}; stages are {STAGES}")
    say = Report("full_scale", args.results)
    places = rehearsal.Places(args.work_dir)
    say.header("Riiid-size rehearsal (bench/bench_full_scale.py)", "torch", "numpy", "pyarrow")
    say(f"scale       {args.scale:g} of the real train.csv's students; work {args.work_dir}")
    say(f"peak RSS    {RSS_SOURCE}, and the sampled PSS sum over a stage's process tree")
    say()

    def stage(name: str, run, *a) -> None:
        if name not in skip:
            say(f"{name}:")
            run(places, *a, say)

    stage("generate", rehearsal.run_generate, args.scale, args.seed, args.jobs, args.chunk_users)
    stage("preprocess", rehearsal.run_preprocess)
    stage("folds", rehearsal.run_folds, args.valid_share)
    train = (args.train_steps, args.train_warmup, args.batch_size, args.threads)
    stage("train", rehearsal.run_train, *train)
    stage("batches", rehearsal.run_batches, args.batch_seconds, [args.jobs], args.batch_size)
    stage("stream", rehearsal.run_stream, args.stream_rows or None, args.threads)
    stage("kaggle", rehearsal.run_kaggle, args.kaggle_rows, args.threads)
    stage("profile", rehearsal.run_profile, args.profile_rows, args.count_groups, args.threads)
    say()
    rehearsal_report.report(say, places, args.scale)
    say(f"load avg    {load_average()} (1, 5, 15 min) at the end")
    if args.clean:
        for folder in (places.input, places.prep, places.stream, places.bundle):
            shutil.rmtree(folder, ignore_errors=True)
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
