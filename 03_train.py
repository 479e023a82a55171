"""Stage 3: train SAINT / SAINT+ on one fold or several, a checkpoint per epoch, into the
run's folder output/runs/NAME/fold{k}/ (see common/train/trainer.py, common/runs/folders.py).

python 03_train.py --fold 0 --run base
python 03_train.py --fold all --run base --resume     (every fold; finished ones are kept)
python 03_train.py --config output/runs/base/fold0/config.json --run base-lr2 --lr 2e-3
torchrun --nproc_per_node=N -- 03_train.py --run base --fold 0    (several GPUs or processes;
    the -- keeps torchrun from taking --run for its own --run-path)
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from common import cli
from common.data.fold_data import fold_count
from common.device import Distributed
from common.runs.folders import run_name
from common.train.config import TrainConfig, add_train_flags
from common.train.trainer import train
from common.workspace import Workspace


def parse_args(argv: list[str] | None):
    parser = cli.parser(__doc__)
    cli.path_flags(parser)
    cli.run_flag(
        parser,
        "the run's folder under <output-dir>/runs/ (default: the model preset, d_model and "
        "a digest of the config, e.g. saint+-d256-1a2b3c4d)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="empty a fold folder that holds files before training it (default: off: "
        "refused unless --resume with the same config)",
    )
    add_train_flags(parser)
    cli.fold_list_flag(parser)
    note = " (a run's fold{k}/config.json trains that configuration again)"
    config, args = cli.parse_config(parser, TrainConfig, argv, note, stage="train")
    if config.full_data and cli.flag_values(argv, "--fold"):  # a recipe's fold is its CV's
        parser.error(
            "--full-data trains every student into the run's full/ (no fold): drop --fold, "
            "or drop --full-data to train a fold"
        )
    return config, args


def main(argv: list[str] | None = None) -> int:
    config, args = parse_args(argv)

    def run() -> None:
        workspace = Workspace(args.output_dir)
        name = args.run  # checked by train(); None: named from the config
        folds = [config.fold] if config.full_data else None
        if folds is None:
            folds = cli.chosen_folds(config.fold, fold_count(workspace))
        try:
            for k in folds:
                fold_config = replace(config, fold=0 if config.full_data else k)
                name = name or run_name(fold_config)
                if len(folds) > 1:
                    print(f"== fold {k} ({folds.index(k) + 1} of {len(folds)})", flush=True)
                histories = train(fold_config, workspace, name, args.overwrite)
                where = workspace.run(name).model(k, config.full_data)
                for arch, history in histories.items():
                    folder = where if arch == config.primary else where.member(arch)
                    named = f"{arch}: " if len(histories) > 1 else ""
                    report(fold_config, history, folder.path, named)
        finally:
            Distributed.from_env().close()  # torchrun: one process group for every fold

    return cli.guarded(
        run,
        "the epochs finished so far are kept in the run's fold folder (epoch_NN.pt, best.pt); "
        "the same command with --resume continues after the last one",
        args.output_dir,
    )


def report(config: TrainConfig, history: list[dict], where: Path, named: str = "") -> None:
    if not history:
        return
    column = f"{config.select_on}_auc"
    best = max(history, key=lambda r: r[column] if r[column] == r[column] else -1)
    print(
        f"{named}best {config.select_on} validation AUC {best[column]:.4f} at epoch "
        f"{best['epoch']} (the fold's AUC there: {best['fold_auc']:.4f}); checkpoints in {where}"
    )


if __name__ == "__main__":
    sys.exit(main())
