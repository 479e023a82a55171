"""Metric functions on labels and scores: ROC AUC (NaN where undefined), log loss,
classification metrics at a threshold, the F1-optimal threshold, a bootstrap interval of
AUC, and every metric of one scorer together. Pure functions, used by 03's validation,
04's stream table, 05's report, the emulator and the benchmarks."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tqdm import tqdm

PROBABILITY_CLIP = 1e-7  # log loss: probabilities are clipped to [clip, 1 - clip]


def _tied_groups(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, group, values): the stable ascending sort of `scores`, each sorted row's
    run of tied scores (0, 1, ...), and each run's score."""
    order = np.argsort(scores, kind="mergesort")
    ordered = scores[order]
    opens = np.ones(len(ordered), dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=opens[1:])
    return order, np.cumsum(opens) - 1, ordered[opens]


def _grouped_auc(positive: np.ndarray, group: np.ndarray, weight: np.ndarray) -> float:
    """AUC from rows in ascending score order (runs of tied scores numbered by `group`)."""
    n_groups = int(group[-1]) + 1
    positive_weight = np.bincount(group, weight * positive, minlength=n_groups)
    negative_weight = np.bincount(group, weight * ~positive, minlength=n_groups)
    total_positive, total_negative = positive_weight.sum(), negative_weight.sum()
    if total_positive == 0 or total_negative == 0:
        return float("nan")
    below = np.cumsum(negative_weight) - negative_weight
    pairs = positive_weight @ (below + 0.5 * negative_weight)
    return float(pairs / (total_positive * total_negative))


def auc_or_nan(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC, or NaN where it is undefined (no rows, or one class only).

    The Mann-Whitney form: the share of (positive, negative) pairs in which the positive
    scores higher, a tie counting a half; the area under the ROC curve that sklearn's
    roc_auc_score integrates (equal to 1e-15), from one sort and no per-call validation,
    so the many small slices of 05's tables cost little."""
    labels = np.asarray(labels)
    if len(labels) == 0:
        return float("nan")
    order, group, _ = _tied_groups(np.asarray(scores, dtype=np.float64))
    return _grouped_auc(labels[order] == 1, group, np.ones(len(labels)))


def binary_log_loss(labels: np.ndarray, probability: np.ndarray) -> float:
    """Mean log loss of probabilities (clipped), or NaN with no rows."""
    labels = np.asarray(labels, dtype=np.float64)
    if len(labels) == 0:
        return float("nan")
    clipped = np.clip(
        np.asarray(probability, dtype=np.float64), PROBABILITY_CLIP, 1 - PROBABILITY_CLIP
    )
    return float(-(labels * np.log(clipped) + (1 - labels) * np.log(1 - clipped)).mean())


def threshold_metrics(labels: np.ndarray, scores: np.ndarray, threshold: float) -> dict:
    """Classification metrics of `scores >= threshold` (the convention of
    precision_recall_curve); a ratio with a zero denominator is 0 (as sklearn's
    zero_division=0)."""
    labels = np.asarray(labels) == 1
    predicted = np.asarray(scores) >= threshold
    tp = int((predicted & labels).sum())
    fp = int((predicted & ~labels).sum())
    fn = int((~predicted & labels).sum())
    tn = len(labels) - tp - fp - fn

    def ratio(top: int, bottom: int) -> float:
        return top / bottom if bottom else 0.0

    specificity = ratio(tn, tn + fp)
    return {
        "accuracy": ratio(tp + tn, len(labels)),
        "precision": ratio(tp, tp + fp),
        "recall": ratio(tp, tp + fn),
        "fall_out": 1.0 - specificity,
        "specificity": specificity,
        "f1": ratio(2 * tp, 2 * tp + fp + fn),
        "tp": tp,
        "fp": fp,
        "tn": tn,
        "fn": fn,
    }


def f1_optimal_threshold(labels: np.ndarray, scores: np.ndarray) -> float:
    """The score threshold (predict positive at >= it) with the highest F1; the lowest
    such threshold on ties. Candidates are the distinct scores (precision_recall_curve's
    thresholds)."""
    order, group, values = _tied_groups(np.asarray(scores, dtype=np.float64))
    positive = np.asarray(labels)[order] == 1
    # predicting positive at >= values[g]: the rows of runs g and above
    above = np.cumsum(np.bincount(group, minlength=len(values))[::-1])[::-1]
    true_above = np.cumsum(np.bincount(group, positive, minlength=len(values))[::-1])[::-1]
    denominator = above + positive.sum()  # 2 tp + fp + fn = predicted + actual positives
    f1 = np.divide(2 * true_above, denominator, out=np.zeros(len(values)), where=denominator > 0)
    return float(values[int(np.argmax(f1))])


def bootstrap_auc_interval(
    labels: np.ndarray,
    scores: np.ndarray,
    n_resamples: int,
    seed: int,
    level: float = 0.95,
    progress: bool = False,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ROC AUC over rows.

    Each resample draws len(labels) rows with replacement, counted as weights (the AUC of
    the resampled rows); the rows are sorted once, so a resample costs two bincounts."""
    if n_resamples <= 0 or len(labels) == 0:
        return float("nan"), float("nan")
    order, group, _ = _tied_groups(np.asarray(scores, dtype=np.float64))
    positive = np.asarray(labels)[order] == 1
    rng = np.random.default_rng(seed)
    n = len(positive)
    aucs = np.empty(n_resamples)
    bar = tqdm(range(n_resamples), desc=f"AUC bootstrap, {n:,} rows", disable=not progress)
    for b in bar:
        counts = np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.float64)
        aucs[b] = _grouped_auc(positive, group, counts)
    tail = 100 * (1 - level) / 2
    low, high = np.nanpercentile(aucs, [tail, 100 - tail])
    return float(low), float(high)


def score_metrics(labels: np.ndarray, scores: np.ndarray) -> dict:
    """Every metric of one scorer on one set of rows."""
    labels = np.asarray(labels).astype(np.int8)
    scores = np.asarray(scores, dtype=np.float64)
    both_classes = len(labels) > 0 and labels.min() != labels.max()
    result = {
        "rows": len(labels),
        "share_positive": float(labels.mean()) if len(labels) else float("nan"),
        "auc": auc_or_nan(labels, scores),
        "log_loss": binary_log_loss(labels, scores),
        "brier": float(np.mean((scores - labels) ** 2)) if len(labels) else float("nan"),
    }
    for key, value in threshold_metrics(labels, scores, 0.5).items():
        result[f"{key}_at_half"] = value
    best = f1_optimal_threshold(labels, scores) if both_classes else float("nan")
    result["best_f1_threshold"] = best
    for key, value in threshold_metrics(labels, scores, best).items():
        result[f"{key}_at_best_f1"] = value
    return result


# (kind, value, mask): one slice of the scored rows, e.g. ("part", "3", part == 3)
Slice = tuple[str, str, np.ndarray]


def student_and_part_slices(new_student: np.ndarray, part: np.ndarray, parts) -> list[Slice]:
    """All rows, new and continuing students, and each part in `parts`."""
    new_student = np.asarray(new_student, dtype=bool)
    slices = [("all", "all", np.ones(len(new_student), dtype=bool))]
    slices += [("student", "new", new_student), ("student", "continuing", ~new_student)]
    return slices + [("part", str(p), part == p) for p in parts]


def slice_table(
    labels: np.ndarray,
    scores: dict[str, np.ndarray],
    slices: list[Slice],
    log_loss_of: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Per slice: rows, share correct, AUC of every scorer (auc_<name>), and the log loss
    of the scorers named in log_loss_of (log_loss_<name>); NaN where a slice is empty."""
    labels = np.asarray(labels)
    records = []
    for kind, value, mask in slices:
        picked = labels[mask]
        record = {
            "slice": kind,
            "value": value,
            "rows": int(mask.sum()),
            "share_correct": float(picked.mean()) if len(picked) else float("nan"),
        }
        for name, score in scores.items():
            record[f"auc_{name}"] = auc_or_nan(picked, np.asarray(score)[mask])
        for name in log_loss_of:
            record[f"log_loss_{name}"] = binary_log_loss(picked, np.asarray(scores[name])[mask])
        records.append(record)
    return pd.DataFrame(records)


def paired_bootstrap_auc_difference(
    labels: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    clusters: np.ndarray,
    n_resamples: int,
    seed: int,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """(AUC(first) - AUC(second), low, high): the difference of two scorers on the same
    rows and its percentile bootstrap interval, resampling whole clusters (students) with
    replacement, the same draw for both scorers (paired), so that rows of one student,
    which are not independent, move together."""
    labels = np.asarray(labels)
    difference = auc_or_nan(labels, first) - auc_or_nan(labels, second)
    if n_resamples <= 0 or len(labels) == 0:
        return difference, float("nan"), float("nan")
    _, cluster = np.unique(np.asarray(clusters), return_inverse=True)
    n_clusters = int(cluster.max()) + 1
    sorted_by = []
    for scores in (first, second):
        order, group, _ = _tied_groups(np.asarray(scores, dtype=np.float64))
        sorted_by.append((order, group, labels[order] == 1))
    rng = np.random.default_rng(seed)
    differences = np.empty(n_resamples)
    for b in range(n_resamples):
        drawn = np.bincount(rng.integers(0, n_clusters, size=n_clusters), minlength=n_clusters)
        weight = drawn[cluster].astype(np.float64)
        a, z = (
            _grouped_auc(positive, group, weight[order]) for order, group, positive in sorted_by
        )
        differences[b] = a - z
    tail = 100 * (1 - level) / 2
    low, high = np.nanpercentile(differences, [tail, 100 - tail])
    return float(difference), float(low), float(high)
