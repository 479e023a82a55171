"""Convert a public knowledge-tracing dataset (DKVMN 3-line / AKT 4-line / pyKT CSV files) into
competition-schema input files: train.csv, questions.csv, lectures.csv, id maps, folds and
conversion.json (what was filled in). See common/inputs/kt_datasets.py.

    python 00_convert_kt_dataset.py --dataset assist2009_pid
    python 00_convert_kt_dataset.py --dataset assist2015 --output-dir input/assist2015
    python 00_convert_kt_dataset.py --config configs/assist2015.toml   (its [convert] table)
    python 00_convert_kt_dataset.py --dataset assist2015_pykt --output-dir input/assist2015_pykt
    python 00_convert_kt_dataset.py --format 4line --inputs a.csv b.csv --name mine \
        --input-folds 0 1 --output-dir input/mine
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common import cli
from common.files import check_writable
from common.inputs.kt_datasets import (
    MULTI_SKILL_MODES,
    PRESETS,
    TIMESTAMP_STEP_MS,
    ConversionConfig,
    convert_dataset,
    preset_config,
)
from common.inputs.kt_readers import LINE_FORMATS
from common.options import at_least

SHARED_DATA = Path("../shared/data")  # where the shared real data sits beside the checkout


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset",
        choices=sorted(PRESETS),
        help="a known dataset (preset; default: none, give --format and --inputs)",
    )
    parser.add_argument(
        "--source-dir",
        type=Path,
        help="folder holding the preset's files (default: ../shared/data/<folder>)",
    )
    parser.add_argument(
        "--format",
        choices=LINE_FORMATS,
        dest="line_format",
        help="the files' line format (default: the preset's)",
    )
    parser.add_argument(
        "--inputs", nargs="+", type=Path, help="input files, in order (default: the preset's)"
    )
    parser.add_argument("--name", help="dataset name (default: the preset's)")
    parser.add_argument(
        "--input-folds",
        nargs="+",
        type=cli.ranged(int, at_least(-1)),
        help="the shipped fold of each input file's students (-1: none); "
        "omit for no user_folds.csv (default: the preset's)",
    )
    parser.add_argument(
        "--multi-skill-rows",
        choices=MULTI_SKILL_MODES,
        default="keep",
        help="AKT rows repeating one response per skill: keep (as published benchmarks), "
        "bundle (one task container), merge (one row) (default: %(default)s)",
    )
    parser.add_argument(
        "--timestamp-step-ms",
        type=cli.ranged(int, at_least(1)),
        default=TIMESTAMP_STEP_MS,
        help="milliseconds between a student's consecutive rows, for files without times "
        "(default: %(default)s)",
    )
    parser.add_argument("--output-dir", type=Path, help="(default: input/<name>)")
    cli.config_flag(parser, argv, stage="convert")
    args = parser.parse_args(argv)
    if args.dataset is not None:
        clashing = [f for f in ("line_format", "inputs", "input_folds") if getattr(args, f)]
        if clashing:
            parser.error(f"--dataset sets the files itself; drop {clashing}")
    elif args.line_format is None or args.inputs is None or args.name is None:
        parser.error("give --dataset, or --format, --inputs and --name")
    elif args.source_dir is not None:
        parser.error("--source-dir goes with --dataset")
    return args


def build_config(args: argparse.Namespace) -> ConversionConfig:
    options = {
        "multi_skill_rows": args.multi_skill_rows,
        "timestamp_step_ms": args.timestamp_step_ms,
    }
    if args.dataset is not None:
        source_dir = args.source_dir or SHARED_DATA / PRESETS[args.dataset].folder
        if args.name:
            options["name"] = args.name
        return preset_config(args.dataset, source_dir, **options)
    return ConversionConfig(
        name=args.name,
        line_format=args.line_format,
        inputs=args.inputs,
        input_folds=args.input_folds,
        **options,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = build_config(args)
    except ValueError as error:  # a bad flag combination, e.g. folds for too few files
        print(f"error: {error}", file=sys.stderr)
        return 2
    output_dir = args.output_dir or Path("input") / config.name
    return cli.guarded(
        lambda: convert(config, output_dir),
        "nothing was written (the output folder appears whole or not at all); run it again",
        output_dir,
    )


def convert(config: ConversionConfig, output_dir: Path) -> None:
    start = time.perf_counter()
    check_writable(output_dir)  # before the files are read
    record = convert_dataset(config, output_dir)
    seconds = time.perf_counter() - start

    counts = record["counts"]
    print(f"{config.name} ({config.line_format}) -> {output_dir} in {seconds:.1f} s")
    for item in record["inputs"]:
        students, rows = item["students"], item["rows"]
        print(f"  {item['name']}: {students:,} students, {rows:,} rows, fold {item['fold']}")
    print(
        f"  students {counts['students']:,}  responses {counts['responses']:,}  "
        f"questions {counts['questions']:,}  skills {counts['skills']:,}  "
        f"share correct {record['share_correct']:.4f}"
    )
    print(
        f"  questions with several skills {counts['questions_with_several_skills']:,}; "
        f"rows repeating a response for another skill {counts['repeated_skill_rows_in_input']:,} "
        f"({config.multi_skill_rows}); empty students skipped {counts['empty_students_skipped']:,}"
    )
    # a copy in a later container than its attempt's first row is predicted after that
    # attempt's answer is revealed: every copy under keep, none under bundle or merge
    print(
        "  rows predicted after their own attempt's answer "
        f"{counts['rows_seeing_their_own_attempt']:,}"
    )
    print(f"  folds: {record['folds']}")


if __name__ == "__main__":
    sys.exit(main())
