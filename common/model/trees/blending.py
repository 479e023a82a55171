"""The blend 04 streams and submits: sigmoid(w * logit(model) + (1 - w) * logit(trees))
(common.model.trees.logit_blend), with the model's weight w chosen per fold on the inner
validation split only, never on the rows it scores; with several architectures (03
--arch), the stacked blend sigmoid(sum of w_m * logit(member m) + w_t * logit(trees) + b)
(common.model.trees.stacked_blend), its weights a logistic regression over the members'
and the trees' logits on the same inner split; the fold's trees fitted on its
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
from common.model.trees.blend_bundle import TREES_WEIGHT, BlendBundle
from common.model.trees.boosting import FittedTrees, TreesConfig, fit_trees
from common.model.trees.forest import clipped_logit, logit_blend, stacked_blend

BLEND = "blend: model + trees"
WEIGHTS = np.round(np.linspace(0.0, 1.0, 21), 2)  # the model's weight


def choose_weight(labels: np.ndarray, model: np.ndarray, features: np.ndarray) -> float:
    """The model's weight in WEIGHTS with the best AUC (the largest on a tie)."""
    aucs = [auc_or_nan(labels, logit_blend(model, features, w)) for w in WEIGHTS]
    aucs = np.nan_to_num(np.asarray(aucs), nan=-1.0)
    return float(WEIGHTS[len(WEIGHTS) - 1 - int(np.argmax(aucs[::-1]))])


def choose_stack(
    labels: np.ndarray, members: dict[str, np.ndarray], trees: np.ndarray
) -> tuple[dict[str, float], float]:
    """The stacked blend's weights (each member's, in their order, then the trees') and
    intercept: a logistic regression over their logits (scikit-learn's, L2 at C=1: the
    inner split's thousands of rows against a handful of weights)."""
    from sklearn.linear_model import LogisticRegression  # only here: a fit, not a stream

    names = [*members, TREES_WEIGHT]
    logits = np.column_stack([clipped_logit(p) for p in [*members.values(), trees]])
    fit = LogisticRegression(C=1.0, max_iter=1000).fit(logits, labels)
    return dict(zip(names, map(float, fit.coef_[0]), strict=True)), float(fit.intercept_[0])


@dataclass
class BlendChoice:
    """A fold's weight and the inner split's AUCs it was chosen on, with the trees'
    permutation importance there (the AUC lost when a feature's values are shuffled).
    Several architectures: the stacked blend's weights and intercept (weight None) and
    each member's inner AUC."""

    weight: float | None
    epoch: int  # the checkpoint's epoch whose inner predictions chose it
    inner_rows: int
    inner_auc_model: float
    inner_auc_features: float
    inner_auc_blend: float
    importance: dict[str, list[float]] = field(default_factory=dict)  # name: [mean, std]
    weights: dict[str, float] | None = None
    intercept: float = 0.0
    inner_auc_members: dict[str, float] = field(default_factory=dict)


@dataclass
class Member:
    """Another architecture of the run beside the model (03 --arch's first): its name,
    03's predictions of the inner split and the streamed checkpoint's epoch."""

    name: str
    inner: InnerPredictions
    epoch: int | None


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
    others: tuple[Member, ...] = (),
    primary: str = "model",
) -> tuple[BlendChoice | None, str]:
    """(choice, "") or (None, why there is no blend for this fold). The trees are
    fitted again without the inner rows and score them beside best.pt's predictions
    (and, with `others`, every other architecture's best.pt's: then the stacked blend's
    weights; the model's name among them is `primary`)."""
    entries, model, why = inner_entries(inner, fold, data, checkpoint_epoch)
    if entries is None:
        return None, why
    members = {primary: model}
    for member in others:
        member_entries, predictions, why = inner_entries(member.inner, fold, data, member.epoch)
        if member_entries is None:
            return None, why
        if not np.array_equal(member_entries, entries):
            raise ValueError(
                f"{member.inner.path}: other inner rows than {inner.path} (the same inner "
                "split, 03's --inner-share and --seed, must choose every member)"
            )
        members[member.name] = predictions
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
    weight, weights, intercept = None, None, 0.0
    if others:
        weights, intercept = choose_stack(labels, members, trees)
        named = dict(members, **{TREES_WEIGHT: trees})
        blended = stacked_blend([(w, named[n]) for n, w in sorted(weights.items())], intercept)
    else:
        weight = choose_weight(labels, model, trees)
        blended = logit_blend(model, trees, weight)
    choice = BlendChoice(
        weight=weight,
        epoch=int(checkpoint_epoch),
        inner_rows=len(entries),
        inner_auc_model=auc_or_nan(labels, model),
        inner_auc_features=auc_or_nan(labels, trees),
        inner_auc_blend=auc_or_nan(labels, blended),
        importance=tree_importance(fitted, features, labels, config.boost_seed),
        weights=weights,
        intercept=intercept,
        inner_auc_members={n: auc_or_nan(labels, p) for n, p in members.items()} if others else {},
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
    config: TreesConfig, others: tuple[Member, ...] = (), primary: str = "model",
) -> BlendBundle:  # fmt: skip
    """What 04 streams with fold `fold`'s checkpoint: the trees fitted on every training
    row of the fold and the weight chosen on its inner split (none without one: then the
    model alone is submitted); with `others`, the stacked blend's weights over every
    architecture and the trees."""
    skill = question_skills(data.questions, data.n_questions)
    fitted = fit_trees(
        data.sequences, fold_training(data, fold), skill, data.n_questions,
        config.boost_question_prior, config, config.boost_seed,
    )  # fmt: skip
    choice, why = choose_fold_blend(inner, fold, data, checkpoint_epoch, config, others, primary)
    record = {
        "trees": {"rounds": fitted.rounds, "train_rows": fitted.train_rows},
        "chosen_on": "the fold's inner split" if choice else None,
        "choice": asdict(choice) if choice else None,
        "no_blend": why or None,
    }
    weight = choice.weight if choice else None
    weights = choice.weights if choice else None
    intercept = choice.intercept if choice else 0.0
    return BlendBundle(fitted.trees, fitted.rates, skill, weight, record, weights, intercept)


def full_blend_bundle(
    fold_weights: dict[int, float | None], data: Dataset, config: TreesConfig,
    fold_stacks: dict[int, tuple[dict, float]] | None = None,
) -> BlendBundle:  # fmt: skip
    """What 04 --full ships with the full-data model: trees fitted on every question row,
    and the median of the weights the run's folds chose on their inner splits
    (`fold_weights`, fold: weight, None where a fold chose none; the model alone without
    any). A run of several architectures: `fold_stacks` (fold: each fold's stacked weights
    and intercept), each weight and the intercept the median over the folds."""
    skill = question_skills(data.questions, data.n_questions)
    every = np.ones(len(data.sequences.row), dtype=bool)
    fitted = fit_trees(
        data.sequences, every, skill, data.n_questions, config.boost_question_prior, config,
        config.boost_seed,
    )  # fmt: skip
    if fold_stacks:
        return full_stack_bundle(fold_stacks, fitted, skill)
    chosen = {k: w for k, w in sorted(fold_weights.items()) if w is not None}
    weight = float(np.median(list(chosen.values()))) if chosen else None
    record = {
        "trees": {"rounds": fitted.rounds, "train_rows": fitted.train_rows},
        "chosen_on": f"the median of folds {sorted(chosen)}' weights" if chosen else None,
        "fold_weights": chosen,
        "no_blend": None if chosen else "no fold of the run has a blend weight (04 on its folds)",
    }
    return BlendBundle(fitted.trees, fitted.rates, skill, weight, record)


def full_stack_bundle(
    fold_stacks: dict[int, tuple[dict, float]], fitted: FittedTrees, skill: np.ndarray
) -> BlendBundle:
    """full_blend_bundle's stacked blend: each weight (and the intercept) the median of
    the folds'."""
    folds = sorted(fold_stacks)
    names = list(fold_stacks[folds[0]][0])
    weights = {n: float(np.median([fold_stacks[k][0][n] for k in folds])) for n in names}
    intercept = float(np.median([fold_stacks[k][1] for k in folds]))
    record = {
        "trees": {"rounds": fitted.rounds, "train_rows": fitted.train_rows},
        "chosen_on": f"the median of folds {folds}' stacked weights",
        "fold_weights": {str(k): fold_stacks[k][0] for k in folds},
        "no_blend": None,
    }
    return BlendBundle(fitted.trees, fitted.rates, skill, None, record, weights, intercept)
