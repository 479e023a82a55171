"""Hand cases for the metric functions that every stage shares (the threshold metrics
and the bootstrap have theirs in test_evaluate.py)."""

from __future__ import annotations

import math

import numpy as np

from common.metrics import auc_or_nan, binary_log_loss


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
