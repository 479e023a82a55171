"""05_evaluate.py's figures (matplotlib, Agg backend: no display needed). Each function
draws one figure and writes it as a PNG atomically."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from common.files import atomic_file
from common.metrics import auc_or_nan

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 120


def _pyplot():
    """matplotlib's pyplot on the Agg backend, imported at the first figure, not with this
    module: matplotlib and scikit-learn cost over a second at each start of a process that
    imports 05's code and draws nothing (05 --runs, the benchmarks' scoring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Figure, path: Path) -> None:
    with atomic_file(path) as tmp:
        figure.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    _pyplot().close(figure)


def roc_figure(path: Path, labels: np.ndarray, scores: dict[str, np.ndarray]) -> None:
    """ROC curve of every scorer on the same rows, AUC in the legend."""
    plt = _pyplot()
    from sklearn.metrics import roc_curve  # with pyplot: see _pyplot

    figure, ax = plt.subplots(figsize=(5.5, 5))
    for name, score in scores.items():
        fpr, tpr, _ = roc_curve(labels, score)
        auc = auc_or_nan(labels, score)
        style = "--" if name == "oracle" else "-"
        ax.plot(fpr, tpr, style, lw=1.5, label=f"{name} (AUC {auc:.4f})")
    ax.plot([0, 1], [0, 1], ":", color="grey", lw=1, label="chance")
    ax.set(xlabel="false positive rate (fall-out)", ylabel="true positive rate (recall)")
    ax.set(xlim=(0, 1), ylim=(0, 1), title=f"ROC curves, {len(labels):,} question rows")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    _save(figure, path)


def reliability_figure(
    path: Path, labels: np.ndarray, scores: dict[str, np.ndarray], bins: int = 10
) -> None:
    """Observed share correct against mean score per equal-width bin, with the count of
    the first scorer's (the model's) scores per bin below."""
    plt = _pyplot()
    from sklearn.calibration import calibration_curve  # with pyplot: see _pyplot

    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(5.5, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    top.plot([0, 1], [0, 1], ":", color="grey", lw=1, label="perfectly calibrated")
    for name, score in scores.items():
        observed, predicted = calibration_curve(labels, score, n_bins=bins, strategy="uniform")
        style = "--" if name == "oracle" else "-"
        top.plot(predicted, observed, style, marker="o", ms=3, lw=1.2, label=name)
    top.set(ylabel="observed share correct", ylim=(0, 1), title="Reliability diagram")
    top.legend(loc="upper left", fontsize=8)
    top.grid(alpha=0.3)
    first = next(iter(scores))
    bottom.hist(scores[first], bins=np.linspace(0, 1, bins + 1), color="C0", alpha=0.8)
    bottom.set(xlabel="predicted probability", ylabel=f"{first} rows", xlim=(0, 1))
    bottom.grid(alpha=0.3)
    _save(figure, path)


def training_curves_figure(path: Path, histories: dict[int, pd.DataFrame]) -> None:
    """Per epoch for each fold (03's history.csv): the training loss, and the loss and AUC
    of the inner validation split (which selects the model by default) and of the fold's
    validation rows (logged only, unless 03 ran with --select-on fold)."""
    plt = _pyplot()
    figure, (loss_ax, auc_ax) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    styles = {"train": "-", "inner": "--", "fold": ":"}
    for k, history in sorted(histories.items()):
        color = f"C{k % 10}"
        epoch = history["epoch"]
        for split, style in styles.items():
            loss_ax.plot(epoch, history[f"{split}_loss"], style, marker="o", color=color, ms=3)
            if split != "train":
                auc_ax.plot(epoch, history[f"{split}_auc"], style, marker="o", color=color, ms=3)
        loss_ax.plot([], [], "-", color=color, label=f"fold {k}")
        auc_ax.plot([], [], "-", color=color, label=f"fold {k}")
    for split, style in styles.items():
        loss_ax.plot([], [], style, color="black", label=split)
        if split != "train":
            auc_ax.plot([], [], style, color="black", label=f"{split} validation")
    loss_ax.set(xlabel="epoch", ylabel="binary cross-entropy", title="Loss")
    auc_ax.set(xlabel="epoch", ylabel="ROC AUC", title="Validation AUC (03_train)")
    for ax in (loss_ax, auc_ax):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    _save(figure, path)


def importance_figure(path: Path, importance: dict[str, tuple[float, float]]) -> None:
    """Horizontal bars of each feature's permutation importance (the AUC lost when its
    values are shuffled), largest on top, with the spread over shuffles and folds."""
    plt = _pyplot()
    names = list(importance)[::-1]
    means = np.array([importance[n][0] for n in names])
    spreads = np.array([importance[n][1] for n in names])
    figure, ax = plt.subplots(figsize=(6, 0.28 * len(names) + 1.2))
    ax.barh(names, means, xerr=spreads, color="tab:blue", alpha=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set(xlabel="AUC lost when the feature is shuffled (inner split)")
    ax.set_title("Boosted features: permutation importance")
    _save(figure, path)
