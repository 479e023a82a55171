"""Write a simulated Riiid! dataset (train.csv, questions.csv, lectures.csv) with the true
answer probabilities (demo_truth.csv), so the pipeline runs and its AUC has a known ceiling.

    python 00_make_demo_input.py                      # 2,000 students into input/, then 01
    python 00_make_demo_input.py --users 2000 --seed 0 --output-dir input/demo
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from common import cli
from common.files import check_writable, write_run_record
from common.inputs.demo import DemoConfig, check_demo_target, make_demo
from common.workspace import record_file


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path("input"),
        help="where train.csv, questions.csv, lectures.csv and demo_truth.csv are written "
        "(default: input, where 01_preprocess.py reads; a folder holding another "
        "train.csv than a demo's is refused)",
    )
    cli.add_config_flags(parser, DemoConfig, only=("n_users", "n_questions", "seed", "max_events"))
    config, args = cli.parse_config(parser, DemoConfig, argv, stage="demo")
    return cli.guarded(lambda: write_demo(config, args.output_dir), output_dir=args.output_dir)


def write_demo(config: DemoConfig, output_dir: Path) -> None:
    check_writable(output_dir)  # a file there, a read-only folder: before the simulation
    check_demo_target(output_dir)
    demo = make_demo(config, output_dir)
    write_run_record(record_file(output_dir, "demo"), dataclasses.asdict(config))
    s = demo.summary()
    print(
        f"{output_dir}: {s['rows']:,} rows, {s['students']:,} students, "
        f"{s['questions']:,} questions, {s['lectures']:,} lectures, "
        f"{s['share_correct']:.3f} correct, {s['seconds']:.1f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
