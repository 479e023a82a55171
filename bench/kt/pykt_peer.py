"""One pyKT model on one fold of the KT peers benchmark (bench/kt/peers.py), run in
pyKT's own virtual environment: it imports numpy, torch, scikit-learn and pykt, never the
project's `common`, so pyKT stays out of the pipeline's dependencies.

    <pykt venv>/bin/python bench/kt/pykt_peer.py --data fold0.npz --model akt \
        --out-dir DIR [--epochs 30 --patience 5 --batch-size 64 --lr 1e-4 ...]

Input (`--data`, written by bench/kt/peers.py): every student of the fold as a sequence of
steps (one step per task container: one question answered, its concept and response),
in three splits: `train` (what the model fits), `inner` (the training students held out
by 03's inner split: their steps before the inner cut, then the scored steps) and `test`
(the fold's validation students: their history, then the scored steps), with the row ids
of each scored step. Training is pyKT's own: its loss (`pykt.models.train_model.
model_forward`), Adam, sequences cut into consecutive windows of `--seq-len` steps as
pyKT's data preparation cuts them (windows under 3 steps dropped, pyKT's min_seq_len).
The epoch is chosen on the inner split's AUC (early stopping after `--patience` epochs
without a gain); that epoch's weights predict the test split.

Prediction: every scored step after a student's first gets the model's probability
given the steps before it, read from a window of `--seq-len` steps that ends at or after
it: windows start at multiples of `--stride`, and each step is read from the window
with the most history (at least seq_len - stride earlier steps, or all of them). A
student's first step has no prediction (pyKT's outputs start at the second step).
`--stride 1` is pyKT's window evaluation exactly (seq_len - 1 earlier steps).

Output (`--out-dir`): predictions.csv (row_id, prediction), history.csv (epoch, loss,
inner AUC, seconds) and result.json (config, best epoch, counts, times), each written
to a temporary name and renamed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

PAD = -1
MIN_STEPS = 3  # pyKT's min_seq_len: shorter training windows are dropped
# models of pykt-toolkit 0.0.38 (the release on PyPI) this bench drives, and what they read
CONCEPT_MODELS = ("dkt", "dkvmn", "sakt")  # concept (skill) ids and responses only
QUESTION_MODELS = ("akt", "saint")  # question ids too, where the data has them
MODELS = (*CONCEPT_MODELS, *QUESTION_MODELS)


# ---------------------------------------------------------------------------------------
# windows: which steps each forward pass reads and which predictions it keeps


def training_windows(offsets: np.ndarray, seq_len: int) -> list[tuple[int, int]]:
    """(first, end) flat step ranges: each sequence cut into consecutive windows of
    seq_len steps; windows under MIN_STEPS steps are dropped."""
    windows = []
    for s in range(len(offsets) - 1):
        for first in range(int(offsets[s]), int(offsets[s + 1]), seq_len):
            end = min(first + seq_len, int(offsets[s + 1]))
            if end - first >= MIN_STEPS:
                windows.append((first, end))
    return windows


def prediction_windows(
    offsets: np.ndarray, scored: np.ndarray, seq_len: int, stride: int
) -> list[tuple[int, int, np.ndarray]]:
    """(first, end, kept) per forward pass: the flat window [first, end) and the flat
    steps whose prediction it gives. Every scored step but a sequence's first is kept
    once, by the window starting at the largest multiple of `stride` (from the sequence's
    start) that still holds it, so it sees min(position, seq_len - stride .. seq_len - 1)
    earlier steps."""
    if not 1 <= stride < seq_len:
        raise ValueError(f"stride: expected 1 <= stride < seq_len ({seq_len}), got {stride}")
    passes = []
    for s in range(len(offsets) - 1):
        begin, stop = int(offsets[s]), int(offsets[s + 1])
        position = np.flatnonzero(scored[begin:stop])
        position = position[position > 0]
        if len(position) == 0:
            continue
        start = np.maximum(0, -(-(position - seq_len + 1) // stride) * stride)
        for window_start in np.unique(start).tolist():
            kept = begin + position[start == window_start]
            passes.append((begin + window_start, min(begin + window_start + seq_len, stop), kept))
    return passes


# ---------------------------------------------------------------------------------------
# batches in pyKT's layout (pykt.datasets.data_loader.KTDataset.__getitem__)


def pykt_batch(split: dict, windows: list, seq_len: int, torch) -> dict:
    """pyKT's batch dict for windows [(first, end), ...]: qseqs/cseqs/rseqs of steps
    0..L-2 and shft_* of steps 1..L-1, padding zeroed, masks where both are real."""
    q = np.full((len(windows), seq_len), PAD, dtype=np.int64)
    c, r = q.copy(), q.copy()
    for i, (first, end) in enumerate(windows):
        q[i, : end - first] = split["q"][first:end]
        c[i, : end - first] = split["c"][first:end]
        r[i, : end - first] = split["r"][first:end]
    mask = (c[:, :-1] != PAD) & (c[:, 1:] != PAD)
    batch = {}
    for key, values in (("qseqs", q), ("cseqs", c), ("rseqs", r)):
        batch[key] = torch.from_numpy(values[:, :-1] * mask)
        batch["shft_" + key] = torch.from_numpy(values[:, 1:] * mask)
    for key in ("rseqs", "shft_rseqs"):
        batch[key] = batch[key].float()
    batch["tseqs"] = batch["shft_tseqs"] = torch.zeros(0)
    batch["masks"] = batch["smasks"] = torch.from_numpy(mask)
    return batch


def to_device(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def forward_probabilities(model, name: str, batch: dict, torch):
    """(B, L-1) probability of steps 1..L-1, as pykt.models.evaluate_model.evaluate
    computes it for each model."""
    q, c, r = batch["qseqs"], batch["cseqs"], batch["rseqs"]
    qshft, cshft, rshft = batch["shft_qseqs"], batch["shft_cseqs"], batch["shft_rseqs"]
    cq, cc = torch.cat((q[:, :1], qshft), dim=1), torch.cat((c[:, :1], cshft), dim=1)
    cr = torch.cat((r[:, :1], rshft), dim=1)
    if name == "dkt":
        y = model(c.long(), r.long())
        return (y * torch.nn.functional.one_hot(cshft.long(), model.num_c)).sum(-1)
    if name == "dkvmn":
        return model(cc.long(), cr.long())[:, 1:]
    if name == "sakt":
        return model(c.long(), r.long(), cshft.long())
    if name == "saint":
        return model(cq.long(), cc.long(), r.long())[:, 1:]
    if name == "akt":
        return model(cc.long(), cr.long(), cq.long())[0][:, 1:]
    raise ValueError(f"model: expected one of {MODELS}, got {name!r}")


# ---------------------------------------------------------------------------------------
# the model, training and prediction


def build_model(name: str, params: dict, meta: dict, seq_len: int):
    """A pykt-toolkit model as pykt.models.init_model builds it (num_q 0 where the data
    has no question ids of its own, as pyKT runs concept-only data sets)."""
    from pykt.models import akt, dkt, dkvmn, saint, sakt

    num_c, num_q = meta["num_c"], meta["num_q"] if meta["has_questions"] else 0
    if name == "dkt":
        return dkt.DKT(num_c, **params)
    if name == "dkvmn":
        return dkvmn.DKVMN(num_c, **params)
    if name == "sakt":
        return sakt.SAKT(num_c, seq_len, **params)
    if name == "saint":
        return saint.SAINT(num_q, num_c, seq_len, **params)
    if name == "akt":
        return akt.AKT(num_c, num_q, **params)
    raise ValueError(f"model: expected one of {MODELS}, got {name!r}")


def predict(model, name: str, split: dict, args, torch) -> tuple[np.ndarray, np.ndarray]:
    """(flat steps, probabilities) of every scored step after its sequence's first."""
    model.eval()
    passes = prediction_windows(split["offsets"], split["scored"], args.seq_len, args.stride)
    steps, probabilities = [], []
    with torch.no_grad():
        for b in range(0, len(passes), args.batch_size):
            chunk = passes[b : b + args.batch_size]
            batch = to_device(
                pykt_batch(split, [p[:2] for p in chunk], args.seq_len, torch), args.device
            )
            y = forward_probabilities(model, name, batch, torch).float().cpu().numpy()
            for i, (first, _, kept) in enumerate(chunk):
                steps.append(kept)
                probabilities.append(y[i, kept - first - 1])
    if not steps:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    return np.concatenate(steps), np.concatenate(probabilities)


def weighted_auc(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores, sample_weight=weights))


def train_epoch(model, name, opt, split, windows, args, rng, torch) -> float:
    from pykt.models.train_model import model_forward

    model.train()
    order = rng.permutation(len(windows))
    losses = []
    for b in range(0, len(order), args.batch_size):
        chosen = [windows[i] for i in order[b : b + args.batch_size]]
        batch = to_device(pykt_batch(split, chosen, args.seq_len, torch), args.device)
        loss = model_forward(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return float(np.mean(losses))


def fit(model, name: str, splits: dict, args, torch) -> tuple[dict, list[dict]]:
    """Train epoch by epoch; the state of the epoch with the best inner AUC, and the
    history."""
    rng = np.random.default_rng(args.seed)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    windows = training_windows(splits["train"]["offsets"], args.seq_len)
    inner = splits["inner"]
    best, best_auc, history, waited = None, -np.inf, [], 0
    for epoch in range(1, args.epochs + 1):
        clock = time.perf_counter()
        loss = train_epoch(model, name, opt, splits["train"], windows, args, rng, torch)
        train_seconds = time.perf_counter() - clock
        steps, p = predict(model, name, inner, args, torch)
        auc = weighted_auc(inner["r"][steps], p, inner["rows"][steps])
        history.append(
            {"epoch": epoch, "train_loss": loss, "inner_auc": auc, "train_seconds": train_seconds,
             "inner_seconds": time.perf_counter() - clock - train_seconds}
        )  # fmt: skip
        print(
            f"epoch {epoch}: loss {loss:.4f} inner AUC {auc:.4f} ({train_seconds:.0f} s)",
            flush=True,
        )
        if auc > best_auc:
            best, best_auc, waited = copy.deepcopy(model.state_dict()), auc, 0
        else:
            waited += 1
            if waited >= args.patience:
                break
    return best, history


# ---------------------------------------------------------------------------------------
# files


def load_splits(path: Path) -> tuple[dict, dict]:
    with np.load(path) as data:
        meta = json.loads(str(data["meta"]))
        splits = {
            split: {
                key: data[f"{split}_{key}"] for key in ("offsets", "q", "c", "r", "scored", "rows")
            }
            for split in ("train", "inner", "test")
        }
        splits["test"]["row_id"] = data["test_row_id"]
        splits["test"]["row_step"] = data["test_row_step"]
    return splits, meta


def write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def write_outputs(out_dir: Path, test: dict, steps, p, history, record) -> None:
    import pandas as pd

    step_probability = np.full(len(test["q"]), np.nan)
    step_probability[steps] = p
    prediction = step_probability[test["row_step"]]
    kept = ~np.isnan(prediction)
    rows = pd.DataFrame({"row_id": test["row_id"][kept], "prediction": prediction[kept]})
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "predictions.csv", lambda t: rows.to_csv(t, index=False))
    write_atomic(out_dir / "history.csv", lambda t: pd.DataFrame(history).to_csv(t, index=False))
    record["rows_predicted"] = int(kept.sum())
    record["rows_without_prediction"] = int((~kept).sum())
    write_atomic(out_dir / "result.json", lambda t: t.write_text(json.dumps(record, indent=2)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--model", choices=MODELS, required=True)
    p.add_argument("--params", default="{}", help="the model's constructor arguments (JSON)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--patience", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seq-len", type=int, default=200)
    p.add_argument("--stride", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    if min(args.epochs, args.patience, args.batch_size, args.threads) < 1:
        p.error("--epochs, --patience, --batch-size and --threads: expected positive integers")
    if not 1 <= args.stride < args.seq_len:
        p.error(f"--stride: expected 1 <= stride < --seq-len ({args.seq_len}), got {args.stride}")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    splits, meta = load_splits(args.data)
    params = json.loads(args.params)
    model = build_model(args.model, params, meta, args.seq_len).to(args.device)
    clock = time.perf_counter()
    best, history = fit(model, args.model, splits, args, torch)
    model.load_state_dict(best)
    steps, p = predict(model, args.model, splits["test"], args, torch)
    best_epoch = max(history, key=lambda h: h["inner_auc"])
    record = {
        "model": args.model, "params": params, "meta": meta,
        "pykt_version": metadata.version("pykt-toolkit"), "torch": torch.__version__,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "epochs_run": len(history), "best_epoch": best_epoch["epoch"],
        "best_inner_auc": best_epoch["inner_auc"], "wall_seconds": time.perf_counter() - clock,
        "parameters": sum(t.numel() for t in model.parameters()),
    }  # fmt: skip
    write_outputs(args.out_dir, splits["test"], steps, p, history, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
