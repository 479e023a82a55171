"""What an evaluation (common/report/evaluate.py) takes, EvaluateConfig (05_evaluate.py's
flags), and what it finds, Evaluation; report.md's renderer (common/report/render.py)
reads both, so they live apart from the evaluation that imports the renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.options import at_least, option, progress_option
from common.report.baselines import BaselineConfig
from common.report.scored_rows import MODEL


@dataclass
class EvaluateConfig:
    folds: list[int] | None = option(
        None,
        "folds to score",
        shown_default="every fold{k}/ of the run holding stream predictions",
        range=at_least(0),
    )
    bootstrap: int = option(1000, "AUC resamples for the interval; 0 skips it", range=at_least(0))
    seed: int = option(0, "seed of the bootstrap", range=at_least(0))
    calibration_bins: int = option(10, "bins of the calibration table and plot", range=at_least(1))
    # a bar over bootstrap resamples (minutes on millions of rows)
    progress: bool = progress_option()
    baselines: BaselineConfig = field(default_factory=BaselineConfig)


@dataclass
class Evaluation:
    """What 05 found (report/summary.json holds it as JSON): the pooled model AUC and
    its bootstrap interval, every baseline's, the blend's and the oracle's AUC, the
    model's lift over each baseline, the folds' AUCs, and the blend weights."""

    rows: int
    auc: float
    auc_ci_low: float
    auc_ci_high: float
    baselines: dict[str, float]  # name: pooled AUC
    blend_auc: float | None
    oracle_auc: float | None  # None without the demo's true probabilities
    # every other architecture of a run of several (03 --arch): name: its pooled AUC
    members: dict[str, float]
    lift: dict[str, float]  # the model's AUC minus each baseline's
    fold_aucs: list[float]
    auc_fold_mean: float
    auc_fold_std: float | None  # over folds (n - 1); None with one fold
    # what the run submits, as 04 streamed it: the blend where every fold streamed one
    submitted: str = MODEL
    blend: dict[int, dict] = field(default_factory=dict)  # fold: BlendChoice as a dict
    no_blend: list[str] = field(default_factory=list)  # why a fold has no blend
    # the trees' permutation importance on the inner splits: name: (mean AUC lost, spread)
    tree_importance: dict[str, tuple[float, float]] = field(default_factory=dict)
    # the settings 04 fitted the trees with (its stream_summary's trees_config); None: 04
    # ran with --no-trees, and the report has no trees or blend
    trees_config: dict | None = None
    folds: list[int] = field(default_factory=list)
    selection: str = ""  # which checkpoint scored each fold, and what chose it
    report: str = ""  # report.md's path
    run: str = ""
