"""Stage 3: train SAINT / SAINT+ on one fold, a checkpoint per epoch (see common/training.py).

python 03_train.py --fold 0
torchrun --nproc_per_node=N 03_train.py --fold 0     (several GPUs or processes)
"""

from __future__ import annotations

import sys
from pathlib import Path

from common import cli
from common.layout import fold_dir
from common.train_config import TrainConfig, add_train_flags
from common.training import train


def parse_args(argv: list[str] | None) -> tuple[TrainConfig, Path]:
    parser = cli.parser(__doc__)
    cli.path_flags(parser)
    add_train_flags(parser)
    config, args = cli.parse_config(parser, TrainConfig, argv)
    return config, args.output_dir


def main(argv: list[str] | None = None) -> int:
    config, output_dir = parse_args(argv)

    def run() -> None:
        history = train(config, output_dir)
        if not history:
            return
        column = f"{config.select_on}_auc"
        best = max(history, key=lambda r: r[column] if r[column] == r[column] else -1)
        print(
            f"best {config.select_on} validation AUC {best[column]:.4f} at epoch "
            f"{best['epoch']} (the fold's AUC there: {best['fold_auc']:.4f}); checkpoints "
            f"in {fold_dir(output_dir, config.fold)}"
        )

    return cli.guarded(run)


if __name__ == "__main__":
    sys.exit(main())
