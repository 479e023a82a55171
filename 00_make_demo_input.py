"""Write a simulated Riiid! dataset (train.csv, questions.csv, lectures.csv) with the true
answer probabilities (demo_truth.csv), so the pipeline runs and its AUC has a known ceiling.

    python 00_make_demo_input.py --users 2000 --seed 0 --output-dir input/demo
"""

from __future__ import annotations

import argparse
import dataclasses

from common.demo import DemoConfig, make_demo
from common.files import write_run_record


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    defaults = DemoConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=defaults.n_users)
    parser.add_argument("--questions", type=int, default=defaults.n_questions)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--output-dir", default="input/demo")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = DemoConfig(n_users=args.users, n_questions=args.questions, seed=args.seed)
    demo = make_demo(config, args.output_dir)
    write_run_record(args.output_dir, "demo", dataclasses.asdict(config))
    s = demo.summary()
    print(
        f"{args.output_dir}: {s['rows']:,} rows, {s['students']:,} students, "
        f"{s['questions']:,} questions, {s['lectures']:,} lectures, "
        f"{s['share_correct']:.3f} correct, {s['seconds']:.1f} s"
    )


if __name__ == "__main__":
    main()
