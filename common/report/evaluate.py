"""05_evaluate.py's logic: score every fold's streamed predictions, compare them with
three baselines (common/report/baselines.py, common/report/feature_baseline.py) and, on
demo data, with the true probabilities, score the model's blend with the boosted features
(common/report/blend.py), and write a report with tables and figures.

Inputs (under --output-dir): data/ (01), folds/ (02), and in the run's folder (runs/NAME/)
fold{k}/history.csv, config.json (03) and fold{k}/stream_predictions.parquet (04);
optionally fold{k}/inner_predictions.parquet (03, for the blend) and
<input-dir>/demo_truth.csv (00's demo).
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from common import metrics
from common.data.dataset import Dataset
from common.data.fold_data import Fold
from common.files import atomic_file, write_json, write_run_record, write_text
from common.layout import REPORT_FILE, REPORT_SUBDIR, STREAM_PREDICTIONS, fold_dir, run_dir
from common.metrics import bootstrap_auc_interval, score_metrics, student_and_part_slices
from common.options import option, progress_option
from common.report import plots
from common.report.baselines import BASELINE_NAMES, BaselineConfig
from common.report.blend import BLEND, BlendChoice, choose_fold_blend, logit_blend
from common.report.feature_baseline import FEATURE_BASELINE, FeatureBaselineConfig
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
from common.runs.provenance import epochs_trained, provenance_markdown, run_provenance
from common.runs.table import append_run_row, config_columns
from common.tables import markdown_table

TRUTH_FILE = "demo_truth.csv"
POOLED = "pooled"

# Slice buckets: (label, lowest value, highest value) inclusive.
HISTORY_BUCKETS = (
    ("0", 0, 0),
    ("1-10", 1, 10),
    ("11-100", 11, 100),
    ("101-1000", 101, 1000),
    (">1000", 1001, np.inf),
)
CONTAINER_BUCKETS = (("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4", 4, 4), ("5+", 5, np.inf))


@dataclass
class EvaluateConfig:
    folds: list[int] | None = option(
        None, "folds to score (default: every fold{k}/ of the run holding stream predictions)"
    )
    bootstrap: int = option(1000, "AUC resamples for the interval; 0 skips it")
    seed: int = option(0, "seed of the bootstrap")
    calibration_bins: int = option(10, "bins of the calibration table and plot")
    # a bar over bootstrap resamples (minutes on millions of rows)
    progress: bool = progress_option()
    feature_baseline: bool = option(
        True,
        "fit the boosted-features baseline (gradient-boosted trees over past-event "
        "features) on each fold's training rows, and blend it with the model",
    )
    baselines: BaselineConfig = field(default_factory=BaselineConfig)
    features: FeatureBaselineConfig = field(default_factory=FeatureBaselineConfig)


BASELINES = (*BASELINE_NAMES, FEATURE_BASELINE)


def scorers(rows: pd.DataFrame) -> list[str]:
    """Score columns present, in report order."""
    return [name for name in (MODEL, BLEND, *BASELINES, ORACLE) if name in rows.columns]


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


def _fmt(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    return f"{float(value):.{digits}f}"


def _auc_with_interval(record: pd.Series) -> str:
    text = _fmt(record["auc"])
    if not np.isnan(record["auc_ci_low"]):
        text += f" ({_fmt(record['auc_ci_low'])}–{_fmt(record['auc_ci_high'])})"
    return text


def metrics_markdown(table: pd.DataFrame) -> str:
    """Three tables: AUC by fold and scorer, every scorer pooled, the model at the two
    thresholds."""
    present = list(dict.fromkeys(table["scorer"]))
    folds = list(dict.fromkeys(table["fold"]))
    by = table.set_index(["fold", "scorer"])
    header = ["fold", "rows", "share correct", "model AUC (95% CI)"]
    header += [f"{s} AUC" for s in present if s != MODEL] + ["model log loss", "model Brier"]
    body = []
    for fold in folds:
        model = by.loc[(fold, MODEL)]
        row = [fold, _fmt(int(model["rows"])), _fmt(model["share_positive"], 3)]
        row.append(_auc_with_interval(model))
        row += [_fmt(by.loc[(fold, s), "auc"]) for s in present if s != MODEL]
        row += [_fmt(model["log_loss"]), _fmt(model["brier"])]
        body.append(row)
    parts = ["### ROC AUC by fold\n\n", markdown_table(header, body)]

    header = ["scorer", "AUC", "log loss", "Brier", "accuracy @0.5", "F1 @0.5"]
    header += ["best-F1 threshold", "F1 there"]
    body = []
    for scorer in present:
        r = by.loc[(POOLED, scorer)]
        body.append(
            [
                scorer,
                _fmt(r["auc"]),
                _fmt(r["log_loss"]),
                _fmt(r["brier"]),
                _fmt(r["accuracy_at_half"]),
                _fmt(r["f1_at_half"]),
                _fmt(r["best_f1_threshold"], 3),
                _fmt(r["f1_at_best_f1"]),
            ]
        )
    parts += ["\n### Every scorer, pooled rows\n\n", markdown_table(header, body)]

    header = ["fold", "threshold", "accuracy", "precision", "recall", "fall-out"]
    header += ["specificity", "F1"]
    body = []
    for fold in folds:
        r = by.loc[(fold, MODEL)]
        for suffix, label in (
            ("at_half", "0.5"),
            ("at_best_f1", f"{_fmt(r['best_f1_threshold'], 3)} (best F1)"),
        ):
            keys = ("accuracy", "precision", "recall", "fall_out", "specificity", "f1")
            body.append([fold, label, *[_fmt(r[f"{k}_{suffix}"]) for k in keys]])
    parts += ["\n### The model as a classifier\n\n", markdown_table(header, body)]
    return "".join(parts)


def slices_markdown(table: pd.DataFrame) -> str:
    auc_columns = [c for c in table.columns if c.startswith("auc_")]
    header = ["slice", "value", "rows", "share correct"]
    header += [f"{c.removeprefix('auc_')} AUC" for c in auc_columns] + ["model log loss"]
    body = [
        [
            r["slice"],
            r["value"],
            _fmt(int(r["rows"])),
            _fmt(r["share_correct"], 3),
            *[_fmt(r[c]) for c in auc_columns],
            _fmt(r["log_loss_model"]),
        ]
        for _, r in table.iterrows()
    ]
    return markdown_table(header, body, "ll" + "r" * (len(header) - 2))


# ---------------------------------------------------------------------------------------
# the report


def headline(table: pd.DataFrame) -> dict:
    """Pooled model AUC with interval, the baselines' and the oracle's AUC, the lifts."""
    pooled = table[table["fold"] == POOLED].set_index("scorer")
    model = pooled.loc[MODEL]
    result = {
        "rows": int(model["rows"]),
        "auc": float(model["auc"]),
        "auc_ci_low": float(model["auc_ci_low"]),
        "auc_ci_high": float(model["auc_ci_high"]),
        "baselines": {
            name: float(pooled.loc[name, "auc"]) for name in BASELINES if name in pooled.index
        },
        "blend_auc": float(pooled.loc[BLEND, "auc"]) if BLEND in pooled.index else None,
        "oracle_auc": float(pooled.loc[ORACLE, "auc"]) if ORACLE in pooled.index else None,
    }
    result["lift"] = {name: result["auc"] - auc for name, auc in result["baselines"].items()}
    per_fold = table[(table["fold"] != POOLED) & (table["scorer"] == MODEL)]["auc"].to_numpy()
    result["fold_aucs"] = [float(a) for a in per_fold]
    result["auc_fold_mean"] = float(np.mean(per_fold))
    # the sample standard deviation over folds (n - 1); none with one fold
    result["auc_fold_std"] = float(np.std(per_fold, ddof=1)) if len(per_fold) > 1 else None
    return result


def _headline_markdown(head: dict, folds: list[int], config: EvaluateConfig) -> str:
    lines = [
        f"**Model ROC AUC {head['auc']:.4f}** on {head['rows']:,} streamed question rows "
        f"(fold{'s' if len(folds) > 1 else ''} {', '.join(map(str, folds))}, pooled)"
    ]
    if config.bootstrap > 0:
        lines[0] += (
            f", 95% interval {head['auc_ci_low']:.4f}–{head['auc_ci_high']:.4f} "
            f"(percentile bootstrap over rows, {config.bootstrap:,} resamples)"
        )
    lines[0] += "."
    if head.get("auc_fold_std") is not None:
        lines.append(
            f"Fold mean {head['auc_fold_mean']:.4f} ± {head['auc_fold_std']:.4f} (standard "
            f"deviation over {len(head['fold_aucs'])} folds, each scored on its own rows)."
        )
    if head["oracle_auc"] is not None:
        best = max(head["baselines"].values())
        gap = head["oracle_auc"] - best
        share = (head["auc"] - best) / gap if gap > 0 else float("nan")
        lines.append(
            f"**Oracle AUC {head['oracle_auc']:.4f}** on the same rows (the demo generator's "
            f"true probabilities as scores: the best ranking any model can expect); the model "
            f"closes {share:.0%} of the gap between the better baseline and the oracle."
        )
    for name, auc in head["baselines"].items():
        lines.append(f"Lift over the {name} baseline ({auc:.4f}): {head['lift'][name]:+.4f} AUC.")
    if head.get("blend_auc") is not None:
        weights = ", ".join(
            f"fold {k}: {choice['weight']:g}" for k, choice in head["blend"].items()
        )
        lines.append(
            f"**Blend AUC {head['blend_auc']:.4f}**: the model's and the boosted features' "
            f"logits, the model's weight chosen on each fold's inner split ({weights})."
        )
    for reason in head.get("no_blend", []):
        lines.append(f"No blend for {reason}.")
    if "selection" in head:
        lines.append(head["selection"])
    return "\n".join(f"- {line}" for line in lines) + "\n"


def _method_markdown(config: EvaluateConfig, has_oracle: bool) -> str:
    b = config.baselines
    items = [
        "Rows: every question row of each fold's validation stream, predicted one API group "
        "at a time by 04_infer.py (fold{k}/stream_predictions.parquet). Labels are read "
        "from the preprocessed data arrays through global_row; the file's own labels, "
        "row ids, question ids and new-student flags are checked against them, and each "
        "streamed question row must appear exactly once.",
        "Pooled: the folds' rows together, each scored by its own fold's model; metrics "
        "are computed once on the pooled rows (scikit-learn), never averaged over folds.",
        f"AUC interval: percentile bootstrap over rows ({config.bootstrap:,} resamples, "
        f"seed {config.seed}; the 2.5th and 97.5th percentiles). Rows of one student are "
        "correlated, so a bootstrap over students would give a wider interval.",
        "Thresholds: a row is predicted correct when its score is >= the threshold; the "
        "best-F1 threshold is chosen on the same rows (optimistic by construction). "
        "Fall-out = FP / (FP + TN) = 1 − specificity.",
        f"Question-rate baseline: each question's correct rate on the fold's training rows "
        f"(every student's rows before their cut), smoothed as (correct + {b.question_prior:g}"
        f" × global) / (answers + {b.question_prior:g}); unseen questions get the global "
        "training rate.",
        f"Student + question baseline: (n × student mean + {b.student_prior:g} × question "
        f"rate) / (n + {b.student_prior:g}), where the student mean runs over the n question "
        "rows of the student's earlier task containers (training history and earlier "
        "stream containers, whose outcomes the API has revealed); never the row's own "
        "container or later rows.",
        "Boosted-features baseline: scikit-learn's HistGradientBoostingClassifier "
        f"(at most {config.features.boost_rounds} rounds, learning rate "
        f"{config.features.boost_learning_rate:g}, {config.features.boost_leaves} leaves, "
        "early stopping on a tenth of its training rows) over common/data/past_features.py's "
        "features: the student's running, recent, per-part, per-skill and per-question "
        "answers and correct rates over earlier task containers, times since the previous "
        "container and the same question, the question's training rate (out of fold on "
        "its own training rows), explanation and elapsed-time means; fitted on the fold's "
        f"training rows (a sample of {config.features.boost_max_rows:,} at most).",
        "Blend: sigmoid(w × logit(model) + (1 − w) × logit(boosted features)); w in "
        "0, 0.05, ..., 1 maximizes the AUC of the fold's inner split (training students' "
        "questions the model neither trained on nor is scored on: 03's "
        "inner_predictions.parquet of the streamed checkpoint, against the baseline "
        "fitted without them), never of the scored rows.",
        "Slices: new = the student has no training rows in this fold; history length = the "
        "student's question rows before this one (training history and earlier stream "
        "rows, including earlier questions of the same container); container size = "
        "questions in the row's task container; part from questions.csv.",
        f"Reliability diagram: {config.calibration_bins} equal-width bins of the score "
        "(sklearn calibration_curve); the histogram below counts the model's scores.",
    ]
    if has_oracle:
        items.append(
            "Oracle: demo_truth.csv's p_true (the probability the demo generator drew each "
            "answer from), joined on row_id, scored on the same rows."
        )
    return "\n".join(f"- {item}" for item in items) + "\n"


def report_markdown(
    head: dict,
    metrics_md: str,
    slices_md: str,
    figures: dict[str, str],
    folds: list[int],
    config: EvaluateConfig,
    provenance: dict,
) -> str:
    has_oracle = head["oracle_auc"] is not None
    figure_md = "".join(f"### {title}\n\n![{title}]({link})\n\n" for title, link in figures.items())
    if not figures:
        figure_md = "No figures.\n\n"
    return (
        f"# Evaluation report: run {provenance['run']}\n\n"
        f"_Generated {time.strftime('%Y-%m-%d %H:%M')} by 05_evaluate.py at commit "
        f"{commit()}._\n\n"
        f"## Run\n\n{provenance_markdown(provenance)}\n"
        f"## Headline\n\n{_headline_markdown(head, folds, config)}\n"
        f"## Metrics\n\n{metrics_md}\n"
        f"## Slices (pooled rows)\n\n{slices_md}\n"
        f"## Figures\n\n{figure_md}"
        f"## How measured\n\n{_method_markdown(config, has_oracle)}"
    )


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    with atomic_file(path) as tmp:
        frame.to_csv(tmp, index=False)


def fold_blend(
    output_dir: Path, run_dir: Path, fold_index: int, data: Dataset, config: EvaluateConfig
) -> tuple[BlendChoice | None, str]:
    """The fold's blend weight, chosen on its inner split (common.report.blend)."""
    summary = stream_summary(run_dir, fold_index)
    fold = Fold.load(output_dir, fold_index)
    cut_row = data.arrays.offsets[:-1] + fold.user_cut
    return choose_fold_blend(
        run_dir,
        fold_index,
        data,
        cut_row,
        summary.get("checkpoint_epoch"),
        config.baselines.question_prior,
        config.features,
        config.seed,
    )


def load_histories(run_dir: Path, folds: list[int]) -> dict[int, pd.DataFrame]:
    histories = {}
    for k in folds:
        path = fold_dir(run_dir, k) / "history.csv"
        if path.exists():
            histories[k] = pd.read_csv(path)
    return histories


def evaluate(output_dir: Path, input_dir: Path, config: EvaluateConfig, run: str) -> dict:
    """Score run `run`'s folds' stream predictions, write its report and a row of
    output/runs.csv; returns the headline."""
    begin = time.perf_counter()
    output_dir, input_dir = Path(output_dir), Path(input_dir)
    folder = run_dir(output_dir, run)
    folds = config.folds if config.folds is not None else discover_folds(folder)
    if not folds:
        raise FileNotFoundError(f"no {folder}/fold*/{STREAM_PREDICTIONS}: run 04_infer.py first")
    data = Dataset.load(output_dir)
    features = config.features if config.feature_baseline else None
    frames, blends, no_blend = [], {}, []
    for k in folds:
        fold_rows = load_fold_rows(
            output_dir, folder, k, data, config.baselines, features, config.seed
        )
        if features is not None:
            choice, reason = fold_blend(output_dir, folder, k, data, config)
            if choice is None:
                no_blend.append(reason)
            else:
                blends[k] = choice
                fold_rows[BLEND] = logit_blend(
                    fold_rows[MODEL].to_numpy(),
                    fold_rows[FEATURE_BASELINE].to_numpy(),
                    choice.weight,
                )
        frames.append(fold_rows)
    if no_blend:  # a blend row over some folds only would not compare with the others
        frames = [frame.drop(columns=[BLEND], errors="ignore") for frame in frames]
        blends = {}
    rows = pd.concat(frames).reset_index(drop=True)
    truth_path = input_dir / TRUTH_FILE
    if truth_path.exists():
        rows = add_oracle(rows, truth_path)

    report_dir = folder / REPORT_SUBDIR
    table = metric_table(rows, config)
    slices = slice_table(rows)
    metrics_md, slices_md = metrics_markdown(table), slices_markdown(slices)
    _write_csv(report_dir / "metrics.csv", table)
    _write_csv(report_dir / "slices.csv", slices)
    write_text(report_dir / "metrics.md", metrics_md)
    write_text(report_dir / "slices.md", slices_md)

    labels = rows["label"].to_numpy()
    scores = {name: rows[name].to_numpy() for name in scorers(rows)}
    figures = {
        "ROC curves": "roc.png",
        "Reliability diagram": "reliability.png",
    }
    plots.roc_figure(report_dir / "roc.png", labels, scores)
    plots.reliability_figure(
        report_dir / "reliability.png", labels, scores, config.calibration_bins
    )
    histories = load_histories(folder, folds)
    if histories:
        plots.training_curves_figure(report_dir / "training_curves.png", histories)
        figures["Training curves"] = "training_curves.png"
    links = {title: f"{REPORT_SUBDIR}/{name}" for title, name in figures.items()}

    head = headline(table)
    head["blend"] = {k: asdict(choice) for k, choice in blends.items()}
    head["no_blend"] = no_blend
    head["folds"] = folds
    summaries = {k: stream_summary(folder, k) for k in folds}
    head["selection"] = selection_note(summaries)
    head["report"] = str(folder / REPORT_FILE)
    head["run"] = run
    provenance = run_provenance(folder, summaries)
    text = report_markdown(head, metrics_md, slices_md, links, folds, config, provenance)
    write_text(folder / REPORT_FILE, text)
    write_json(report_dir / "summary.json", head)
    append_run_row(output_dir, evaluate_row(folder, head, provenance, summaries, begin))
    write_run_record(report_dir, "evaluate", asdict(config))
    return head


def evaluate_row(folder: Path, head: dict, provenance: dict, summaries: dict, begin: float) -> dict:
    """The report as a row of output/runs.csv: the pooled AUC and the fold spread."""
    first = next(iter(provenance["folds"].values()))
    return {
        "run": head["run"],
        "stage": "evaluate",
        "folds": ",".join(map(str, head["folds"])),
        "commit": commit(),
        **(config_columns(first["config"]) if first["config"] else {}),
        "epochs": ",".join(str(epochs_trained(folder, k)) for k in head["folds"]),
        "best_epoch": ",".join(str(s.get("checkpoint_epoch")) for s in summaries.values()),
        "selected_on": ",".join(
            sorted({str(s.get("checkpoint_selected_on") or "by hand") for s in summaries.values()})
        ),
        "stream_auc": head["auc"],
        "auc_fold_mean": head["auc_fold_mean"],
        "auc_fold_std": head["auc_fold_std"],
        "wall_s": time.perf_counter() - begin,
    }
