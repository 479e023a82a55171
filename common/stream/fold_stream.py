"""A fold's validation rows streamed through the emulated API (04_infer.py, locally): its
predictions and metric table, the run's out-of-fold file and its row of runs.csv, and
04's settings (InferConfig). The loop itself is common.stream.api_loop (the Kaggle
notebook runs the same one, common.stream.kaggle_notebook); what 04 does with a run's
folds is common.stream.infer."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from common.data.dataset import Dataset
from common.data.fold_data import Fold, FoldData, check_fold_fingerprint, load_fold_data
from common.data.past_features import attach_model_features, question_skills
from common.data.past_state import build_feature_snapshot
from common.device import check_device, device_option, resolve_device, threads_option
from common.files import atomic_file, json_values, write_json, write_run_record, write_text
from common.metrics import slice_table, student_and_part_slices
from common.model.checkpoint import load_model, read_checkpoint
from common.model.trees.blend_bundle import BlendBundle
from common.model.trees.blending import Member, fold_blend_bundle
from common.model.trees.boosting import TreesConfig
from common.options import above, at_least, option, progress_option
from common.runs.artefacts import inner_predictions, member_names
from common.runs.folders import commit
from common.runs.provenance import epochs_trained
from common.runs.table import append_run_row, config_columns
from common.stream.api_loop import stream_loop
from common.stream.blend_state import BlendState, feature_state_budget, member_column
from common.stream.emulator import Emulator, EmulatorConfig
from common.stream.kaggle_export import KaggleConfig
from common.stream.online import OnlineState, model_snapshot, run_states
from common.workspace import ModelFolder, Run


@dataclass
class InferConfig:
    fold: int = option(0, "the fold whose validation rows are streamed", range=at_least(0))
    full: bool = option(
        False,
        "export the run's full-data model (full/, from 03 --full-data) as the Kaggle bundle "
        "instead of streaming a fold (it has no validation rows)",
    )
    device: str = device_option()
    threads: int = threads_option()
    stream: EmulatorConfig = field(default_factory=EmulatorConfig)  # how groups are cut
    cache_students: int = option(
        4096,
        "students whose model cache stays in memory (LRU beyond; rebuilt from the ring)",
        range=at_least(1),
    )
    checkpoint: str = option(ModelFolder.BEST, "file in the run's fold{k}/")
    progress: bool = progress_option()
    # past it the run stops with StateMemoryError rather than being killed by the OS
    max_state_memory: float | None = option(
        None,
        "the online state's budget (student rings + cache pool): the cache pool shrinks to "
        "fit it, and a student who would not fit stops the run with a message (the total is "
        "in stream_summary.json; unbounded by default, 9 GB with --competition)",
        metavar="GB",
        range=above(0),
    )

    trees: bool = option(
        True,
        "fit the trees (boosted trees over past-event features) on the fold's training rows, "
        "choose the blend's weight on 03's inner split, and stream and submit the blend (off: "
        "the model alone, and 05 reports no trees or blend)",
    )
    # the trees' settings; its fields' flags are its own (--boost-rounds, ...)
    trees_config: TreesConfig = field(default_factory=TreesConfig)
    kaggle: KaggleConfig = field(default_factory=KaggleConfig)
    competition: bool = option(
        False, "run against the real riiideducation API (by default only where it is importable)"
    )
    model_dir: Path | None = option(
        None,
        "competition mode: the Kaggle dataset folder",
        metavar="DIR",
        shown_default="<kaggle-dir>/dataset",
    )

    test_csv: Path | None = option(
        None,
        "after the export, try the exported notebook locally: its cell runs on this test "
        "file (the competition's format, as example_test.csv) through a stand-in API, and "
        "writes <kaggle-dir>/trial/working/submission.csv",
        metavar="FILE",
    )

    def __post_init__(self) -> None:
        check_device(self.device)
        if self.test_csv is not None and not self.kaggle.export:
            raise ValueError("--test-csv tries the export: drop --no-export")
        several = self.fold == "all" or (isinstance(self.fold, tuple) and len(self.fold) > 1)
        if self.test_csv is not None and several and not self.full:
            raise ValueError(
                "--test-csv tries the export of one model, and several folds export none: "
                "give one --fold"
            )
        if self.full and self.fold != 0:  # a fold given (a --fold value is a tuple)
            raise ValueError(
                "--full exports the full-data model (full/, no fold): drop --fold, or drop "
                "--full to stream a fold"
            )

    @property
    def max_state_bytes(self) -> int | None:
        return None if self.max_state_memory is None else int(self.max_state_memory * 1e9)


SUBMISSION, MODEL_ALONE = "submission", "model"  # stream_metrics' scorers


def stream_metrics(results: pd.DataFrame, parts: np.ndarray) -> pd.DataFrame:
    """AUC overall, for new and continuing students, and by part (1-7): of what is
    submitted (`auc`: the blend where the run has trees) and of the model alone
    (`auc_model`)."""
    part = parts[np.clip(results["content_id"].to_numpy(), 0, len(parts) - 1)]
    slices = student_and_part_slices(results["new_student"].to_numpy(), part, range(1, 8))
    scores = {SUBMISSION: results["prediction"]}
    scores[MODEL_ALONE] = results.get("model_prediction", results["prediction"])
    table = slice_table(results["answered_correctly"].to_numpy(), scores, slices)
    names = {"all": "{}", "student": "{} students", "part": "part {}"}
    pairs = table[["slice", "value"]].itertuples(index=False)
    return pd.DataFrame(
        {
            "slice": [names[k].format(v) for k, v in pairs],
            "rows": table["rows"],
            "auc": table[f"auc_{SUBMISSION}"],
            "auc_model": table[f"auc_{MODEL_ALONE}"],
            "share_correct": table["share_correct"],
        }
    )


def member_models(folder: ModelFolder, name: str, device) -> dict:
    """The run's other architectures (03 --arch beyond the first, each in its folder
    inside the fold's: common.runs.artefacts.member_names), by name: (model, checkpoint)
    of each one's `name` checkpoint."""
    others = {}
    for other in member_names(folder, name):
        path = folder.member(other).checkpoint(name)
        model, other_checkpoint = load_model(path, device)
        other_checkpoint["path"] = str(path)
        others[other] = (model, other_checkpoint)
    return others


def fold_state(
    folder: ModelFolder,
    config: InferConfig,
    model,
    checkpoint: dict,
    dataset: Dataset,
    data: FoldData,
    others: dict | None = None,
) -> OnlineState | BlendState:
    """The state at the start of the fold's stream: every student's training questions, for
    the model (and each other architecture of `others`, name: (model, checkpoint)) and,
    unless --no-trees, for the trees' features, with the fold's trees and blend weights
    (common.model.trees.blending.fold_blend_bundle; the state holds them as `bundle`). The
    model's state is sized first: a state budget too small is refused before the trees
    are fitted. The snapshots are dropped on return."""
    others = others or {}
    users = dataset.arrays.users
    skill = question_skills(dataset.questions, dataset.n_questions)
    models = [model] + [m for m, _ in others.values()]
    model_reads = any(m.config.past_features != "none" for m in models)
    if model_reads:  # the snapshot carries them for the model's cache builds
        attach_model_features(data.sequences, skill)
    device = checkpoint["device"]
    snapshot = model_snapshot(model, data.sequences, users, data.train_length, device)
    features = None
    if config.trees or model_reads:
        features = build_feature_snapshot(data.sequences, users, data.train_length)
    snapshot_of = partial(
        model_snapshot, sequences=data.sequences, users=users, length=data.train_length,
        device=device,
    )  # fmt: skip
    streamed = {name: (m, partial(snapshot_of, m)) for name, (m, _) in others.items()}
    model_state, states = run_states(
        model, snapshot, streamed, dataset.parts, device, config.cache_students,
        config.max_state_bytes, feature_state_budget(features) if features else 0,
    )  # fmt: skip
    del snapshot
    if features is None:
        return model_state
    bundle = None
    if config.trees:
        primary = checkpoint["arch"]
        members = tuple(
            Member(name, inner_predictions(folder.member(name)), other_checkpoint.get("epoch"))
            for name, (_, other_checkpoint) in others.items()
        )
        bundle = fold_blend_bundle(
            inner_predictions(folder), data.fold, dataset, checkpoint.get("epoch"),
            config.trees_config, members, primary,
        )  # fmt: skip
    return BlendState(
        model_state, bundle, dataset.parts, skill, features, record=True, others=states,
        primary=checkpoint["arch"],
    )  # fmt: skip


def run_emulated(run: Run, config: InferConfig) -> dict:
    """Stream fold `config.fold`'s validation rows (from the workspace's data/ and folds/)
    through the emulator with the run's checkpoint, and with the fold's trees unless
    --no-trees; write the fold's outputs (the trees and the blend's weight
    beside the checkpoint) and a row of output/runs.csv. The run's oof.parquet is its
    caller's (common.stream.infer.stream_folds)."""
    begin = time.perf_counter()
    folder = run.fold(config.fold)
    device = resolve_device(config.device)
    model, checkpoint = load_model(folder.checkpoint(config.checkpoint), device)
    checkpoint["path"], checkpoint["device"] = str(folder.checkpoint(config.checkpoint)), device
    fold = Fold.of(run.workspace, config.fold)  # read and fingerprinted once
    check_fold_fingerprint(checkpoint.get("fold_fingerprint"), fold, checkpoint["path"])
    dataset = Dataset.of(run.workspace)
    data = load_fold_data(run.workspace, config.fold)
    others = member_models(folder, config.checkpoint, device)
    for _, other in others.values():
        check_fold_fingerprint(other.get("fold_fingerprint"), fold, other["path"])
    state = fold_state(folder, config, model, checkpoint, dataset, data, others)
    arrays, parts = dataset.arrays, dataset.parts
    del dataset, data
    env = Emulator.from_fold(arrays, fold, config.stream)
    timing = stream_loop(env, state, config.progress)
    results = stream_results(env, state, arrays, fold)
    table = stream_metrics(results, parts)
    bundle = getattr(state, "bundle", None)
    summary = stream_summary(config, checkpoint, state, table, bundle, timing)
    # the model's architecture, and each one streamed with its checkpoint (05 scores each
    # one's column of the predictions)
    summary["arch"] = checkpoint["arch"]
    summary["members"] = {checkpoint["arch"]: checkpoint["path"]}
    summary["members"].update({name: c["path"] for name, (_, c) in others.items()})
    if bundle is not None:
        bundle.save(folder)
    else:  # --no-trees: an earlier stream's trees and weight must not ship with this one
        for name in ModelFolder.BLEND_FILES:
            folder.file(name).unlink(missing_ok=True)
    write_outputs(folder, results, table, summary)
    append_run_row(run.workspace, stream_row(run, checkpoint, summary, begin))
    write_run_record(folder.record("infer"), asdict(config))
    return summary


def stream_results(env: Emulator, state, arrays, fold: Fold) -> pd.DataFrame:
    """The emulator's rows (what was submitted in `prediction`), whether each student is
    new, and with a blend the model's and the trees' own probabilities."""
    results = env.results()
    student = np.searchsorted(arrays.offsets, results["global_row"].to_numpy(), side="right") - 1
    results["new_student"] = fold.user_cut[student] == 0
    if getattr(state, "bundle", None) is not None:
        parts = state.parts_of_predictions().set_index("row_id")
        columns = ["model_prediction", "trees_prediction"]
        columns += [member_column(name) for name in state.others]
        for column in columns:
            results[column] = parts[column].reindex(results["row_id"]).to_numpy()
    return results


def stream_summary(
    config: InferConfig,
    checkpoint: dict,
    state,
    table: pd.DataFrame,
    bundle: BlendBundle | None,
    timing: dict,
) -> dict:
    """stream_summary.json: the checkpoint and what chose it, the fold, the AUCs of what
    was submitted and of the model alone, the blend, timing and the state's memory."""
    model_state = state.model_state if isinstance(state, BlendState) else state
    return {
        "fold": config.fold,
        "checkpoint": checkpoint["path"],
        "checkpoint_digest": checkpoint.get("model_digest"),
        "checkpoint_epoch": checkpoint.get("epoch"),
        # how the checkpoint was chosen: "inner" (an inner split of the training
        # students), "fold" (these very rows), or None (a checkpoint named by hand)
        "checkpoint_selected_on": checkpoint.get("selected_on")
        if config.checkpoint == ModelFolder.BEST
        else None,
        "fold_fingerprint": checkpoint.get("fold_fingerprint"),
        "auc": float(table.loc[0, "auc"]),
        "model_auc": float(table.loc[0, "auc_model"]),
        "submitted": "blend" if bundle is not None and bundle.blended else "model",
        "blend": None if bundle is None else bundle.record | blend_parameters(bundle),
        **timing,
        "state_bytes_per_student": model_state.state_bytes_per_student(),
        "state_bytes": state.state_bytes(),
        "cache_students": config.cache_students,
        "cache_rebuilds": model_state.rebuilds,
        "cache_evictions": model_state.pool.evictions,
        "device": str(model_state.device),
        "torch_threads": torch.get_num_threads(),
        "stream_config": json_values(asdict(config.stream)),
        "trees_config": json_values(asdict(config.trees_config)) if config.trees else None,
    }


def blend_parameters(bundle: BlendBundle) -> dict:
    """What the summary records of the blend: its weight, or a stacked blend's weights and
    intercept."""
    if bundle.weights is None:
        return {"weight": bundle.weight}
    return {"weight": None, "weights": bundle.weights, "intercept": bundle.intercept}


def streamed_already(run: Run, config: InferConfig) -> bool:
    """Whether fold `config.fold` was streamed with this checkpoint (same weights digest)
    and these stream settings: `04 --fold all` then keeps its outputs."""
    folder = run.fold(config.fold)
    if not folder.stream_summary.exists() or not folder.stream_predictions.exists():
        return False
    summary = json.loads(folder.stream_summary.read_text())
    checkpoint = read_checkpoint(folder.checkpoint(config.checkpoint))
    digest = checkpoint.get("model_digest")
    same_model = digest is not None and summary.get("checkpoint_digest") == digest
    trees = json_values(asdict(config.trees_config)) if config.trees else None
    same_trees = summary.get("trees_config") == trees
    return (
        same_model
        and same_trees
        and summary.get("stream_config") == json_values(asdict(config.stream))
    )


def stream_row(run: Run, checkpoint: dict, summary: dict, begin: float) -> dict:
    """The fold's stream as a row of output/runs.csv."""
    epoch = checkpoint.get("epoch")
    history = {r["epoch"]: r for r in checkpoint.get("history", [])}
    return {
        "run": run.name,
        "stage": "stream",
        "folds": str(summary["fold"]),
        "commit": commit(),
        **config_columns(checkpoint.get("train_config", {})),
        "epochs": epochs_trained(run, summary["fold"]),
        "batch_size": checkpoint.get("resolved", {}).get("batch_size"),
        "best_epoch": epoch,
        "selected_on": summary["checkpoint_selected_on"] or "by hand",
        "tf_auc": history.get(epoch, {}).get("fold_auc"),
        "stream_auc": summary["auc"],
        "model_auc": summary["model_auc"],
        "rows_per_s": summary["rows_per_s"],
        "wall_s": time.perf_counter() - begin,
    }


def write_outputs(
    folder: ModelFolder, results: pd.DataFrame, table: pd.DataFrame, summary: dict
) -> None:
    with atomic_file(folder.validation_predictions) as tmp:
        results[["row_id", "prediction"]].rename(
            columns={"prediction": "answered_correctly"}
        ).to_csv(tmp, index=False)
    with atomic_file(folder.stream_predictions) as tmp:
        results.to_parquet(tmp, index=False)
    with atomic_file(folder.stream_metrics_csv) as tmp:
        table.to_csv(tmp, index=False)
    what = {"blend": "the blend (submitted)", "model": "the model (submitted)"}
    lines = [
        f"| slice | rows | AUC of {what[summary['submitted']]} | AUC of the model alone "
        "| share correct |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.slice} | {r.rows:,} | {r.auc:.4f} | {r.auc_model:.4f} | {r.share_correct:.3f} |"
        for r in table.itertuples()
    ]
    lines += [
        "",
        f"{summary['rows']:,} question rows in {summary['groups']:,} groups, "
        f"{summary['seconds']:.1f} s, {summary['rows_per_s']:,.0f} rows/s "
        f"({summary['device']}, {summary['torch_threads']} threads); predicting alone "
        f"(without the API's own calls) {summary['predict_rows_per_s']:,.0f} rows/s; "
        f"{summary['cache_builds']:,} cache builds took {summary['build_seconds']:.1f} s "
        f"(without them {summary['rows_per_s_without_builds']:,.0f} rows/s)",
    ]
    write_text(folder.stream_metrics_md, "\n".join(lines) + "\n")
    write_json(folder.stream_summary, summary)
