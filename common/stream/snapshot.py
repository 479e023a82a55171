"""The start state of the students seen in training (a Snapshot): each one's last
questions with the online state's ring fields, and where their history stands. 04 and the
Kaggle export build it from the training rows (build_snapshot); the online state's rings are
filled from it (common.stream.student_store), with the same per-question fields as
common.data.features.QuestionSequences. This module ships in the Kaggle bundle: Python 3.7,
numpy 1.19."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.data.features import QuestionSequences
from common.data.question_fields import FIELD_DTYPES, NEXT_CONTAINER, QUESTION_FIELDS
from common.files import atomic_file

# the rings' fields and their dtypes are the sequences' (common.data.question_fields); a
# model that reads past-event features has one more: PAST_DTYPE, a trailing axis of
# len(MODEL_FEATURES)
__all__ = ["FIELD_DTYPES", "PAST_DTYPE", "FileFields", "Snapshot", "build_snapshot"]
PAST_DTYPE = np.float32  # a model's past-event features (ModelConfig.past_features)


@dataclass
class Snapshot:
    """Each known student's last `length` questions (positions n_items - length ..
    n_items - 1; entries before position 0 unused) and where their history stands."""

    users: np.ndarray  # (n,) int64
    n_items: np.ndarray  # (n,) int64 questions answered so far
    last_first: np.ndarray  # (n,) int64 position of the last container's first question
    fields: dict[str, np.ndarray] | FileFields  # name -> (n, length)
    # a recurrent model's state of each student (common.model.predict.final_states), or
    # None: a model whose state is rebuilt from the rings
    states: np.ndarray | None = None

    @property
    def length(self) -> int:
        if isinstance(self.fields, FileFields):
            return self.fields.length
        return next(iter(self.fields.values())).shape[1]

    def save(self, path) -> None:
        with atomic_file(path) as tmp, open(tmp, "wb") as handle:
            np.savez_compressed(
                handle,
                users=self.users,
                n_items=self.n_items,
                last_first=self.last_first,
                **({} if self.states is None else {"states": self.states}),
                **{f"field_{k}": v for k, v in self.fields.items()},
            )

    @classmethod
    def load(cls, path) -> Snapshot:
        """The snapshot in `path`; its fields are read from the file when used (one at a
        time while a state is filled: the whole of them is 3.9 GB at Riiid's size)."""
        data = np.load(str(path))
        states = data["states"] if "states" in data.files else None
        return cls(data["users"], data["n_items"], data["last_first"], FileFields(data), states)

    def nbytes(self) -> int:
        states = 0 if self.states is None else self.states.nbytes
        return sum(a.nbytes for a in self.fields.values()) + 3 * 8 * len(self.users) + states


class FileFields:
    """A snapshot file's fields, each read (decompressed) when asked for."""

    def __init__(self, data):
        self.data = data  # numpy's NpzFile, open
        self.names = [k[len("field_") :] for k in data.files if k.startswith("field_")]
        self._length: int | None = None

    def __iter__(self):
        return iter(self.names)

    def __getitem__(self, name: str) -> np.ndarray:
        values = self.data["field_" + name]
        self._length = values.shape[1]
        return values

    def items(self):
        return ((name, self[name]) for name in self.names)

    def values(self):
        return (self[name] for name in self.names)

    @property
    def length(self) -> int:
        if self._length is None:
            self._length = self[self.names[0]].shape[1]
        return self._length


def build_snapshot(
    sequences: QuestionSequences, users: np.ndarray, length: np.ndarray, keep_last: int
) -> Snapshot:
    """Snapshot of questions [0, length[s]) of every student s with length > 0, keeping
    the last `keep_last` of them (a model's receptive_field).

    The last container's fields that the API reveals only with the student's next
    container (common.data.question_fields: NEXT_CONTAINER; elapsed time, explanation)
    hold their blank."""
    keep = np.flatnonzero(length > 0)
    n_items = length[keep].astype(np.int64)
    positions = n_items[:, None] - keep_last + np.arange(keep_last)  # (n, L)
    index = sequences.offsets[keep][:, None] + np.clip(positions, 0, None)
    fields = sequences.take(index)  # with the past-event features where attached
    last_first = fields["container_first"][:, -1].astype(np.int64)
    unrevealed = positions >= last_first[:, None]
    for f in QUESTION_FIELDS:
        if f.revealed == NEXT_CONTAINER:
            fields[f.name] = np.where(unrevealed, f.blank, fields[f.name])
    fields = {k: v.astype(FIELD_DTYPES.get(k, PAST_DTYPE)) for k, v in fields.items()}
    return Snapshot(np.asarray(users)[keep].astype(np.int64), n_items, last_first, fields)
