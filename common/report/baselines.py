"""Two baselines scored on the model's stream rows, so a report can show the model's lift.

    question rate       each question's correct rate on the fold's TRAINING rows only (a
                        student's rows before their cut), smoothed toward the global rate:
                        (correct + m * global) / (count + m); a question never seen in
                        training gets the global rate.
    student + question  the student's running mean over every earlier question whose
                        outcome the API has already revealed, blended with the question
                        rate: (n * student_mean + k * question_rate) / (n + k), n = that
                        number of revealed questions (0 for a new student).

"Revealed" follows the API: a task container's outcomes arrive with the next group, and a
group holds at most one question container per student (the API's rule,
common.data.api_group), so when a row is predicted the student's earlier containers
(training history and earlier stream containers) are known and its own container and
anything later are not. Containers are those of common.data.features.build_sequences, the
model's own definition. Given the stream's groups (04's group_num), the rule is checked:
a stream that broke it is refused (ContainerRuleError), as the streaming states refuse it.

Neither baseline reads a label the model could not have read when it predicted the row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.data.api_group import check_one_container
from common.data.features import QuestionSequences
from common.data.question_rates import question_rates, training_entries
from common.options import above, at_least, option


@dataclass
class BaselineConfig:
    # a question answered 20 times in training is pulled a half toward the global rate
    question_prior: float = option(
        20.0,
        "pseudo-answers at the global rate added to every question's training rate",
        range=at_least(0),
    )
    # after 20 revealed answers the student's own mean counts as much as the question's rate
    student_prior: float = option(
        20.0, "weight of the question rate against the student's running mean", range=above(0)
    )


BASELINE_NAMES = ("question rate", "student + question")


def revealed_history(sequences: QuestionSequences, entries: np.ndarray):
    """For flat entries: (n_revealed, n_correct), the student's question rows in EARLIER
    containers and how many were correct. The entry's own container and later rows never
    count."""
    entries = np.asarray(entries, dtype=np.int64)
    student = np.searchsorted(sequences.offsets, entries, side="right") - 1
    start = sequences.offsets[student]
    correct_before = np.concatenate(([0], np.cumsum(sequences.response, dtype=np.int64)))
    container_start = start + sequences.container_first[entries]
    n_revealed = container_start - start
    n_correct = correct_before[container_start] - correct_before[start]
    return n_revealed, n_correct


def check_streamed_groups(
    sequences: QuestionSequences, entries: np.ndarray, group_num: np.ndarray
) -> None:
    """Raise ContainerRuleError if a group of the stream (group_num[i] of flat entry
    entries[i]) held question rows of two containers of one student: then a row of the
    later one would count outcomes the API had not revealed yet."""
    entries = np.asarray(entries, dtype=np.int64)
    student = np.searchsorted(sequences.offsets, entries, side="right") - 1
    check_one_container(
        student,
        sequences.container_first[entries],
        np.asarray(group_num),
        where="the streamed rows (students by their index in the data)",
        container_name="containers opening at the student's question",
    )


def student_question_blend(
    n_revealed: np.ndarray, n_correct: np.ndarray, question_rate: np.ndarray, prior: float
) -> np.ndarray:
    """(n * student_mean + k * question_rate) / (n + k), written as
    (correct + k * question_rate) / (n + k) so that n = 0 needs no special case."""
    return (n_correct + prior * question_rate) / (n_revealed + prior)


def baseline_scores(
    sequences: QuestionSequences,
    entries: np.ndarray,
    user_cut_row: np.ndarray,
    n_questions: int,
    config: BaselineConfig,
    group_num: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Both baselines for the flat entries `entries` of one fold, keyed by BASELINE_NAMES;
    with the groups the entries were streamed in (group_num), the API's rule checked
    first (check_streamed_groups)."""
    if group_num is not None:
        check_streamed_groups(sequences, entries, group_num)
    rates = question_rates(
        sequences, training_entries(sequences, user_cut_row), n_questions, config.question_prior
    )
    question_rate = rates(sequences.question[entries])
    n_revealed, n_correct = revealed_history(sequences, entries)
    blend = student_question_blend(n_revealed, n_correct, question_rate, config.student_prior)
    return dict(zip(BASELINE_NAMES, (question_rate, blend), strict=True))
