"""Readers for what 01_preprocess.py writes under `<output-dir>/data/`.

Layout:
    data/train.parquet        every train.csv row, competition dtypes
    data/questions.parquet    questions.csv (question_id, bundle_id, correct_answer, part, tags)
    data/lectures.parquet     lectures.csv
    data/arrays/<column>.bin  one flat little-endian array per column, every row in file
                              order (grouped by student, in time order)
    data/arrays/users.bin, offsets.bin
                              student i owns rows offsets[i]:offsets[i+1]; users[i] is its id
    data/arrays/manifest.json dtypes and lengths of the above

The flat arrays are memory-mapped, so several training processes share one copy in the
page cache and nothing is parsed twice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.data.schema import TRAIN_DTYPES
from common.errors import UserError
from common.workspace import DataFolder

# Flat per-row arrays. Missing values: user_answer -> ANSWER_UNKNOWN (lectures keep -1),
# prior_question_had_explanation -> -1, prior_question_elapsed_time -> NaN.
ROW_ARRAYS: dict[str, str] = {
    name: "int8" if name == "prior_question_had_explanation" else dtype
    for name, dtype in TRAIN_DTYPES.items()
    if name != "user_id"  # stored once per student (users, offsets)
}


@dataclass
class TrainArrays:
    """Every train row as flat arrays (file order) plus the student index."""

    users: np.ndarray  # (n_students,) int32 user ids in file order
    offsets: np.ndarray  # (n_students + 1,) int64
    columns: dict[str, np.ndarray]  # name -> (n_rows,) array

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def n_students(self) -> int:
        return len(self.users)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def user_of_row(self) -> np.ndarray:
        """(n_rows,) index of the student owning each row."""
        return np.repeat(np.arange(self.n_students, dtype=np.int32), np.diff(self.offsets))

    @classmethod
    def load(cls, data: DataFolder, mmap: bool = True) -> TrainArrays:
        if not data.arrays_manifest.exists():
            raise UserError(f"{data.path} holds no stage-1 data: run 01_preprocess.py first")
        manifest = json.loads(data.arrays_manifest.read_text())

        def read(name: str, dtype: str, length: int) -> np.ndarray:
            path = data.array(name)
            if length == 0:
                return np.zeros(0, dtype=dtype)
            if mmap:
                return np.memmap(path, dtype=dtype, mode="r", shape=(length,))
            return np.fromfile(path, dtype=dtype, count=length)

        n_rows, n_students = manifest["n_rows"], manifest["n_students"]
        columns = {name: read(name, dtype, n_rows) for name, dtype in manifest["columns"].items()}
        users = read("users", "int32", n_students)
        offsets = read("offsets", "int64", n_students + 1)
        return cls(users=np.asarray(users), offsets=np.asarray(offsets), columns=columns)


def opens_container(
    timestamp: np.ndarray, task_container_id: np.ndarray, new_student: np.ndarray
) -> np.ndarray:
    """(n,) bool: True where a row opens a new task container, for rows in student and
    time order; new_student is True at each student's first row.

    A container is a run of one student's consecutive rows sharing timestamp and
    task_container_id: the rows the test API hands over together, answered before any
    feedback. (In the real data a timestamp almost always maps to one container; the
    finer of the two keys is used so that neither kind of change is missed.) The one
    home of this rule: folds, features and the emulator all call it."""
    starts = np.array(new_student, dtype=bool, copy=True)
    if len(starts):
        starts[0] = True
        starts[1:] |= (timestamp[1:] != timestamp[:-1]) | (
            task_container_id[1:] != task_container_id[:-1]
        )
    return starts


def container_starts(arrays: TrainArrays) -> np.ndarray:
    """opens_container over every row of `arrays` (lectures included)."""
    new_student = np.zeros(arrays.n_rows, dtype=bool)
    new_student[arrays.offsets[:-1][arrays.offsets[:-1] < arrays.n_rows]] = True
    return opens_container(arrays["timestamp"], arrays["task_container_id"], new_student)


def load_questions(data: DataFolder) -> pd.DataFrame:
    return pd.read_parquet(data.questions)


def load_lectures(data: DataFolder) -> pd.DataFrame:
    return pd.read_parquet(data.lectures)


def question_parts(questions: pd.DataFrame) -> np.ndarray:
    """Lookup table: part (1-7) by question id; 0 for ids that are not questions."""
    parts = np.zeros(int(questions["question_id"].max()) + 1, dtype=np.int8)
    parts[questions["question_id"].to_numpy()] = questions["part"].to_numpy()
    return parts


HASH_BLOCK = 8 << 20  # bytes read at a time while hashing


def write_data_fingerprint(data: DataFolder) -> str:
    """A sha256 over stage 1's output (every array file and the question and lecture
    tables), written to data/ (DataFolder.fingerprint): 02 records it with the folds it makes, and
    03, 04 and 05 refuse folds made from other data (common.data.fold_data.Fold.load)."""
    digest = hashlib.sha256()
    files = sorted(data.arrays.glob("*.bin"))
    files += [data.questions, data.lectures]
    for path in files:
        digest.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda h=handle: h.read(HASH_BLOCK), b""):
                digest.update(block)
    fingerprint = digest.hexdigest()[:16]
    data.fingerprint.write_text(json.dumps({"sha256": fingerprint}) + "\n")
    return fingerprint


def data_fingerprint(data: DataFolder) -> str | None:
    """Stage 1's fingerprint of the data in `data` (None: data from before it had one)."""
    path = data.fingerprint
    return json.loads(path.read_text())["sha256"] if path.exists() else None
