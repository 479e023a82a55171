"""Question difficulty as an encoder input: each question's correct rate on the training
rows of the current fold, smoothed and bucketed, embedded by SAINT (ModelConfig
.difficulty_buckets, the `difficulty_embed` embedding).

- Training rows only: positions < train_length of each student (the rows the model
  trains on), so a validation answer never shapes any input, not even through a
  question's rate.
- Out-of-fold for the training rows themselves: as a training input, a row's bucket
  comes from the rates and bucket edges of the other students' rows, in 5 groups of
  students (out_of_fold_buckets); with its own answer in the rate, the input would leak
  the label it is trained to predict (in-sample target encoding), most for rarely
  answered questions, and even a leave-one-out rate would leak it through the bucket
  edges of the questions that set them. Validation and streaming use the training
  rows' rates (the model's buffer).
- Bayesian smoothing toward the global rate g of the training rows,
      rate = (correct + m * g) / (count + m),
  the posterior mean under a Beta prior worth m answers centred on g: a question seen
  once moves at most 1 / (1 + m) away from g. DIFFICULTY_SMOOTHING = 10 is the
  method-of-moments estimate of the Beta prior's strength, g(1 - g) / var - 1, on the real
  Riiid rows in ../shared/data (between-question variance of the correct rate ~0.022
  around g ~0.57 gives m ~10 to 15).
- Quantile buckets 1..B: the edges are the rates' quantiles over the questions seen in
  training, so each bucket holds about as many questions and its embedding gets
  comparable training signal. Riiid's question rates are skewed (most between 0.5 and
  0.9), so equal-width buckets over [0, 1] would leave the low buckets nearly empty and
  lump most questions into a few high ones. The edges are per fold, which is fine: each
  fold trains its own model, and the buckets travel in its checkpoint.
- Bucket 0 is reserved for questions unseen in training and for the unknown-question id
  n_questions (ids past the metadata, see common.data.features.step_inputs).

The buckets live in the model's `question_difficulty` buffer (n_questions + 1,) and are
saved in its state_dict, so inference needs nothing beyond the checkpoint.
"""

from __future__ import annotations

import numpy as np
import torch

from common.data.features import QuestionSequences
from common.data.fold_data import FoldData
from common.data.question_rates import smoothed_rates
from common.model.saint import SAINT

DIFFICULTY_SMOOTHING = 10.0  # Beta prior strength in answers; see the module docstring
UNSEEN_BUCKET = 0
# training rows' buckets as inputs: from the rates of the other groups of training
# students (out-of-fold target encoding, as Kaggle feature pipelines do)
OUT_OF_FOLD_GROUPS = 5


def training_mask(sequences: QuestionSequences, train_length: np.ndarray) -> np.ndarray:
    """(n,) bool: True for the flat entries at positions < train_length[student]."""
    lengths = sequences.lengths()
    if len(train_length) != len(lengths):
        raise ValueError(
            f"train_length has {len(train_length)} students, the sequences {len(lengths)}"
        )
    student = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(student)) - sequences.offsets[student]
    return position < np.asarray(train_length)[student]


def smoothed_correct_rate(
    sequences: QuestionSequences,
    train_length: np.ndarray,
    n_questions: int,
    smoothing: float = DIFFICULTY_SMOOTHING,
) -> tuple[np.ndarray, np.ndarray]:
    """(rate, count), each (n_questions,): the smoothed correct rate of each question on
    the training rows, and how many training answers it rests on (rate is the global
    rate where count is 0)."""
    train = training_mask(sequences, train_length)
    rate, count, _ = smoothed_rates(
        sequences.question[train], sequences.response[train], n_questions, smoothing
    )
    return rate, count.astype(np.int64)


def question_difficulty_buckets(
    sequences: QuestionSequences,
    train_length: np.ndarray,
    n_questions: int,
    buckets: int,
    smoothing: float = DIFFICULTY_SMOOTHING,
) -> np.ndarray:
    """(n_questions + 1,) int64: bucket 1..buckets of each question's smoothed training
    correct rate (1 hardest, `buckets` easiest); 0 for questions unseen in training and
    for the unknown id n_questions."""
    if buckets < 1:
        raise ValueError(f"difficulty buckets must be >= 1, got {buckets}")
    rate, count = smoothed_correct_rate(sequences, train_length, n_questions, smoothing)
    seen = count > 0
    out = np.full(n_questions + 1, UNSEEN_BUCKET, dtype=np.int64)
    if not seen.any():
        return out
    edges = np.quantile(rate[seen], np.linspace(0.0, 1.0, buckets + 1)[1:-1])  # (B - 1,)
    out[:n_questions] = np.where(seen, 1 + np.searchsorted(edges, rate, side="right"), 0)
    return out


def out_of_fold_buckets(
    sequences: QuestionSequences,
    train_length: np.ndarray,
    n_questions: int,
    buckets: int,
    smoothing: float = DIFFICULTY_SMOOTHING,
) -> np.ndarray:
    """(n,) int64, per flat question: the difficulty bucket training feeds the model.
    The training students (rows at positions < train_length) are split into
    OUT_OF_FOLD_GROUPS groups (by student index); a training row's bucket comes from the
    rates and bucket edges of the other groups' training rows only (0 where they never
    answer its question), so no answer of the row's own student, its own included, shapes
    it: what a validation row's bucket is to the model. Other rows get their question's
    bucket over all training rows (question_difficulty_buckets), which validation and
    streaming use."""
    question = sequences.question.astype(np.int64)
    known = (question >= 0) & (question < n_questions)
    question = np.where(known, question, n_questions)
    every = question_difficulty_buckets(sequences, train_length, n_questions, buckets, smoothing)
    out = every[question]
    lengths = sequences.lengths()
    group_of_student = np.arange(len(lengths)) % OUT_OF_FOLD_GROUPS
    group = np.repeat(group_of_student, lengths)
    train = training_mask(sequences, train_length)
    for j in range(OUT_OF_FOLD_GROUPS):
        others = np.where(group_of_student == j, 0, train_length)
        rows = train & (group == j)
        table = question_difficulty_buckets(sequences, others, n_questions, buckets, smoothing)
        out[rows] = table[question[rows]]
    return out


def install_difficulty(
    model: SAINT, data: FoldData, smoothing: float = DIFFICULTY_SMOOTHING
) -> np.ndarray:
    """Fill model.question_difficulty from the training rows of the fold `data`; returns
    the buckets."""
    config = model.config
    if not config.difficulty_buckets:
        raise ValueError("the model has no difficulty input (ModelConfig.difficulty_buckets 0)")
    if config.n_questions != data.n_questions:
        raise ValueError(f"model n_questions {config.n_questions} != the data's {data.n_questions}")
    buckets = question_difficulty_buckets(
        data.sequences, data.fit_length, data.n_questions, config.difficulty_buckets, smoothing
    )
    buffer = model.question_difficulty
    buffer.copy_(torch.from_numpy(buckets).to(buffer.device))
    return buckets
