"""Train as you serve, beyond the window: AUC by position in the student's history, for
(a) the stream (04_infer.py through the API emulator) and (b) a fresh-window recompute
(each task container predicted from its last `window` questions, re-encoded from a start
token), for two versions of the code: `--before-code` (a checkout of the pipeline before
the change, e.g. `git worktree add ../before 179d689`) and this repository.

Per data set and window (32: d_model 32; 100: d_model 64; both 2+2 layers, 4 heads):
03_train.py for a fixed number of epochs with early stopping off, 04_infer.py on the
last epoch's checkpoint (no model selection, so both versions are scored alike; this
version trains on every training student, --select-on fold, whose best.pt is not used),
then the fresh-window recompute on the same checkpoint with this repository's model code
(the model's function is the same in both versions; what differs is the state it is
trained and streamed in). Buckets: the row's position in the student's question history
(0-based): the first window, window to 2x window, 2x to 4x, beyond.

Data sets: the quick start's demo (2,000 students, fold 0 of the user folds), a demo of
3,000 students streamed the way the competition's test was (virtual-time tail, 5% of the
rows: long histories), and ASSISTments 2009 (AKT's problem-level files, fold 0 of its user
folds; SAINT, as these files have no times).

    python -m bench.bench_context --before-code ../before   # output: bench/results/context.txt
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.benchlib import (
    BENCH_RUN,
    DEMO_FLAGS,
    DEMO_FOLD_FLAGS,
    REPO,
    SHARED_DATA,
    WORK,
    Report,
    link_data,
    machine,
    results_flag,
    run,
    script,
)
from bench.fold_run import FoldRun, train_and_stream
from common.data.features import window_inputs
from common.data.fold_data import FoldData, load_fold_data
from common.files import write_json
from common.metrics import auc_or_nan
from common.model.checkpoint import load_model
from common.model.predict import to_tensors
from common.tables import markdown_table
from common.workspace import ModelFolder, Workspace

WINDOWS = {32: ("--d-model", "32"), 100: ("--d-model", "64")}
COMMON = ("--layers", "2", "--heads", "4", "--dropout", "0.1", "--patience", "100")
# versions: the code they run and their extra 03 flags. "after" trains on every training
# student (--select-on fold; its best.pt is not scored) as "before" did; "after-quarter-
# rope" is "after" with the rotary width of before (on the demo only): what full-width
# rotary positions change
VERSIONS = {
    "before": ("before", ()),
    "after": ("after", ("--select-on", "fold")),
    "after-quarter-rope": ("after", ("--select-on", "fold", "--rope-fraction", "0.25")),
}
QUARTER_ROPE_DATASETS = ("demo",)


def version_fold(out: Workspace, version: str) -> FoldRun:
    """Fold 0 in `out`: fold0/ of the output dir itself for the code before runs existed,
    else the run's."""
    return FoldRun(out, None if VERSIONS[version][0] == "before" else BENCH_RUN)


PREPROCESS = (
    "01_preprocess.py",
    "--input-dir",
    "{input}",
    "--output-dir",
    "{prep}",
    "--no-progress",
)


@dataclass(frozen=True)
class DataSet:
    name: str
    prepare: tuple[tuple[str, ...], ...]  # commands (script, flags...) into <dir>/input, prep
    train: tuple[str, ...]  # 03_train.py flags besides the window's
    epochs: int
    note: str


DATASETS = {
    "demo": DataSet(
        "demo",
        (
            ("00_make_demo_input.py", *DEMO_FLAGS, "--output-dir", "{input}"),
            PREPROCESS,
            ("02_make_folds.py", "--output-dir", "{prep}", *DEMO_FOLD_FLAGS),
        ),
        ("--model", "saint+", "--batch-size", "64", "--lr", "2e-3", "--warmup", "100"),
        5,
        "the quick start's demo: 2,000 students, fold 0 of 5 user folds (398 validation "
        "students, 120 of them new), the run_demo.sh recipe",
    ),
    "demo-long": DataSet(
        "demo-long",
        (
            ("00_make_demo_input.py", "--users", "3000", "--seed", "1", "--output-dir", "{input}"),
            PREPROCESS,
            ("02_make_folds.py", "--output-dir", "{prep}", "--n-folds", "1", "--strategy",
             "virtual-time", "--valid-share", "0.05", "--seed", "1"),
        ),
        ("--model", "saint+", "--batch-size", "64", "--lr", "2e-3", "--warmup", "100"),
        5,
        "a 3,000-student demo (seed 1) streamed as the competition's test was: the last 5% "
        "of rows by virtual time, mostly continuing students deep in long histories",
    ),
    "assist2009": DataSet(
        "assist2009",
        (
            ("00_convert_kt_dataset.py", "--dataset", "assist2009_pid", "--source-dir",
             "{shared}/assist2009_pid_akt", "--multi-skill-rows", "keep", "--output-dir",
             "{input}"),
            PREPROCESS,
            ("02_make_folds.py", "--input-dir", "{input}", "--output-dir", "{prep}",
             "--strategy", "dataset", "--n-folds", "5"),
        ),
        ("--model", "saint", "--batch-size", "64", "--lr", "2e-3", "--schedule", "cosine",
         "--warmup", "100"),
        6,
        "ASSISTments 2009 (AKT's assist2009_pid files), fold 0 of AKT's 5 user folds (wholly "
        "new students); SAINT, as the files have no times, with the KT benchmark's settings",
    ),
}  # fmt: skip


def prepare(data: DataSet, work: Path, shared: Path, say: Report) -> Workspace:
    prep = Workspace(work / data.name / "prep")
    if prep.folds.fold(0).exists():
        return prep
    places = {"input": work / data.name / "input", "prep": prep.path, "shared": shared}
    for i, (name, *flags) in enumerate(data.prepare):
        flags = [f.format(**{k: str(v) for k, v in places.items()}) for f in flags]
        run(script(name, *flags), work / data.name / f"prepare{i}.log", say=say)
    return prep


def train_version(
    code: Path, version: str, data: DataSet, window: int, prep: Workspace, work: Path, say: Report
) -> FoldRun:
    """03 then 04 of `code` on fold 0 (skips what is done: 03 when its last epoch's
    checkpoint is there, 04 when its summary is newer than that checkpoint)."""
    out = link_data((work / data.name / f"{version}-w{window}").resolve(), prep)
    fold = version_fold(out, version)
    checkpoint = fold.folder.epoch_checkpoint(data.epochs)
    flags = [*data.train, *WINDOWS[window], *COMMON, "--window", str(window)]
    flags += ["--epochs", str(data.epochs), *VERSIONS[version][1]]
    stream = ["--checkpoint", checkpoint.name]
    summary = fold.folder.stream_summary
    if not checkpoint.exists():
        train_and_stream(fold, flags, stream, logs=out.path, code=code, say=say)
    elif not summary.exists() or summary.stat().st_mtime < checkpoint.stat().st_mtime:
        log = out.path / f"fold{fold.fold}_infer.log"
        run(fold.stream_command(stream, code), log, cwd=code, append=True, say=say)
    return fold


@torch.no_grad()
def fresh_window(
    folder: ModelFolder, checkpoint: str, data: FoldData, batch: int = 256
) -> pd.Series:
    """Each validation container predicted from its last `window` questions, re-encoded
    from a start token; indexed by flat question index."""
    model, _ = load_model(folder.checkpoint(checkpoint))
    window = model.config.window
    seq = data.sequences
    tails = data.fold_tails
    owners, starts, lengths, firsts = [], [], [], []
    for s, h, e in zip(tails.students, tails.history, tails.end, strict=True):
        first = seq.container_first[seq.offsets[s] : seq.offsets[s + 1]]
        opens = np.flatnonzero(first[h:e] == np.arange(h, e)) + h
        opens = np.union1d(opens, [h])
        ends = np.append(opens[1:], e)
        begin = np.maximum(opens - window, 0)
        owners += [s] * len(opens)
        starts += begin.tolist()
        lengths += (ends - begin).tolist()
        firsts += opens.tolist()
    owners, starts, lengths, firsts = map(np.asarray, (owners, starts, lengths, firsts))
    flat, predicted = [], []
    cpu = torch.device("cpu")
    for lo in range(0, len(owners), batch):
        part = slice(lo, lo + batch)
        inputs = window_inputs(seq, owners[part], starts[part], lengths[part], data.n_questions)
        probability = torch.sigmoid(model(to_tensors(inputs, cpu)).float()).numpy()
        position = inputs["position"]
        scored = inputs["valid"] & (position >= firsts[part][:, None])
        rows = np.nonzero(scored)
        flat.append(seq.offsets[owners[part]][rows[0]] + position[rows])
        predicted.append(probability[rows])
    return pd.Series(np.concatenate(predicted), index=np.concatenate(flat))


def paired_difference(
    label: np.ndarray, a: np.ndarray, b: np.ndarray, student: np.ndarray, resamples: int = 200
) -> list[float]:
    """AUC(a) - AUC(b) on the same rows, with a 95% percentile interval from a bootstrap
    over students (a student's rows are correlated, so they are drawn together)."""
    order = np.argsort(student, kind="stable")
    owners, first = np.unique(student[order], return_index=True)
    bounds = np.append(first, len(order))
    rng = np.random.default_rng(0)
    differences = []
    for _ in range(resamples):
        drawn = rng.integers(0, len(owners), len(owners))
        rows = order[np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in drawn])]
        if 0 < label[rows].mean() < 1:
            differences.append(auc_or_nan(label[rows], a[rows]) - auc_or_nan(label[rows], b[rows]))
    low, high = np.percentile(differences, [2.5, 97.5])
    return [float(auc_or_nan(label, a) - auc_or_nan(label, b)), float(low), float(high)]


BUCKETS = ["all", "first window", "1-2 windows", "2-4 windows", "beyond 4", "beyond 1"]


def bucket_table(folder: ModelFolder, checkpoint: str, data: FoldData, window: int) -> dict:
    """AUC of the stream and of the fresh-window recompute by position in the history
    (BUCKETS: positions < W, W to 2W, 2W to 4W, >= 4W, >= W), and their paired difference."""
    seq = data.sequences
    streamed = pd.read_parquet(folder.stream_predictions)
    flat = np.searchsorted(seq.row, streamed["global_row"].to_numpy())
    student = np.searchsorted(seq.offsets, flat, side="right") - 1
    position = flat - seq.offsets[student]
    label = seq.response[flat]
    fresh = fresh_window(folder, checkpoint, data).reindex(flat).to_numpy()
    assert not np.isnan(fresh).any(), "every streamed row has a fresh-window prediction"
    stream = streamed["prediction"].to_numpy()
    masks = [
        np.ones(len(flat), dtype=bool),
        position < window,
        (position >= window) & (position < 2 * window),
        (position >= 2 * window) & (position < 4 * window),
        position >= 4 * window,
        position >= window,
    ]
    result = {"rows": {}, "stream": {}, "fresh": {}, "stream_minus_fresh": {}}
    for name, mask in zip(BUCKETS, masks, strict=True):
        result["rows"][name] = int(mask.sum())
        both = mask.any() and 0 < label[mask].mean() < 1
        for kind, score in (("stream", stream), ("fresh", fresh)):
            result[kind][name] = float(auc_or_nan(label[mask], score[mask])) if both else None
        result["stream_minus_fresh"][name] = (
            paired_difference(label[mask], stream[mask], fresh[mask], student[mask])
            if both
            else None
        )
    summary = json.loads(folder.stream_summary.read_text())
    result["stream_rows_per_s"] = summary["rows_per_s"]
    history = pd.read_csv(folder.history)
    result["train_interactions_per_s"] = float(history["interactions_per_s"].mean())
    result["train_seconds"] = float(history["train_seconds"].sum())
    return result


def section(results: dict, args: argparse.Namespace) -> str:
    lines = [
        "`python -m bench.bench_context --before-code <checkout of 179d689>` (output: "
        "`bench/results/context.txt`). "
        f"Machine: {machine()}, CPU. "
        "Before (commit 179d689): training windows of at most `window` questions, each from "
        "a start token; validation and streaming from the last `window` history questions; "
        "rotary positions on a quarter of each head's channels. After: training sequences "
        "carry the receptive field (layers x window) as context; validation and streaming "
        "start from the last receptive field's questions; rotary positions on all channels "
        "(after-quarter-rope: on a quarter, as before). All: the last epoch's checkpoint "
        "(no selection), trained on every training student of the fold; stream = 04's "
        "predictions, fresh = each container predicted from its last `window` questions "
        "re-encoded from a start token; stream - fresh: the paired AUC difference on the same "
        "rows, 95% interval from 200 bootstrap resamples of students. Columns: the row's "
        "position in the student's question history, in windows: the first window (< W), "
        "W to 2W, 2W to 4W, beyond 4W, and beyond the first window (>= W).\n",
    ]
    for name, per_window in results.items():
        lines.append(f"\n**{name}**: {DATASETS[name].note}.\n\n")
        header = ["window", "version", "scored by", *BUCKETS]
        body = []
        for window, versions in per_window.items():
            for version, r in versions.items():
                for kind in ("stream", "fresh"):
                    cells = [f"{v:.4f}" if v is not None else "–" for v in r[kind].values()]
                    body.append([str(window), version, kind, *cells])
                cells = [
                    f"{d:+.4f} ({lo:+.4f}, {hi:+.4f})" if d is not None else "–"
                    for d, lo, hi in (v or (None,) * 3 for v in r["stream_minus_fresh"].values())
                ]
                body.append([str(window), version, "stream - fresh (95% CI)", *cells])
            rows = next(iter(versions.values()))["rows"]
            body.append([str(window), "", "rows", *[f"{n:,}" for n in rows.values()]])
        lines.append(markdown_table(header, body, "lll" + "r" * (len(header) - 3)))
    return "".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--before-code", type=Path, required=True, help="checkout of the old code")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--windows", default="32,100")
    p.add_argument("--versions", default=",".join(VERSIONS))
    p.add_argument("--work-dir", type=Path, default=WORK / "context")
    p.add_argument("--shared-data", type=Path, default=SHARED_DATA)
    results_flag(p, "context")
    args = p.parse_args()
    say = Report("context", args.results)
    say.header("AUC by position in the history, stream and fresh window (bench/bench_context.py)")
    codes = {"before": args.before_code.resolve(), "after": REPO}
    results: dict = {}
    for name in args.datasets.split(","):
        data = DATASETS[name]
        prep = prepare(data, args.work_dir, args.shared_data, say)
        fold = load_fold_data(prep, 0)
        for window in map(int, args.windows.split(",")):
            for version in args.versions.split(","):
                if version == "after-quarter-rope" and name not in QUARTER_ROPE_DATASETS:
                    continue
                code = codes[VERSIONS[version][0]]
                trained = train_version(code, version, data, window, prep, args.work_dir, say)
                checkpoint = trained.folder.epoch_checkpoint(data.epochs).name
                table = bucket_table(trained.folder, checkpoint, fold, window)
                write_json(trained.workspace.path / "buckets.json", table)
                results.setdefault(name, {}).setdefault(window, {})[version] = table
                say(name, window, version, "stream", json.dumps(table["stream"]))
                say(name, window, version, "fresh", json.dumps(table["fresh"]))
    text = section(results, args)
    say()
    say(text.rstrip("\n"))
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
