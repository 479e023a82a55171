"""Stage 3: train SAINT / SAINT+ on one fold, a checkpoint per epoch (see common/training.py).

Multi-GPU or multi-process: torchrun --nproc_per_node=N 03_train.py --fold 0
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from common.checkpoint import CheckpointError
from common.folds import FoldMismatchError
from common.schema import InputError
from common.training import TrainConfig, train

DEFAULTS = TrainConfig()


def parse_args() -> tuple[TrainConfig, Path]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--input-dir", type=Path, default=Path("input"), help="unused; for symmetry")
    p.add_argument("--output-dir", type=Path, default=Path("output"))
    p.add_argument("--fold", type=int, default=DEFAULTS.fold)
    p.add_argument("--epochs", type=int, default=DEFAULTS.epochs)
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULTS.batch_size,
        help="windows' worth of trained questions per step (0: SAINT's 512, fewer when an "
        "epoch would take under 64 steps)",
    )
    p.add_argument(
        "--span",
        type=int,
        default=DEFAULTS.span,
        help="questions trained on per training sequence, each after the model's receptive "
        "field of context (0: 4 receptive fields)",
    )
    p.add_argument("--lr", type=float, default=DEFAULTS.lr)
    p.add_argument(
        "--warmup",
        type=int,
        default=DEFAULTS.warmup,
        help="warm-up steps (0: a tenth of the run's steps, at most 4000)",
    )
    p.add_argument("--schedule", choices=("noam", "cosine"), default=DEFAULTS.schedule)
    p.add_argument("--weight-decay", type=float, default=DEFAULTS.weight_decay)
    p.add_argument("--grad-clip", type=float, default=DEFAULTS.grad_clip)
    p.add_argument("--model", choices=("saint", "saint+"), default=DEFAULTS.model)
    p.add_argument(
        "--decoder-features",
        default=None,
        help="comma list overriding the preset: elapsed,lag,explanation,answer,question "
        "(question: the answered question, embedded per (question, response) pair)",
    )
    p.add_argument("--d-model", type=int, default=DEFAULTS.d_model)
    p.add_argument("--d-ff", type=int, default=DEFAULTS.d_ff, help="0: 4 * d-model")
    p.add_argument("--layers", type=int, default=DEFAULTS.layers, help="per side")
    p.add_argument("--heads", type=int, default=DEFAULTS.heads)
    p.add_argument("--dropout", type=float, default=DEFAULTS.dropout)
    p.add_argument("--window", type=int, default=DEFAULTS.window)
    p.add_argument("--attention", choices=("mha", "mla"), default=DEFAULTS.attention)
    p.add_argument("--kv-latent-dim", type=int, default=DEFAULTS.kv_latent_dim)
    p.add_argument(
        "--difficulty-buckets",
        type=int,
        default=DEFAULTS.difficulty_buckets,
        help="> 0 adds the question-difficulty input with this many buckets",
    )
    p.add_argument(
        "--tags",
        action="store_true",
        help="add the mean embedding of each question's tags (skills) to the encoder input",
    )
    p.add_argument(
        "--question-embedding",
        choices=("id", "rasch"),
        default=DEFAULTS.question_embedding,
        help="id: a vector per question; rasch (with --tags): the tags' embedding plus a "
        "scalar difficulty per question times the tags' variation vector (AKT-Rasch)",
    )
    p.add_argument(
        "--rope-fraction",
        type=float,
        default=DEFAULTS.rope_fraction,
        help="share of each attention head's channels that rotary positions rotate",
    )
    p.add_argument("--teacher", default=None, help="checkpoint of a frozen teacher to distill")
    p.add_argument("--distill-alpha", type=float, default=DEFAULTS.distill_alpha)
    p.add_argument("--distill-temperature", type=float, default=DEFAULTS.distill_temperature)
    p.add_argument("--seed", type=int, default=DEFAULTS.seed)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=DEFAULTS.device)
    p.add_argument(
        "--amp",
        nargs="?",
        const="auto",
        default=DEFAULTS.amp,
        choices=("auto", "bf16", "fp16", "off"),
    )
    p.add_argument("--resume", action="store_true")
    p.add_argument("--patience", type=int, default=DEFAULTS.patience)
    p.add_argument(
        "--select-on",
        choices=("inner", "fold"),
        default=DEFAULTS.select_on,
        help="early stopping and best.pt on an inner split of the training students (inner) "
        "or on the fold's validation rows, which 04 and 05 then score (fold: optimistic)",
    )
    p.add_argument(
        "--inner-share",
        type=float,
        default=DEFAULTS.inner_share,
        help="share of the fold's training students in the inner validation split",
    )
    p.add_argument("--valid-batch-size", type=int, default=DEFAULTS.valid_batch_size)
    p.add_argument("--no-progress", action="store_true")
    args = vars(p.parse_args())
    output_dir = args.pop("output_dir")
    args.pop("input_dir")
    args["progress"] = not args.pop("no_progress")
    if args["decoder_features"] is not None:
        args["decoder_features"] = tuple(f for f in args["decoder_features"].split(",") if f)
    known = {f.name for f in fields(TrainConfig)}
    return TrainConfig.from_dict({k: v for k, v in args.items() if k in known}), output_dir


def main() -> int:
    config, output_dir = parse_args()
    try:
        history = train(config, output_dir)
    except (CheckpointError, FoldMismatchError, InputError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if history:
        column = f"{config.select_on}_auc"
        best = max(history, key=lambda r: r[column] if r[column] == r[column] else -1)
        print(
            f"best {config.select_on} validation AUC {best[column]:.4f} at epoch "
            f"{best['epoch']} (the fold's AUC there: {best['fold_auc']:.4f}); checkpoints "
            f"in {output_dir / f'fold{config.fold}'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
