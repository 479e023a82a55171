"""Past-event features of a question row, as a Kaggler would feed gradient-boosted trees:
computed here for many rows at once (from common.data.features.QuestionSequences), and one
API group at a time as the API serves them by common.data.past_state.PastFeatureState. The
two are tested equal.

Everything a row's features read is known when the API asks for the row: the student's
questions in EARLIER task containers (their outcomes arrive with the next group, their
elapsed time and explanation flag with the student's next container), the row's own
container (its questions and timestamp, never its outcomes), and a question-rate table
from training rows. Lectures are not counted (the model drops them too).

Per row (NaN where a value is undefined, e.g. a rate over no answers):

    answered                  questions the student answered before this container
    correct_rate              their correct share
    recent_rate               correct share of the latest RECENT of them
    last_correct              outcome of the latest
    seconds_since_previous    since the student's previous question container
    seconds_since_first       since the student's first question
    container_size            questions in this container
    part                      the question's part
    part_answered, part_correct_rate             the same over the question's part
    skill_answered, skill_correct_rate, skill_last_correct
                              the same over its skill (its first tag; -1: none)
    question_attempts, question_correct_rate, question_last_correct,
    seconds_since_question    the student's earlier answers to this very question
    question_rate, question_count   the question's smoothed correct rate and answer count
                              on training rows (common.data.question_rates.QuestionRates)
    explanation_rate          share of the answered questions whose explanation was read
    mean_elapsed              mean seconds spent on them (where known)
    previous_elapsed          seconds spent on the previous container's questions
"""

from __future__ import annotations

import numpy as np

from common.data.features import QuestionSequences
from common.data.question_rates import QuestionRates

RECENT = 10
FEATURE_NAMES = (
    "answered",
    "correct_rate",
    "recent_rate",
    "last_correct",
    "seconds_since_previous",
    "seconds_since_first",
    "container_size",
    "part",
    "part_answered",
    "part_correct_rate",
    "skill_answered",
    "skill_correct_rate",
    "skill_last_correct",
    "question_attempts",
    "question_correct_rate",
    "question_last_correct",
    "seconds_since_question",
    "question_rate",
    "question_count",
    "explanation_rate",
    "mean_elapsed",
    "previous_elapsed",
)
CATEGORICAL = ("part",)
# What a SAINT model reads of them (ModelConfig.past_features): each student's own past,
# not the training rows' question-rate table (the model learns each question's difficulty
# in its embeddings) nor the part (an encoder input already). Unlike the rate table, these
# depend on nothing but the student's history: they are the same in every fold.
MODEL_FEATURES = tuple(
    name for name in FEATURE_NAMES if name not in ("question_rate", "question_count", "part")
)
MODEL_COLUMNS = [FEATURE_NAMES.index(name) for name in MODEL_FEATURES]
# the model's inputs of counts and durations are log1p of the raw values; ratios are as is
MODEL_LOG_FEATURES = tuple(
    name
    for name in MODEL_FEATURES
    if name.endswith(("answered", "attempts", "size", "elapsed")) or name.startswith("seconds")
)
EXPLAINED = 2  # common.data.features' explanation code of "read it"


def question_skills(questions, n_questions: int) -> np.ndarray:
    """(n_questions + 1,) each question id's first tag (its skill), -1 without tags or a
    questions table; the last entry is the unknown question."""
    skill = np.full(n_questions + 1, -1, dtype=np.int64)
    if questions is None or "tags" not in questions.columns:
        return skill
    pairs = zip(questions["question_id"], questions["tags"])  # noqa: B905 (Python 3.7)
    for question_id, text in pairs:
        words = str(text).split() if isinstance(text, str) else []
        if words and 0 <= int(question_id) < n_questions:
            skill[int(question_id)] = int(words[0])
    return skill


def _ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    top, bottom = np.asarray(top, dtype=np.float64), np.asarray(bottom, dtype=np.float64)
    out = np.full(np.shape(top), np.nan)
    np.divide(top, bottom, out=out, where=bottom > 0)
    return out


def _prefix(values: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(values, dtype=np.float64)))


def _revealed_by_key(key: np.ndarray, student: np.ndarray, container: np.ndarray, values):
    """For every flat entry: how many of the student's entries with the same key lie in
    earlier containers, the sum of each of `values` over them, and the flat index of
    the latest of them (-1: none). Entries of one container are contiguous, so inside a
    (student, key) group, ordered by position, the revealed ones are a prefix."""
    n = len(key)
    order = np.lexsort((np.arange(n), key, student))
    k, s, c = key[order], student[order], container[order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (k[1:] != k[:-1]) | (s[1:] != s[:-1])
    new_run = new_group.copy()
    new_run[1:] |= c[1:] != c[:-1]
    index = np.arange(n)
    group_start = np.maximum.accumulate(np.where(new_group, index, 0))
    run_start = np.maximum.accumulate(np.where(new_run, index, 0))
    count = np.empty(n, dtype=np.int64)
    count[order] = run_start - group_start
    sums = []
    for value in values:
        prefix = _prefix(np.asarray(value)[order])
        total = np.empty(n, dtype=np.float64)
        total[order] = prefix[run_start] - prefix[group_start]
        sums.append(total)
    last = np.full(n, -1, dtype=np.int64)
    has = run_start > group_start
    last[order[has]] = order[run_start[has] - 1]
    return count, sums, last


def _seconds(milliseconds) -> np.ndarray:
    return np.asarray(milliseconds, dtype=np.float64) / 1000.0


def _elapsed_seconds(bucket: np.ndarray) -> np.ndarray:
    """common.data.features' elapsed bucket -> seconds, NaN where unknown (bucket 0)."""
    bucket = np.asarray(bucket, dtype=np.float64)
    return np.where(bucket > 0, bucket - 1, np.nan)


def past_features(
    sequences: QuestionSequences,
    entries: np.ndarray,
    skill: np.ndarray,
    rates: QuestionRates,
) -> np.ndarray:
    """(len(entries), len(FEATURE_NAMES)) float64 features of the flat entries."""
    seq, entries = sequences, np.asarray(entries, dtype=np.int64)
    student = np.repeat(np.arange(seq.n_students), seq.lengths())
    start = seq.offsets[student]
    container = start + seq.container_first  # flat index of each entry's container start
    response = seq.response.astype(np.float64)
    question = seq.question.astype(np.int64)
    skills = skill[np.clip(question, 0, len(skill) - 1)]
    timestamp = seq.timestamp.astype(np.float64)
    revealed = (student, container, response)
    out = _student_features(seq, entries, start, container, response, timestamp)
    out.update(_part_features(entries, seq.part.astype(np.int64), *revealed))
    out.update(_skill_features(entries, skills, *revealed))
    out.update(_question_features(entries, question, *revealed, timestamp))
    out["question_rate"] = rates(question[entries])
    out["question_count"] = question_count(rates, question[entries])
    return np.column_stack([np.asarray(out[name], dtype=np.float64) for name in FEATURE_NAMES])


def _student_features(
    seq: QuestionSequences,
    entries: np.ndarray,
    start: np.ndarray,
    container: np.ndarray,
    response: np.ndarray,
    timestamp: np.ndarray,
) -> dict[str, np.ndarray]:
    """The student-wide features and the container's own (size, part): every entry
    before the container's start is revealed. start, container: each flat entry's
    student start and container start (flat indices)."""
    elapsed = _elapsed_seconds(seq.elapsed)
    known_elapsed = ~np.isnan(elapsed)
    e_start, e_container = start[entries], container[entries]
    answered = e_container - e_start
    correct = _prefix(response)
    recent_from = np.maximum(e_container - RECENT, e_start)
    previous = np.maximum(e_container - 1, 0)  # the latest revealed entry (if answered)
    has_previous = answered > 0
    explained = _prefix(seq.explanation == EXPLAINED)
    explanation_known = _prefix(seq.explanation > 0)
    elapsed_sum = _prefix(np.where(known_elapsed, elapsed, 0.0))
    elapsed_count = _prefix(known_elapsed)
    return {
        "answered": answered,
        "correct_rate": _ratio(correct[e_container] - correct[e_start], answered),
        "recent_rate": _ratio(
            correct[e_container] - correct[recent_from], e_container - recent_from
        ),
        "last_correct": np.where(has_previous, response[previous], np.nan),
        "seconds_since_previous": np.where(
            has_previous, _seconds(timestamp[entries] - timestamp[previous]), np.nan
        ),
        "seconds_since_first": _seconds(timestamp[entries] - timestamp[e_start]),
        "container_size": _container_size(container)[entries],
        "part": seq.part[entries],
        "explanation_rate": _ratio(
            explained[e_container] - explained[e_start],
            explanation_known[e_container] - explanation_known[e_start],
        ),
        "mean_elapsed": _ratio(
            elapsed_sum[e_container] - elapsed_sum[e_start],
            elapsed_count[e_container] - elapsed_count[e_start],
        ),
        "previous_elapsed": np.where(has_previous, elapsed[previous], np.nan),
    }


def _container_size(container: np.ndarray) -> np.ndarray:
    """(n,) questions in each flat entry's container, from its container start."""
    opens = np.ones(len(container), dtype=bool)
    opens[1:] = container[1:] != container[:-1]
    run_id = np.cumsum(opens) - 1
    return np.bincount(run_id)[run_id]


def _part_features(
    entries: np.ndarray,
    part: np.ndarray,
    student: np.ndarray,
    container: np.ndarray,
    response: np.ndarray,
) -> dict[str, np.ndarray]:
    """part_*: the student's revealed answers to questions of the entry's part."""
    count, (right,), _ = _revealed_by_key(part, student, container, [response])
    return {
        "part_answered": count[entries],
        "part_correct_rate": _ratio(right[entries], count[entries]),
    }


def _skill_features(
    entries: np.ndarray,
    skills: np.ndarray,
    student: np.ndarray,
    container: np.ndarray,
    response: np.ndarray,
) -> dict[str, np.ndarray]:
    """skill_*: the student's revealed answers to questions of the entry's skill; NaN
    for an entry whose question has no skill (-1)."""
    count, (right,), last = _revealed_by_key(skills, student, container, [response])
    no_skill = skills[entries] < 0
    last = last[entries]
    missing = (last < 0) | no_skill
    return {
        "skill_answered": np.where(no_skill, np.nan, count[entries]),
        "skill_correct_rate": np.where(no_skill, np.nan, _ratio(right[entries], count[entries])),
        "skill_last_correct": np.where(missing, np.nan, response[np.maximum(last, 0)]),
    }


def _question_features(
    entries: np.ndarray,
    question: np.ndarray,
    student: np.ndarray,
    container: np.ndarray,
    response: np.ndarray,
    timestamp: np.ndarray,
) -> dict[str, np.ndarray]:
    """question_* and seconds_since_question: the student's revealed answers to the
    entry's very question."""
    count, (right,), last = _revealed_by_key(question, student, container, [response])
    last = last[entries]
    seen = last >= 0
    return {
        "question_attempts": count[entries],
        "question_correct_rate": _ratio(right[entries], count[entries]),
        "question_last_correct": np.where(seen, response[np.maximum(last, 0)], np.nan),
        "seconds_since_question": np.where(
            seen, _seconds(timestamp[entries] - timestamp[np.maximum(last, 0)]), np.nan
        ),
    }


def question_count(rates: QuestionRates, question: np.ndarray) -> np.ndarray:
    """Training answers per question id (0 beyond the table)."""
    question = np.asarray(question, dtype=np.int64)
    inside = (question >= 0) & (question < len(rates.count))
    return np.where(inside, rates.count[np.where(inside, question, 0)], 0).astype(np.float64)


def attach_model_features(sequences: QuestionSequences, skill: np.ndarray) -> None:
    """Set sequences.past to every question's MODEL_FEATURES (float32; NaN where
    undefined): what a model with ModelConfig.past_features reads at each position, in
    training and teacher-forced validation. Computed once; streaming computes the same
    values online (common.data.past_state)."""
    if sequences.past is not None:
        return
    no_rates = QuestionRates(np.zeros(1), np.zeros(1), 0.0)  # the rate columns are not read
    every = np.arange(len(sequences.row))
    sequences.past = past_features(sequences, every, skill, no_rates)[:, MODEL_COLUMNS].astype(
        np.float32
    )
