"""04_infer.py's logic: a fold's validation rows streamed through the emulated API, the
submission and metric table. The loop itself is common.api_loop (the Kaggle notebook runs
the same one, common.kaggle_notebook); the Kaggle export is common.kaggle_export."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from common.api_loop import stream_loop
from common.checkpoint import load_model
from common.dataset import Dataset
from common.device import device_option, resolve_device
from common.emulator import Emulator, EmulatorConfig
from common.files import atomic_file, write_json, write_run_record, write_text
from common.folds import Fold, check_fold_fingerprint, load_fold_data
from common.layout import STREAM_PREDICTIONS, STREAM_SUMMARY, fold_dir
from common.metrics import slice_table, student_and_part_slices
from common.online import OnlineState, build_snapshot
from common.options import option, progress_option


@dataclass
class InferConfig:
    fold: int = option(0, "the fold whose validation rows are streamed")
    full: bool = option(
        False,
        "export the full-data model (output/full/, from 03 --full-data) as the Kaggle bundle "
        "instead of streaming a fold (it has no validation rows)",
    )
    device: str = device_option()
    stream: EmulatorConfig = field(default_factory=EmulatorConfig)  # how groups are cut
    cache_students: int = option(
        4096, "students whose model cache stays in memory (LRU beyond; rebuilt from the ring)"
    )
    checkpoint: str = option("best.pt", "file in output/fold{k}/")
    progress: bool = progress_option()
    # past it the run stops with StateMemoryError rather than being killed by the OS
    max_state_memory: float | None = option(
        None,
        "the online state's budget (student rings + cache pool): the cache pool shrinks to "
        "fit it, and a student who would not fit stops the run with a message (the total is "
        "in stream_summary.json; unbounded by default, 9 GB with --competition)",
        metavar="GB",
    )

    @property
    def max_state_bytes(self) -> int | None:
        return None if self.max_state_memory is None else int(self.max_state_memory * 1e9)


def stream_metrics(results: pd.DataFrame, parts: np.ndarray) -> pd.DataFrame:
    """AUC overall, for new and continuing students, and by part (1-7)."""
    part = parts[np.clip(results["content_id"].to_numpy(), 0, len(parts) - 1)]
    slices = student_and_part_slices(results["new_student"].to_numpy(), part, range(1, 8))
    table = slice_table(
        results["answered_correctly"].to_numpy(), {"model": results["prediction"]}, slices
    )
    names = {"all": "{}", "student": "{} students", "part": "part {}"}
    pairs = table[["slice", "value"]].itertuples(index=False)
    return pd.DataFrame(
        {
            "slice": [names[k].format(v) for k, v in pairs],
            "rows": table["rows"],
            "auc": table["auc_model"],
            "share_correct": table["share_correct"],
        }
    )


def fold_state(
    output_dir: Path, config: InferConfig, model, device: torch.device, dataset: Dataset
) -> OnlineState:
    """The online state at the start of fold `config.fold`'s stream: every student's
    training questions (the fold's snapshot is dropped on return)."""
    data = load_fold_data(output_dir, config.fold, dataset=dataset)
    snapshot = build_snapshot(
        data.sequences, dataset.arrays.users, data.train_length, model.config.receptive_field
    )
    return OnlineState(
        model, dataset.parts, device, snapshot, config.cache_students, config.max_state_bytes
    )


def run_emulated(output_dir: Path, config: InferConfig) -> dict:
    """Stream fold `config.fold`'s validation rows through the emulator."""
    run_dir = fold_dir(output_dir, config.fold)
    device = resolve_device(config.device)
    model, checkpoint = load_model(run_dir / config.checkpoint, device)
    fingerprint = checkpoint.get("fold_fingerprint")
    check_fold_fingerprint(fingerprint, output_dir, config.fold, str(run_dir / config.checkpoint))
    dataset = Dataset.load(output_dir)
    fold = Fold.load(output_dir, config.fold)
    state = fold_state(output_dir, config, model, device, dataset)
    arrays, parts = dataset.arrays, dataset.parts
    del dataset  # the sequences are not needed while streaming
    env = Emulator.from_fold(arrays, fold, config.stream)
    timing = stream_loop(env, state, config.progress)
    results = env.results()
    student = np.searchsorted(arrays.offsets, results["global_row"].to_numpy(), side="right") - 1
    results["new_student"] = fold.user_cut[student] == 0
    table = stream_metrics(results, parts)
    summary = {
        "fold": config.fold,
        "checkpoint": str(run_dir / config.checkpoint),
        "checkpoint_epoch": checkpoint.get("epoch"),
        # how the checkpoint was chosen: "inner" (an inner split of the training
        # students), "fold" (these very rows), or None (a checkpoint named by hand)
        "checkpoint_selected_on": checkpoint.get("selected_on")
        if config.checkpoint == "best.pt"
        else None,
        "fold_fingerprint": fingerprint,
        "auc": float(table.loc[0, "auc"]),
        **timing,
        "state_bytes_per_student": state.state_bytes_per_student(),
        "state_bytes": state.state_bytes(),
        "cache_students": config.cache_students,
        "cache_builds": state.builds,
        "cache_rebuilds": state.rebuilds,
        "cache_evictions": state.pool.evictions,
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
    }
    write_outputs(run_dir, results, table, summary)
    write_run_record(run_dir, "infer", asdict(config))
    return summary


def write_outputs(run_dir: Path, results: pd.DataFrame, table: pd.DataFrame, summary: dict):
    with atomic_file(run_dir / "submission.csv") as tmp:
        results[["row_id", "prediction"]].rename(
            columns={"prediction": "answered_correctly"}
        ).to_csv(tmp, index=False)
    with atomic_file(run_dir / STREAM_PREDICTIONS) as tmp:
        results.to_parquet(tmp, index=False)
    with atomic_file(run_dir / "stream_metrics.csv") as tmp:
        table.to_csv(tmp, index=False)
    lines = ["| slice | rows | AUC | share correct |", "|---|---:|---:|---:|"]
    lines += [
        f"| {r.slice} | {r.rows:,} | {r.auc:.4f} | {r.share_correct:.3f} |"
        for r in table.itertuples()
    ]
    lines += [
        "",
        f"{summary['rows']:,} question rows in {summary['groups']:,} groups, "
        f"{summary['seconds']:.1f} s, {summary['rows_per_s']:,.0f} rows/s "
        f"({summary['device']}, {summary['torch_threads']} threads); predicting alone "
        f"(without the API's own calls) {summary['predict_rows_per_s']:,.0f} rows/s",
    ]
    write_text(run_dir / "stream_metrics.md", "\n".join(lines) + "\n")
    write_json(run_dir / STREAM_SUMMARY, summary)
