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
from bench.kt.peer_configs import NAMES, PEERS, peer_config
from bench.kt.peer_data import peer_fold_dir
from bench.kt.plans import Context, DatasetPlan
from common.files import write_text
from common.layout import STREAM_PREDICTIONS
from common.metrics import auc_or_nan, paired_bootstrap_auc_difference

OURS = {
    "model_prediction": "ours: model",
    "trees_prediction": "ours: trees",
    "prediction": "ours: blend",
}
COLUMNS = [
    "dataset", "split", "multi_skill_rows", "model", "folds", "auc_mean", "auc_std",
    "auc_pooled", "rows_scored", "model_minus", "model_minus_low", "model_minus_high",
    "blend_minus", "blend_minus_low", "blend_minus_high", "best_epoch", "epochs_run",
    "train_seconds_per_fold", "config",
]  # fmt: skip


def fold_rows(ctx: Context, plan: DatasetPlan, model_dir: Path, k: int) -> pd.DataFrame | None:
    """Fold k's common rows: label, student, ours and every finished peer's prediction;
    None until ours and the peers' data file exist."""
    stream = FoldRun(model_dir, fold=k).folder / STREAM_PREDICTIONS
    data = peer_fold_dir(ctx, plan, k) / "data.npz"
    if not stream.exists() or not data.exists():
        return None
    with np.load(data) as npz:
        offsets, row_id, row_step = npz["test_offsets"], npz["test_row_id"], npz["test_row_step"]
    student = np.searchsorted(offsets, row_step, side="right") - 1
    first_step = np.isin(row_step, offsets[:-1])
    rows = pd.DataFrame({"row_id": row_id[~first_step], "student": student[~first_step]})
    ours = pd.read_parquet(stream).set_index("row_id")
    if len(ours) != len(row_id) or not ours.index.isin(row_id).all():
        raise ValueError(f"{stream}: its rows are not the rows of {data}")
    rows["label"] = ours.loc[rows["row_id"], "answered_correctly"].to_numpy()
    for column in OURS:
        rows[column] = ours.loc[rows["row_id"], column].to_numpy()
    for peer in PEERS:
        path = peer_fold_dir(ctx, plan, k) / peer / "predictions.csv"
        if path.exists():
            predicted = pd.read_csv(path).set_index("row_id")["prediction"]
            if len(predicted) != len(rows) or not predicted.index.isin(rows["row_id"]).all():
                raise ValueError(
                    f"{path}: expected a prediction for each of the fold's {len(rows):,} rows"
                )
            rows[peer] = predicted.loc[rows["row_id"]].to_numpy()
    rows["fold"] = k
    return rows


def peer_results(ctx: Context, plan: DatasetPlan, peer: str, folds: list[int]) -> list[dict]:
    results = []
    for k in folds:
        path = peer_fold_dir(ctx, plan, k) / peer / "result.json"
        if path.exists():
            results.append(json.loads(path.read_text()))
    return results


def score_table(ctx: Context, plan: DatasetPlan, our_model: str, bootstrap: int) -> list[dict]:
    """One dict per model (ours: model, trees, blend; each peer with every fold ours has)."""
    model_dir = ctx.model_dir(plan, our_model)
    folds = [fold_rows(ctx, plan, model_dir, k) for k in range(plan.n_folds)]
    folds = [f for f in folds if f is not None]
    if not folds:
        return []
    scorers = [c for c in [*OURS, *PEERS] if all(c in f for f in folds)]
    pooled = pd.concat(folds, ignore_index=True)
    clusters = pooled["fold"].to_numpy() * 10_000_000 + pooled["student"].to_numpy()
    table = []
    for scorer in scorers:
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
        if scorer in PEERS:
            row.update(peer_summary(ctx, plan, scorer, [int(f["fold"].iloc[0]) for f in folds]))
        table.append(row)
    return table


def _name(scorer: str) -> str:
    return OURS[scorer] if scorer in OURS else NAMES[scorer]


def peer_summary(ctx: Context, plan: DatasetPlan, peer: str, folds: list[int]) -> dict:
    results = peer_results(ctx, plan, peer, folds)
    return {
        "best_epoch": float(np.mean([r["best_epoch"] for r in results])),
        "epochs_run": float(np.mean([r["epochs_run"] for r in results])),
        "train_seconds_per_fold": float(np.mean([r["wall_seconds"] for r in results])),
        "config": peer_config(peer, plan.preset).source,
    }


def render(frame: pd.DataFrame, ctx: Context) -> str:
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
    ctx: Context, plans: list[DatasetPlan], our_model: str, results: Path, bootstrap: int
) -> str:
    """kt_peers.csv and kt_peers.txt from every finished fold; returns the text."""
    rows = [row for plan in plans for row in score_table(ctx, plan, our_model, bootstrap)]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    results.parent.mkdir(parents=True, exist_ok=True)
    write_text(results.with_suffix(".csv"), frame.to_csv(index=False, float_format="%.6g"))
    text = render(frame, ctx)
    write_text(results.with_suffix(".txt"), relative(text) + "\n")
    return text
