"""Stage 4: streaming inference under the competition's API rules (see common/inference.py).

Locally it streams fold k's validation rows through an emulator of the `riiideducation`
API, writes output/fold{k}/submission.csv and a metric table, and exports the Kaggle
dataset and notebook (output/kaggle/: see common/kaggle_export.py). Where `riiideducation`
is importable (or with --competition) it runs the bundle against the real API instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

from common import cli, layout
from common.errors import UserError
from common.inference import InferConfig, run_emulated
from common.kaggle_export import KaggleIds, export_kaggle
from common.kaggle_notebook import run_submission


def parse_args(argv: list[str] | None):
    parser = cli.parser(__doc__)
    cli.path_flags(parser)
    cli.add_config_flags(parser, InferConfig)
    parser.add_argument(
        "--kaggle-dir",
        type=Path,
        help="where to export the Kaggle dataset/ and kernel/ (default: <output-dir>/kaggle)",
    )
    user = os.environ.get("KAGGLE_USERNAME", "your-kaggle-username")
    parser.add_argument(
        "--kaggle-dataset-id", default=f"{user}/riiid-saint", help="(default: %(default)s)"
    )
    parser.add_argument(
        "--kaggle-kernel-id", help="the notebook's id (default: <dataset id>-submission)"
    )
    parser.add_argument(
        "--kaggle-gpu",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="whether the notebook asks for a GPU (default: %(default)s)",
    )
    parser.add_argument(
        "--kaggle-docker-image",
        help="pin the notebook's environment (kernel-metadata.json's docker_image)",
    )
    parser.add_argument("--no-export", action="store_true", help="skip the Kaggle export")
    parser.add_argument(
        "--competition",
        action="store_true",
        help="run against the real riiideducation API (automatic when importable)",
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        help="competition mode: the Kaggle dataset folder (default: <kaggle-dir>/dataset)",
    )
    return cli.parse_config(parser, InferConfig, argv)


def main(argv: list[str] | None = None) -> int:
    config, args = parse_args(argv)
    return cli.guarded(lambda: infer(config, args))


def infer(config: InferConfig, args) -> None:
    model = layout.model_dir(Path(), config.fold, config.full).name  # fold{k} or full
    if args.competition or importlib.util.find_spec("riiideducation") is not None:
        kaggle_dir = args.kaggle_dir or layout.kaggle_dir(args.output_dir)
        run_submission(
            args.model_dir or kaggle_dir / layout.KAGGLE_DATASET_SUBDIR,
            model=model,
            device=config.device,
            max_state_gb=config.max_state_memory,
            cache_students=config.cache_students,
        )
        return
    if config.full:  # nothing to stream: the full-data model has seen every student
        if args.no_export:
            raise UserError("--full exports the full-data model's bundle: drop --no-export")
        export(config, args, model)
        return
    summary = run_emulated(args.output_dir, config)
    fold_dir = layout.fold_dir(args.output_dir, config.fold)
    print((fold_dir / "stream_metrics.md").read_text())
    print(json.dumps({k: summary[k] for k in ("auc", "rows", "groups", "rows_per_s")}))
    if not args.no_export:
        export(config, args, model)
    print(f"wrote {fold_dir / 'submission.csv'}")


def export(config: InferConfig, args, model: str) -> None:
    checkpoint = layout.model_dir(args.output_dir, config.fold, config.full) / config.checkpoint
    ids = KaggleIds(
        args.kaggle_dataset_id, args.kaggle_kernel_id, args.kaggle_gpu, args.kaggle_docker_image
    )
    kaggle_dir = args.kaggle_dir or layout.kaggle_dir(args.output_dir)
    dataset, kernel = export_kaggle(args.output_dir, checkpoint, model, kaggle_dir, ids)
    print(
        f"Kaggle dataset in {dataset}, notebook in {kernel}; submit with\n"
        f"  kaggle datasets create -p {dataset} --dir-mode zip   "
        f"(later: kaggle datasets version -p {dataset} --dir-mode zip -m '<what changed>')\n"
        f"  kaggle kernels push -p {kernel}"
    )
    if not args.kaggle_docker_image:
        print(
            "note: the notebook runs on Kaggle's latest image unless pinned, and there "
            "riiideducation (built for Python 3.7) does not import: pin it to the "
            "competition's original environment in the notebook's settings, or export with "
            "--kaggle-docker-image"
        )


if __name__ == "__main__":
    sys.exit(main())
