"""Stage 4: streaming inference under the competition's API rules (see common/inference.py).

Locally it streams fold k's validation rows through an emulator of the `riiideducation`
API and writes output/fold{k}/submission.csv, a metric table and the Kaggle bundle. In a
Kaggle notebook of the competition, where `riiideducation` is importable, the same loop
runs against the real API (or pass --competition).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from common import cli, layout
from common.errors import UserError
from common.inference import InferConfig, export_kaggle, run_competition, run_emulated


def parse_args(argv: list[str] | None):
    parser = cli.parser(__doc__)
    cli.path_flags(parser)
    cli.add_config_flags(parser, InferConfig)
    parser.add_argument(
        "--kaggle-dir", type=Path, help="where to write the Kaggle bundle (default: the output dir)"
    )
    user = os.environ.get("KAGGLE_USERNAME", "your-kaggle-username")
    parser.add_argument(
        "--kaggle-dataset-id", default=f"{user}/riiid-saint", help="(default: %(default)s)"
    )
    parser.add_argument("--no-export", action="store_true", help="skip the Kaggle bundle")
    parser.add_argument(
        "--competition",
        action="store_true",
        help="run against the real riiideducation API (automatic when importable)",
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="competition mode: the bundle's root (default: above this script)",
    )
    return cli.parse_config(parser, InferConfig, argv)


def main(argv: list[str] | None = None) -> int:
    config, args = parse_args(argv)
    return cli.guarded(lambda: infer(config, args))


def infer(config: InferConfig, args) -> None:
    if args.competition or importlib.util.find_spec("riiideducation") is not None:
        run_competition(args.model_dir, config)
        return
    if config.full:  # nothing to stream: the full-data model has seen every student
        if args.no_export:
            raise UserError("--full exports the full-data model's bundle: drop --no-export")
        export(config, args)
        return
    summary = run_emulated(args.output_dir, config)
    fold_dir = layout.fold_dir(args.output_dir, config.fold)
    print((fold_dir / "stream_metrics.md").read_text())
    print(json.dumps({k: summary[k] for k in ("auc", "rows", "groups", "rows_per_s")}))
    if not args.no_export:
        export(config, args)
    print(f"wrote {fold_dir / 'submission.csv'}")


def export(config: InferConfig, args) -> None:
    dest = args.kaggle_dir or args.output_dir
    export_kaggle(args.output_dir, config, dest, args.kaggle_dataset_id)
    print(
        f"Kaggle bundle in {dest}; upload: kaggle datasets create -p {dest} --dir-mode zip "
        f"(later: kaggle datasets version -p {dest} --dir-mode zip -m '<what changed>')"
    )


if __name__ == "__main__":
    sys.exit(main())
