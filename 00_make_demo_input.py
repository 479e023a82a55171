"""Write a simulated Riiid! dataset (train.csv, questions.csv, lectures.csv) with the true
answer probabilities (demo_truth.csv), so the pipeline runs and its AUC has a known ceiling.

    python 00_make_demo_input.py --users 2000 --seed 0 --output-dir input/demo
"""

from __future__ import annotations

import dataclasses
import sys

from common import cli
from common.files import write_run_record
from common.inputs.demo import DemoConfig, make_demo


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    cli.path_flags(parser, output="input/demo")
    cli.add_config_flags(parser, DemoConfig, only=("n_users", "n_questions", "seed", "max_events"))
    config, args = cli.parse_config(parser, DemoConfig, argv)
    demo = make_demo(config, args.output_dir)
    write_run_record(args.output_dir, "demo", dataclasses.asdict(config))
    s = demo.summary()
    print(
        f"{args.output_dir}: {s['rows']:,} rows, {s['students']:,} students, "
        f"{s['questions']:,} questions, {s['lectures']:,} lectures, "
        f"{s['share_correct']:.3f} correct, {s['seconds']:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
