"""04_infer.py's logic: the streaming loop over an API (emulated or the real one), the
submission and metric table, and the Kaggle-ready bundle.

Kaggle bundle (written into --kaggle-dir, by default the output dir itself):
    dataset-metadata.json     for `kaggle datasets create -p <dir> --dir-mode zip`
    code/                     the project package and 04_infer.py (nothing to install)
    fold{k}/best.pt           the model, rebuilt from the checkpoint alone
    state/snapshot.npz        every training student's last receptive_field questions (all of
                              train.csv: in the competition a test student's whole
                              train.csv history precedes the test)
    state/questions.parquet   question id -> part
    KAGGLE.md                 the notebook cell that runs the submission
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from common.checkpoint import load_model
from common.cli import option, progress_option
from common.data import question_parts
from common.dataset import Dataset
from common.device import device_option, resolve_device
from common.emulator import Emulator, EmulatorConfig
from common.files import atomic_file, write_json, write_run_record, write_text
from common.folds import Fold, check_fold_fingerprint, load_fold_data
from common.layout import STREAM_PREDICTIONS, STREAM_SUMMARY, fold_dir, model_dir, state_dir
from common.metrics import slice_table, student_and_part_slices
from common.online import OnlineState, Snapshot, build_snapshot

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent


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
        "refuse, with a message, to let the online state (student rings + cache pool) grow "
        "past this many GB (the total is in stream_summary.json)",
        metavar="GB",
    )

    @property
    def max_state_bytes(self) -> int | None:
        return None if self.max_state_memory is None else int(self.max_state_memory * 1e9)


def stream_loop(env, state: OnlineState, progress: bool = True) -> dict:
    """Run the API loop: predict each group, hand predictions back. Returns counts and
    timing: the whole loop, and the part spent predicting (everything but the API's own
    calls, iter_test and env.predict)."""
    rows = groups = 0
    predicting = 0.0
    begin = time.perf_counter()
    bar = tqdm(env.iter_test(), desc="groups", unit=" groups", disable=not progress)
    for test_df, sample in bar:
        start = time.perf_counter()
        probability = state.predict(test_df)
        question = test_df["content_type_id"].to_numpy() == 0
        row_id = test_df["row_id"].to_numpy()[question]
        wanted = sample["row_id"].to_numpy()
        if not np.array_equal(wanted, row_id):  # the API's order is the group's order
            probability = pd.Series(probability, index=row_id).reindex(wanted).to_numpy()
        sample["answered_correctly"] = probability  # copy-on-write: the API's frame is kept
        predicting += time.perf_counter() - start
        env.predict(sample)
        rows += len(sample)
        groups += 1
        if progress:
            bar.set_postfix(rows=rows, refresh=False)
    seconds = time.perf_counter() - begin
    return {
        "rows": rows,
        "groups": groups,
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "predict_seconds": predicting,
        "predict_rows_per_s": rows / predicting if predicting else float("nan"),
    }


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


# ---------------------------------------------------------------------------------------
# Kaggle bundle and the competition's own API


def full_snapshot(dataset: Dataset, keep_last: int) -> Snapshot:
    """Every student's last `keep_last` questions: the state the hidden test starts from."""
    sequences = dataset.sequences
    return build_snapshot(sequences, dataset.arrays.users, sequences.lengths(), keep_last)


def export_kaggle(output_dir: Path, config: InferConfig, dest: Path, dataset_id: str) -> Path:
    """Write the offline bundle a Kaggle notebook needs (see the module docstring): the
    checkpoint 04 streamed (config.checkpoint of fold{k}/), or the full-data model's
    best.pt (config.full), as the bundle's <fold{k} or full>/best.pt."""
    dest.mkdir(parents=True, exist_ok=True)
    checkpoint = model_dir(output_dir, config.fold, config.full) / config.checkpoint
    model, _ = load_model(checkpoint, "cpu")
    bundled = model_dir(dest, config.fold, config.full) / "best.pt"
    if checkpoint.resolve() != bundled.resolve():
        with atomic_file(bundled) as tmp:
            shutil.copyfile(checkpoint, tmp)
    dataset = Dataset.load(output_dir)
    full_snapshot(dataset, model.config.receptive_field).save(state_dir(dest) / "snapshot.npz")
    with atomic_file(state_dir(dest) / "questions.parquet") as tmp:
        dataset.questions.to_parquet(tmp, index=False)
    del dataset
    code = dest / "code"
    staging = dest / ".code.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(PACKAGE_DIR, staging / "common", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO_DIR / "04_infer.py", staging / "04_infer.py")
    shutil.rmtree(code, ignore_errors=True)
    os.replace(staging, code)
    write_json(
        dest / "dataset-metadata.json",
        {"title": "Riiid SAINT model", "id": dataset_id, "licenses": [{"name": "CC0-1.0"}]},
    )
    which = "--full" if config.full else f"--fold {config.fold}"
    write_text(dest / "KAGGLE.md", KAGGLE_NOTE.format(which=which))
    return dest


KAGGLE_NOTE = """# Running the submission in a Kaggle notebook

Add this dataset to a notebook of the Riiid! Answer Correctness Prediction competition
(internet off), then run one cell:

    !python /kaggle/input/<this-dataset>/code/04_infer.py --competition \\
        --model-dir /kaggle/input/<this-dataset> {which}

04_infer.py imports the competition's `riiideducation` module, streams every test group
through the same online state as the local emulator, and the API writes submission.csv.
"""


def run_competition(bundle: Path, config: InferConfig) -> dict:
    """The same loop against the real `riiideducation` API (in a Kaggle notebook), with
    the bundle's model (<fold{k} or full>/best.pt) and state."""
    import riiideducation  # only present in the competition's notebooks

    device = resolve_device(config.device)
    model, _ = load_model(model_dir(bundle, config.fold, config.full) / "best.pt", device)
    snapshot = Snapshot.load(state_dir(bundle) / "snapshot.npz")
    parts = question_parts(pd.read_parquet(state_dir(bundle) / "questions.parquet"))
    state = OnlineState(
        model, parts, device, snapshot, config.cache_students, config.max_state_bytes
    )
    env = riiideducation.make_env()
    timing = stream_loop(env, state, progress=False)
    print(json.dumps(timing))
    return timing
