"""The blend 04 streams and submits: sigmoid(w * logit(model) + (1 - w) * logit(trees))
(common.model.trees.logit_blend), with the model's weight w chosen per fold on the inner
validation split only, never on the rows it scores; the fold's trees fitted on its
training rows (fold_blend_bundle), or for the full-data model on every row with the
median of the folds' weights (full_blend_bundle).

The inner split is the one 03 selects best.pt on (common.data.fold_data.inner_cut): training
students' questions the model did not train on. 03 writes best.pt's predictions of it
(inner_predictions.parquet: the caller reads it, this module reads no run folder); the
trees are fitted again on the fold's training rows without them and score them; the
weight that gives the best AUC there is applied to the scored rows. There too the
trees' permutation importance is measured (05's report plots it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from common.data.dataset import Dataset
from common.data.fold_data import Fold
from common.data.past_features import FEATURE_NAMES, past_features, question_skills
from common.data.question_rates import training_entries
from common.metrics import auc_or_nan
from common.model.blend_bundle import BlendBundle
from common.model.boosting import FittedTrees, TreesConfig, fit_trees
from common.model.trees import logit_blend

BLEND = "blend: model + trees"
WEIGHTS = np.round(np.linspace(0.0, 1.0, 21), 2)  # the model's weight


def choose_weight(labels: np.ndarray, model: np.ndarray, features: np.ndarray) -> float:
    """The model's weight in WEIGHTS with the best AUC (the largest on a tie)."""
    aucs = [auc_or_nan(labels, logit_blend(model, features, w)) for w in WEIGHTS]
    aucs = np.nan_to_num(np.asarray(aucs), nan=-1.0)
    return float(WEIGHTS[len(WEIGHTS) - 1 - int(np.argmax(aucs[::-1]))])


@dataclass
class BlendChoice:
    """A fold's weight and the inner split's AUCs it was chosen on, with the trees'
    permutation importance there (the AUC lost when a feature's values are shuffled)."""

    weight: float
    epoch: int  # the checkpoint's epoch whose inner predictions chose it
    inner_rows: int
    inner_auc_model: float
    inner_auc_features: float
    inner_auc_blend: float
    importance: dict[str, list[float]] = field(default_factory=dict)  # name: [mean, std]


@dataclass
class InnerPredictions:
    """03's predictions of a fold's inner split by its best checkpoint (the run's
    inner_predictions.parquet, read by common.runs.folders.inner_predictions): `rows`
    None where the fold has none; `path` names the file in messages."""

    path: str
    rows: pd.DataFrame | None


def inner_entries(
    inner: InnerPredictions, fold: Fold, data: Dataset, checkpoint_epoch: int | None
) -> tuple[np.ndarray | None, np.ndarray | None, str]:
    """(flat entries of the inner split, best.pt's predictions of them, "") from 03's
    inner predictions of the streamed checkpoint; (None, None, why not) without them."""
    path, name = inner.path, Path(inner.path).name
    if inner.rows is None:
        return None, None, f"fold {fold.index}: no {name} (03 --select-on inner writes it)"
    epochs = set(inner.rows["epoch"].tolist())
    if epochs != {checkpoint_epoch}:
        why = (
            f"fold {fold.index}: {name} holds epoch {sorted(epochs)}'s "
            f"predictions, the streamed checkpoint is epoch {checkpoint_epoch}"
        )
        return None, None, why
    inner = inner.rows
    sequences = data.sequences
    global_row = inner["global_row"].to_numpy().astype(np.int64)
    entries = np.searchsorted(sequences.row, global_row)
    if np.any(entries >= len(sequences.row)) or not np.array_equal(
        sequences.row[np.minimum(entries, len(sequences.row) - 1)], global_row
    ):
        raise ValueError(f"{path}: global_row values that are not question rows of the data")
    if not fold_training(data, fold)[entries].all():
        raise ValueError(f"{path}: inner rows outside the fold's training rows")
    return entries, inner["prediction"].to_numpy(dtype=np.float64), ""


def fold_training(data: Dataset, fold: Fold) -> np.ndarray:
    """(n_entries,) bool: the fold's training question rows (before each student's cut)."""
    return training_entries(data.sequences, data.arrays.offsets[:-1] + fold.user_cut)


def choose_fold_blend(
    inner: InnerPredictions,
    fold: Fold,
    data: Dataset,
    checkpoint_epoch: int | None,
    config: TreesConfig,
) -> tuple[BlendChoice | None, str]:
    """(choice, "") or (None, why there is no blend for this fold). The trees are
    fitted again without the inner rows and score them beside best.pt's predictions."""
    entries, model, why = inner_entries(inner, fold, data, checkpoint_epoch)
    if entries is None:
        return None, why
    fit = fold_training(data, fold)
    fit[entries] = False
    skill = question_skills(data.questions, data.n_questions)
    fitted = fit_trees(
        data.sequences, fit, skill, data.n_questions, config.boost_question_prior, config,
        config.boost_seed,
    )  # fmt: skip
    features = past_features(data.sequences, entries, skill, fitted.rates)
    trees = fitted.trees.probability(features)
    labels = data.sequences.response[entries]
    weight = choose_weight(labels, model, trees)
    choice = BlendChoice(
        weight=weight,
        epoch=int(checkpoint_epoch),
        inner_rows=len(entries),
        inner_auc_model=auc_or_nan(labels, model),
        inner_auc_features=auc_or_nan(labels, trees),
        inner_auc_blend=auc_or_nan(labels, logit_blend(model, trees, weight)),
        importance=tree_importance(fitted, features, labels, config.boost_seed),
    )
    return choice, ""


IMPORTANCE_REPEATS = 5  # shuffles per feature


def _auc_of_scores(model, features: np.ndarray, labels: np.ndarray) -> float:
    """The AUC of the trees' scores (scikit-learn's "roc_auc" scorer, computed by
    common.metrics.auc_or_nan without its per-call checks: most of the time on small
    folds)."""
    return auc_or_nan(labels, model.decision_function(features))


def tree_importance(
    fitted: FittedTrees, features: np.ndarray, labels: np.ndarray, seed: int
) -> dict[str, list[float]]:
    """Each fitted feature's permutation importance on these rows (scikit-learn's
    permutation_importance, AUC): {name: [mean AUC lost, its std over the shuffles]},
    largest first."""
    if len(np.unique(labels)) < 2:
        return {}
    from sklearn.inspection import permutation_importance  # only here: see fit_trees

    found = permutation_importance(
        fitted.model,
        features[:, fitted.columns],
        labels,
        scoring=_auc_of_scores,
        n_repeats=IMPORTANCE_REPEATS,
        random_state=seed,
    )
    names = [FEATURE_NAMES[c] for c in fitted.columns]
    pairs = zip(names, found.importances_mean, found.importances_std, strict=True)
    ranked = sorted(pairs, key=lambda item: -item[1])
    return {name: [float(mean), float(std)] for name, mean, std in ranked}


def fold_blend_bundle(
    inner: InnerPredictions, fold: Fold, data: Dataset, checkpoint_epoch: int | None,
    config: TreesConfig,
) -> BlendBundle:  # fmt: skip
    """What 04 streams with fold `fold`'s checkpoint: the trees fitted on every training
    row of the fold and the weight chosen on its inner split (none without one: then the
    model alone is submitted)."""
    skill = question_skills(data.questions, data.n_questions)
    fitted = fit_trees(
        data.sequences, fold_training(data, fold), skill, data.n_questions,
        config.boost_question_prior, config, config.boost_seed,
    )  # fmt: skip
    choice, why = choose_fold_blend(inner, fold, data, checkpoint_epoch, config)
    record = {
        "trees": {"rounds": fitted.rounds, "train_rows": fitted.train_rows},
        "chosen_on": "the fold's inner split" if choice else None,
        "choice": asdict(choice) if choice else None,
        "no_blend": why or None,
    }
    weight = choice.weight if choice else None
    return BlendBundle(fitted.trees, fitted.rates, skill, weight, record)


def full_blend_bundle(
    fold_weights: dict[int, float | None], data: Dataset, config: TreesConfig
) -> BlendBundle:
    """What 04 --full ships with the full-data model: trees fitted on every question row,
    and the median of the weights the run's folds chose on their inner splits
    (`fold_weights`, fold: weight, None where a fold chose none; the model alone without
    any)."""
    skill = question_skills(data.questions, data.n_questions)
    every = np.ones(len(data.sequences.row), dtype=bool)
    fitted = fit_trees(
        data.sequences, every, skill, data.n_questions, config.boost_question_prior, config,
        config.boost_seed,
    )  # fmt: skip
    chosen = {k: w for k, w in sorted(fold_weights.items()) if w is not None}
    weight = float(np.median(list(chosen.values()))) if chosen else None
    record = {
        "trees": {"rounds": fitted.rounds, "train_rows": fitted.train_rows},
        "chosen_on": f"the median of folds {sorted(chosen)}' weights" if chosen else None,
        "fold_weights": chosen,
        "no_blend": None if chosen else "no fold of the run has a blend weight (04 on its folds)",
    }
    return BlendBundle(fitted.trees, fitted.rates, skill, weight, record)
