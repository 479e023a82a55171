"""A fold on disk read back for training (03), streaming (04) and evaluation (05): its cuts
and stream (`Fold`), its fingerprint and the check that a model or a stream belongs to
it, the inner validation split, and a fold's question sequences with its validation
tails (`FoldData`). Stage 2 writes the folds: common.data.folds.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from common.data.arrays import TrainArrays, data_fingerprint
from common.data.dataset import Dataset
from common.data.features import QuestionSequences
from common.errors import UserError
from common.workspace import Workspace


@dataclass
class Fold:
    """One fold of the artifact; read back by `load`, which fingerprints the file it read."""

    index: int
    user_cut: np.ndarray  # (n_students,) int64, row index within the student
    virtual_offset: np.ndarray  # (n_students,) int64 ms
    stream_index: np.ndarray  # (n_valid_rows,) int64 global row index, stream order
    path: Path | None = None  # folds/fold{k}.npz, once loaded
    fingerprint: dict | None = None  # what identifies it (see fold_fingerprint), once loaded

    @classmethod
    def of(cls, workspace: Workspace, index: int) -> Fold:
        """Fold `index` of the workspace's folds/, read once per process."""
        return workspace.once((cls, index), lambda: cls.load(workspace, index))

    @classmethod
    def load(cls, workspace: Workspace, index: int) -> Fold:
        """Fold `index` of the workspace's folds/, read from disk: its arrays and its
        fingerprint (a sha256 over the file's bytes and the fold config)."""
        path = workspace.folds.fold(index)
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: run 02_make_folds.py first")
        manifest = load_fold_config(workspace)
        raw = path.read_bytes()
        digest = hashlib.sha256(raw)
        config = manifest["config"]
        digest.update(json.dumps(config, sort_keys=True).encode())
        fingerprint = {"fold": index, "sha256": digest.hexdigest()[:16], "config": config}
        with np.load(io.BytesIO(raw)) as data:
            arrays = data["user_cut"], data["virtual_offset"], data["stream_index"]
        return cls(index, *arrays, path=path, fingerprint=fingerprint)

    def valid_rows(self, arrays: TrainArrays) -> np.ndarray:
        """(n_rows,) bool: the fold's validation rows."""
        mask = np.zeros(arrays.n_rows, dtype=bool)
        mask[self.stream_index] = True
        return mask

    def is_new(self) -> np.ndarray:
        """(n_students,) bool: students whose whole history is validation."""
        return self.user_cut == 0


def load_fold_config(workspace: Workspace) -> dict:
    """folds/folds.json: the fold config, statistics and the data they were made from,
    read once per process and checked against the data there now (check_made_from)."""
    return workspace.once(load_fold_config, lambda: _read_fold_config(workspace))


def _read_fold_config(workspace: Workspace) -> dict:
    path = workspace.folds.manifest
    if not path.exists():
        raise UserError(f"{path} not found: run 02_make_folds.py first")
    manifest = json.loads(path.read_text())
    check_made_from(manifest, workspace)
    return manifest


def check_made_from(manifest: dict, workspace: Workspace) -> None:
    """Raise FoldMismatchError unless the folds were made from the workspace's data/
    (stage 1's fingerprint, which 02 records): 01 run again on other data leaves folds
    whose rows are not the data's."""
    recorded = manifest.get("data_fingerprint")
    current = data_fingerprint(workspace.data)
    if recorded != current:
        raise FoldMismatchError(
            f"{workspace.folds.path} were made from other data (fingerprint "
            f"{recorded}) than {workspace.data.path} holds now ({current}): run "
            f"02_make_folds.py again"
        )


def fold_count(workspace: Workspace) -> int:
    """How many folds stage 2 made in the workspace (from the data there now)."""
    return len(load_fold_config(workspace)["folds"])


# ---------------------------------------------------------------------------------------
# fold identity


class FoldMismatchError(UserError, ValueError):
    """A model or its predictions belong to other folds than those on disk."""


def fold_fingerprint(workspace: Workspace, index: int) -> dict:
    """What identifies fold `index` of the folds on disk: a sha256 over folds/fold{k}.npz
    (its cuts and stream; byte-identical for a given seed) and the fold config. Training
    records it in every checkpoint, streaming in its summary."""
    return Fold.of(workspace, index).fingerprint


def check_fold_fingerprint(recorded: dict | None, fold: Fold, what: str) -> None:
    """Raise FoldMismatchError unless `recorded` (from a checkpoint or a stream summary;
    `what` names it) is the fingerprint of `fold`, as loaded from disk: a model trained on
    another fold, or on folds made again since, has trained on this fold's validation
    rows."""
    path, current, index = fold.path, fold.fingerprint, fold.index
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
    size = round(share * len(candidates))
    if share > 0 and not 0 < size < len(candidates):
        side = "no student in the inner split" if size == 0 else "no student to train on"
        raise UserError(
            f"--inner-share {share:g} of the fold's {len(candidates):,} training students "
            f"leaves {side}: choose a share between {1 / max(len(candidates), 1):.3g} and "
            f"{1 - 1 / max(len(candidates), 1):.3g}"
        )
    chosen = np.sort(rng.choice(candidates, size=size, replace=False))
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
    # of an inner validation split (common.data.fold_data.inner_cut); None: train_length
    fit_length: np.ndarray | None = None
    fingerprint: dict | None = None  # common.data.fold_data.fold_fingerprint
    fold: Fold | None = None  # the fold on disk (None: the full-data run's)

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
    workspace: Workspace, fold_index: int, inner_share: float = 0.0, seed: int = 0
) -> FoldData:
    """Fold `fold_index` of the workspace's data/ and folds/ (each loaded once per
    process); with inner_share > 0 an inner validation split is carved from its training
    students (seeded by seed and the fold), mixing new and continuing students as the
    fold's own validation students do."""
    dataset = Dataset.of(workspace)
    arrays, questions, sequences = dataset.arrays, dataset.questions, dataset.sequences
    fold = Fold.of(workspace, fold_index)
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
        fingerprint=fold.fingerprint,
        fold=fold,
    )


def load_full_data(workspace: Workspace) -> FoldData:
    """Every question of every student as training data (03 --full-data, the submission's
    model): no validation tails, no inner split, no fold fingerprint."""
    dataset = Dataset.of(workspace)
    lengths = dataset.sequences.lengths().astype(np.int64)
    return FoldData(
        sequences=dataset.sequences,
        train_length=lengths,
        n_questions=dataset.n_questions,
        questions=dataset.questions,
    )
