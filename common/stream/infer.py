"""04_infer.py's logic: against the real API where `riiideducation` is importable (or
with --competition), run the exported bundle; otherwise stream the run's folds through the
emulated API (common.stream.fold_stream), keep its out-of-fold file whole, and export the
Kaggle bundle of the one fold streamed, or of the full-data model (--full)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

from common import cli
from common.data.api_file import check_api_file
from common.data.dataset import Dataset
from common.data.fold_data import fold_count
from common.device import use_threads
from common.errors import UserError
from common.files import check_writable
from common.model.trees.blending import full_blend_bundle
from common.runs.artefacts import fold_stacks, fold_weights
from common.runs.folders import choose_run, fold_lock
from common.runs.oof import write_oof
from common.runs.table import latest_run
from common.stream.fold_stream import InferConfig, run_emulated, streamed_already
from common.stream.kaggle_export import DATASET_SLUG, NO_OWNER, export_kaggle
from common.stream.kaggle_notebook import run_submission
from common.stream.trial import try_notebook
from common.workspace import Bundle, KaggleFolder, ModelFolder, Run, Workspace


def infer(config: InferConfig, workspace: Workspace, name: str | None) -> None:
    """What `04_infer.py` does with run `name` (None: the only run, or the latest
    trained) of the workspace."""
    use_threads(config.threads)
    if config.competition or importlib.util.find_spec("riiideducation") is not None:
        run_competition(config, workspace, name)
        return
    if config.test_csv is not None:  # the trial's file, checked before any work
        check_api_file(config.test_csv)
    if config.kaggle.export and config.kaggle.kaggle_dir is not None:
        KaggleFolder(config.kaggle.kaggle_dir)  # refuses a file where its folders go
    run = choose_run(workspace, name, latest_run(workspace))
    if config.full:  # nothing to stream: the full-data model has seen every student
        if not config.kaggle.export:
            raise UserError("--full exports the full-data model's bundle: drop --no-export")
        model = run.full.checkpoint(config.checkpoint)
        if not model.exists():  # before the trees are fitted beside it
            raise UserError(
                f"run {run.name} has no full-data model ({model}): train it with "
                f"03_train.py --run {run.name} --full-data, then run this again"
            )
        if config.trees:
            with fold_lock(run.full):  # one writer of full/, checked writable before the fit
                fit_full_bundle(config, run)
        export(replace(config, fold=0), run)
        return
    folds = stream_folds(config, run)
    if not config.kaggle.export:
        return
    if len(folds) > 1:
        print(
            "several folds: no Kaggle export (it ships one model: 04_infer.py --fold k, or "
            "--full after 03_train.py --full-data)"
        )
        return
    export(replace(config, fold=folds[0]), run)


def fit_full_bundle(config: InferConfig, run: Run) -> None:
    """The full-data model's trees (every question row) and the median of the folds'
    blend weights, written beside full/best.pt for the export."""
    dataset = Dataset.of(run.workspace)
    bundle = full_blend_bundle(fold_weights(run), dataset, config.trees_config, fold_stacks(run))
    bundle.save(run.full)
    weight = "none: the model alone" if bundle.weight is None else f"{bundle.weight:g}"
    if bundle.weights is not None:
        weight = ", ".join(f"{name} {w:+.3f}" for name, w in bundle.weights.items())
    print(
        f"full-data trees: {bundle.record['trees']['rounds']} rounds on "
        f"{bundle.record['trees']['train_rows']:,} rows; blend weight {weight} "
        f"({bundle.record['chosen_on'] or bundle.record['no_blend']})"
    )


def run_competition(config: InferConfig, workspace: Workspace, name: str | None) -> None:
    """The bundle (--model-dir, or the run's export) streamed through the real API."""
    if not isinstance(config.fold, int) and len(config.fold) != 1:
        raise UserError("the competition's API streams one model: give one --fold")
    fold = config.fold if isinstance(config.fold, int) else config.fold[0]
    if config.model_dir is not None:
        bundle = Bundle(config.model_dir)
    elif config.kaggle.kaggle_dir is not None:
        bundle = Bundle(KaggleFolder(config.kaggle.kaggle_dir).dataset)
    else:
        bundle = Bundle(choose_run(workspace, name, latest_run(workspace)).kaggle.dataset)
    run_submission(
        bundle.path,
        model=ModelFolder.name_of(fold, config.full),
        device=config.device,
        max_state_gb=config.max_state_memory,
        cache_students=config.cache_students,
    )


def stream_folds(config: InferConfig, run: Run) -> list[int]:
    """Stream each chosen fold (with several, a fold streamed already with this checkpoint
    and these settings is kept) and keep the run's oof.parquet whole (written here only,
    after each fold); the folds."""
    folds = cli.chosen_folds(config.fold, fold_count(run.workspace))
    untrained = [k for k in folds if not run.fold(k).checkpoint(config.checkpoint).exists()]
    if untrained and len(folds) > 1:  # before any fold streams (one fold: load_model says)
        raise UserError(
            f"run {run.name} has no {config.checkpoint} for fold(s) {untrained}: train "
            f"them (03_train.py --run {run.name} --fold ...) or name the folds to stream"
        )
    kept = False
    for k in folds:
        fold_config = replace(config, fold=k)
        # one writer of the fold (not 03 training it), checked writable before the trees
        with fold_lock(run.fold(k)):
            if len(folds) > 1 and streamed_already(run, fold_config):
                print(f"fold {k}: streamed already with this checkpoint and these settings (kept)")
                kept = True
                continue
            summary = run_emulated(run, fold_config)
        write_oof(run)  # after each fold, from the folds on disk (kept ones included)
        folder = run.fold(k)
        print(folder.stream_metrics_md.read_text())
        print(json.dumps({k: summary[k] for k in ("auc", "rows", "groups", "rows_per_s")}))
        print(f"wrote {folder.validation_predictions}")
    if kept:  # rebuilt from the folds on disk (a kept fold's rows included)
        write_oof(run)
    print(f"out-of-fold predictions of run {run.name}: {run.oof}")
    return folds


def export(config: InferConfig, run: Run) -> None:
    """The Kaggle dataset and notebook of fold `config.fold`'s (or the full-data) model."""
    source = run.model(config.fold, config.full)
    kaggle = config.kaggle
    folder = KaggleFolder(kaggle.kaggle_dir) if kaggle.kaggle_dir else run.kaggle
    ids = kaggle.ids()
    check_writable(folder.path)  # before every student's state is built
    dataset, kernel = export_kaggle(run.workspace, source, config.checkpoint, folder, ids)
    if config.test_csv is not None:
        submission = try_notebook(folder, config.test_csv, ids.slug)
        print(f"the exported notebook ran on {config.test_csv}: {submission}")
    print(
        f"Kaggle dataset in {dataset}, notebook in {kernel}; submit with\n"
        f"  kaggle datasets create -p {dataset} --dir-mode zip   "
        f"(later: kaggle datasets version -p {dataset} --dir-mode zip -m '<what changed>')\n"
        f"  kaggle kernels push -p {kernel}"
    )
    if not ids.owner_found:
        print(
            f"note: no Kaggle user name was found ($KAGGLE_USERNAME, ~/.kaggle/kaggle.json), so "
            f"{dataset}/dataset-metadata.json and the notebook name the owner {NO_OWNER}: "
            f"export again with --kaggle-dataset-id <you>/{DATASET_SLUG} before pushing"
        )
    if not kaggle.kaggle_docker_image:
        print(
            "note: the notebook runs on Kaggle's latest image unless pinned, and there "
            "riiideducation (built for Python 3.7) does not import: pin it to the "
            "competition's original environment in the notebook's settings, or export with "
            "--kaggle-docker-image"
        )
