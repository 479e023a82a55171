"""report.md and the report's Markdown tables, rendered from an evaluation
(common.report.evaluation.Evaluation). The report opens with the answer a reader came for,
the headline (the model, the blend, the baselines and the oracle, with the model's lift
over each), then the run's configuration and provenance, the tables, the figures and
how everything was measured.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from common.model.trees.blending import BLEND
from common.report.evaluation import EvaluateConfig, Evaluation
from common.report.scored_rows import MODEL, ORACLE
from common.runs.folders import commit
from common.runs.provenance import provenance_markdown
from common.tables import markdown_table

POOLED = "pooled"  # the metric table's "fold" of every fold's rows together
TOP_FEATURES = 3  # the features the headline names


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


def headline_table(head: Evaluation) -> str:
    """Every scorer's pooled AUC, best first, and the model's lift over each."""
    scores = {MODEL: head.auc, **({BLEND: head.blend_auc} if head.blend_auc else {})}
    scores |= head.baselines
    if head.oracle_auc is not None:
        scores[f"{ORACLE} (the demo's true probabilities)"] = head.oracle_auc
    body = []
    for name, auc in sorted(scores.items(), key=lambda item: -item[1]):
        text = _fmt(auc)
        if name == MODEL and not np.isnan(head.auc_ci_low):
            text += f" ({_fmt(head.auc_ci_low)}–{_fmt(head.auc_ci_high)})"
        lift = "" if name == MODEL else f"{head.auc - auc:+.4f}"
        body.append([f"**{name}**" if name == MODEL else name, text, lift])
    return markdown_table(["scorer", "ROC AUC (pooled)", "model − scorer"], body)


def headline_lines(head: Evaluation, config: EvaluateConfig) -> str:
    """The headline's sentences: the model's AUC and interval, the fold spread, the
    oracle, the lifts, the blend and what chose each checkpoint."""
    folds = head.folds
    lines = [
        f"**Model ROC AUC {head.auc:.4f}** on {head.rows:,} streamed question rows "
        f"(fold{'s' if len(folds) > 1 else ''} {', '.join(map(str, folds))}, pooled)"
    ]
    if config.bootstrap > 0:
        lines[0] += (
            f", 95% interval {head.auc_ci_low:.4f}–{head.auc_ci_high:.4f} "
            f"(percentile bootstrap over rows, {config.bootstrap:,} resamples)"
        )
    lines[0] += "."
    if head.auc_fold_std is not None:
        lines.append(
            f"Fold mean {head.auc_fold_mean:.4f} ± {head.auc_fold_std:.4f} (standard "
            f"deviation over {len(head.fold_aucs)} folds, each scored on its own rows)."
        )
    if head.oracle_auc is not None:
        best = max(head.baselines.values())
        gap = head.oracle_auc - best
        share = (head.auc - best) / gap if gap > 0 else float("nan")
        lines.append(
            f"**Oracle AUC {head.oracle_auc:.4f}** on the same rows (the demo generator's "
            f"true probabilities as scores: the best ranking any model can expect); the model "
            f"closes {share:.0%} of the gap between the better baseline and the oracle."
        )
    for name, auc in head.baselines.items():
        lines.append(f"Lift over the {name} baseline ({auc:.4f}): {head.lift[name]:+.4f} AUC.")
    if head.blend_auc is not None:
        lines.append(blend_line(head))
    for reason in head.no_blend:
        lines.append(f"No blend for {reason}.")
    if head.tree_importance:
        top = list(head.tree_importance.items())[:TOP_FEATURES]
        named = ", ".join(f"{name} ({mean:.4f})" for name, (mean, _) in top)
        lines.append(
            f"The trees lean most on {named}: the AUC each costs the trees when "
            "shuffled on the inner split (permutation importance, figure below)."
        )
    if head.selection:
        lines.append(head.selection)
    return "\n".join(f"- {line}" for line in lines) + "\n"


def blend_weights(head) -> str:
    """The weights each fold's blend chose: the model's, or a stacked blend's per member."""
    if not any(choice.get("weights") for choice in head.blend.values()):
        return ", ".join(f"fold {k}: {choice['weight']:g}" for k, choice in head.blend.items())
    return "; ".join(
        f"fold {k}: " + ", ".join(f"{n} {w:+.3f}" for n, w in choice["weights"].items())
        for k, choice in head.blend.items()
    )


def blend_line(head) -> str:
    """The headline's blend: its AUC and the weights each fold chose; each other
    architecture's AUC."""
    members = "".join(f" {name} alone: {auc:.4f}." for name, auc in head.members.items())
    if not any(choice.get("weights") for choice in head.blend.values()):
        return (
            f"**Blend AUC {head.blend_auc:.4f}**: the model's and the trees' "
            f"logits, the model's weight chosen on each fold's inner split "
            f"({blend_weights(head)}).{members}"
        )
    return (
        f"**Blend AUC {head.blend_auc:.4f}**: a logistic regression over every "
        f"architecture's and the trees' logits, fitted on each fold's inner split "
        f"({blend_weights(head)}).{members}"
    )


def trees_method(trees: dict | None) -> list[str]:
    """How 04 fitted the trees (`trees`: its stream summary's trees_config) and chose the
    blend's weight; why there are none where it ran with --no-trees."""
    if trees is None:
        return ["Trees and blend: none (04_infer.py streamed the folds with --no-trees)."]
    return [
        "Trees (fitted by 04_infer.py, read here from its stream): scikit-learn's "
        f"HistGradientBoostingClassifier (at most {trees['boost_rounds']} rounds, learning "
        f"rate {trees['boost_learning_rate']:g}, {trees['boost_leaves']} leaves, early "
        "stopping on a tenth of its training rows) over common/data/past_features.py's "
        "features: the student's running, recent, per-part, per-skill and per-question "
        "answers and correct rates over earlier task containers, times since the previous "
        "container and the same question, the question's training rate (out of fold on "
        "its own training rows), explanation and elapsed-time means; fitted on the fold's "
        f"training rows (a sample of {trees['boost_max_rows']:,} at most).",
        "Blend (its weight chosen by 04_infer.py): sigmoid(w × logit(model) + (1 − w) × "
        "logit(trees)); w in 0, 0.05, ..., 1 maximizes the AUC of the fold's inner split "
        "(training students' questions the model neither trained on nor is scored on: 03's "
        "inner_predictions.parquet of the streamed checkpoint, against trees fitted without "
        "them), never of the scored rows.",
    ]


def method_markdown(config: EvaluateConfig, has_oracle: bool, trees: dict | None) -> str:
    """How every figure of the report was measured."""
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
        *trees_method(trees),
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
    head: Evaluation,
    tables: tuple[str, str],
    figures: dict[str, str],
    config: EvaluateConfig,
    provenance: dict,
) -> str:
    """report.md: the headline first, then the run's provenance, the metric and slice
    tables (`tables`), the figures (title: link) and how everything was measured."""
    metrics_md, slices_md = tables
    method = method_markdown(config, head.oracle_auc is not None, head.trees_config)
    figure_md = "".join(f"### {title}\n\n![{title}]({link})\n\n" for title, link in figures.items())
    if not figures:
        figure_md = "No figures.\n\n"
    return (
        f"# Evaluation report: run {provenance['run']}\n\n"
        f"## Headline\n\n{headline_table(head)}\n{headline_lines(head, config)}\n"
        f"## Run\n\n_Generated {time.strftime('%Y-%m-%d %H:%M')} by 05_evaluate.py at commit "
        f"{commit()}._\n\n{provenance_markdown(provenance)}\n"
        f"## Metrics\n\n{metrics_md}\n"
        f"## Slices (pooled rows)\n\n{slices_md}\n"
        f"## Figures\n\n{figure_md}"
        f"## How measured\n\n{method}"
    )
