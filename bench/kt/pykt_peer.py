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
of each scored step.

Models (MODELS): pykt-toolkit's DKT, DKVMN, SAKT, SAINT and AKT (in 0.0.38, PyPI's
release, and in pyKT's source), and simpleKT, sparseKT (top-K: emb_type qid_sparseattn;
soft: qid_accumulative_attn) and stableKT (pyKT's source only). This script drives each:
the model's forward called directly, and pyKT's own loss (`pykt.models.train_model.
cal_loss`, the loss its `model_forward` computes for the model, AKT's regularizer
included) with Adam; sequences cut into consecutive windows of `--seq-len` steps as pyKT's
data preparation cuts them (windows under 3 steps dropped, pyKT's min_seq_len). The epoch
is chosen on the inner split's AUC (early stopping after `--patience` epochs without a
gain); that epoch's weights predict the test split.

Trimmed batches (the default; `--no-trim` pads every window to --seq-len as pyKT does):
windows are batched with windows of similar length (shuffled, then ordered by length; in
training each batch holds about --batch-size x the mean window length of steps, the
batches taken in random order) and each batch is cut at its longest window. Each model
here is causal (a position reads only the positions before it: DKT's LSTM, the
attention models' masks), so a window's predictions do not depend on the padding after
it: bench/kt/pykt_trim.py's `--check-trim` proves it on real batches of the fold
(trimmed and padded predictions agree within 1e-5) and its `--time-epochs` measures what
it saves (one training epoch and one inner prediction each way, from the same weights).

Prediction: every scored step after a student's first gets the model's probability
given the steps before it, read from a window of `--seq-len` steps that ends at or after
it: windows start at multiples of `--stride`, and each step is read from the window
with the most history (at least seq_len - stride earlier steps, or all of them). A
student's first step has no prediction (pyKT's outputs start at the second step).
`--stride 1` is pyKT's window evaluation exactly (seq_len - 1 earlier steps).

Output (`--out-dir`): predictions.csv (row_id, prediction), history.csv (epoch, loss,
inner AUC, seconds) and result.json (config, best epoch, counts, times, the pyKT source
the venv holds), each written to a temporary name and renamed. While it trains,
`resume.pt` there holds the state after the last finished epoch: a run stopped and
started again with the same flags goes on from it (the same weights as a run never
stopped), so a peer that trains for longer than a session loses no finished epoch.
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
# the models this bench drives: name -> (pyKT's class, its emb_type or None); the first
# five are in pykt-toolkit 0.0.38 (PyPI) too, the others only in pyKT's source
CONCEPT_MODELS = ("dkt", "dkvmn", "sakt")  # concept (skill) ids and responses only
QUESTION_MODELS = ("akt", "saint")  # question ids too, where the data has them
SOURCE_MODELS = ("simplekt", "sparsekt_topk", "sparsekt_soft", "stablekt")
MODELS = (*CONCEPT_MODELS, *QUESTION_MODELS, *SOURCE_MODELS)
EMB_TYPES = {
    "simplekt": "qid",
    "sparsekt_topk": "qid_sparseattn",
    "sparsekt_soft": "qid_accumulative_attn",
    "stablekt": "qid",
}
# pyKT models whose forward reads pyKT's batch dict (the others take id tensors)
DICT_MODELS = SOURCE_MODELS


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


def batch_order(lengths: np.ndarray, batch_size: int, trim: bool, rng) -> list[np.ndarray]:
    """The windows of each batch, as indices into `lengths`. Padded (trim False): batches
    of `batch_size` windows, in a random order (or as given without a generator).
    Trimmed: windows of similar length together (a random order, then a stable sort by
    length, so that equal lengths mix). Training (a generator): each batch holds about
    batch_size x the mean window length of steps, so that an epoch takes as many steps
    as pyKT's and each step weighs as many positions as one of pyKT's random batches
    does on average (pyKT's loss is a mean over a batch's positions); the batches in a
    random order. Prediction (no generator): batches of `batch_size` windows, shortest
    first."""
    n = len(lengths)
    order = rng.permutation(n) if rng is not None else np.arange(n)
    if not trim:
        return [order[b : b + batch_size] for b in range(0, n, batch_size)]
    order = order[np.argsort(lengths[order], kind="stable")]
    if rng is None:
        return [order[b : b + batch_size] for b in range(0, n, batch_size)]
    budget = batch_size * float(lengths.mean()) if n else 1.0
    ends = np.searchsorted(np.cumsum(lengths[order]), budget * np.arange(1, n + 1), "left") + 1
    ends = np.unique(np.minimum(ends, n))
    batches = np.split(order, ends[:-1]) if n else []
    return [batches[i] for i in rng.permutation(len(batches))]


# ---------------------------------------------------------------------------------------
# batches in pyKT's layout (pykt.datasets.data_loader.KTDataset.__getitem__)


def pykt_batch(split: dict, windows: list, width: int, torch) -> dict:
    """pyKT's batch dict for windows [(first, end), ...], each padded to `width` steps
    (pyKT's seq_len, or the batch's longest window when trimmed): qseqs/cseqs/rseqs of
    steps 0..width-2 and shft_* of steps 1..width-1, padding zeroed, masks where both are
    real."""
    q = np.full((len(windows), width), PAD, dtype=np.int64)
    c, r = q.copy(), q.copy()
    for i, (first, end) in enumerate(windows):
        end = min(end, first + width)  # a window wider than the batch loses its tail
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


def batch_width(windows: list, seq_len: int, trim: bool) -> int:
    """The batch's width: its longest window when trimmed, else seq_len."""
    return max(end - first for first, end in windows) if trim else seq_len


def to_device(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def model_outputs(model, name: str, batch: dict, torch, train: bool) -> tuple[list, list]:
    """(ys, preloss) as pykt.models.train_model.model_forward hands them to cal_loss: ys[0]
    the (B, L-1) probability of steps 1..L-1; preloss AKT's regularizer. Every model's
    forward is called here, not through model_forward, whose unpacking fails on sparseKT
    (its forward(train=True) returns 4 values); the calls are model_forward's and
    evaluate_model.evaluate's for each model."""
    q, c, r = batch["qseqs"], batch["cseqs"], batch["rseqs"]
    qshft, cshft, rshft = batch["shft_qseqs"], batch["shft_cseqs"], batch["shft_rseqs"]
    cq, cc = torch.cat((q[:, :1], qshft), dim=1), torch.cat((c[:, :1], cshft), dim=1)
    cr = torch.cat((r[:, :1], rshft), dim=1)
    if name == "dkt":
        y = model(c.long(), r.long())
        return [(y * torch.nn.functional.one_hot(cshft.long(), model.num_c)).sum(-1)], []
    if name == "dkvmn":
        return [model(cc.long(), cr.long())[:, 1:]], []
    if name == "sakt":
        return [model(c.long(), r.long(), cshft.long())], []
    if name == "saint":
        return [model(cq.long(), cc.long(), r.long())[:, 1:]], []
    if name == "akt":
        y, reg_loss = model(cc.long(), cr.long(), cq.long())
        return [y[:, 1:]], [reg_loss]
    if name in ("simplekt", "stablekt"):
        if train:
            y, y2, y3 = model(batch, train=True)
            return [y[:, 1:], y2, y3], []
        return [model(batch)[:, 1:]], []
    if name in ("sparsekt_topk", "sparsekt_soft"):
        if train:
            y, y2, y3, _ = model(batch, train=True)  # the 4th: its c_reg_loss, always 0
            return [y[:, 1:], y2, y3], []
        return [model(batch)[0][:, 1:]], []
    raise ValueError(f"model: expected one of {MODELS}, got {name!r}")


def forward_probabilities(model, name: str, batch: dict, torch):
    """(B, L-1) probability of steps 1..L-1, as pykt.models.evaluate_model.evaluate
    computes it for each model."""
    return model_outputs(model, name, batch, torch, train=False)[0][0]


def peer_loss(model, name: str, batch: dict, torch):
    """pyKT's training loss of the model on the batch (cal_loss, as model_forward calls
    it)."""
    from pykt.models.train_model import cal_loss

    ys, preloss = model_outputs(model, name, batch, torch, train=True)
    r, rshft, sm = batch["rseqs"], batch["shft_rseqs"], batch["smasks"]
    return cal_loss(model, ys, r, rshft, sm, preloss)


# ---------------------------------------------------------------------------------------
# the model, training and prediction


def build_model(name: str, params: dict, meta: dict, seq_len: int, torch):
    """A pyKT model as pykt.models.init_model builds it (num_q 0 where the data has no
    question ids of its own, as pyKT runs concept-only data sets; seq_len where
    examples/wandb_train.py passes it)."""
    num_c, num_q = meta["num_c"], meta["num_q"] if meta["has_questions"] else 0
    if name == "dkt":
        from pykt.models.dkt import DKT

        return DKT(num_c, **params)
    if name == "dkvmn":
        from pykt.models.dkvmn import DKVMN

        return DKVMN(num_c, **params)
    if name == "sakt":
        from pykt.models.sakt import SAKT

        return SAKT(num_c, seq_len, **params)
    if name == "saint":
        from pykt.models.saint import SAINT

        return SAINT(num_q, num_c, seq_len, **params)
    if name == "akt":
        from pykt.models.akt import AKT

        return AKT(num_c, num_q, **params)
    if name == "simplekt":
        from pykt.models.simplekt import simpleKT

        return simpleKT(num_c, num_q, **params, seq_len=seq_len, emb_type=EMB_TYPES[name])
    if name in ("sparsekt_topk", "sparsekt_soft"):
        from pykt.models.sparsekt import sparseKT

        return sparseKT(num_c, num_q, **params, seq_len=seq_len, emb_type=EMB_TYPES[name])
    if name == "stablekt":
        from pykt.models.stablekt import stableKT

        with cuda_tensors_stay(torch):
            return stableKT(num_c, num_q, **params, seq_len=seq_len, emb_type=EMB_TYPES[name])
    raise ValueError(f"model: expected one of {MODELS}, got {name!r}")


class cuda_tensors_stay:
    """stableKT's constructor moves its ALiBi tables to CUDA unconditionally
    (`torch.arange(...).cuda()`), which fails on a machine without CUDA. Without CUDA,
    Tensor.cuda returns the tensor itself while the model is built (the tables stay on
    the CPU, where the model runs); with CUDA nothing changes."""

    def __init__(self, torch):
        self.torch, self.saved = torch, None

    def __enter__(self):
        if not self.torch.cuda.is_available():
            self.saved = self.torch.Tensor.cuda
            self.torch.Tensor.cuda = lambda tensor, *args, **kwargs: tensor

    def __exit__(self, *exc):
        if self.saved is not None:
            self.torch.Tensor.cuda = self.saved


def predict(
    model, name: str, split: dict, args, torch, trim: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(flat steps, probabilities) of every scored step after its sequence's first."""
    model.eval()
    trim = args.trim if trim is None else trim
    passes = prediction_windows(split["offsets"], split["scored"], args.seq_len, args.stride)
    lengths = np.array([end - first for first, end, _ in passes], dtype=np.int64)
    steps, probabilities = [], []
    with torch.no_grad():
        for chosen in batch_order(lengths, args.batch_size, trim, None):
            chunk = [passes[i] for i in chosen]
            windows = [p[:2] for p in chunk]
            width = batch_width(windows, args.seq_len, trim)
            batch = to_device(pykt_batch(split, windows, width, torch), args.device)
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


def train_epoch(model, name, opt, split, windows, args, rng, torch, trim=None) -> float:
    model.train()
    trim = args.trim if trim is None else trim
    lengths = np.array([end - first for first, end in windows], dtype=np.int64)
    losses = []
    for chosen in batch_order(lengths, args.batch_size, trim, rng):
        batch_windows = [windows[i] for i in chosen]
        width = batch_width(batch_windows, args.seq_len, trim)
        batch = to_device(pykt_batch(split, batch_windows, width, torch), args.device)
        loss = peer_loss(model, name, batch, torch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return float(np.mean(losses))


RESUME = "resume.pt"  # in --out-dir: the state after the last finished epoch
# the flags a resumed run must share with the run it resumes (not its threads or device)
RESUME_KEYS = ("data", "model", "params", "epochs", "patience", "batch_size", "lr", "seq_len",
               "stride", "seed", "trim")  # fmt: skip


def resume_key(args) -> dict:
    return {key: str(getattr(args, key)) for key in RESUME_KEYS}


def save_epoch(path: Path, model, opt, rng, torch, progress: dict, args) -> None:
    """Everything the next epoch starts from (weights, optimizer, both random streams, the
    best state so far, the history), written whole or not at all."""
    state = {
        "key": resume_key(args), "model": model.state_dict(), "opt": opt.state_dict(),
        "numpy_rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(), **progress,
    }  # fmt: skip
    write_atomic(path, lambda tmp: torch.save(state, tmp))


def load_epoch(path: Path, model, opt, rng, torch, args) -> dict:
    """The progress of the run `path` holds, its weights, optimizer and random streams
    restored; refused where its flags differ from `args`."""
    state = torch.load(path, map_location=args.device, weights_only=False)
    key = resume_key(args)
    if state["key"] != key:
        differ = sorted(k for k in RESUME_KEYS if state["key"].get(k) != key[k])
        raise SystemExit(
            f"error: {path} holds a run with other {', '.join(differ)}: delete it to start over"
        )
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    rng.bit_generator.state = state["numpy_rng"]
    torch.set_rng_state(state["torch_rng"])
    print(f"resumed after epoch {state['history'][-1]['epoch']} ({path})", flush=True)
    return {k: state[k] for k in ("best", "best_auc", "history", "waited")}


def fit(
    model, name: str, splits: dict, args, torch, resume: Path | None = None
) -> tuple[dict, list[dict]]:
    """Train epoch by epoch; the state of the epoch with the best inner AUC, and the
    history. With `resume`, each finished epoch is saved there, and a run that finds it
    goes on from it as if never stopped (the same weights at the end)."""
    rng = np.random.default_rng(args.seed)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    windows = training_windows(splits["train"]["offsets"], args.seq_len)
    inner = splits["inner"]
    progress = {"best": None, "best_auc": -np.inf, "history": [], "waited": 0}
    if resume is not None and resume.exists():
        progress = load_epoch(resume, model, opt, rng, torch, args)
    history = progress["history"]
    for epoch in range(len(history) + 1, args.epochs + 1):
        if progress["waited"] >= args.patience:
            break
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
        if auc > progress["best_auc"]:
            progress |= {"best": copy.deepcopy(model.state_dict()), "best_auc": auc, "waited": 0}
        else:
            progress["waited"] += 1
        if resume is not None:
            save_epoch(resume, model, opt, rng, torch, progress, args)
    return progress["best"], history


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
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda t: t.write_text(json.dumps(record, indent=2) + "\n"))


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
    write_json(out_dir / "result.json", record)


def settings(args: argparse.Namespace) -> dict:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def pykt_source() -> str:
    """Which pyKT this venv holds: scripts/setup_pykt_env.sh's note, else the version."""
    note = Path(sys.prefix) / "pykt-source.txt"
    if note.exists():
        return note.read_text().strip()
    return f"pykt-toolkit {metadata.version('pykt-toolkit')}"


def arguments(description: str = __doc__.split("\n\n")[0]) -> argparse.ArgumentParser:
    """The flags of a peer's run (pykt_trim.py adds its own)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, help="where the outputs go")
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
    pad = "pad every batch to --seq-len as pyKT does (default: trimmed batches)"
    p.add_argument("--no-trim", dest="trim", action="store_false", help=pad)
    return p


def parse_args(
    argv: list[str] | None = None, p: argparse.ArgumentParser | None = None, out_dir=True
) -> argparse.Namespace:
    """The flags of `p` (default: arguments()), checked; --params read as JSON."""
    p = p or arguments()
    args = p.parse_args(argv)
    if min(args.epochs, args.patience, args.batch_size, args.threads) < 1:
        p.error("--epochs, --patience, --batch-size and --threads: expected positive integers")
    if not 1 <= args.stride < args.seq_len:
        p.error(f"--stride: expected 1 <= stride < --seq-len ({args.seq_len}), got {args.stride}")
    if out_dir and args.out_dir is None:
        p.error("--out-dir is required")
    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as error:
        p.error(f"--params: not JSON ({error})")
    if not isinstance(params, dict):
        p.error("--params: expected a JSON object of the model's constructor arguments")
    args.params = params
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    splits, meta = load_splits(args.data)
    model = build_model(args.model, args.params, meta, args.seq_len, torch).to(args.device)
    clock = time.perf_counter()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    resume = args.out_dir / RESUME
    resumed = resume.exists()
    best, history = fit(model, args.model, splits, args, torch, resume=resume)
    model.load_state_dict(best)
    steps, p = predict(model, args.model, splits["test"], args, torch)
    best_epoch = max(history, key=lambda h: h["inner_auc"])
    record = {
        "model": args.model, "params": args.params, "meta": meta,
        "pykt_version": metadata.version("pykt-toolkit"), "pykt_source": pykt_source(),
        "torch": torch.__version__,
        "settings": settings(args),
        "epochs_run": len(history), "best_epoch": best_epoch["epoch"],
        "best_inner_auc": best_epoch["inner_auc"], "wall_seconds": time.perf_counter() - clock,
        "resumed": resumed,  # wall_seconds then counts the resumed epochs alone
        "seconds_per_epoch": float(np.mean([h["train_seconds"] for h in history])),
        "parameters": sum(t.numel() for t in model.parameters()),
    }  # fmt: skip
    write_outputs(args.out_dir, splits["test"], steps, p, history, record)
    resume.unlink()  # the run is whole: result.json says so
    return 0


if __name__ == "__main__":
    sys.exit(main())
