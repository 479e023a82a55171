"""Question tags (skills) as an encoder input: the mean of a question's tag embeddings is
added to its question and part embeddings (ModelConfig.n_tags > 0, `--tags`).

questions.csv carries each question's tags as a space-separated list (Riiid: 1-6 of 188
tags; the KT adapters: the problem's skills). Tags share statistical strength across
questions: a question answered a few times still gets a useful input from skills that
many others share, which a question-id embedding alone cannot give.

The tags live in the model's `question_tags` buffer, (n_questions + 1, max_tags) tag ids
padded with n_tags, saved in its state_dict like the difficulty buckets: inference needs
nothing beyond the checkpoint. The unknown-question id n_questions, ids without a
questions.csv row and questions with no tags get only padding (a zero tag input).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from common.data.schema import InputError
from common.model.saint import SAINT
from common.workspace import DataFolder


def parse_tags(questions: pd.DataFrame) -> list[list[int]]:
    """Each row's tag ids; a missing or empty tags value gives no tags. Raises InputError
    naming the row and the value when a tag is not a non-negative integer."""
    parsed = []
    rows = zip(questions["question_id"], questions["tags"], strict=True)
    for row, (question_id, text) in enumerate(rows, start=1):
        if text is None or pd.isna(text) or not str(text).strip():
            parsed.append([])
            continue
        try:
            tags = [int(t) for t in str(text).split()]
        except ValueError:
            tags = [-1]
        if min(tags) < 0:
            raise InputError(
                str(DataFolder(DataFolder.NAME).questions),
                f"space-separated non-negative integer tag ids (question_id {question_id})",
                row=row,
                column="tags",
                value=text,
            )
        parsed.append(tags)
    return parsed


def tag_shape(questions: pd.DataFrame) -> tuple[int, int]:
    """(n_tags, max_tags): tag ids are 0..n_tags-1; max_tags is the most tags of any
    question (at least 1)."""
    parsed = parse_tags(questions)
    n_tags = max((max(t) for t in parsed if t), default=-1) + 1
    return max(n_tags, 1), max((len(t) for t in parsed), default=1) or 1


def question_tag_matrix(
    questions: pd.DataFrame, n_questions: int, n_tags: int, max_tags: int
) -> np.ndarray:
    """(n_questions + 1, max_tags) int64 tag ids, padded with n_tags."""
    matrix = np.full((n_questions + 1, max_tags), n_tags, dtype=np.int64)
    for question_id, tags in zip(questions["question_id"], parse_tags(questions), strict=True):
        if not 0 <= question_id < n_questions:
            continue
        if len(tags) > max_tags or (tags and max(tags) >= n_tags):
            raise ValueError(
                f"questions: question_id {question_id} has tags {tags}; this model takes at "
                f"most {max_tags} tags with ids below {n_tags}"
            )
        matrix[question_id, : len(tags)] = tags
    return matrix


def install_tags(model: SAINT, questions: pd.DataFrame) -> None:
    """Fill the model's question_tags buffer from questions.parquet."""
    config = model.config
    if not config.n_tags:
        raise ValueError("the model has no tag input (ModelConfig.n_tags is 0)")
    matrix = question_tag_matrix(questions, config.n_questions, config.n_tags, config.max_tags)
    model.question_tags.copy_(torch.from_numpy(matrix))
