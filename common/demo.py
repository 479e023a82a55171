"""An embedded demo dataset: simulated students in the exact Riiid! file formats.

`generate_demo` builds a question bank, a lecture list and the histories of simulated
students; `write_demo` writes them as `train.csv`, `questions.csv` and `lectures.csv` in the
competition's text format, plus `demo_truth.csv` (row_id, p_true): the true probability of a
correct answer on every question row, so the oracle AUC of any evaluation is known. Every
number comes from one `numpy.random.Generator` seeded by `DemoConfig.seed`, so a seed fixes
the output byte for byte.

The student model (parameter names are `DemoConfig` fields)
-----------------------------------------------------------
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

Students. Student u has an ability theta_u ~ N(0, `ability_sd`), an answer speed
~ LogNormal(0, `speed_sigma`), a probability of reading the explanation after a container
~ Beta(`explanation_beta`) (some students nearly always read, some nearly never), and a rate
of taking lectures = `lecture_rate` * Gamma(shape 1/2, scale 2), at most 1/2 (most students
rarely take one). user_ids are unique random integers in 1..2^31-1.

Knowledge. k_{u,s} is student u's knowledge of skill s in logit units; it starts at 0 and
is bounded by `knowledge_max`. Between updates it fades towards 0,
k(t) = k(t0) * exp(-(t - t0) / tau) with tau = `forgetting_days`. After a question container
every answered question q moves each of its skills towards the bound,
k <- k + eta * (`knowledge_max` - k), eta = `learn_practice` (+ `learn_explanation` when the
student read the explanation); several questions on one skill in a container compound,
k <- k_max - (k_max - k) * prod(1 - eta). A lecture on skill s does the same with
eta = `learn_lecture`.

Answers. All questions of a container are answered with the knowledge from before the
container (feedback comes after it):
    z = clip(a_q * (theta_u + mean_{s in tags(q)} k_{u,s} - b_q), -`logit_clip`, `logit_clip`)
    p = 1/4 + 3/4 * sigmoid(z)       (four choices: a guessing floor of 1/4)
p is rounded to 6 decimals and is exactly the p_true written to demo_truth.csv;
answered_correctly ~ Bernoulli(p); user_answer is the correct answer when correct, else one
of the three wrong choices uniformly.

Time. A question takes base seconds of its part (`answer_seconds`) * the student's speed
* exp(-`answer_slowdown` * z) * LogNormal(0, `answer_noise_sigma`), in whole seconds, at most
`max_answer_seconds`: a student who is less likely to know the answer is slower, so elapsed
time carries signal.
A container's prior_question_elapsed_time, shown on the next question container, is its
mean milliseconds per question (integer ms). Between events a student idles
LogNormal(ln `idle_seconds`, `idle_sigma`), takes a short pause (1-30 min, log-uniform) with
probability `pause_prob` or a long break (1 hour to `max_break_days`, log-uniform, during
which knowledge fades) with probability `break_prob`, reads the explanation if it does
(LogNormal(ln `read_seconds`, 0.6)) and watches a lecture (LogNormal(ln `lecture_seconds`,
0.8)). A timestamp is the completion time of its event in ms since the student's first
event completed (first event at 0).

Histories. A student's number of events (question containers and lectures) is
LogNormal(ln `median_events`, `events_sigma`), at least 1 and at most `max_events`, which
gives heavy-tailed histories as in the real data (median near 40 rows, some thousands).
The first event is a question container; each later event is a lecture with the student's
lecture rate, else a question container. A lecture is on a random lecture of the part of the
student's latest question; it has its own timestamp and task_container_id, user_answer and
answered_correctly -1, an empty prior_question_elapsed_time and prior_question_had_explanation
False (as in the real data); it does not change what the next question container reports about
the previous question container.

Simulation. All students advance together, one event per step, with numpy operations over
the students still active (students are simulated longest history first, so the active ones
are a prefix of the state arrays); the rows are then ordered by user_id and time and numbered
0..N-1 like the real train.csv.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from common.files import atomic_file
from common.schema import LECTURE, N_CHOICES, N_PARTS, QUESTION, TRAIN_COLUMNS, TRAIN_DTYPES

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
MS_PER_DAY = 86_400_000

OUTPUT_FILES = ("train.csv", "questions.csv", "lectures.csv", "demo_truth.csv")


@dataclass(frozen=True)
class DemoConfig:
    """Size, seed and the parameters of the student model (see the module docstring)."""

    n_users: int = 2_000
    n_questions: int = 1_500  # enough for ~7 bundles per skill tag, few enough to be seen often
    n_lectures: int = 300  # the real bank has 418 lectures for 13,523 questions
    seed: int = 0
    n_tags: int = 188  # the competition's tags are 0..187
    # Histories: ~1.4 rows per event, so a median of 40 rows; mean/median = exp(sigma^2 / 2)
    # ~ 6 as in the real train.csv (about 260 rows per user, median about 40).
    median_events: float = 29.0
    events_sigma: float = 1.95
    max_events: int = 10_000  # the real task_container_id stops at 9999; fits int16
    # Items
    tag_difficulty_sd: float = 0.5
    item_difficulty_sd: float = 0.8
    discrimination_median: float = 1.5  # oracle AUC ~0.80, where the best real models end
    discrimination_sigma: float = 0.25
    popularity_sigma: float = 1.0
    # Students
    ability_sd: float = 1.0
    speed_sigma: float = 0.3
    explanation_beta: tuple[float, float] = (2.0, 0.5)  # mean 0.8; the real rate is ~0.9
    lecture_rate: float = 0.027  # lecture events per event: ~2% of rows are lectures
    # Knowledge, in logit units
    knowledge_max: float = 1.5  # a mastered skill is worth 1.5 sd of ability
    learn_practice: float = 0.04
    learn_explanation: float = 0.08  # reading the explanation triples what a question teaches
    learn_lecture: float = 0.25
    forgetting_days: float = 5.0  # most breaks last hours to days, so forgetting is visible
    logit_clip: float = 12.0  # keeps p_true, rounded to 6 decimals, strictly inside (1/4, 1)
    # Time
    answer_seconds: tuple[float, ...] = (22.0, 18.0, 23.0, 23.0, 17.0, 22.0, 30.0)  # per part
    answer_slowdown: float = 0.2  # exp(0.2 * 2): 1.5x slower at z = -2 than at z = 0
    answer_noise_sigma: float = 0.35
    max_answer_seconds: float = 300.0  # the real elapsed times stop at 300000 ms
    idle_seconds: float = 3.0
    idle_sigma: float = 0.7
    read_seconds: float = 10.0
    lecture_seconds: float = 180.0
    pause_prob: float = 0.05
    break_prob: float = 0.03  # sessions of ~30 events, as in the real data
    max_break_days: float = 30.0

    def __post_init__(self) -> None:
        checks = {
            "n_users >= 1": self.n_users >= 1,
            f"{N_PARTS * MAX_BUNDLE} <= n_questions <= {MAX_CONTENT_ID + 1}": (
                N_PARTS * MAX_BUNDLE <= self.n_questions <= MAX_CONTENT_ID + 1
            ),
            f"{N_PARTS} <= n_lectures <= {MAX_CONTENT_ID + 1}": (
                N_PARTS <= self.n_lectures <= MAX_CONTENT_ID + 1
            ),
            f"{2 * N_PARTS} <= n_tags <= {MAX_CONTENT_ID}": (
                2 * N_PARTS <= self.n_tags <= MAX_CONTENT_ID
            ),
            "1 <= max_events <= 32768": 1 <= self.max_events <= MAX_CONTENT_ID + 1,
            f"answer_seconds has {N_PARTS} values": len(self.answer_seconds) == N_PARTS,
            "0 <= lecture_rate < 1": 0 <= self.lecture_rate < 1,
            "pause_prob + break_prob <= 1": self.pause_prob + self.break_prob <= 1,
        }
        failed = [rule for rule, ok in checks.items() if not ok]
        if failed:
            raise ValueError(f"DemoConfig: expected {', '.join(failed)}; got {self}")


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


@dataclass
class DemoData:
    """A generated demo: the four output tables. `train` holds train.csv's columns in file
    order as numpy arrays (missing values: NaN elapsed time, -1 had_explanation)."""

    config: DemoConfig
    questions: pd.DataFrame
    lectures: pd.DataFrame
    train: dict[str, np.ndarray]
    p_true: np.ndarray  # (number of question rows,) in file order
    seconds: float = 0.0

    @property
    def n_rows(self) -> int:
        return len(self.train["row_id"])

    def train_frame(self) -> pd.DataFrame:
        """train.csv as a DataFrame with the competition dtypes (nullable boolean)."""
        frame = pd.DataFrame({name: self.train[name] for name in TRAIN_COLUMNS})
        explanation = self.train["prior_question_had_explanation"]
        frame["prior_question_had_explanation"] = pd.array(
            np.where(explanation < 0, None, explanation == 1), dtype="boolean"
        )
        return frame.astype(TRAIN_DTYPES)

    def summary(self) -> dict[str, float | int]:
        is_question = self.train["content_type_id"] == QUESTION
        users, rows_per_user = np.unique(self.train["user_id"], return_counts=True)
        return {
            "rows": self.n_rows,
            "students": len(users),
            "questions": len(self.questions),
            "lectures": len(self.lectures),
            "question_rows": int(is_question.sum()),
            "lecture_rows": int((~is_question).sum()),
            "median_rows_per_student": float(np.median(rows_per_user)),
            "share_correct": float(self.train["answered_correctly"][is_question].mean()),
            "seconds": round(self.seconds, 2),
        }


# ----------------------------------------------------------------------------- item bank


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


def _tag_pools(config: DemoConfig, rng: np.random.Generator) -> tuple[np.ndarray, list]:
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
    config: DemoConfig, part_tags: np.ndarray, pools: list, rng: np.random.Generator
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


def _make_lectures(config: DemoConfig, pools: list, rng: np.random.Generator) -> pd.DataFrame:
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


def make_item_bank(config: DemoConfig, rng: np.random.Generator) -> ItemBank:
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


# ----------------------------------------------------------------------------- students


@dataclass
class _Students:
    """Per-student parameters and state, in simulation order (longest history first)."""

    n_events: np.ndarray  # (U,) descending
    ability: np.ndarray  # (U,)
    speed: np.ndarray  # (U,)
    read_prob: np.ndarray  # (U,)
    lecture_prob: np.ndarray  # (U,)
    knowledge: np.ndarray  # (U, n_tags + 1) float32; column n_tags pads, stays 0
    updated_at: np.ndarray  # (U, n_tags + 1) int64 ms of the latest knowledge update
    clock: np.ndarray  # (U,) int64 ms at the end of the latest event (reading included)
    last_mean_ms: np.ndarray  # (U,) int32 of the latest question container, -1 before
    last_read: np.ndarray  # (U,) int8 read its explanation, -1 before
    last_part: np.ndarray  # (U,) int8 part of the latest question container


def _draw_students(config: DemoConfig, rng: np.random.Generator) -> _Students:
    n = config.n_users
    n_events = rng.lognormal(math.log(config.median_events), config.events_sigma, n)
    n_events = np.clip(np.rint(n_events), 1, config.max_events).astype(np.int64)
    width = config.n_tags + 1
    return _Students(
        n_events=np.sort(n_events)[::-1].copy(),
        ability=rng.normal(0.0, config.ability_sd, n),
        speed=rng.lognormal(0.0, config.speed_sigma, n),
        read_prob=rng.beta(*config.explanation_beta, n),
        lecture_prob=np.minimum(config.lecture_rate * rng.gamma(0.5, 2.0, n), 0.5),
        knowledge=np.zeros((n, width), dtype=np.float32),
        updated_at=np.zeros((n, width), dtype=np.int64),
        clock=np.zeros(n, dtype=np.int64),
        last_mean_ms=np.full(n, -1, dtype=np.int32),
        last_read=np.full(n, -1, dtype=np.int8),
        last_part=np.ones(n, dtype=np.int8),
    )


# Columns of the rows the simulation emits: a simulation user index instead of user_id,
# -1 where a prior value is missing.
_ROW_DTYPES: dict[str, type] = {
    "user": np.int32,
    "timestamp": np.int64,
    "content_id": np.int16,
    "content_type_id": np.int8,
    "task_container_id": np.int16,
    "user_answer": np.int8,
    "answered_correctly": np.int8,
    "prior_mean_ms": np.int32,
    "prior_read": np.int8,
    "p_true": np.float64,
}


def _log_uniform(low: float, high: float, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.exp(rng.uniform(math.log(low), math.log(high), n))


class _Simulation:
    """Advances all students one event per step and collects the emitted rows."""

    def __init__(self, bank: ItemBank, config: DemoConfig, rng: np.random.Generator) -> None:
        self.bank, self.config, self.rng = bank, config, rng
        self.students = _draw_students(config, rng)
        self.tau_ms = config.forgetting_days * MS_PER_DAY
        self.lecture_ids = bank.lectures["lecture_id"].to_numpy()
        self.lecture_tags = bank.lectures["tag"].to_numpy()
        self.parts: dict[str, list[np.ndarray]] = {name: [] for name in _ROW_DTYPES}

    def run(self) -> dict[str, np.ndarray]:
        """Simulate every history; return the rows in emission order (step by step)."""
        n_events = self.students.n_events  # descending: the active students are a prefix
        n_active = np.searchsorted(-n_events, -np.arange(n_events[0]), side="left")
        for step, m in enumerate(n_active.tolist()):
            users = np.arange(m)
            start = self.students.clock[:m] + self._gap_ms(m)
            lecture = (self.rng.random(m) < self.students.lecture_prob[:m]) & (step > 0)
            if not lecture.all():
                self._answer_containers(users[~lecture], start[~lecture], step)
            if lecture.any():
                self._take_lectures(users[lecture], start[lecture], step)
        return {
            name: np.concatenate(parts) if parts else np.empty(0, _ROW_DTYPES[name])
            for name, parts in self.parts.items()
        }

    def _emit(self, n: int, **columns: np.ndarray | float) -> None:
        assert columns.keys() == _ROW_DTYPES.keys(), f"columns {sorted(columns)}"
        for name, values in columns.items():
            dtype = _ROW_DTYPES[name]
            if np.ndim(values) == 0:
                self.parts[name].append(np.full(n, values, dtype=dtype))
            else:
                assert len(values) == n, f"{name}: {len(values)} values for {n} rows"
                self.parts[name].append(np.asarray(values, dtype=dtype))

    def _gap_ms(self, n: int) -> np.ndarray:
        """Time between the end of a student's event and the start of the next: idling,
        now and then a pause (minutes) or a long break (hours to weeks)."""
        config, rng = self.config, self.rng
        idle = rng.lognormal(math.log(config.idle_seconds), config.idle_sigma, n)
        pause = _log_uniform(60.0, 1800.0, n, rng)
        long_break = _log_uniform(3600.0, config.max_break_days * 86_400.0, n, rng)
        which = rng.random(n)
        extra = np.where(which < config.pause_prob, pause, 0.0)
        extra = np.where(which > 1.0 - config.break_prob, long_break, extra)
        return np.maximum(np.rint((idle + extra) * 1000.0), 1).astype(np.int64)

    def _p_correct(
        self, users: np.ndarray, questions: np.ndarray, start: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The model's logit and p_true for each student's bundle, from the knowledge
        faded to the container's start. Shapes (n, MAX_BUNDLE)."""
        bank, students = self.bank, self.students
        tags = bank.question_tags[questions]  # (n, MAX_BUNDLE, MAX_TAGS)
        u3 = users[:, None, None]
        fade = np.exp(-(start[:, None, None] - students.updated_at[u3, tags]) / self.tau_ms)
        knowledge = (students.knowledge[u3, tags] * fade).sum(axis=2)
        knowledge /= bank.n_question_tags[questions]  # mean over the question's skills
        logit = bank.discrimination[questions] * (
            students.ability[users, None] + knowledge - bank.difficulty[questions]
        )
        logit = np.clip(logit, -self.config.logit_clip, self.config.logit_clip)
        guess = 1.0 / N_CHOICES
        return logit, np.round(guess + (1.0 - guess) / (1.0 + np.exp(-logit)), 6)

    def _answer_ms(self, users: np.ndarray, questions: np.ndarray, logit: np.ndarray) -> np.ndarray:
        """Whole seconds per question, in ms; slower where the answer is less likely
        known. Shape (n, MAX_BUNDLE), 0 on padding."""
        seconds = (
            self.bank.base_seconds[questions]
            * self.students.speed[users, None]
            * np.exp(-self.config.answer_slowdown * logit)
            * self.rng.lognormal(0.0, self.config.answer_noise_sigma, questions.shape)
        )
        seconds = np.minimum(np.rint(seconds), self.config.max_answer_seconds)
        return (seconds * 1000.0).astype(np.int64) * (questions < self.bank.n_questions)

    def _answer_containers(self, users: np.ndarray, start: np.ndarray, step: int) -> None:
        """One question container for each of `users`, all of its questions answered with
        the knowledge from before it; then feedback: the explanation and learning."""
        bank, students, config, rng = self.bank, self.students, self.config, self.rng
        n = len(users)
        bundle = np.searchsorted(bank.bundle_cumweight, rng.random(n), side="right")
        questions = bank.bundle_questions[np.minimum(bundle, len(bank.bundle_cumweight) - 1)]
        valid = questions < bank.n_questions  # (n, MAX_BUNDLE)
        logit, p_true = self._p_correct(users, questions, start)
        correct = rng.random(questions.shape) < p_true
        key = bank.correct_answer[questions]
        wrong = (key + rng.integers(1, N_CHOICES, questions.shape)) % N_CHOICES
        total_ms = self._answer_ms(users, questions, logit).sum(axis=1)
        timestamp = start + total_ms
        read = rng.random(n) < students.read_prob[users]
        read_ms = np.rint(rng.lognormal(math.log(config.read_seconds), 0.6, n) * 1000.0)

        row = np.broadcast_to(np.arange(n)[:, None], questions.shape)[valid]
        self._emit(
            len(row),
            user=users[row],
            timestamp=timestamp[row],
            content_id=questions[valid],
            content_type_id=QUESTION,
            task_container_id=step,
            user_answer=np.where(correct, key, wrong)[valid],
            answered_correctly=correct[valid],
            prior_mean_ms=students.last_mean_ms[users][row],
            prior_read=students.last_read[users][row],
            p_true=p_true[valid],
        )
        students.last_mean_ms[users] = total_ms // valid.sum(axis=1)
        students.last_read[users] = read
        students.last_part[users] = bank.part[questions[:, 0]]
        students.clock[users] = timestamp + np.where(read, read_ms, 0).astype(np.int64)

        tags = bank.question_tags[questions]  # padding questions have only padding tags
        has_tag = tags < config.n_tags
        eta = config.learn_practice + config.learn_explanation * read  # (n,)
        pair = np.broadcast_to(np.arange(n)[:, None, None], tags.shape)[has_tag]
        self._learn(users[pair], tags[has_tag], eta[pair], timestamp[pair])

    def _take_lectures(self, users: np.ndarray, start: np.ndarray, step: int) -> None:
        """One lecture for each of `users`, from the part of the student's latest
        question container."""
        bank, config, rng = self.bank, self.config, self.rng
        n = len(users)
        part = self.students.last_part[users].astype(np.int64)
        first = bank.lecture_part_start[part - 1]
        count = bank.lecture_part_start[part] - first
        lecture = bank.lectures_by_part[first + (rng.random(n) * count).astype(np.int64)]
        watch_ms = np.rint(rng.lognormal(math.log(config.lecture_seconds), 0.8, n) * 1000.0)
        timestamp = start + watch_ms.astype(np.int64)
        self._emit(
            n,
            user=users,
            timestamp=timestamp,
            content_id=self.lecture_ids[lecture],
            content_type_id=LECTURE,
            task_container_id=step,
            user_answer=-1,
            answered_correctly=-1,
            prior_mean_ms=-1,
            prior_read=0,  # the real data has False, not empty, on lecture rows
            p_true=np.nan,
        )
        self.students.clock[users] = timestamp
        eta = np.full(n, config.learn_lecture)
        self._learn(users, self.lecture_tags[lecture], eta, timestamp)

    def _learn(self, users: np.ndarray, tags: np.ndarray, eta: np.ndarray, now: np.ndarray) -> None:
        """Fade each (user, tag) pair's knowledge to `now`, then move it towards the bound:
        k <- k_max - (k_max - k) * prod(1 - eta) over the pair's occurrences."""
        students, k_max = self.students, self.config.knowledge_max
        flat = users.astype(np.int64) * students.knowledge.shape[1] + tags
        pairs, inverse = np.unique(flat, return_inverse=True)
        inverse = inverse.reshape(-1)  # numpy 2.0 kept the input's shape here
        log_keep = np.bincount(inverse, weights=np.log1p(-eta), minlength=len(pairs))
        pair_now = np.empty(len(pairs), dtype=np.int64)
        pair_now[inverse] = now  # one student's pairs share one time
        knowledge = students.knowledge.reshape(-1)  # views: writes go to the state
        updated_at = students.updated_at.reshape(-1)
        faded = knowledge[pairs] * np.exp(-(pair_now - updated_at[pairs]) / self.tau_ms)
        knowledge[pairs] = k_max - (k_max - faded) * np.exp(log_keep)
        updated_at[pairs] = pair_now


def simulate_students(
    bank: ItemBank, config: DemoConfig, rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Simulate `config.n_users` histories; return train.csv's columns in file order
    (prior_question_elapsed_time NaN and prior_question_had_explanation -1 where missing)
    and p_true of the question rows in file order."""
    simulation = _Simulation(bank, config, rng)
    return _to_file_order(simulation.run(), config.n_users, rng)


def _draw_user_ids(n: int, rng: np.random.Generator) -> np.ndarray:
    """Unique positive int32 ids spread over the whole range, like the real user_ids."""
    return (rng.choice(np.iinfo(np.int32).max, size=n, replace=False) + 1).astype(np.int32)


def _to_file_order(
    rows: dict[str, np.ndarray], n_users: int, rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Order rows by user_id then time (rows were emitted step by step, so a stable sort
    by user keeps each history in time order), shift each history to start at 0 and
    number the rows."""
    user_ids = _draw_user_ids(n_users, rng)
    rank = np.argsort(np.argsort(user_ids, kind="stable"), kind="stable")
    order = np.argsort(rank[rows["user"]], kind="stable")
    ordered = {name: values[order] for name, values in rows.items()}
    del rows

    user = ordered.pop("user")
    first_row = np.flatnonzero(np.r_[True, user[1:] != user[:-1]])
    first_timestamp = ordered["timestamp"][first_row]
    ordered["timestamp"] -= np.repeat(first_timestamp, np.diff(np.r_[first_row, len(user)]))
    prior_mean_ms = ordered.pop("prior_mean_ms")
    p_true = ordered.pop("p_true")
    train = {
        "row_id": np.arange(len(user), dtype=np.int64),
        "timestamp": ordered["timestamp"],
        "user_id": user_ids[user],
        "content_id": ordered["content_id"],
        "content_type_id": ordered["content_type_id"],
        "task_container_id": ordered["task_container_id"],
        "user_answer": ordered["user_answer"],
        "answered_correctly": ordered["answered_correctly"],
        "prior_question_elapsed_time": np.where(prior_mean_ms < 0, np.nan, prior_mean_ms),
        "prior_question_had_explanation": ordered["prior_read"],
    }
    assert list(train) == TRAIN_COLUMNS, f"columns {list(train)}"
    return train, p_true[ordered["content_type_id"] == QUESTION]


def generate_demo(config: DemoConfig) -> DemoData:
    """The whole demo for `config`, from one generator seeded with `config.seed`."""
    began = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    bank = make_item_bank(config, rng)
    train, p_true = simulate_students(bank, config, rng)
    return DemoData(
        config=config,
        questions=bank.questions,
        lectures=bank.lectures,
        train=train,
        p_true=p_true,
        seconds=time.perf_counter() - began,
    )


# ----------------------------------------------------------------------------- writing


def _write_arrow_csv(table: pa.Table, path: Path) -> None:
    """Write `table` as CSV with an unquoted header and unquoted values (pyarrow quotes
    header names and strings otherwise)."""
    with pa.OSFile(str(path), "wb") as sink:
        sink.write((",".join(table.column_names) + "\n").encode())
        options = pa_csv.WriteOptions(include_header=False, quoting_style="none")
        pa_csv.write_csv(table, sink, write_options=options)


def _train_table(train: dict[str, np.ndarray]) -> pa.Table:
    """train.csv's columns in the real file's text form: the elapsed time as an integer
    float ("13000.0"), booleans as True/False, missing values empty."""
    elapsed = train["prior_question_elapsed_time"]
    missing = np.isnan(elapsed)
    whole_ms = pa.array(np.where(missing, 0, elapsed).astype(np.int64), mask=missing)
    elapsed_text = pc.binary_join_element_wise(pc.cast(whole_ms, pa.string()), ".0", "")
    explanation = train["prior_question_had_explanation"]
    no_explanation = explanation < 0
    explanation_text = pc.take(
        pa.array(["False", "True"]),
        pa.array(np.where(no_explanation, 0, explanation), mask=no_explanation),
    )
    columns = {name: pa.array(train[name]) for name in TRAIN_COLUMNS}
    columns["prior_question_elapsed_time"] = elapsed_text
    columns["prior_question_had_explanation"] = explanation_text
    return pa.table(columns)


def write_demo(demo: DemoData, output_dir: str | Path) -> list[Path]:
    """Write train.csv, questions.csv, lectures.csv and demo_truth.csv into `output_dir`
    (each file atomically; other files there are left alone). Returns the paths."""
    output_dir = Path(output_dir)
    paths = [output_dir / name for name in OUTPUT_FILES]
    train_path, questions_path, lectures_path, truth_path = paths
    with atomic_file(questions_path) as tmp:
        demo.questions.to_csv(tmp, index=False, lineterminator="\n")
    with atomic_file(lectures_path) as tmp:
        demo.lectures.to_csv(tmp, index=False, lineterminator="\n")
    is_question = demo.train["content_type_id"] == QUESTION
    truth = pa.table({"row_id": demo.train["row_id"][is_question], "p_true": demo.p_true})
    with atomic_file(truth_path) as tmp:
        _write_arrow_csv(truth, tmp)
    with atomic_file(train_path) as tmp:
        _write_arrow_csv(_train_table(demo.train), tmp)
    return paths


def make_demo(config: DemoConfig, output_dir: str | Path) -> DemoData:
    """Generate the demo for `config` and write it into `output_dir`; `seconds` covers
    both."""
    began = time.perf_counter()
    demo = generate_demo(config)
    write_demo(demo, output_dir)
    return dataclasses.replace(demo, seconds=time.perf_counter() - began)
