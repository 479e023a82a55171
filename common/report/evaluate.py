"""05_evaluate.py's logic: score every fold's streamed predictions, compare them with
two baselines (common/report/baselines.py), the trees and the blend as 04 streamed them
(04 fits the trees and chooses the blend's weight, common/model/trees/blending.py; 05 only reads
them: none where 04 ran with --no-trees) and, on demo data, with the true probabilities,
and write a report with tables and figures.

Inputs (under --output-dir): data/ (01), folds/ (02), and in the run's folder (runs/NAME/)
fold{k}/history.csv, config.json (03), fold{k}/stream_predictions.parquet,
stream_summary.json (its blend record) and trees.npz, tree_inputs.npz, blend.json (04);
optionally <input-dir>/demo_truth.csv (00's demo).
Labels come from the data arrays through each prediction's global_row, never from the
predictions file (whose labels must agree), and the rows must be exactly the question rows
of the fold's validation stream.

Outputs (in the run's folder, and a row of <output-dir>/runs.csv):
    report.md             the report (the run's configuration and provenance, headline,
                          tables, figures, method)
    report/metrics.csv    per fold and pooled, per scorer: every metric
    report/metrics.md     the same as Markdown tables
    report/slices.csv/md  AUC and more by student, part, history, container
    report/*.png          ROC curves, reliability diagram, training curves
    report/summary.json   the headline numbers
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from common import metrics
from common.data.dataset import Dataset
from common.data.fold_data import Fold
from common.files import atomic_dir, atomic_file, write_json, write_run_record, write_text
from common.metrics import bootstrap_auc_interval, score_metrics, student_and_part_slices
from common.model.registry import ARCH_NAMES
from common.model.trees.blending import BLEND, BlendChoice
from common.model.trees.boosting import TREES
from common.report import plots
from common.report.baselines import BASELINE_NAMES
from common.report.evaluation import EvaluateConfig, Evaluation
from common.report.render import POOLED, metrics_markdown, report_markdown, slices_markdown
from common.report.scored_rows import (
    MODEL,
    ORACLE,
    add_oracle,
    discover_folds,
    load_fold_rows,
    selection_note,
    stream_summary,
)
from common.runs.folders import commit
from common.runs.provenance import epochs_trained, run_provenance
from common.runs.table import append_run_row, config_columns
from common.workspace import ModelFolder, ReportFolder, Run

TRUTH_FILE = "demo_truth.csv"
IMPORTANCE_TITLE = "Trees: permutation importance"

# Slice buckets: (label, lowest value, highest value) inclusive.
HISTORY_BUCKETS = (
    ("0", 0, 0),
    ("1-10", 1, 10),
    ("11-100", 11, 100),
    ("101-1000", 101, 1000),
    (">1000", 1001, np.inf),
)
CONTAINER_BUCKETS = (("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4", 4, 4), ("5+", 5, np.inf))


BASELINES = (*BASELINE_NAMES, TREES)


def scorers(rows: pd.DataFrame) -> list[str]:
    """Score columns present, in report order: the model, the blend, each other
    architecture of the run (by its name), the baselines, the oracle."""
    members = [name for name in ARCH_NAMES if name in rows.columns]
    return [name for name in (MODEL, BLEND, *members, *BASELINES, ORACLE) if name in rows.columns]


# ---------------------------------------------------------------------------------------
# tables


def metric_table(rows: pd.DataFrame, config: EvaluateConfig) -> pd.DataFrame:
    """Long table: one row per (fold or 'pooled', scorer) with every metric; the model's
    rows carry a bootstrap interval for AUC."""
    groups = [(str(k), rows[rows["fold"] == k]) for k in sorted(rows["fold"].unique())]
    groups.append((POOLED, rows))
    records = []
    for name, group in groups:
        labels = group["label"].to_numpy()
        for scorer in scorers(rows):
            record = {"fold": name, "scorer": scorer}
            record.update(score_metrics(labels, group[scorer].to_numpy()))
            low = high = float("nan")
            if scorer == MODEL:
                low, high = bootstrap_auc_interval(
                    labels,
                    group[scorer].to_numpy(),
                    config.bootstrap,
                    config.seed,
                    progress=config.progress,
                )
            record["auc_ci_low"], record["auc_ci_high"] = low, high
            records.append(record)
    return pd.DataFrame(records)


def _bucket(values: np.ndarray, buckets) -> list[tuple[str, np.ndarray]]:
    return [(label, (values >= low) & (values <= high)) for label, low, high in buckets]


def slice_table(rows: pd.DataFrame) -> pd.DataFrame:
    """AUC of every scorer, rows, share correct and the model's log loss per slice of the
    pooled rows."""
    part = rows["part"].to_numpy()
    slices = student_and_part_slices(rows["new_student"].to_numpy(), part, np.unique(part))
    for kind, column, buckets in (
        ("history length", "history_length", HISTORY_BUCKETS),
        ("container size", "container_size", CONTAINER_BUCKETS),
    ):
        slices += [(kind, label, mask) for label, mask in _bucket(rows[column].to_numpy(), buckets)]
    scores = {scorer: rows[scorer].to_numpy() for scorer in scorers(rows)}
    return metrics.slice_table(rows["label"].to_numpy(), scores, slices, log_loss_of=(MODEL,))


# ---------------------------------------------------------------------------------------
# the report


def headline(table: pd.DataFrame) -> Evaluation:
    """The pooled figures of the metric table (the run's fields left empty)."""
    pooled = table[table["fold"] == POOLED].set_index("scorer")
    model = pooled.loc[MODEL]
    baselines = {name: float(pooled.loc[name, "auc"]) for name in BASELINES if name in pooled.index}
    per_fold = table[(table["fold"] != POOLED) & (table["scorer"] == MODEL)]["auc"].to_numpy()
    return Evaluation(
        rows=int(model["rows"]),
        auc=float(model["auc"]),
        auc_ci_low=float(model["auc_ci_low"]),
        auc_ci_high=float(model["auc_ci_high"]),
        baselines=baselines,
        blend_auc=float(pooled.loc[BLEND, "auc"]) if BLEND in pooled.index else None,
        oracle_auc=float(pooled.loc[ORACLE, "auc"]) if ORACLE in pooled.index else None,
        members={n: float(pooled.loc[n, "auc"]) for n in ARCH_NAMES if n in pooled.index},
        lift={name: float(model["auc"]) - auc for name, auc in baselines.items()},
        fold_aucs=[float(a) for a in per_fold],
        auc_fold_mean=float(np.mean(per_fold)),
        auc_fold_std=float(np.std(per_fold, ddof=1)) if len(per_fold) > 1 else None,
    )


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    with atomic_file(path) as tmp:
        frame.to_csv(tmp, index=False)


NO_TREES = "04 streamed it without trees (04_infer.py --no-trees): no trees or blend to report"


def streamed_choice(summary: dict, fold: int) -> tuple[BlendChoice | None, str]:
    """The blend weight 04 chose for the fold (its stream_summary's blend record: 04 fits
    the trees and chooses the weight, 05 only reads them), or why there is none."""
    record = summary.get("blend")
    if not record:
        return None, f"fold {fold}: {NO_TREES}"
    if record.get("choice") is None:
        return None, record.get("no_blend") or f"fold {fold}: 04 chose no weight"
    return BlendChoice(**record["choice"]), ""


def load_histories(run: Run, folds: list[int]) -> dict[int, pd.DataFrame]:
    histories = {}
    for k in folds:
        path = run.fold(k).history
        if path.exists():
            histories[k] = pd.read_csv(path)
    return histories


def scored_rows(
    run: Run, folds: list[int], data: Dataset, config: EvaluateConfig
) -> tuple[pd.DataFrame, dict[int, BlendChoice], list[str]]:
    """The folds' scored rows (with the trees and the blend where every fold streamed
    them), each fold's blend choice as 04 made it, and why a fold has none."""
    frames, blends, no_blend = [], {}, []
    for k in folds:
        fold = Fold.of(run.workspace, k)  # read and fingerprinted once
        fold_rows = load_fold_rows(fold, run.fold(k), data, config.baselines)
        choice, reason = streamed_choice(stream_summary(run.fold(k)), k)
        if choice is None:
            no_blend.append(reason)
        else:
            blends[k] = choice
        frames.append(fold_rows)
    # a row over some folds only would not compare with the others
    dropped = [name for name in (TREES, BLEND) if not all(name in f for f in frames)]
    frames = [frame.drop(columns=dropped, errors="ignore") for frame in frames]
    if BLEND in dropped:
        blends = {}
    return pd.concat(frames).reset_index(drop=True), blends, no_blend


def write_tables(
    report: ReportFolder, table: pd.DataFrame, slices: pd.DataFrame
) -> tuple[str, str]:
    """report/metrics and report/slices as CSV and Markdown; returns the Markdown."""
    metrics_md, slices_md = metrics_markdown(table), slices_markdown(slices)
    _write_csv(report.table("metrics", "csv"), table)
    _write_csv(report.table("slices", "csv"), slices)
    write_text(report.table("metrics", "md"), metrics_md)
    write_text(report.table("slices", "md"), slices_md)
    return metrics_md, slices_md


def tree_importance(blends: dict[int, BlendChoice]) -> dict[str, tuple[float, float]]:
    """Each feature's permutation importance on the inner splits, averaged over the folds
    that measured it: {name: (mean AUC lost, the larger of its spreads)}, largest first."""
    found: dict[str, list[tuple[float, float]]] = {}
    for choice in blends.values():
        for name, (mean, spread) in (choice.importance or {}).items():
            found.setdefault(name, []).append((mean, spread))
    averaged = {
        name: (float(np.mean([m for m, _ in pairs])), float(max(s for _, s in pairs)))
        for name, pairs in found.items()
    }
    return dict(sorted(averaged.items(), key=lambda item: -item[1][0]))


def write_figures(
    report: ReportFolder,
    rows: pd.DataFrame,
    histories: dict[int, pd.DataFrame],
    bins: int,
    importance: dict[str, tuple[float, float]],
) -> dict[str, str]:
    """The report's figures; returns their titles and links (relative to report.md)."""
    labels = rows["label"].to_numpy()
    scores = {name: rows[name].to_numpy() for name in scorers(rows)}
    figures = {"ROC curves": "roc", "Reliability diagram": "reliability"}
    plots.roc_figure(report.figure("roc"), labels, scores)
    plots.reliability_figure(report.figure("reliability"), labels, scores, bins)
    if histories:
        plots.training_curves_figure(report.figure("training_curves"), histories)
        figures["Training curves"] = "training_curves"
    if importance:
        plots.importance_figure(report.figure("tree_importance"), importance)
        figures[IMPORTANCE_TITLE] = "tree_importance"
    return {title: report.link(key) for title, key in figures.items()}


def evaluate(run: Run, input_dir: Path, config: EvaluateConfig) -> Evaluation:
    """Score the run's folds' stream predictions, write its report and a row of
    runs.csv; returns what it found."""
    begin = time.perf_counter()
    input_dir = Path(input_dir)
    folds = config.folds if config.folds is not None else discover_folds(run)
    if not folds:
        raise FileNotFoundError(
            f"no {run.path}/fold*/{ModelFolder.STREAM_PREDICTIONS}: run 04_infer.py first"
        )
    data = Dataset.of(run.workspace)
    rows, blends, no_blend = scored_rows(run, folds, data, config)
    if (input_dir / TRUTH_FILE).exists():
        rows = add_oracle(rows, input_dir / TRUTH_FILE, data)
    table = metric_table(rows, config)
    summaries = {k: stream_summary(run.fold(k)) for k in folds}
    head = describe(table, blends, no_blend, summaries, run)
    provenance = run_provenance(run, summaries)
    # report/ whole or not at all, and report.md written last inside that: a stop leaves
    # the previous report and its folder, or both new
    with atomic_dir(run.report.path, owns=ReportFolder.WRITES) as tmp:
        report = ReportFolder(tmp)
        tables = write_tables(report, table, slice_table(rows))
        histories = load_histories(run, folds)
        links = write_figures(
            report, rows, histories, config.calibration_bins, head.tree_importance
        )
        write_json(report.summary, asdict(head))
        write_run_record(report.record("evaluate"), asdict(config))
        text = report_markdown(head, tables, links, config, provenance)
        write_text(run.report_file, text)
    row = evaluate_row(run, head, provenance, summaries, table)
    append_run_row(run.workspace, row | {"wall_s": time.perf_counter() - begin})
    return head


def describe(
    table: pd.DataFrame,
    blends: dict[int, BlendChoice],
    no_blend: list[str],
    summaries: dict[int, dict],
    run: Run,
) -> Evaluation:
    """What the evaluation found: the metric table's headline, and what the run
    submits, the blend's choices, the trees' importance, the checkpoints' selection."""
    streamed_blend = all(v.get("submitted") == "blend" for v in summaries.values())
    return replace(
        headline(table),
        submitted=BLEND if streamed_blend and BLEND in set(table["scorer"]) else MODEL,
        blend={k: asdict(choice) for k, choice in blends.items()},
        tree_importance=tree_importance(blends),
        trees_config=trees_config(summaries) if TREES in set(table["scorer"]) else None,
        no_blend=no_blend,
        folds=list(summaries),
        selection=selection_note(summaries),
        report=str(run.report_file),
        run=run.name,
    )


def trees_config(summaries: dict[int, dict]) -> dict | None:
    """The settings 04 fitted the folds' trees with (their stream summaries'
    trees_config), the first fold's where folds differ."""
    return next(iter(summaries.values())).get("trees_config")


def evaluate_row(
    run: Run, head: Evaluation, provenance: dict, summaries: dict, table: pd.DataFrame
) -> dict:
    """The report as a row of output/runs.csv: the pooled AUC of what the run submits
    (the streamed blend, or the model) and its fold spread, and the model's AUC."""
    first = next(iter(provenance["folds"].values()))
    submitted = table[table["scorer"] == head.submitted]
    per_fold = submitted[submitted["fold"] != POOLED]["auc"].to_numpy()
    return {
        "run": head.run,
        "stage": "evaluate",
        "folds": ",".join(map(str, head.folds)),
        "commit": commit(),
        **(config_columns(first["config"]) if first["config"] else {}),
        "epochs": ",".join(str(epochs_trained(run, k)) for k in head.folds),
        "best_epoch": ",".join(str(s.get("checkpoint_epoch")) for s in summaries.values()),
        "selected_on": ",".join(
            sorted({str(s.get("checkpoint_selected_on") or "by hand") for s in summaries.values()})
        ),
        "stream_auc": float(submitted[submitted["fold"] == POOLED]["auc"].iloc[0]),
        "model_auc": head.auc,
        "auc_fold_mean": float(np.mean(per_fold)),
        "auc_fold_std": float(np.std(per_fold, ddof=1)) if len(per_fold) > 1 else None,
    }
