"""Each question's correct rate on a fold's training rows, smoothed toward the global rate:
(correct + m * global) / (count + m). The question-rate baseline (common.report.baselines),
the trees' `question_rate` and `question_count` (common.data.past_features) and
the blend's training rows read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.data.features import QuestionSequences


def smoothed_rates(
    item: np.ndarray, outcome: np.ndarray, n_items: int, prior: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """(rate, count, global_rate) per item id 0..n_items-1: the share of correct outcomes
    with `prior` pseudo-answers at the global rate added (rate = the global rate where an
    item has no answers; ids outside the range are left out; global rate 0.5 with no
    answers at all). The question rate of the difficulty input, the baselines and the
    trees' features."""
    if prior < 0:
        raise ValueError(f"smoothing must be >= 0, got {prior}")
    item = np.asarray(item, dtype=np.int64)
    outcome = np.asarray(outcome, dtype=np.float64)
    known = (item >= 0) & (item < n_items)
    item, outcome = item[known], outcome[known]
    count = np.bincount(item, minlength=n_items).astype(np.float64)
    correct = np.bincount(item, weights=outcome, minlength=n_items)
    global_rate = float(correct.sum() / count.sum()) if count.sum() else 0.5
    rate = np.full(n_items, global_rate)
    seen = count > 0
    rate[seen] = (correct[seen] + prior * global_rate) / (count[seen] + prior)
    return rate, count, global_rate


@dataclass
class QuestionRates:
    rate: np.ndarray  # (n_questions,) smoothed correct rate per question id
    count: np.ndarray  # (n_questions,) training answers per question id
    global_rate: float

    def __call__(self, question: np.ndarray) -> np.ndarray:
        """Rate per question id; the global rate for ids beyond the table."""
        question = np.asarray(question, dtype=np.int64)
        inside = (question >= 0) & (question < len(self.rate))
        return np.where(inside, self.rate[np.where(inside, question, 0)], self.global_rate)


def training_entries(sequences: QuestionSequences, user_cut_row: np.ndarray) -> np.ndarray:
    """(n,) bool over the flat question entries: True where the row lies before its
    student's cut. user_cut_row: (n_students,) global row index of each student's cut
    (offsets[:-1] + Fold.user_cut)."""
    student = np.repeat(np.arange(sequences.n_students), sequences.lengths())
    return sequences.row < np.asarray(user_cut_row)[student]


def question_rates(
    sequences: QuestionSequences, train: np.ndarray, n_questions: int, prior: float
) -> QuestionRates:
    """Smoothed per-question correct rate from the entries where `train` is True."""
    if not np.any(train):
        raise ValueError("no training question rows: the question-rate baseline needs some")
    rate, count, global_rate = smoothed_rates(
        sequences.question[train], sequences.response[train], n_questions, prior
    )
    return QuestionRates(rate=rate, count=count, global_rate=global_rate)
