"""Stage 4: streaming inference under the competition's API rules (see common/stream/inference.py).

Locally it streams fold k's validation rows of a run through an emulator of the
`riiideducation` API, writes output/runs/NAME/fold{k}/validation_predictions.csv, a metric
table and the run's oof.parquet, and exports the Kaggle dataset and notebook
(output/runs/NAME/kaggle/: see common/stream/kaggle_export.py). Where `riiideducation` is
importable (or with --competition) it runs the bundle against the real API instead.

python 04_infer.py --run base --fold 0
python 04_infer.py --run base --fold all      (every fold; those streamed already are kept)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from common import cli, layout
from common.data.fold_data import fold_count
from common.errors import UserError
from common.runs.folders import choose_run
from common.runs.oof import write_oof
from common.runs.table import latest_run
from common.stream.inference import InferConfig, run_emulated, streamed_already
from common.stream.kaggle_export import KaggleIds, export_kaggle
from common.stream.kaggle_notebook import run_submission


def parse_args(argv: list[str] | None):
    parser = cli.parser(__doc__)
    cli.path_flags(parser)
    cli.run_flag(
        parser,
        "the run under <output-dir>/runs/ (default: the only run, or the latest trained)",
    )
    cli.add_config_flags(parser, InferConfig)
    cli.fold_list_flag(parser)
    parser.add_argument(
        "--kaggle-dir",
        type=Path,
        help="where to export the Kaggle dataset/ and kernel/ (default: <run>/kaggle)",
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
        help="pin the notebook's environment (kernel-metadata.json's docker_image; default: "
        "none, Kaggle's latest image)",
    )
    parser.add_argument(
        "--no-export",
        action="store_true",
        help="skip the Kaggle export (default: export after streaming one fold)",
    )
    parser.add_argument(
        "--competition",
        action="store_true",
        help="run against the real riiideducation API (default: only when importable)",
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
    if args.competition or importlib.util.find_spec("riiideducation") is not None:
        if not isinstance(config.fold, int) and len(config.fold) != 1:
            raise UserError("the competition's API streams one model: give one --fold")
        config = replace(
            config, fold=config.fold if isinstance(config.fold, int) else config.fold[0]
        )
        model = layout.model_dir(Path(), config.fold, config.full).name  # fold{k} or full
        kaggle_dir = args.kaggle_dir
        if kaggle_dir is None and args.model_dir is None:
            run = choose_run(args.output_dir, args.run, latest_run(args.output_dir))
            kaggle_dir = layout.kaggle_dir(layout.run_dir(args.output_dir, run))
        run_submission(
            args.model_dir or Path(kaggle_dir) / layout.KAGGLE_DATASET_SUBDIR,
            model=model,
            device=config.device,
            max_state_gb=config.max_state_memory,
            cache_students=config.cache_students,
        )
        return
    run = choose_run(args.output_dir, args.run, latest_run(args.output_dir))
    run_dir = layout.run_dir(args.output_dir, run)
    if config.full:  # nothing to stream: the full-data model has seen every student
        if args.no_export:
            raise UserError("--full exports the full-data model's bundle: drop --no-export")
        export(replace(config, fold=0), args, run_dir)
        return
    folds = cli.chosen_folds(config.fold, fold_count(args.output_dir))
    untrained = [k for k in folds if not (layout.fold_dir(run_dir, k) / config.checkpoint).exists()]
    if untrained and len(folds) > 1:  # before any fold streams (one fold: load_model says)
        raise UserError(
            f"run {run} has no {config.checkpoint} for fold(s) {untrained}: train them "
            f"(03_train.py --run {run} --fold ...) or name the folds to stream"
        )
    kept = False
    for k in folds:
        fold_config = replace(config, fold=k)
        fold_dir = layout.fold_dir(run_dir, k)
        if len(folds) > 1 and streamed_already(run_dir, fold_config):
            print(f"fold {k}: streamed already with this checkpoint and these settings (kept)")
            kept = True
            continue
        summary = run_emulated(args.output_dir, run_dir, fold_config)
        print((fold_dir / "stream_metrics.md").read_text())
        print(json.dumps({k: summary[k] for k in ("auc", "rows", "groups", "rows_per_s")}))
        print(f"wrote {fold_dir / layout.VALIDATION_PREDICTIONS}")
    if kept:  # rebuilt from the folds on disk (a kept fold's rows included)
        write_oof(run_dir)
    print(f"out-of-fold predictions of run {run}: {run_dir / layout.OOF_FILE}")
    if args.no_export:
        return
    if len(folds) > 1:
        print(
            "several folds: no Kaggle export (it ships one model: 04_infer.py --fold k, or "
            "--full after 03_train.py --full-data)"
        )
        return
    export(replace(config, fold=folds[0]), args, run_dir)


def export(config: InferConfig, args, run_dir: Path) -> None:
    model = layout.model_dir(Path(), config.fold, config.full).name  # fold{k} or full
    checkpoint = layout.model_dir(run_dir, config.fold, config.full) / config.checkpoint
    ids = KaggleIds(
        args.kaggle_dataset_id, args.kaggle_kernel_id, args.kaggle_gpu, args.kaggle_docker_image
    )
    kaggle_dir = args.kaggle_dir or layout.kaggle_dir(run_dir)
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
