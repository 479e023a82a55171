"""Cross-validation folds: which rows train and which rows form the validation stream.

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

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from common.data.arrays import TrainArrays, container_starts
from common.data.dataset import Dataset
from common.data.features import QuestionSequences
from common.data.schema import QUESTION, InputError
from common.errors import UserError
from common.files import atomic_dir, write_run_record
from common.layout import DATA_SUBDIR, FOLDS_SUBDIR, ROW_FOLDS, fold_file
from common.options import option

STRATEGIES = ("user", "last-n", "virtual-time", "unseen", "dataset")


@dataclass
class FoldConfig:
    n_folds: int = option(5, "folds")
    seed: int = option(0, "seed of the split")
    strategy: str = option(
        "user", "how validation rows are chosen (see common/data/folds.py)", choices=STRATEGIES
    )
    # the competition's hidden test mixed new students with continuing ones
    new_share: float = option(0.25, "user strategy: share of validation students that are new")
    last_n: int = option(100, "last-n strategy: validation rows per student")
    # 2.5M of 101M rows in tito's CV
    valid_share: float = option(
        0.025, "virtual-time strategy: share of all rows in the validation tail"
    )

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.n_folds < 1:
            raise ValueError(f"n_folds must be >= 1, got {self.n_folds}")


@dataclass
class Fold:
    """One fold of the artifact."""

    index: int
    user_cut: np.ndarray  # (n_students,) int64, row index within the student
    virtual_offset: np.ndarray  # (n_students,) int64 ms
    stream_index: np.ndarray  # (n_valid_rows,) int64 global row index, stream order

    @classmethod
    def load(cls, output_dir: str | Path, index: int) -> Fold:
        path = fold_file(output_dir, index)
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: run 02_make_folds.py first")
        with np.load(path) as data:
            return cls(index, data["user_cut"], data["virtual_offset"], data["stream_index"])

    def valid_rows(self, arrays: TrainArrays) -> np.ndarray:
        """(n_rows,) bool: the fold's validation rows."""
        mask = np.zeros(arrays.n_rows, dtype=bool)
        mask[self.stream_index] = True
        return mask

    def is_new(self) -> np.ndarray:
        """(n_students,) bool: students whose whole history is validation."""
        return self.user_cut == 0


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
    output_dir: str | Path, config: FoldConfig, input_dir: str | Path | None = None
) -> list[dict]:
    """Write the fold artifact under `<output-dir>/folds/` and return per-fold stats."""
    output_dir = Path(output_dir)
    arrays = TrainArrays.load(output_dir / DATA_SUBDIR)
    cuts = _fold_cuts(arrays, config, Path(input_dir) if input_dir else None)
    stats, folds = [], []
    with atomic_dir(output_dir / FOLDS_SUBDIR) as tmp:
        for k, (cut, offset) in enumerate(cuts):
            fold = Fold(k, cut, offset, _stream_index(arrays, cut, offset))
            folds.append(fold)
            np.savez(
                tmp / f"fold{k}.npz",
                user_cut=fold.user_cut,
                virtual_offset=fold.virtual_offset,
                stream_index=fold.stream_index,
            )
            stats.append(fold_statistics(arrays, fold))
        write_row_folds(tmp / ROW_FOLDS, arrays, folds)
        manifest = {"config": asdict(config), "n_students": arrays.n_students, "folds": stats}
        (tmp / "folds.json").write_text(json.dumps(manifest, indent=2) + "\n")
    # beside the folder, not in it: the artifact stays byte-identical for a given seed
    write_run_record(output_dir, "folds", asdict(config))
    return stats


def load_fold_config(output_dir: str | Path) -> dict:
    return json.loads((Path(output_dir) / FOLDS_SUBDIR / "folds.json").read_text())


def fold_count(output_dir: str | Path) -> int:
    """How many folds stage 2 made in `output_dir`."""
    path = Path(output_dir) / FOLDS_SUBDIR / "folds.json"
    if not path.exists():
        raise UserError(f"{path} not found: run 02_make_folds.py first")
    return len(load_fold_config(output_dir)["folds"])


# ---------------------------------------------------------------------------------------
# fold identity


class FoldMismatchError(UserError, ValueError):
    """A model or its predictions belong to other folds than those on disk."""


def fold_fingerprint(output_dir: str | Path, index: int) -> dict:
    """What identifies fold `index` of the folds on disk: a sha256 over folds/fold{k}.npz
    (its cuts and stream; byte-identical for a given seed) and the fold config. Training
    records it in every checkpoint, streaming in its summary."""
    folds_dir = Path(output_dir) / FOLDS_SUBDIR
    path = folds_dir / f"fold{index}.npz"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run 02_make_folds.py first")
    digest = hashlib.sha256(path.read_bytes())
    config = load_fold_config(output_dir)["config"]
    digest.update(json.dumps(config, sort_keys=True).encode())
    return {"fold": index, "sha256": digest.hexdigest()[:16], "config": config}


def check_fold_fingerprint(
    recorded: dict | None, output_dir: str | Path, index: int, what: str
) -> None:
    """Raise FoldMismatchError unless `recorded` (from a checkpoint or a stream summary;
    `what` names it) is the fingerprint of fold `index` on disk: a model trained on
    another fold, or on folds made again since, has trained on this fold's validation
    rows."""
    path = fold_file(output_dir, index)
    current = fold_fingerprint(output_dir, index)
    if recorded is None:
        raise FoldMismatchError(
            f"{what} records no fold fingerprint, so nothing shows it belongs to {path} "
            f"(fingerprint {current['sha256']}); train it again on these folds"
        )
    if recorded.get("fold") != index:
        raise FoldMismatchError(
            f"{what} was made for fold {recorded.get('fold')}, asked for fold {index}: a model "
            f"of another fold has trained on this fold's validation rows; use fold {index}'s own"
        )
    if recorded.get("sha256") != current["sha256"]:
        raise FoldMismatchError(
            f"{what} was made for fold {index} of other folds (fingerprint "
            f"{recorded.get('sha256')}, config {recorded.get('config')}) than {path} on disk "
            f"(fingerprint {current['sha256']}, config {current['config']}): its model has "
            f"trained on rows these folds validate on; train it again on these folds"
        )


# ---------------------------------------------------------------------------------------
# inner validation split (model selection without the fold's validation rows)


def inner_cut(
    container_first: np.ndarray,
    offsets: np.ndarray,
    train_length: np.ndarray,
    share: float,
    new_share: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Questions to train on per student: `train_length` (questions before the fold's
    cut), except for an inner validation split carved from those training questions:
    `share` of the students with training questions, each cut at a random container
    start after their first container, or at 0 (wholly held out) with probability
    `new_share` or when they have one container. container_first and offsets are
    common.data.features.QuestionSequences fields."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"inner validation share must be in [0, 1), got {share}")
    cut = np.asarray(train_length, dtype=np.int64).copy()
    candidates = np.flatnonzero(cut > 0)
    chosen = np.sort(rng.choice(candidates, size=round(share * len(candidates)), replace=False))
    held_out = rng.random(len(chosen)) < new_share
    for student, new in zip(chosen.tolist(), held_out.tolist(), strict=True):
        first = container_first[offsets[student] : offsets[student] + cut[student]]
        starts = np.flatnonzero(first == np.arange(len(first)))[1:]
        cut[student] = 0 if new or len(starts) == 0 else int(rng.choice(starts))
    return cut


# ---------------------------------------------------------------------------------------
# a fold's data for training and validation


@dataclass
class Tails:
    """Validation tails: questions [history[i], end[i]) of students[i], each predicted
    after that student's questions [0, history[i])."""

    students: np.ndarray
    history: np.ndarray
    end: np.ndarray

    @classmethod
    def between(cls, history: np.ndarray, end: np.ndarray) -> Tails:
        """The tails of every student with questions between history and end."""
        students = np.flatnonzero(history < end)
        return cls(students, history[students], end[students])

    def flat_index(self, sequences: QuestionSequences) -> np.ndarray:
        """Flat sequence indices of the tails' questions, student by student."""
        count = self.end - self.history
        before = np.cumsum(count) - count  # entries of the earlier students
        first = np.repeat(sequences.offsets[self.students] + self.history - before, count)
        return first + np.arange(count.sum())

    def labels(self, sequences: QuestionSequences) -> np.ndarray:
        return sequences.response[self.flat_index(sequences)].astype(np.float32)


@dataclass
class FoldData:
    """A fold's question sequences, where each student's validation tail starts, and what
    the model trains on."""

    sequences: QuestionSequences
    train_length: np.ndarray  # (n_students,) questions before the fold's cut
    n_questions: int
    questions: pd.DataFrame | None = None  # questions.parquet (tags for --tags)
    # (n_students,) questions the model trains on: train_length, or less for the students
    # of an inner validation split (common.data.folds.inner_cut); None: train_length
    fit_length: np.ndarray | None = None
    fingerprint: dict | None = None  # common.data.folds.fold_fingerprint

    def __post_init__(self) -> None:
        if self.fit_length is None:
            self.fit_length = self.train_length

    @property
    def fold_tails(self) -> Tails:
        """The fold's validation questions (what 04 streams and 05 scores)."""
        return Tails.between(self.train_length, self.sequences.lengths())

    @property
    def inner_tails(self) -> Tails:
        """The inner validation questions: training questions of the fold held out from
        the model's training (empty without an inner split)."""
        return Tails.between(self.fit_length, self.train_length)

    @property
    def valid_students(self) -> np.ndarray:
        return self.fold_tails.students

    @property
    def valid_history(self) -> np.ndarray:
        return self.fold_tails.history

    @property
    def valid_end(self) -> np.ndarray:
        return self.fold_tails.end

    def valid_labels(self) -> np.ndarray:
        return self.fold_tails.labels(self.sequences)


def load_fold_data(
    output_dir: str | Path,
    fold_index: int,
    inner_share: float = 0.0,
    seed: int = 0,
    dataset: Dataset | None = None,
) -> FoldData:
    """Fold `fold_index` of `<output_dir>/data` (or of `dataset`, already loaded from
    it) and `<output_dir>/folds`; with inner_share > 0 an inner validation split is
    carved from its training students (seeded by seed and the fold), mixing new and
    continuing students as the fold's own validation students do."""
    dataset = dataset or Dataset.load(output_dir)
    arrays, questions, sequences = dataset.arrays, dataset.questions, dataset.sequences
    fold = Fold.load(output_dir, fold_index)
    cut_row = arrays.offsets[:-1] + fold.user_cut
    train_length = (np.searchsorted(sequences.row, cut_row) - sequences.offsets[:-1]).astype(
        np.int64
    )
    fit_length = None
    if inner_share > 0:
        validating = train_length < sequences.lengths()
        new_share = float((train_length[validating] == 0).mean()) if validating.any() else 0.0
        rng = np.random.default_rng([seed, fold_index, 1])
        fit_length = inner_cut(
            sequences.container_first, sequences.offsets, train_length, inner_share, new_share, rng
        )
    return FoldData(
        sequences=sequences,
        train_length=train_length,
        n_questions=dataset.n_questions,
        questions=questions,
        fit_length=fit_length,
        fingerprint=fold_fingerprint(output_dir, fold_index),
    )


def load_full_data(output_dir: str | Path, dataset: Dataset | None = None) -> FoldData:
    """Every question of every student as training data (03 --full-data, the submission's
    model): no validation tails, no inner split, no fold fingerprint."""
    dataset = dataset or Dataset.load(output_dir)
    lengths = dataset.sequences.lengths().astype(np.int64)
    return FoldData(
        sequences=dataset.sequences,
        train_length=lengths,
        n_questions=dataset.n_questions,
        questions=dataset.questions,
    )
