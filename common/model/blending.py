"""A logit blend of the model and the feature baseline, scored by 05 as an extra row:
sigmoid(w * logit(model) + (1 - w) * logit(features)), with the weight w chosen per
fold on the inner validation split only, never on the rows it scores.

The inner split is the one 03 selects best.pt on (common.data.fold_data.inner_cut): training
students' questions the model did not train on. 03 writes best.pt's predictions of it
(layout.INNER_PREDICTIONS); the feature baseline is fitted again on the fold's training
rows without them and scores them; the weight that gives the best AUC there is applied
to the scored rows (the model streamed, the baseline fitted on every training row).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from common.data.dataset import Dataset
from common.data.past_features import question_skills
from common.data.question_rates import training_entries
from common.layout import INNER_PREDICTIONS, fold_dir
from common.metrics import auc_or_nan
from common.model.boosting import (
    FeatureBaselineConfig,
    fit_feature_baseline,
    score_feature_baseline,
)

BLEND = "blend: model + boosted features"
WEIGHTS = np.round(np.linspace(0.0, 1.0, 21), 2)  # the model's weight
EDGE = 1e-6  # probabilities are clipped this far from 0 and 1 before the logit


def logit_blend(model: np.ndarray, features: np.ndarray, weight: float) -> np.ndarray:
    def logit(p):
        p = np.clip(np.asarray(p, dtype=np.float64), EDGE, 1 - EDGE)
        return np.log(p) - np.log1p(-p)

    return 1.0 / (1.0 + np.exp(-(weight * logit(model) + (1 - weight) * logit(features))))


def choose_weight(labels: np.ndarray, model: np.ndarray, features: np.ndarray) -> float:
    """The model's weight in WEIGHTS with the best AUC (the largest on a tie)."""
    aucs = [auc_or_nan(labels, logit_blend(model, features, w)) for w in WEIGHTS]
    aucs = np.nan_to_num(np.asarray(aucs), nan=-1.0)
    return float(WEIGHTS[len(WEIGHTS) - 1 - int(np.argmax(aucs[::-1]))])


@dataclass
class BlendChoice:
    """A fold's weight and the inner split's AUCs it was chosen on."""

    weight: float
    epoch: int  # the checkpoint's epoch whose inner predictions chose it
    inner_rows: int
    inner_auc_model: float
    inner_auc_features: float
    inner_auc_blend: float


def choose_fold_blend(
    run_dir: Path,
    fold_index: int,
    data: Dataset,
    cut_row: np.ndarray,
    checkpoint_epoch: int | None,
    question_prior: float,
    config: FeatureBaselineConfig,
    seed: int,
) -> tuple[BlendChoice | None, str]:
    """(choice, "") or (None, why there is no blend for this fold)."""
    path = fold_dir(run_dir, fold_index) / INNER_PREDICTIONS
    if not path.exists():
        return None, f"fold {fold_index}: no {INNER_PREDICTIONS} (03 --select-on inner writes it)"
    inner = pd.read_parquet(path)
    epochs = set(inner["epoch"].tolist())
    if epochs != {checkpoint_epoch}:
        return None, (
            f"fold {fold_index}: {INNER_PREDICTIONS} holds epoch {sorted(epochs)}'s predictions, "
            f"the streamed checkpoint is epoch {checkpoint_epoch}"
        )
    sequences = data.sequences
    global_row = inner["global_row"].to_numpy().astype(np.int64)
    entries = np.searchsorted(sequences.row, global_row)
    if np.any(entries >= len(sequences.row)) or not np.array_equal(
        sequences.row[np.minimum(entries, len(sequences.row) - 1)], global_row
    ):
        raise ValueError(f"{path}: global_row values that are not question rows of the data")
    train = training_entries(sequences, cut_row)
    if not train[entries].all():
        raise ValueError(f"{path}: inner rows outside the fold's training rows")
    fit = train.copy()
    fit[entries] = False
    skill = question_skills(data.questions, data.n_questions)
    fitted = fit_feature_baseline(
        sequences, fit, skill, data.n_questions, question_prior, config, seed
    )
    features = score_feature_baseline(fitted, sequences, entries, skill)
    labels = sequences.response[entries]
    model = inner["prediction"].to_numpy(dtype=np.float64)
    weight = choose_weight(labels, model, features)
    choice = BlendChoice(
        weight=weight,
        epoch=int(checkpoint_epoch),
        inner_rows=len(entries),
        inner_auc_model=auc_or_nan(labels, model),
        inner_auc_features=auc_or_nan(labels, features),
        inner_auc_blend=auc_or_nan(labels, logit_blend(model, features, weight)),
    )
    return choice, ""
