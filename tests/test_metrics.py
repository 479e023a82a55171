"""The metric functions every stage shares: hand cases, and scikit-learn's metrics as the
reference on random data with ties (the threshold metrics and the bootstrap also have
hand cases in test_evaluate.py)."""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import (
    brier_score_loss,
    f1_score,
    log_loss,
    precision_recall_curve,
    precision_score,
    roc_auc_score,
)

from common.metrics import (
    auc_or_nan,
    binary_log_loss,
    bootstrap_auc_interval,
    f1_optimal_threshold,
    score_metrics,
    threshold_metrics,
)


def test_auc_by_hand_and_nan_where_undefined():
    # pairs (positive, negative): (0.8, 0.1), (0.8, 0.9), (0.4, 0.1), (0.4, 0.9): 2 of 4
    # ordered right, none tied
    assert auc_or_nan(np.array([1, 0, 1, 0]), np.array([0.8, 0.1, 0.4, 0.9])) == 0.5
    assert auc_or_nan(np.array([1, 0, 1, 0]), np.array([0.8, 0.1, 0.9, 0.4])) == 1.0
    assert math.isnan(auc_or_nan(np.array([1, 1]), np.array([0.2, 0.3])))
    assert math.isnan(auc_or_nan(np.array([], dtype=int), np.array([])))


def test_log_loss_by_hand_with_clipping():
    loss = binary_log_loss(np.array([1.0, 0.0]), np.array([0.8, 0.4]))
    assert math.isclose(loss, -(math.log(0.8) + math.log(0.6)) / 2, rel_tol=1e-12)
    # a certain wrong answer costs -log(1e-7), not infinity
    assert math.isclose(binary_log_loss(np.array([1.0]), np.array([0.0])), -math.log(1e-7))
    assert math.isnan(binary_log_loss(np.array([]), np.array([])))


def test_ties_count_a_half():
    # pairs: (0.5 vs 0.5) tie, (0.5 vs 0.2) right, (0.9 vs 0.5) right, (0.9 vs 0.2) right
    assert auc_or_nan(np.array([1, 0, 1, 0]), np.array([0.5, 0.5, 0.9, 0.2])) == 3.5 / 4


def random_cases(n_cases: int = 200):
    """(labels, scores) of random sizes, half of them with many tied scores."""
    rng = np.random.default_rng(0)
    for case in range(n_cases):
        n = int(rng.integers(2, 300))
        labels = rng.integers(0, 2, n)
        scores = rng.integers(0, 12, n) / 11 if case % 2 else rng.random(n)
        if labels.min() != labels.max():
            yield labels, scores


def test_metrics_equal_scikit_learns():
    """scikit-learn is the reference: AUC, F1-optimal threshold, the metrics at it."""
    for labels, scores in random_cases():
        assert abs(auc_or_nan(labels, scores) - roc_auc_score(labels, scores)) < 1e-12
        precision, recall, thresholds = precision_recall_curve(labels, scores)
        f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-300)
        # the lowest threshold of the best F1 (scikit-learn's 2pr/(p+r) rounds exact ties
        # apart; 2tp/(2tp+fp+fn) does not)
        best = np.flatnonzero(f1[:-1] >= f1[:-1].max() - 1e-12)
        expected = thresholds[best[0]]
        assert f1_optimal_threshold(labels, scores) == expected
        predicted = (scores >= expected).astype(int)
        got = threshold_metrics(labels, scores, expected)
        assert math.isclose(got["f1"], f1_score(labels, predicted), rel_tol=1e-12)
        assert math.isclose(got["precision"], precision_score(labels, predicted), rel_tol=1e-12)
        metrics = score_metrics(labels, scores)
        assert math.isclose(metrics["brier"], brier_score_loss(labels, scores), rel_tol=1e-12)
        inside = np.clip(scores, 0.01, 0.99)  # (scikit-learn clips at 1e-15, we at 1e-7)
        assert math.isclose(
            score_metrics(labels, inside)["log_loss"], log_loss(labels, inside), rel_tol=1e-12
        )


def test_bootstrap_resamples_are_weighted_aucs():
    """Each resample's AUC is scikit-learn's AUC of the resampled rows (weights = counts):
    the interval equals one computed resample by resample with roc_auc_score."""
    for labels, scores in list(random_cases(20))[:6]:
        order = np.argsort(scores, kind="stable")  # the rows are drawn in score order
        labels, scores = labels[order], scores[order]
        rng = np.random.default_rng(7)
        aucs = []
        for _ in range(30):
            counts = np.bincount(rng.integers(0, len(labels), len(labels)), minlength=len(labels))
            picked = counts > 0
            both = labels[picked].min() != labels[picked].max()
            weighted = roc_auc_score(labels, scores, sample_weight=counts) if both else np.nan
            aucs.append(weighted)
        expected = np.nanpercentile(aucs, [2.5, 97.5])
        got = bootstrap_auc_interval(labels, scores, 30, seed=7)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
