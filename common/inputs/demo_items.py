"""The demo's item bank (common.inputs.demo): questions.csv and lectures.csv in the real
bank's proportions, plus each question's hidden parameters in the student model.

Parameter names are `DemoConfig` fields; the `config` arguments are a DemoConfig
(common.inputs.demo, which imports this module, so the type is not named here).

Items. Questions belong to TOEIC parts 1-7 in the real bank's proportions and come in
bundles that share a timestamp and a task_container_id: parts 1, 2 and 5 single questions,
parts 3 and 4 bundles of 3, part 6 of 4, part 7 of 2-5. Skills are tags (0..`n_tags`-1):
each part has one "part tag" and a pool of skill tags. A question of parts 5 and 6 has one
skill tag; a question of the other parts has its own skill tag plus its bundle's shared tags
(the part tag and 0-2 skill tags), as in the real questions.csv. Question q has a difficulty
b_q = mean of its tags' difficulties (sd `tag_difficulty_sd`) + N(0, `item_difficulty_sd`)
and a discrimination a_q ~ LogNormal(ln `discrimination_median`, `discrimination_sigma`).
Bundles are drawn with popularity weights ~ LogNormal(0, `popularity_sigma`), so some
questions are seen far more often than others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.data.schema import N_CHOICES, N_PARTS

# Question and lecture counts per part (1..7) in the competition's questions.csv and
# lectures.csv: the demo bank keeps these proportions.
REAL_QUESTIONS_PER_PART = (992, 1647, 1562, 1439, 5511, 1212, 1160)
REAL_LECTURES_PER_PART = (54, 56, 19, 31, 143, 83, 32)
# Bundle sizes of part 7 and how many real bundles have each size (69, 53, 77, 111).
PART7_BUNDLE_SIZES = (2, 3, 4, 5)
PART7_BUNDLE_COUNTS = (69, 53, 77, 111)
FIXED_BUNDLE_SIZE = {1: 1, 2: 1, 3: 3, 4: 3, 5: 1, 6: 4}
SINGLE_TAG_PARTS = (5, 6)  # in the real bank these questions have one tag
LECTURE_TYPES = ("concept", "solving question", "intention", "starter")
REAL_LECTURE_TYPE_COUNTS = (222, 186, 7, 3)
MAX_BUNDLE = 5
MAX_TAGS = 4  # own skill tag + part tag + up to two shared skill tags
MAX_CONTENT_ID = np.iinfo(np.int16).max


@dataclass(frozen=True)
class ItemBank:
    """questions.csv and lectures.csv plus the hidden item parameters of the model.

    Per-question arrays have Q + 1 rows: row Q is a padding question (no tags) that fills
    bundles up to MAX_BUNDLE. Tag index n_tags pads a question's tags up to MAX_TAGS.
    """

    questions: pd.DataFrame  # question_id, bundle_id, correct_answer, part, tags
    lectures: pd.DataFrame  # lecture_id, tag, part, type_of
    question_tags: np.ndarray  # (Q + 1, MAX_TAGS) int64, padded with n_tags
    n_question_tags: np.ndarray  # (Q + 1,) int64; 1 for the padding question
    difficulty: np.ndarray  # (Q + 1,) b_q
    discrimination: np.ndarray  # (Q + 1,) a_q
    base_seconds: np.ndarray  # (Q + 1,) answer seconds of the question's part
    correct_answer: np.ndarray  # (Q + 1,) int8
    part: np.ndarray  # (Q + 1,) int8, 1..7
    bundle_questions: np.ndarray  # (B, MAX_BUNDLE) int64, padded with Q
    bundle_cumweight: np.ndarray  # (B,) cumulative popularity, ending at 1
    lecture_part_start: np.ndarray  # (N_PARTS + 1,) lectures of part p are rows
    # lecture_part_start[p - 1] .. lecture_part_start[p] - 1 of `lectures` sorted by part
    lectures_by_part: np.ndarray  # (L,) row indices of `lectures`, sorted by part

    @property
    def n_questions(self) -> int:
        return len(self.questions)


def _split_counts(total: int, weights: tuple[float, ...], minimum: int) -> np.ndarray:
    """Split `total` into len(weights) integer counts proportional to `weights` (largest
    remainder), each at least `minimum`."""
    shares = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    spare = total - minimum * len(shares)
    raw = spare * shares
    counts = np.floor(raw).astype(np.int64)
    by_remainder = np.argsort(-(raw - counts), kind="stable")
    counts[by_remainder[: spare - counts.sum()]] += 1
    return counts + minimum


def _bundle_sizes(part: int, n_questions: int, rng: np.random.Generator) -> list[int]:
    """Sizes of bundles that hold exactly `n_questions` questions of `part` (the last
    bundle is cut short where needed)."""
    if part in FIXED_BUNDLE_SIZE:
        size = FIXED_BUNDLE_SIZE[part]
        sizes = [size] * -(-n_questions // size)
    else:
        probs = np.asarray(PART7_BUNDLE_COUNTS) / sum(PART7_BUNDLE_COUNTS)
        drawn = rng.choice(PART7_BUNDLE_SIZES, size=n_questions, p=probs)  # more than enough
        sizes = drawn[: np.searchsorted(np.cumsum(drawn), n_questions) + 1].tolist()
    sizes[-1] -= sum(sizes) - n_questions
    return sizes


def _tag_pools(config, rng: np.random.Generator) -> tuple[np.ndarray, list]:
    """Shuffled tag ids: one part tag per part, and per part a pool of skill tags sized by
    the part's share of questions."""
    tag_ids = rng.permutation(config.n_tags)
    pool_sizes = _split_counts(config.n_tags - N_PARTS, REAL_QUESTIONS_PER_PART, minimum=1)
    pools = np.split(tag_ids[N_PARTS:], np.cumsum(pool_sizes)[:-1])
    return tag_ids[:N_PARTS], pools


def _bundle_tags(
    part: int, size: int, part_tag: int, pool: np.ndarray, rng: np.random.Generator
) -> list[list[int]]:
    """Tags of the `size` questions of one bundle: each question's own skill tag, plus
    (outside parts 5 and 6) the part tag and 0-2 skill tags that the bundle shares."""
    shared: list[int] = []
    if part not in SINGLE_TAG_PARTS:
        n_shared = min(int(rng.integers(0, 3)), len(pool))
        shared = [part_tag, *rng.choice(pool, n_shared, replace=False).tolist()]
    tag_lists = []
    for own in rng.choice(pool, size).tolist():
        tags = [own, *(tag for tag in shared if tag != own)]
        tag_lists.append([tags[i] for i in rng.permutation(len(tags))])
    return tag_lists


def _make_questions(
    config, part_tags: np.ndarray, pools: list, rng: np.random.Generator
) -> tuple[pd.DataFrame, list[list[int]]]:
    """questions.csv (question ids follow a shuffled bundle order; bundle_id is the id of
    the bundle's first question) and each question's tags."""
    per_part = _split_counts(config.n_questions, REAL_QUESTIONS_PER_PART, minimum=MAX_BUNDLE)
    bundles = [
        (part, size)
        for part, count in zip(range(1, N_PARTS + 1), per_part.tolist(), strict=True)
        for size in _bundle_sizes(part, count, rng)
    ]
    rows, tag_lists = [], []
    for index in rng.permutation(len(bundles)).tolist():
        part, size = bundles[index]
        bundle_id = len(rows)
        for tags in _bundle_tags(part, size, int(part_tags[part - 1]), pools[part - 1], rng):
            rows.append((len(rows), bundle_id, int(rng.integers(0, N_CHOICES)), part))
            tag_lists.append(tags)
    questions = pd.DataFrame(rows, columns=["question_id", "bundle_id", "correct_answer", "part"])
    questions["tags"] = [" ".join(map(str, tags)) for tags in tag_lists]
    return questions, tag_lists


def _make_lectures(config, pools: list, rng: np.random.Generator) -> pd.DataFrame:
    """lectures.csv sorted by lecture_id: sparse unique ids in 0..32767 (like the real ids
    they may equal question ids; content_type_id tells them apart), parts in the real
    proportions, one skill tag of the lecture's part, types in the real proportions."""
    per_part = _split_counts(config.n_lectures, REAL_LECTURES_PER_PART, minimum=1)
    parts = rng.permutation(np.repeat(np.arange(1, N_PARTS + 1), per_part))
    tags = [int(rng.choice(pools[part - 1])) for part in parts.tolist()]
    type_probs = np.asarray(REAL_LECTURE_TYPE_COUNTS) / sum(REAL_LECTURE_TYPE_COUNTS)
    types = rng.choice(len(LECTURE_TYPES), size=config.n_lectures, p=type_probs)
    lecture_ids = np.sort(rng.choice(MAX_CONTENT_ID + 1, size=config.n_lectures, replace=False))
    return pd.DataFrame(
        {
            "lecture_id": lecture_ids,
            "tag": tags,
            "part": parts,
            "type_of": np.asarray(LECTURE_TYPES, dtype=object)[types],
        }
    )


def make_item_bank(config, rng: np.random.Generator) -> ItemBank:
    """Questions, lectures and the hidden item parameters (difficulty, discrimination,
    popularity) of the student model."""
    part_tags, pools = _tag_pools(config, rng)
    questions, tag_lists = _make_questions(config, part_tags, pools, rng)
    lectures = _make_lectures(config, pools, rng)
    n_q = len(questions)

    question_tags = np.full((n_q + 1, MAX_TAGS), config.n_tags, dtype=np.int64)
    for q, tags in enumerate(tag_lists):
        question_tags[q, : len(tags)] = tags
    n_question_tags = np.array([*map(len, tag_lists), 1], dtype=np.int64)

    tag_difficulty = np.append(rng.normal(0.0, config.tag_difficulty_sd, config.n_tags), 0.0)
    tag_mean = tag_difficulty[question_tags].sum(axis=1) / n_question_tags
    difficulty = tag_mean + rng.normal(0.0, config.item_difficulty_sd, n_q + 1)
    discrimination = rng.lognormal(
        math.log(config.discrimination_median), config.discrimination_sigma, n_q + 1
    )
    part = np.append(questions["part"].to_numpy(np.int8), np.int8(1))
    correct_answer = np.append(questions["correct_answer"].to_numpy(np.int8), np.int8(0))

    bundle_ids = questions["bundle_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, bundle_ids[1:] != bundle_ids[:-1]])
    sizes = np.diff(np.r_[starts, n_q])
    offsets = np.arange(MAX_BUNDLE)
    bundle_questions = np.where(offsets < sizes[:, None], starts[:, None] + offsets, n_q)
    popularity = rng.lognormal(0.0, config.popularity_sigma, len(starts))

    lecture_parts = lectures["part"].to_numpy()
    part_counts = np.bincount(lecture_parts, minlength=N_PARTS + 1)[1:]
    return ItemBank(
        questions=questions,
        lectures=lectures,
        question_tags=question_tags,
        n_question_tags=n_question_tags,
        difficulty=difficulty,
        discrimination=discrimination,
        base_seconds=np.asarray(config.answer_seconds)[part - 1],
        correct_answer=correct_answer,
        part=part,
        bundle_questions=bundle_questions,
        bundle_cumweight=np.cumsum(popularity) / popularity.sum(),
        lecture_part_start=np.r_[0, np.cumsum(part_counts)],
        lectures_by_part=np.argsort(lecture_parts, kind="stable"),
    )
