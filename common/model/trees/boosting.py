"""The trees: scikit-learn's histogram gradient boosting over the past-event features of
common/data/past_features.py, what a Kaggler builds in an afternoon. 04 fits them on a
fold's training rows (common.model.trees.blending.fold_blend_bundle), streams them beside the
model and blends the two; 05 reports what 04 streamed, a third baseline.

A training row's question rate must not count the row's own answer (the trees would
learn to trust it too much): training rows get out-of-fold rates, from the training rows
of the other student groups (student index mod `boost_rate_folds`), their counts scaled to
the full table's; scored rows get the rates of every training row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from common.data.features import QuestionSequences
from common.data.past_features import CATEGORICAL, FEATURE_NAMES, past_features, question_count
from common.data.question_rates import question_rates
from common.model.trees.forest import BITSET_WORDS, Trees
from common.options import above, at_least, option

if TYPE_CHECKING:
    from sklearn.ensemble import HistGradientBoostingClassifier

TREES = "trees"  # the scorer label of the boosted trees over past-event features
RATE_COLUMN = FEATURE_NAMES.index("question_rate")
COUNT_COLUMN = FEATURE_NAMES.index("question_count")


@dataclass
class TreesConfig:
    boost_max_rows: int = option(
        1_000_000,
        "training rows the boosted-features baseline fits on at most (a sample)",
        range=at_least(1),
    )
    boost_rounds: int = option(
        300,
        "boosting rounds at most (early stopping on a tenth of the training rows)",
        range=at_least(1),
    )
    boost_learning_rate: float = option(0.1, "boosting learning rate", range=above(0))
    boost_leaves: int = option(31, "leaves per tree", range=at_least(2))
    boost_rate_folds: int = option(
        5,
        "student groups of the out-of-fold question rates of the training rows",
        range=at_least(2),
    )
    # a question answered 20 times in training is pulled a half toward the global rate
    boost_question_prior: float = option(
        20.0,
        "pseudo-answers at the global rate in the trees' question-rate feature",
        range=at_least(0),
    )
    boost_seed: int = option(
        0, "seed of the trees' row sample and early-stopping split", range=at_least(0)
    )


@dataclass
class FittedTrees:
    """A fitted baseline: the trees and what they were fitted on."""

    model: object  # sklearn HistGradientBoostingClassifier
    trees: Trees  # the model as arrays: what scores (here, in 04 and in the notebook)
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
    config: TreesConfig,
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


def fit_trees(
    sequences: QuestionSequences,
    train: np.ndarray,
    skill: np.ndarray,
    n_questions: int,
    question_prior: float,
    config: TreesConfig,
    seed: int = 0,
) -> FittedTrees:
    """Fit on the flat entries where `train` (bool, one per entry) is True."""
    # imported here, not at the top: scikit-learn's import costs about a second at the start
    # of every 03 and 04 process, and only a fit needs it
    from sklearn.ensemble import HistGradientBoostingClassifier

    rates, entries, features = training_matrix(
        sequences, train, n_questions, question_prior, skill, config, seed
    )
    columns = informative_columns(features)
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
    trees = to_trees(model, columns)
    return FittedTrees(model, trees, rates, columns, len(entries), int(model.n_iter_))


def informative_columns(features: np.ndarray) -> np.ndarray:
    """The FEATURE_NAMES columns the trees are fitted on. Left out: a feature the data
    never defines (elapsed time in a data set without times: the trees cannot bin a column
    of NaN), and a categorical one with a single known value (a data set with one part),
    which can only split known against missing, a split to_trees cannot carry."""
    defined = ~np.all(np.isnan(features), axis=0)
    for column, name in enumerate(FEATURE_NAMES):
        if name in CATEGORICAL and defined[column]:
            values = features[:, column]
            defined[column] = len(np.unique(values[~np.isnan(values)])) > 1
    return np.flatnonzero(defined)


def score_trees(
    fitted: FittedTrees, sequences: QuestionSequences, entries: np.ndarray, skill: np.ndarray
) -> np.ndarray:
    """Probability of a correct answer for the flat entries."""
    features = past_features(sequences, entries, skill, fitted.rates)
    return fitted.trees.probability(features)


def to_trees(model: HistGradientBoostingClassifier, columns: np.ndarray) -> Trees:
    """A fitted binary classifier as arrays, `columns` the FEATURE_NAMES columns it was
    fitted on: Trees.probability(features) is model.predict_proba(features[:, columns])[:, 1]."""
    if model.n_trees_per_iteration_ != 1:
        raise ValueError(f"{model.n_trees_per_iteration_} trees per round: expected a binary model")
    columns = np.asarray(columns, dtype=np.int64)
    if len(columns) != model.n_features_in_:
        raise ValueError(f"{len(columns)} columns for a model of {model.n_features_in_} inputs")
    return Trees(
        columns=columns,
        **_preprocessing(model),
        baseline=np.asarray(model._baseline_prediction, dtype=np.float64).reshape(()),
        **_flat_nodes([iteration[0] for iteration in model._predictors]),
    )


def _preprocessing(model: HistGradientBoostingClassifier) -> dict[str, np.ndarray]:
    """Trees' fields of the model's ColumnTransformer (categorical columns first, as
    OrdinalEncoder codes) and of its bin mapper's known categories."""
    n = model.n_features_in_
    fields = {
        "order": np.arange(n, dtype=np.int64),
        "categorical": np.zeros(n, dtype=bool),
        "categories": np.zeros(0, dtype=np.float64),
        "category_offsets": np.zeros(1, dtype=np.int64),
        "known_bitsets": np.zeros((0, BITSET_WORDS), dtype=np.uint32),
        "known_row": np.zeros(n, dtype=np.int64),
    }
    preprocessor = model._preprocessor
    if preprocessor is None:  # no categorical feature: the inputs as they are
        return fields
    for name, _, selected in preprocessor.transformers_:
        fields["order"][preprocessor.output_indices_[name]] = np.arange(n)[selected]
    if sorted(fields["order"]) != list(range(n)):
        raise ValueError(f"the preprocessor's columns {fields['order']} are not a reordering")
    fields["categorical"] = np.asarray(model._is_categorical_remapped, dtype=bool)
    known = [
        np.asarray(values[: len(values) - int(np.isnan(values[-1]))], dtype=np.float64)
        if len(values)
        else np.zeros(0)
        for values in preprocessor.named_transformers_["encoder"].categories_
    ]  # OrdinalEncoder lists NaN as a last category where the fit saw one: it encodes NaN
    fields["categories"] = np.concatenate([np.zeros(0), *known])
    fields["category_offsets"] = np.cumsum([0, *(len(k) for k in known)]).astype(np.int64)
    bitsets, row = model._bin_mapper.make_known_categories_bitsets()
    fields["known_bitsets"] = np.asarray(bitsets, dtype=np.uint32)
    fields["known_row"] = np.asarray(row, dtype=np.int64)
    return fields


def _flat_nodes(predictors: list) -> dict[str, np.ndarray]:
    """Trees' node and bitset fields: every tree's nodes in one set of arrays, children
    and bitset rows made global."""
    nodes = np.concatenate([p.nodes for p in predictors])
    sizes = [len(p.nodes) for p in predictors]
    bitsets = [p.raw_left_cat_bitsets for p in predictors]
    bitset_counts = [len(b) for b in bitsets]
    tree_root = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
    tree_bitset = np.cumsum([0, *bitset_counts[:-1]]).astype(np.int64)
    leaf = nodes["is_leaf"].astype(bool)
    categorical = nodes["is_categorical"].astype(bool) & ~leaf
    local_bitset = nodes["bitset_idx"].astype(np.int64)
    own_bitsets = np.repeat(bitset_counts, sizes)
    if np.any(categorical & (local_bitset >= own_bitsets)):
        # a categorical split on a feature with one known category gets no bitset of its
        # own in scikit-learn (its index 0 reads another split's bitset, or none)
        raise ValueError("a categorical split without a bitset of its tree's own")
    first = np.repeat(tree_root, sizes)
    return {
        "tree_root": tree_root,
        "tree_bitset": tree_bitset,
        "node_feature": nodes["feature_idx"].astype(np.int64),
        "node_threshold": nodes["num_threshold"].astype(np.float64),
        "node_left": np.where(leaf, -1, nodes["left"].astype(np.int64) + first),
        "node_right": np.where(leaf, -1, nodes["right"].astype(np.int64) + first),
        "node_missing_left": nodes["missing_go_to_left"].astype(bool),
        "node_is_leaf": leaf,
        "node_value": nodes["value"].astype(np.float64),
        "node_categorical": categorical,
        "node_bitset": np.where(categorical, local_bitset + np.repeat(tree_bitset, sizes), -1),
        "left_bitsets": np.concatenate([np.zeros((0, BITSET_WORDS), np.uint32), *bitsets]),
    }
