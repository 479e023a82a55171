"""The trim's check and its speed, for one pyKT peer on one fold of the KT peers benchmark
(bench/kt/peers.py): run in pyKT's venv beside bench/kt/pykt_peer.py, whose windows,
batches and models it uses.

    <pykt venv>/bin/python bench/kt/pykt_trim.py --data fold0.npz --model akt --check-trim
    <pykt venv>/bin/python bench/kt/pykt_trim.py --data fold0.npz --model akt --time-epochs \
        --out-dir DIR [--time-share 0.1]

--check-trim: trimmed batches (each cut at its longest window) and padded ones (every
window padded to --seq-len, as pyKT pads) predict the same, within 1e-5, on real batches
of the fold's inner split, from the model's untrained weights; exit 1 where they do not.
--time-epochs: one training epoch and one inner prediction, padded and trimmed, from the
same weights; speed.json in --out-dir (bench/kt/peer_speed.py's table).
"""

from __future__ import annotations

import copy
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np


def _sibling(name: str):
    """bench/kt/<name>.py, loaded from its file: this script runs in pyKT's venv, where
    neither `bench` nor the project is importable."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


peer = _sibling("pykt_peer")

CHECK_TOLERANCE = 1e-5  # --check-trim: largest difference allowed, trimmed against padded


def check_trim(model, name: str, split: dict, args, torch) -> dict:
    """Trimmed against padded predictions on real batches of the split: --check-batches
    batches of --batch-size prediction windows drawn at random (seed --seed), ordered by
    length and cut into batches as the trimmed prediction batches them; each batch
    predicted at its longest window's width and at --seq-len. Returns the largest
    absolute difference over every kept step and what was checked."""
    model.eval()
    passes = peer.prediction_windows(split["offsets"], split["scored"], args.seq_len, args.stride)
    rng = np.random.default_rng(args.seed)
    count = min(len(passes), args.check_batches * args.batch_size)
    drawn = [passes[i] for i in rng.choice(len(passes), size=count, replace=False)]
    drawn.sort(key=lambda p: p[1] - p[0])
    largest, steps, missing, widths = 0.0, 0, 0, []
    with torch.no_grad():
        for b in range(0, len(drawn), args.batch_size):
            chunk = drawn[b : b + args.batch_size]
            windows = [p[:2] for p in chunk]
            width = peer.batch_width(windows, args.seq_len, trim=True)
            outputs = []
            for w in (width, args.seq_len):
                batch = peer.to_device(peer.pykt_batch(split, windows, w, torch), args.device)
                outputs.append(peer.forward_probabilities(model, name, batch, torch).double().cpu())
            trimmed, padded = (o.numpy() for o in outputs)
            for i, (first, _, kept) in enumerate(chunk):
                column = kept - first - 1
                if column.max() >= trimmed.shape[1]:  # a step the trimmed batch lacks
                    missing += int((column >= trimmed.shape[1]).sum())
                    column = column[column < trimmed.shape[1]]
                gap = np.abs(trimmed[i, column] - padded[i, column])
                largest = max(largest, float(gap.max(initial=0.0)))
                steps += len(kept)
            widths.append(width)
    return {
        "model": name, "batches": len(widths), "steps": steps, "widths": widths,
        "max_abs_difference": largest, "steps_missing": missing, "tolerance": CHECK_TOLERANCE,
        "passed": bool(largest <= CHECK_TOLERANCE and missing == 0),
    }  # fmt: skip


def time_epochs(model, name: str, splits: dict, args, torch) -> dict:
    """Seconds of one training epoch and of one inner prediction, padded and trimmed,
    each from the same initial weights and optimizer state (the batches' draw the same
    seed), padded first. With --time-share below 1, both time the same random share of
    the epoch's training windows, and the epoch's seconds are that time over the share
    (the inner prediction is whole)."""
    windows = peer.training_windows(splits["train"]["offsets"], args.seq_len)
    if args.time_share < 1:
        rng = np.random.default_rng(args.seed)
        chosen = rng.choice(len(windows), size=max(1, round(args.time_share * len(windows))))
        windows = [windows[i] for i in np.sort(np.unique(chosen))]
    start = copy.deepcopy(model.state_dict())
    record = {"model": name, "training_windows": len(windows), "time_share": args.time_share}
    for label, trim in (("padded", False), ("trimmed", True)):
        model.load_state_dict(start)
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        rng = np.random.default_rng(args.seed)
        clock = time.perf_counter()
        loss = peer.train_epoch(model, name, opt, splits["train"], windows, args, rng, torch, trim)
        record[f"{label}_train_seconds"] = (time.perf_counter() - clock) / args.time_share
        clock = time.perf_counter()
        peer.predict(model, name, splits["inner"], args, torch, trim)
        record[f"{label}_inner_seconds"] = time.perf_counter() - clock
        record[f"{label}_loss"] = loss
        print(
            f"{name} {label}: epoch {record[f'{label}_train_seconds']:.1f} s, inner "
            f"prediction {record[f'{label}_inner_seconds']:.1f} s (loss {loss:.4f})",
            flush=True,
        )
    record["train_speedup"] = record["padded_train_seconds"] / record["trimmed_train_seconds"]
    record["inner_speedup"] = record["padded_inner_seconds"] / record["trimmed_inner_seconds"]
    return record


def parse_args(argv: list[str] | None = None):
    p = peer.arguments(__doc__.split("\n\n")[0])
    check = "check that trimmed and padded predictions agree (untrained weights); train nothing"
    p.add_argument("--check-trim", action="store_true", help=check)
    p.add_argument("--check-batches", type=int, default=8, help="batches --check-trim checks")
    timing = "time one epoch and one inner prediction padded and trimmed (speed.json)"
    p.add_argument("--time-epochs", action="store_true", help=timing)
    share = "--time-epochs: time this share of an epoch's windows (each way) and scale up"
    p.add_argument("--time-share", type=float, default=1.0, help=share)
    args = peer.parse_args(argv, p, out_dir=False)
    if args.check_trim == args.time_epochs:
        p.error("give one of --check-trim and --time-epochs")
    if args.check_batches < 1:
        p.error("--check-batches: expected a positive integer")
    if not 0 < args.time_share <= 1:
        p.error(f"--time-share: expected a share in (0, 1], got {args.time_share}")
    if args.time_epochs and args.out_dir is None:
        p.error("--time-epochs writes speed.json into --out-dir: give it")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    splits, meta = peer.load_splits(args.data)
    model = peer.build_model(args.model, args.params, meta, args.seq_len, torch)
    model = model.to(args.device)
    if args.check_trim:
        record = check_trim(model, args.model, splits["inner"], args, torch)
        verdict = "agree" if record["passed"] else "DIFFER"
        print(
            f"{args.model}: trimmed and padded predictions {verdict}: largest difference "
            f"{record['max_abs_difference']:.2e} over {record['steps']:,} steps "
            f"({record['steps_missing']:,} missing from the trimmed batches) in "
            f"{record['batches']} batches of widths {record['widths']} (tolerance "
            f"{CHECK_TOLERANCE:g})",
            flush=True,
        )
        return 0 if record["passed"] else 1
    record = time_epochs(model, args.model, splits, args, torch)
    record.update(params=args.params, pykt_source=peer.pykt_source(), torch=torch.__version__)
    record["settings"] = peer.settings(args)
    peer.write_json(args.out_dir / "speed.json", record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
