"""One whole pyKT SAINT training process (PyPI `pykt-toolkit`), as pyKT's own training
script runs it, on a sequences file in pyKT's format: its KTDataset and DataLoader,
its SAINT, Adam, and `pykt.models.train_model.train_model` (every training step, then
pyKT's evaluation of the validation fold, timed apart, then the checkpoint saved).

Runs in a venv with pykt-toolkit (see bench/pykt_saint_throughput.py for its set-up);
bench/bench_vs_pykt.py writes the file, builds pyKT's cached dataset first (--prepare,
untimed, as 01 is for ours) and times this process whole against 03_train.py's.

    <venv>/bin/python -m bench.pykt_saint_epoch --data-dir D --json out.json [--prepare]

One shim: pyKT's data loader builds `torch.cuda` tensors, which a CPU-only torch cannot;
they are built as CPU tensors here (pyKT's model and training loop pick the device
themselves). Prints nothing of its own but pyKT's; --json gets the figures.
"""

import argparse
import contextlib
import importlib
import io
import json
import time
from pathlib import Path

BEGIN = time.perf_counter()

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

SEQUENCES = "train_valid_sequences.csv"  # pyKT's name for the file of a data set's folds
VALID_FOLD, TRAIN_FOLD = 0, 1


def pykt_saint(num_q: int, num_c: int, args: argparse.Namespace):
    """pyKT's SAINT for num_q questions and num_c concepts at the width of `args`
    (seq_len, d_model, heads, dropout, layers), without the vocabulary sizes its
    constructor prints."""
    from pykt.models.saint import SAINT

    with contextlib.redirect_stdout(io.StringIO()):
        return SAINT(
            num_q,
            num_c,
            seq_len=args.seq_len,
            emb_size=args.d_model,
            num_attn_heads=args.heads,
            dropout=args.dropout,
            n_blocks=args.layers,
        )


def time_evaluation(loop) -> list[float]:
    """Times each call of pyKT's evaluation (of the validation fold) from its training
    loop's module `loop`: the list the seconds are appended to."""
    scoring: list[float] = []
    evaluate = loop.evaluate

    def timed_evaluate(*given, **named):
        begin = time.perf_counter()
        try:
            return evaluate(*given, **named)
        finally:
            scoring.append(time.perf_counter() - begin)

    loop.evaluate = timed_evaluate
    return scoring


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True, help="where the figures go")
    parser.add_argument("--prepare", action="store_true", help="only build pyKT's cache")
    counts = {"num_q": None, "num_c": None, "batch_size": 512, "epochs": 1, "seq_len": 100}
    counts |= {"d_model": 256, "layers": 2, "heads": 8, "threads": 2}
    for name, default in counts.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=int, default=default, required=default is None, help=">= 1")
    parser.add_argument("--dropout", type=float, default=0.1, help="in [0, 1)")
    parser.add_argument("--lr", type=float, default=1e-3, help="> 0")
    args = parser.parse_args()
    for name in counts:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 <= args.dropout < 1 or args.lr <= 0:
        parser.error("--dropout must be in [0, 1) and --lr > 0")
    return args


def main() -> int:
    args = parse_args()
    torch.set_num_threads(args.threads)

    import pykt.datasets.data_loader as loader

    # the module (pykt.models re-exports its function train_model under the same name)
    loop = importlib.import_module("pykt.models.train_model")

    loader.FloatTensor, loader.LongTensor = torch.FloatTensor, torch.LongTensor
    path = str(args.data_dir / SEQUENCES)
    kinds = ["questions", "concepts"]
    train = loader.KTDataset(path, kinds, {TRAIN_FOLD})
    valid = loader.KTDataset(path, kinds, {VALID_FOLD})
    trained = int(train.dori["smasks"].sum())  # positions pyKT's loss covers
    if args.prepare:
        args.json.write_text(json.dumps({"trained": trained}))
        return 0
    torch.manual_seed(0)
    model = pykt_saint(args.num_q, args.num_c, args)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    # as pyKT's init_dataset4train makes them
    train_loader = DataLoader(train, batch_size=args.batch_size)
    valid_loader = DataLoader(valid, batch_size=args.batch_size)
    checkpoints = args.data_dir / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    scoring = time_evaluation(loop)
    start = time.perf_counter()
    result = loop.train_model(
        model, train_loader, valid_loader, args.epochs, opt, str(checkpoints), save_model=True
    )
    train_seconds = time.perf_counter() - start
    figures = {
        "trained": trained,
        "windows": len(train),
        "train_model_seconds": train_seconds,
        "scoring_seconds": sum(scoring),
        "seconds_before_training": start - BEGIN,
        "valid_auc": float(result[4]),
    }
    args.json.write_text(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
