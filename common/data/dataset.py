"""What stage 1 wrote, read back for the model: the rows (common.data.arrays.TrainArrays), the
question table and every student's question sequence (common.data.features). One loader for
training, validation, streaming, evaluation and the benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.data.arrays import TrainArrays, load_questions, question_parts
from common.data.features import QuestionSequences, build_sequences
from common.workspace import Workspace


@dataclass
class Dataset:
    arrays: TrainArrays
    questions: pd.DataFrame
    parts: np.ndarray  # (n_questions,) TOEIC part of each question id (question_parts)
    sequences: QuestionSequences

    @property
    def n_questions(self) -> int:
        """Question ids run 0..n_questions - 1 (n_questions is the model's unknown id)."""
        return int(self.questions["question_id"].max()) + 1

    @classmethod
    def of(cls, workspace: Workspace) -> Dataset:
        """The workspace's data/ (01_preprocess.py's output), loaded once per process."""
        return workspace.once(cls, lambda: cls.load(workspace))

    @classmethod
    def load(cls, workspace: Workspace) -> Dataset:
        """The workspace's data/, read from disk (`of` keeps what it reads)."""
        arrays = TrainArrays.load(workspace.data)
        questions = load_questions(workspace.data)
        parts = question_parts(questions)
        return cls(arrays, questions, parts, build_sequences(arrays, parts))
