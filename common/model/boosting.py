"""The feature baseline: scikit-learn's histogram gradient boosting over the past-event
features of common/data/past_features.py, what a Kaggler builds in an afternoon. 05 fits it
on a fold's training rows and scores the rows the model streamed, as a third baseline.

A training row's question rate must not count the row's own answer (the trees would
learn to trust it too much): training rows get out-of-fold rates, from the training rows
of the other student groups (student index mod `boost_rate_folds`), their counts scaled to
the full table's; scored rows get the rates of every training row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier

from common.data.features import QuestionSequences
from common.data.past_features import CATEGORICAL, FEATURE_NAMES, past_features, question_count
from common.data.question_rates import question_rates
from common.options import option

FEATURE_BASELINE = "boosted features"
RATE_COLUMN = FEATURE_NAMES.index("question_rate")
COUNT_COLUMN = FEATURE_NAMES.index("question_count")


@dataclass
class FeatureBaselineConfig:
    boost_max_rows: int = option(
        1_000_000, "training rows the boosted-features baseline fits on at most (a sample)"
    )
    boost_rounds: int = option(
        300, "boosting rounds at most (early stopping on a tenth of the training rows)"
    )
    boost_learning_rate: float = option(0.1, "boosting learning rate")
    boost_leaves: int = option(31, "leaves per tree")
    boost_rate_folds: int = option(
        5, "student groups of the out-of-fold question rates of the training rows"
    )


@dataclass
class FittedBaseline:
    """A fitted baseline: the trees and what they were fitted on."""

    model: object  # sklearn HistGradientBoostingClassifier
    rates: object  # common.data.question_rates.QuestionRates of every training row
    columns: np.ndarray  # the FEATURE_NAMES columns it uses
    train_rows: int
    rounds: int

    def describe(self) -> str:
        return f"{self.rounds} rounds on {self.train_rows:,} training rows"


def _student_of(sequences: QuestionSequences, entries: np.ndarray) -> np.ndarray:
    return np.searchsorted(sequences.offsets, entries, side="right") - 1


def training_matrix(
    sequences: QuestionSequences,
    train: np.ndarray,
    n_questions: int,
    question_prior: float,
    skill: np.ndarray,
    config: FeatureBaselineConfig,
    seed: int = 0,
):
    """(rates, entries, features) of the flat entries where `train` (bool, one per entry)
    is True (a sample of boost_max_rows at most): the question-rate table of every
    training row, and each sampled row's features with out-of-fold question rates."""
    train = np.asarray(train, dtype=bool)
    rates = question_rates(sequences, train, n_questions, question_prior)
    entries = np.flatnonzero(train)
    rng = np.random.default_rng(seed)
    if len(entries) > config.boost_max_rows:
        entries = np.sort(rng.choice(entries, config.boost_max_rows, replace=False))
    features = past_features(sequences, entries, skill, rates)

    folds = max(int(config.boost_rate_folds), 2)
    group = _student_of(sequences, np.arange(len(sequences.row))) % folds
    entry_group = group[entries]
    for g in range(folds):
        others = question_rates(sequences, train & (group != g), n_questions, question_prior)
        mine = entry_group == g
        question = sequences.question[entries[mine]].astype(np.int64)
        features[mine, RATE_COLUMN] = others(question)
        features[mine, COUNT_COLUMN] = question_count(others, question) * folds / (folds - 1)
    return rates, entries, features


def fit_feature_baseline(
    sequences: QuestionSequences,
    train: np.ndarray,
    skill: np.ndarray,
    n_questions: int,
    question_prior: float,
    config: FeatureBaselineConfig,
    seed: int = 0,
) -> FittedBaseline:
    """Fit on the flat entries where `train` (bool, one per entry) is True."""
    rates, entries, features = training_matrix(
        sequences, train, n_questions, question_prior, skill, config, seed
    )
    # a feature the data never defines (elapsed time in a data set without times) is
    # left out: the trees cannot bin a column of NaN
    columns = np.flatnonzero(~np.all(np.isnan(features), axis=0))
    categorical = [FEATURE_NAMES[c] in CATEGORICAL for c in columns]
    model = HistGradientBoostingClassifier(
        max_iter=config.boost_rounds,
        learning_rate=config.boost_learning_rate,
        max_leaf_nodes=config.boost_leaves,
        early_stopping=True,
        validation_fraction=0.1,
        n_iter_no_change=20,
        categorical_features=categorical,
        random_state=seed,
    )
    model.fit(features[:, columns], sequences.response[entries].astype(np.int64))
    return FittedBaseline(model, rates, columns, len(entries), int(model.n_iter_))


def score_feature_baseline(
    fitted: FittedBaseline, sequences: QuestionSequences, entries: np.ndarray, skill: np.ndarray
) -> np.ndarray:
    """Probability of a correct answer for the flat entries."""
    features = past_features(sequences, entries, skill, fitted.rates)
    return fitted.model.predict_proba(features[:, fitted.columns])[:, 1]
