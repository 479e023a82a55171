"""What 03 and 04 left in a run's folders, read for the stages after them: the CV folds'
best epochs (03 --full-data --epochs 0), a fold's inner-split predictions (the blend's
weight) and the weights the folds' blends chose (04 --full). common.model never reads a
run folder: these readers hand it what it needs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from common.model.checkpoint import CheckpointError, read_checkpoint
from common.model.registry import ARCH_NAMES
from common.model.trees.blend_bundle import BlendBundle, rewrite_in_run
from common.model.trees.blending import InnerPredictions
from common.workspace import ModelFolder, Run


def cv_epochs(run: Run, say: bool = True) -> int:
    """The full-data run's epoch count: the median best epoch of the CV folds' best.pt
    (each chosen by its fold's selection), rounded."""
    found = {}
    for k in run.folds_holding(ModelFolder.BEST):
        folder = run.fold(k)
        found[folder.name] = int(read_checkpoint(folder.checkpoint(), "cpu")["best_epoch"])
    if not found:
        raise CheckpointError(
            f"--epochs 0 takes the epoch count from the CV folds, but {run.path} has no "
            f"fold*/{ModelFolder.BEST}: train the folds first, or give --epochs"
        )
    epochs = max(1, round(float(np.median(list(found.values())))))
    if say:
        print(f"epochs from CV: best epochs {found}, median {epochs}")
    return epochs


def inner_predictions(folder: ModelFolder) -> InnerPredictions:
    """The fold's inner-split predictions by its best checkpoint (03 --select-on inner
    writes them), or none."""
    path = folder.inner_predictions
    return InnerPredictions(str(path), pd.read_parquet(path) if path.exists() else None)


def fold_weights(run: Run) -> dict[int, float | None]:
    """fold: the blend weight 04 chose for it (None: none chosen), for each fold of the
    run with blend files (read and checked whole: common.model.trees.blend_bundle)."""
    return {k: bundle.weight for k, bundle in fold_bundles(run).items()}


def fold_stacks(run: Run) -> dict[int, tuple[dict, float]]:
    """fold: the stacked blend's weights and intercept 04 chose for it, for each fold of a
    run of several architectures with blend files (none: folds without them)."""
    stacks = {}
    for k, bundle in fold_bundles(run).items():
        if bundle.weights is not None:
            stacks[k] = (bundle.weights, bundle.intercept)
    return stacks


def fold_bundles(run: Run) -> dict[int, BlendBundle]:
    """fold: its blend files, for each fold of the run with them (read and checked
    whole)."""
    holding = {k for name in ModelFolder.BLEND_FILES for k in run.folds_holding(name)}
    bundles = {}
    for k in sorted(holding):
        folder = run.fold(k)
        bundles[k] = BlendBundle.load(folder, rewrite_in_run(folder))
    return bundles


def member_names(folder: ModelFolder, checkpoint: str) -> list[str]:
    """The other architectures a fold (or full/) folder holds beside its model (03 --arch
    beyond the first: <folder>/<arch>/), those with the checkpoint `checkpoint`, in the
    registry's order."""
    return [a for a in ARCH_NAMES if folder.member(a).checkpoint(checkpoint).exists()]
