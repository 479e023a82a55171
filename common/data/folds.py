"""Stage 2: cross-validation folds, which rows train and which rows form the validation
stream, written to <output-dir>/folds/ (reading a fold back: common.data.fold_data).

Every strategy gives, per fold, each student a cut: rows before it train, rows from it
on are that student's validation tail (a cut at 0 makes the student new to the model; a
cut at the student's row count leaves them wholly in training). Cuts fall on container
starts, because the test API hands a task container over whole. The validation stream
interleaves students by virtual time: each student's timeline is shifted by a random
offset in [0, max_ts - student_max_ts] (tito's scheme from the competition's
discussion), and rows are ordered by shifted timestamp.

Strategies:
    user          students shuffled into n folds; a fold-k student becomes new with
                  probability new_share, else is cut at a random container start
    last-n        students with at least n rows, shuffled into n folds; the last n rows
                  (rounded back to a container start) are validation (the SAINT review's
                  setup)
    virtual-time  tito's scheme: the last valid_share of all rows by virtual time is
                  validation; fold k draws its own offsets
    unseen        students shuffled into n folds; validation students are wholly new
                  (the protocol of knowledge-tracing papers)
    dataset       a dataset's own disjoint user folds (input-dir/user_folds.csv:
                  user_id,fold), validation students wholly new

Artifact (<output-dir>/folds/): folds.json (config and per-fold statistics) and
fold{k}.npz with user_cut (n_students,) row index within each student, virtual_offset
(n_students,) ms, and stream_index (n_valid_rows,) global row indices in stream order;
and row_folds.csv, the same folds for any other pipeline (`write_row_folds`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from common.data.arrays import TrainArrays, container_starts, data_fingerprint
from common.data.fold_data import Fold
from common.data.schema import QUESTION, InputError
from common.errors import UserError
from common.files import atomic_dir, write_run_record
from common.options import at_least, between, option
from common.workspace import FoldsFolder, Workspace

STRATEGIES = ("user", "last-n", "virtual-time", "unseen", "dataset")


@dataclass
class FoldConfig:
    n_folds: int = option(5, "folds", range=at_least(1))
    seed: int = option(0, "seed of the split", range=at_least(0))
    strategy: str = option(
        "user", "how validation rows are chosen (see common/data/folds.py)", choices=STRATEGIES
    )
    # the competition's hidden test mixed new students with continuing ones
    new_share: float = option(
        0.25, "user strategy: share of validation students that are new", range=between(0, 1)
    )
    last_n: int = option(100, "last-n strategy: validation rows per student", range=at_least(1))
    # 2.5M of 101M rows in tito's CV
    valid_share: float = option(
        0.025,
        "virtual-time strategy: share of all rows in the validation tail",
        range=between(0, 1, low_open=True, high_open=True),
    )

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.n_folds < 1:
            raise ValueError(f"n_folds must be >= 1, got {self.n_folds}")


# ---------------------------------------------------------------------------------------


def _student_offsets(arrays: TrainArrays, rng: np.random.Generator) -> np.ndarray:
    """Random virtual start per student in [0, max_ts - student_max_ts]."""
    last_ts = np.asarray(arrays["timestamp"][arrays.offsets[1:] - 1], dtype=np.int64)
    span = int(last_ts.max()) if len(last_ts) else 0
    return (rng.random(arrays.n_students) * (span - last_ts + 1)).astype(np.int64)


def _container_index(arrays: TrainArrays) -> tuple[np.ndarray, np.ndarray]:
    """Global row indices of container starts, and each student's first entry in them."""
    starts = np.flatnonzero(container_starts(arrays))
    first = np.searchsorted(starts, arrays.offsets)
    return starts, first


def _random_container_cut(
    arrays: TrainArrays, students: np.ndarray, rng: np.random.Generator, new_share: float
) -> np.ndarray:
    """Row cut (within student) at a random container start other than the first, or 0
    with probability new_share (or when the student has one container)."""
    starts, first = _container_index(arrays)
    n_containers = first[students + 1] - first[students]
    pick = 1 + np.floor(rng.random(len(students)) * (n_containers - 1)).astype(np.int64)
    cut = starts[first[students] + np.minimum(pick, n_containers - 1)] - arrays.offsets[students]
    new = (rng.random(len(students)) < new_share) | (n_containers <= 1)
    return np.where(new, 0, cut)


def _align_to_container(arrays: TrainArrays, students: np.ndarray, row_cut: np.ndarray):
    """Move a within-student cut back to the start of the container holding it."""
    starts, _ = _container_index(arrays)
    global_cut = arrays.offsets[students] + row_cut
    aligned = starts[np.searchsorted(starts, global_cut, side="right") - 1]
    return aligned - arrays.offsets[students]


def _split_students(candidates: np.ndarray, n_folds: int, rng: np.random.Generator):
    if n_folds > len(candidates):
        raise UserError(
            f"--n-folds {n_folds}: only {len(candidates):,} students to split into folds "
            f"(each fold validates some): at most {len(candidates):,}"
        )
    shuffled = rng.permutation(candidates)
    return [shuffled[k::n_folds] for k in range(n_folds)]


def _fold_cuts(arrays: TrainArrays, config: FoldConfig, input_dir: Path | None) -> list:
    """Per fold, (user_cut, virtual_offset) arrays."""
    lengths = np.diff(arrays.offsets)
    all_students = np.arange(arrays.n_students)
    rng = np.random.default_rng(config.seed)
    result = []
    if config.strategy == "virtual-time":
        for k in range(config.n_folds):
            fold_rng = np.random.default_rng([config.seed, k])
            offset = _student_offsets(arrays, fold_rng)
            virtual = np.repeat(offset, lengths) + np.asarray(arrays["timestamp"])
            n_valid = round(config.valid_share * arrays.n_rows)
            if n_valid == 0:
                threshold = np.iinfo(np.int64).max
            else:
                threshold = np.partition(virtual, arrays.n_rows - n_valid)[arrays.n_rows - n_valid]
            # Within a student virtual time is non-decreasing, so the valid rows are a tail,
            # and rows of one container share a timestamp, so whole containers move.
            below = np.add.reduceat(virtual < threshold, arrays.offsets[:-1])
            result.append((below.astype(np.int64), offset))
        return result
    offset = _student_offsets(arrays, rng)
    if config.strategy == "dataset":
        groups = _dataset_groups(arrays, config, input_dir)
    elif config.strategy == "last-n":
        groups = _split_students(all_students[lengths >= config.last_n], config.n_folds, rng)
    else:
        groups = _split_students(all_students, config.n_folds, rng)
    for students in groups:
        cut = lengths.astype(np.int64).copy()
        if config.strategy in ("unseen", "dataset"):
            cut[students] = 0
        elif config.strategy == "last-n":
            cut[students] = _align_to_container(arrays, students, lengths[students] - config.last_n)
        else:
            cut[students] = _random_container_cut(arrays, students, rng, config.new_share)
        result.append((cut, offset))
    return result


def _dataset_groups(arrays: TrainArrays, config: FoldConfig, input_dir: Path | None):
    path = Path(input_dir or "input") / "user_folds.csv"
    if not path.exists():
        raise InputError(str(path), "a user_folds.csv (user_id,fold) for --strategy dataset")
    table = pd.read_csv(path)
    for column in ("user_id", "fold"):
        if column not in table.columns:
            raise InputError(str(path), "columns user_id,fold", 0, column, "<missing>")
    student = pd.Series(np.arange(arrays.n_students), index=np.asarray(arrays.users))
    known = table["user_id"].isin(student.index).to_numpy()
    if not known.all():
        i = int(np.argmin(known))
        raise InputError(
            str(path), "a user_id present in train.csv", i + 1, "user_id", table["user_id"][i]
        )
    folds = sorted(table["fold"].unique())
    if folds != list(range(config.n_folds)):
        raise InputError(
            str(path),
            f"folds 0..{config.n_folds - 1} (--n-folds {config.n_folds})",
            None,
            "fold",
            folds,
        )
    ids = student[table["user_id"]].to_numpy()
    return [np.sort(ids[table["fold"].to_numpy() == k]) for k in range(config.n_folds)]


def _stream_index(arrays: TrainArrays, cut: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Global indices of the validation rows, ordered by virtual time (ties: student,
    then file order)."""
    lengths = np.diff(arrays.offsets)
    n_valid = lengths - cut
    student = np.repeat(np.arange(arrays.n_students), n_valid)
    within = np.arange(n_valid.sum()) - np.repeat(np.cumsum(n_valid) - n_valid, n_valid)
    rows = arrays.offsets[student] + cut[student] + within
    virtual = offset[student] + np.asarray(arrays["timestamp"])[rows]
    return rows[np.lexsort((rows, virtual))]


# ---------------------------------------------------------------------------------------
# row_folds.csv: the folds as row ids

ROLES = ("train", "history", "validation")
ROW_CHUNK = 4_000_000  # rows per written block: memory stays flat on the real 101M rows


def write_row_folds(path: Path, arrays: TrainArrays, folds: list[Fold]) -> None:
    """row_folds.csv (row_id, fold, role), every train row, in file order.

    When each student validates in one fold at most (every strategy but virtual-time),
    each row has one line: a fold-k student's rows are `validation` from the cut on and
    `history` before it (trained on in every fold; fold k's stream starts after them);
    other rows are `train` with fold -1. Otherwise (virtual-time) a row has a `validation`
    line per fold it validates in, and rows no fold validates one `train` line (fold -1).
    Either way fold k trains on every row but its own `validation` lines."""
    lengths = np.diff(arrays.offsets)
    validating = [f.user_cut < lengths for f in folds]
    one_fold_each = not folds or int(np.sum(validating, axis=0).max(initial=0)) <= 1
    owner = np.full(arrays.n_students, -1, dtype=np.int16)  # the fold a student validates in
    owner_cut = np.zeros(arrays.n_students, dtype=np.int64)  # and where, in that fold
    for k, students in enumerate(validating):
        owner[students] = k
        owner_cut[students] = folds[k].user_cut[students]
    role_names = pa.array(ROLES)
    row_id = np.asarray(arrays["row_id"])
    schema = pa.schema([("row_id", pa.int64()), ("fold", pa.int16()), ("role", pa.string())])
    options = pa_csv.WriteOptions(include_header=False, quoting_style="none")
    with open(path, "wb") as f, pa_csv.CSVWriter(f, schema, write_options=options) as writer:
        f.write(b"row_id,fold,role\n")
        for lo in range(0, arrays.n_rows, ROW_CHUNK):
            rows = np.arange(lo, min(lo + ROW_CHUNK, arrays.n_rows))
            student = np.searchsorted(arrays.offsets, rows, side="right") - 1
            within = rows - arrays.offsets[student]
            if one_fold_each:
                fold, cut = owner[student], owner_cut[student]
                role = np.where(fold < 0, 0, np.where(within >= cut, 2, 1)).astype(np.int8)
                blocks = [(rows, fold, role)]
            else:
                valid = np.stack([within >= f.user_cut[student] for f in folds])
                never = ~valid.any(axis=0)
                blocks = [(rows[v], k, 2) for k, v in enumerate(valid)] + [(rows[never], -1, 0)]
                blocks = [
                    (chosen, np.full(len(chosen), k, np.int16), np.full(len(chosen), r, np.int8))
                    for chosen, k, r in blocks
                ]
            for chosen, fold, role in blocks:
                roles = pa.DictionaryArray.from_arrays(pa.array(role), role_names)
                columns = [pa.array(row_id[chosen].astype(np.int64)), pa.array(fold)]
                writer.write_table(pa.table([*columns, roles.cast(pa.string())], schema=schema))


def read_row_folds(path: str | Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype={"row_id": "int64", "fold": "int16", "role": "category"})


def fold_statistics(arrays: TrainArrays, fold: Fold) -> dict:
    rows = fold.stream_index
    is_question = np.asarray(arrays["content_type_id"])[rows] == QUESTION
    labels = np.asarray(arrays["answered_correctly"])[rows][is_question]
    lengths = np.diff(arrays.offsets)
    valid_students = fold.user_cut < lengths
    return {
        "fold": fold.index,
        "train_rows": int(arrays.n_rows - len(rows)),
        "valid_rows": len(rows),
        "valid_students": int(valid_students.sum()),
        "new_students": int((valid_students & (fold.user_cut == 0)).sum()),
        "valid_question_share": float(is_question.mean()) if len(rows) else 0.0,
        "valid_share_correct": float(labels.mean()) if len(labels) else 0.0,
    }


def make_folds(
    workspace: Workspace, config: FoldConfig, input_dir: str | Path | None = None
) -> list[dict]:
    """Write the fold artifact under the workspace's folds/ and return per-fold stats."""
    arrays = TrainArrays.load(workspace.data)
    cuts = _fold_cuts(arrays, config, Path(input_dir) if input_dir else None)
    stats, folds = [], []
    with atomic_dir(workspace.folds.path, owns=FoldsFolder.WRITES) as tmp:
        written = FoldsFolder(tmp)
        for k, (cut, offset) in enumerate(cuts):
            fold = Fold(k, cut, offset, _stream_index(arrays, cut, offset))
            folds.append(fold)
            np.savez(
                written.fold(k),
                user_cut=fold.user_cut,
                virtual_offset=fold.virtual_offset,
                stream_index=fold.stream_index,
            )
            stats.append(fold_statistics(arrays, fold))
        write_row_folds(written.row_folds, arrays, folds)
        manifest = {
            "config": asdict(config),
            "n_students": arrays.n_students,
            # what they were made from: 03, 04 and 05 refuse them for other data
            "data_fingerprint": data_fingerprint(workspace.data),
            "folds": stats,
        }
        written.manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    # beside the folder, not in it: the artifact stays byte-identical for a given seed
    write_run_record(workspace.record("folds"), asdict(config))
    workspace.forget()  # folds read before are stale
    return stats
