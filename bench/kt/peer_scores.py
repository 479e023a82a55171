"""The KT peers benchmark's scores (bench/kt/peers.py): our model, the boosted trees, the
blend and each pyKT peer on the same rows of each finished fold, and the tables
bench/results/kt_peers.csv and .txt.

The rows: the fold's streamed question rows (04's stream_predictions.parquet) less each
student's first step, which no pyKT model predicts; every peer must have predicted
exactly these (checked). AUC per fold, their mean ± std, the pooled AUC over the folds
run, and for each peer the paired bootstrap (students resampled, common.metrics) of our
model's and our blend's AUC minus the peer's on the pooled rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.benchlib import relative
from bench.fold_run import FoldRun
from bench.kt.peer_configs import RUN_KEYS, run_name
from bench.kt.peer_data import peer_fold_dir
from bench.kt.plans import Context, DatasetPlan
from common.errors import UserError
from common.files import write_text
from common.metrics import auc_or_nan, paired_bootstrap_auc_difference
from common.model.registry import ARCH_NAMES
from common.workspace import Workspace

OURS = {
    "model_prediction": "ours: model",
    "trees_prediction": "ours: trees",
    "prediction": "ours: blend",
}
# a run of several architectures: each other one's own probabilities (04's column)
OURS.update({f"{arch}_prediction": f"ours: {arch}" for arch in ARCH_NAMES[1:]})
COLUMNS = [
    "dataset", "split", "multi_skill_rows", "model", "folds", "auc_mean", "auc_std",
    "auc_pooled", "rows_scored", "model_minus", "model_minus_low", "model_minus_high",
    "blend_minus", "blend_minus_low", "blend_minus_high", "rows_first_steps", "rows_cut_history",
    "best_epoch", "epochs_run", "train_seconds_per_fold", "seconds_per_epoch", "size",
    "config", "pykt_source",
]  # fmt: skip


def fold_rows(ctx: Context, plan: DatasetPlan, ours: Workspace, k: int) -> pd.DataFrame | None:
    """Fold k's streamed rows: label, student, steps before the row's (`position`),
    whether it is a student's first step (`first_step`, no peer predicts it) and whether
    its concept repeats the step before it; ours and every finished peer's prediction
    (NaN on first steps); ours from our model's workspace `ours`. None until ours and the
    peers' data file exist."""
    stream = FoldRun(ours, fold=k).folder.stream_predictions
    data = peer_fold_dir(ctx, plan, k) / "data.npz"
    if not stream.exists() or not data.exists():
        return None
    with np.load(data) as npz:
        offsets, concept = npz["test_offsets"], npz["test_c"]
        row_id, step = npz["test_row_id"], npz["test_row_step"]
    student = np.searchsorted(offsets, step, side="right") - 1
    position = step - offsets[student]
    repeat = position > 0
    repeat[repeat] = concept[step[repeat]] == concept[step[repeat] - 1]
    rows = pd.DataFrame(
        {"row_id": row_id, "student": student, "position": position, "repeat": repeat}
    )
    rows["first_step"] = position == 0
    ours = pd.read_parquet(stream).set_index("row_id")
    if len(ours) != len(row_id) or not ours.index.isin(row_id).all():
        raise ValueError(f"{stream}: its rows are not the rows of {data}")
    rows["label"] = ours.loc[row_id, "answered_correctly"].to_numpy()
    for column in OURS:
        if column in ours:  # another architecture's, where the run has several
            rows[column] = ours.loc[row_id, column].to_numpy()
    common = rows.loc[~rows["first_step"], "row_id"]
    for peer in RUN_KEYS:
        path = peer_fold_dir(ctx, plan, k) / peer / "predictions.csv"
        if path.exists():
            predicted = pd.read_csv(path).set_index("row_id")["prediction"]
            if len(predicted) != len(common) or not predicted.index.isin(common).all():
                raise ValueError(
                    f"{path}: expected a prediction for each of the fold's {len(common):,} "
                    "rows after a student's first step"
                )
            rows[peer] = predicted.reindex(row_id).to_numpy()
    rows["fold"] = k
    return rows


def peer_results(ctx: Context, plan: DatasetPlan, peer: str, folds: list[int]) -> list[dict]:
    results = []
    for k in folds:
        path = peer_fold_dir(ctx, plan, k) / peer / "result.json"
        if path.exists():
            results.append(json.loads(path.read_text()))
    return results


def score_table(
    ctx: Context, plan: DatasetPlan, our_model: str, bootstrap: int, seq_len: int
) -> tuple[list[dict], pd.DataFrame | None]:
    """(one dict per model: ours (model, trees, blend) and each peer, each on the folds it
    has finished, on the rows after each student's first step; every fold's rows)."""
    ours = Workspace(ctx.model_dir(plan, our_model))
    every = [fold_rows(ctx, plan, ours, k) for k in range(plan.n_folds)]
    every = [f for f in every if f is not None]
    if not every:
        return [], None
    table = []
    for scorer in [*OURS, *RUN_KEYS]:
        folds = [f[~f["first_step"]] for f in every if scorer in f]
        if folds:
            table.append(score_row(ctx, plan, scorer, folds, bootstrap))
            table[-1]["rows_first_steps"] = int(
                sum(f["first_step"].sum() for f in every if scorer in f)
            )
            table[-1]["rows_cut_history"] = int(
                sum((f["position"] >= seq_len).sum() for f in folds)
            )
    return table, pd.concat(every, ignore_index=True)


def score_row(
    ctx: Context, plan: DatasetPlan, scorer: str, folds: list[pd.DataFrame], bootstrap: int
) -> dict:
    """The scorer's AUC per fold and pooled, and our model's and blend's AUC minus its,
    paired over the same rows (students resampled)."""
    pooled = pd.concat(folds, ignore_index=True)
    clusters = pooled["fold"].to_numpy() * 10_000_000 + pooled["student"].to_numpy()
    per_fold = [auc_or_nan(f["label"], f[scorer]) for f in folds]
    row = {
        "dataset": plan.preset, "split": plan.split,
        "multi_skill_rows": ctx.args.multi_skill_rows, "model": _name(scorer),
        "folds": ",".join(str(int(f["fold"].iloc[0])) for f in folds),
        "auc_mean": float(np.mean(per_fold)),
        "auc_std": float(np.std(per_fold, ddof=1)) if len(per_fold) > 1 else float("nan"),
        "auc_pooled": auc_or_nan(pooled["label"], pooled[scorer]), "rows_scored": len(pooled),
    }  # fmt: skip
    for ours, name in (("model_prediction", "model_minus"), ("prediction", "blend_minus")):
        diff = paired_bootstrap_auc_difference(
            pooled["label"], pooled[ours], pooled[scorer], clusters, bootstrap, seed=0
        )
        row.update(zip((name, f"{name}_low", f"{name}_high"), diff, strict=True))
    if scorer in RUN_KEYS:
        row.update(peer_summary(ctx, plan, scorer, [int(f["fold"].iloc[0]) for f in folds]))
    return row


SLICES = {
    "first step (ours only)": lambda r: r["first_step"],
    "1-9 steps before": lambda r: r["position"].between(1, 9),
    "10-49": lambda r: r["position"].between(10, 49),
    "50-199": lambda r: r["position"].between(50, 199),
    "200 or more": lambda r: r["position"] >= 200,
    "same concept as the step before": lambda r: r["repeat"],
    "another concept": lambda r: ~r["repeat"] & ~r["first_step"],
}


def slice_table(plan: DatasetPlan, rows: pd.DataFrame, folds_of: dict[str, str]) -> str:
    """AUC by slice of the rows (history length, a repeat of the concept before), each
    scorer on the folds every peer has finished (the folds of its table row)."""
    shared = set.intersection(*(set(v.split(",")) for v in folds_of.values()))
    rows = rows[rows["fold"].astype(str).isin(shared)]
    scorers = [c for c in [*OURS, *RUN_KEYS] if c in rows and _name(c) in folds_of]
    head = f"| {plan.preset} ({plan.split}), folds {','.join(sorted(shared))} | rows | "
    lines = [head + " | ".join(_name(c) for c in scorers) + " |"]
    lines.append("| --- | ---: |" + " ---: |" * len(scorers))
    for name, chosen in SLICES.items():
        part = rows[chosen(rows)]
        aucs = [
            auc_or_nan(part["label"], part[c]) if part[c].notna().all() else np.nan for c in scorers
        ]
        cells = ["—" if np.isnan(a) else f"{a:.4f}" for a in aucs]
        lines.append(f"| {name} | {len(part):,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _name(scorer: str) -> str:
    return OURS[scorer] if scorer in OURS else run_name(scorer)


def peer_summary(ctx: Context, plan: DatasetPlan, peer: str, folds: list[int]) -> dict:
    """A peer run's means over its folds: epochs, times, and what it ran (its size, the
    hyperparameters' origin and the pyKT it ran in, as its result.json recorded them)."""
    results = peer_results(ctx, plan, peer, folds)
    first = results[0]
    return {
        "best_epoch": float(np.mean([r["best_epoch"] for r in results])),
        "epochs_run": float(np.mean([r["epochs_run"] for r in results])),
        "train_seconds_per_fold": float(np.mean([r["wall_seconds"] for r in results])),
        "seconds_per_epoch": float(np.mean([r["seconds_per_epoch"] for r in results])),
        "size": first["size"],
        "config": first["source"],
        "pykt_source": first["pykt_source"],
    }


def render(frame: pd.DataFrame) -> str:
    """The markdown table of kt_peers.txt."""
    lines = [
        "| data set (split) | model | AUC mean ± std | pooled AUC | rows | our model − this "
        "[95% CI] | our blend − this [95% CI] | folds |",
        "| --- | --- | --- | --- | ---: | --- | --- | --- |",
    ]
    for r in frame.itertuples():
        spread = "" if np.isnan(r.auc_std) else f" ± {r.auc_std:.4f}"
        lines.append(
            f"| {r.dataset} ({r.split}) | {r.model} | {r.auc_mean:.4f}{spread} "
            f"| {r.auc_pooled:.4f} "
            f"| {r.rows_scored:,} | {_diff(r.model_minus, r.model_minus_low, r.model_minus_high)} "
            f"| {_diff(r.blend_minus, r.blend_minus_low, r.blend_minus_high)} | {r.folds} |"
        )
    return "\n".join(lines)


def _diff(value: float, low: float, high: float) -> str:
    if np.isnan(low):
        return f"{value:+.4f}"
    return f"{value:+.4f} [{low:+.4f}, {high:+.4f}]"


def write_tables(
    ctx: Context,
    plans: list[DatasetPlan],
    our_model: str,
    results: Path,
    bootstrap: int,
    seq_len: int,
    replace: bool = False,
) -> str:
    """kt_peers.csv and kt_peers.txt from every finished fold; returns the text. Refused
    (UserError, nothing written) when no fold is finished, and when the tables at
    `results` hold a row (data set, split, model) the work folder has not finished,
    unless `replace`: a partial run never overwrites finished results. The rows are known
    without the bootstrap (minutes a table), so such a refusal comes before it."""
    csv = results.with_suffix(".csv")
    if bootstrap and csv.exists() and not replace:
        rows = [r for plan in plans for r in score_table(ctx, plan, our_model, 0, seq_len)[0]]
        _refuse_dropping(ctx, csv, pd.DataFrame(rows, columns=COLUMNS))
    table, slices = [], []
    for plan in plans:
        rows, every = score_table(ctx, plan, our_model, bootstrap, seq_len)
        table += rows
        if every is not None:
            slices.append(slice_table(plan, every, {r["model"]: r["folds"] for r in rows}))
    if not table:
        looked = [relative(ctx.model_dir(plan, our_model)) for plan in plans]
        raise UserError(
            f"no finished fold under {relative(ctx.args.work_dir)}: a fold is finished when "
            f"our recipe has streamed it (runs/bench/fold<k>/ under {', '.join(looked)}) and "
            "its peers' data exists; nothing written"
        )
    frame = pd.DataFrame(table, columns=COLUMNS)
    if csv.exists() and not replace:
        _refuse_dropping(ctx, csv, frame)
    results.parent.mkdir(parents=True, exist_ok=True)
    write_text(csv, frame.to_csv(index=False, float_format="%.6g"))
    text = render(frame) + "\n\nEach peer's runs (means over its folds):\n\n" + render_runs(frame)
    text += "\n\nAUC by slice of the rows:\n\n" + "\n\n".join(slices)
    write_text(results.with_suffix(".txt"), relative(text) + "\n")
    return text


def _refuse_dropping(ctx: Context, csv: Path, frame: pd.DataFrame) -> None:
    """UserError when the table at `csv` holds a row `frame` lacks."""
    dropped = _dropped_rows(csv, frame)
    if dropped:
        raise UserError(
            f"{relative(csv)} holds {len(dropped)} row(s) the work folder "
            f"{relative(ctx.args.work_dir)} has not finished ({'; '.join(dropped[:4])}"
            f"{' ...' if len(dropped) > 4 else ''}); nothing written: finish them, give "
            "another --results, or --replace to drop them"
        )


def render_runs(frame: pd.DataFrame) -> str:
    """Each peer's size, epochs, seconds per epoch and where its hyperparameters come from."""
    lines = [
        "| data set (split) | peer | size | folds | epochs run | best epoch (inner split) "
        "| s per epoch | hyperparameters from | pyKT |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for r in frame[frame["config"].notna()].itertuples():
        lines.append(
            f"| {r.dataset} ({r.split}) | {r.model} | {r.size} | {r.folds} "
            f"| {r.epochs_run:.1f} | {r.best_epoch:.1f} | {r.seconds_per_epoch:,.0f} "
            f"| {r.config} | {r.pykt_source} |"
        )
    return "\n".join(lines)


def _dropped_rows(csv: Path, frame: pd.DataFrame) -> list[str]:
    """The rows (data set, split, model) of the table at `csv` that `frame` lacks."""
    try:
        old = pd.read_csv(csv, usecols=["dataset", "split", "model"], dtype=str)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise UserError(f"{relative(csv)}: not a table of this bench ({error})") from None
    new = set(zip(frame["dataset"], frame["split"], frame["model"], strict=True))
    return [
        f"{d} ({s}) {m}"
        for d, s, m in zip(old["dataset"], old["split"], old["model"], strict=True)
        if (d, s, m) not in new
    ]
