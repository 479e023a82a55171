"""The past-event features (common.data.past_features) computed online, one API group at a
time, from every student's revealed history: what the Kaggle notebook and 04's stream feed
the boosted trees. Tested equal to the batch computation on real rows.

A student's state is their question history in arrival order (question id, outcome,
timestamp), of which the first `filed` entries are revealed, then at most one pending
container (its outcomes arrive with the next group's prior_group_answers_correct; its
elapsed time and explanation flag with the student's next container, which files it), and
running sums of the elapsed times and explanation flags of the filed questions. Every
feature is a function of the filed history and the new container, as in the batch
definition.

Memory is a flat history: the snapshot's (every training student's questions, 11 bytes
each with 16-bit question ids) plus what the stream appends per student. This module ships
in the Kaggle bundle: Python 3.7, numpy 1.19, pandas 1.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.data.api_group import ApiGroup, read_group
from common.data.features import QuestionSequences
from common.data.past_features import EXPLAINED, FEATURE_NAMES, RECENT, question_count
from common.data.question_fields import elapsed_bucket, explanation_code
from common.data.question_rates import QuestionRates
from common.files import atomic_file

COLUMN = {name: i for i, name in enumerate(FEATURE_NAMES)}
SLOT_ARRAYS = (  # per student slot: name, dtype, fill
    ("base_start", np.int64, 0),  # where the student's snapshot history starts
    ("base_length", np.int64, 0),  # and its length (filed and pending)
    ("filed", np.int64, 0),  # revealed history entries (snapshot and stream)
    ("pending", np.int64, 0),  # questions of the pending container (0: none)
    ("revealed", np.bool_, False),  # whether its outcomes are known
    ("explained", np.int64, 0),  # filed questions whose explanation was read
    ("explanation_known", np.int64, 0),  # filed questions with a known flag
    ("elapsed_sum", np.float64, 0.0),  # seconds, over filed questions with a known time
    ("elapsed_count", np.int64, 0),
    ("previous_elapsed", np.float64, np.nan),  # the latest filed container's seconds
)
# per slot besides the arrays: the slot index entry (~116 B, as common.stream.student_store)
SLOT_INDEX_BYTES = 128


def slot_bytes() -> int:
    """Bytes a student slot holds besides the history: its arrays and index entry."""
    return sum(np.dtype(dtype).itemsize for _, dtype, _ in SLOT_ARRAYS) + SLOT_INDEX_BYTES


def _ratio(top: float, bottom: float) -> float:
    return top / bottom if bottom > 0 else np.nan


def _joined(first: tuple, second: tuple) -> tuple:
    """Two (question, outcome, timestamp) triples, one after the other."""
    return tuple(np.concatenate((first[i], second[i])) for i in range(len(first)))


def _elapsed_seconds(prior_elapsed_ms: float) -> float:
    """A container's elapsed time as the batch features read it: its bucket's seconds,
    NaN when unknown."""
    bucket = int(elapsed_bucket(np.array([prior_elapsed_ms], dtype=np.float64))[0])
    return float(bucket - 1) if bucket > 0 else np.nan


@dataclass
class FeatureSnapshot:
    """Every known student's question history at the start of a stream: `length[i]`
    entries from `start[i]` of the flat arrays, the first `filed[i]` revealed, the rest
    their last container (outcomes known; elapsed time and explanation flag not yet), and
    the running sums over the filed entries."""

    users: np.ndarray  # (n,) int64
    start: np.ndarray  # (n,) int64
    length: np.ndarray  # (n,) int64
    filed: np.ndarray  # (n,) int64
    question: np.ndarray  # (entries,) int16 or int32
    response: np.ndarray  # (entries,) int8
    timestamp: np.ndarray  # (entries,) int64 ms
    explained: np.ndarray  # (n,) int64
    explanation_known: np.ndarray
    elapsed_sum: np.ndarray  # (n,) float64 seconds
    elapsed_count: np.ndarray
    previous_elapsed: np.ndarray  # (n,) float64, NaN: none

    def save(self, path) -> None:
        with atomic_file(path) as tmp, open(tmp, "wb") as handle:
            np.savez_compressed(handle, **self.__dict__)

    @classmethod
    def load(cls, path) -> FeatureSnapshot:
        with np.load(str(path), allow_pickle=False) as data:
            return cls(**{name: data[name] for name in data.files})

    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.__dict__.values())


def build_feature_snapshot(
    sequences: QuestionSequences, users: np.ndarray, length: np.ndarray
) -> FeatureSnapshot:
    """The snapshot of questions [0, length[s]) of every student s with length > 0: the
    last container pending (its elapsed time and explanation flag come with the student's
    next container), the earlier ones filed."""
    keep = np.flatnonzero(length > 0)
    n_items = np.asarray(length)[keep].astype(np.int64)
    begin = sequences.offsets[keep]
    index = np.repeat(begin - np.cumsum(n_items) + n_items, n_items) + np.arange(n_items.sum())
    filed = sequences.container_first[begin + n_items - 1].astype(np.int64)
    owner = np.repeat(np.arange(len(keep)), n_items)
    is_filed = np.arange(n_items.sum()) - np.repeat(np.cumsum(n_items) - n_items, n_items)
    is_filed = is_filed < filed[owner]
    bucket = sequences.elapsed[index].astype(np.int64)
    known = is_filed & (bucket > 0)
    code = sequences.explanation[index]
    counts = len(keep)
    previous = np.full(counts, np.nan)
    has = filed > 0
    last_filed = begin[has] + filed[has] - 1
    last_bucket = sequences.elapsed[last_filed].astype(np.int64)
    previous[has] = np.where(last_bucket > 0, last_bucket - 1, np.nan)
    question_type = np.int16 if sequences.question.max(initial=0) < 2**15 else np.int32
    return FeatureSnapshot(
        users=np.asarray(users)[keep].astype(np.int64),
        start=np.cumsum(n_items) - n_items,
        length=n_items,
        filed=filed,
        question=sequences.question[index].astype(question_type),
        response=sequences.response[index].astype(np.int8),
        timestamp=sequences.timestamp[index].astype(np.int64),
        explained=np.bincount(owner, is_filed & (code == EXPLAINED), counts).astype(np.int64),
        explanation_known=np.bincount(owner, is_filed & (code > 0), counts).astype(np.int64),
        elapsed_sum=np.bincount(owner, np.where(known, bucket - 1, 0), counts).astype(float),
        elapsed_count=np.bincount(owner, known, counts).astype(np.int64),
        previous_elapsed=previous,
    )


class PastFeatureState:
    """Every student's revealed history, updated as the API serves it. Per group:
    `group_features(test_df)` (the previous group's outcomes from its first row's lists,
    then each student's new container). Per container: `features(...)` for a student's
    new task container (it first files the previous one, whose outcomes `reveal` gave and
    whose elapsed time and explanation flag arrive on this container's first row), then
    `reveal` once its outcomes are known."""

    def __init__(
        self,
        parts: np.ndarray,
        skill: np.ndarray,
        rates: QuestionRates,
        snapshot: FeatureSnapshot | None = None,
    ):
        self.parts, self.skill, self.rates = np.asarray(parts), np.asarray(skill), rates
        self.slot_of: dict[int, int] = {}
        self.capacity = 0
        self.slots: dict[str, np.ndarray] = {}
        # the stream's own entries per slot: question, outcome (-1 until revealed), time
        self.extra: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.base = (np.zeros(0, np.int32), np.zeros(0, np.int8), np.zeros(0, np.int64))
        self.previous: ApiGroup | None = None  # the last group, read
        if snapshot is not None:
            self._load_snapshot(snapshot)

    # -- storage -----------------------------------------------------------------------
    def _grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        capacity = max(needed, self.capacity + self.capacity // 4, 1024)
        for name, dtype, fill in SLOT_ARRAYS:
            grown = np.full(capacity, fill, dtype=dtype)
            old = self.slots.get(name)
            if old is not None:
                grown[: len(old)] = old
            self.slots[name] = grown
        self.capacity = capacity

    def _load_snapshot(self, snapshot: FeatureSnapshot) -> None:
        n = len(snapshot.users)
        self._grow(n)
        self.slot_of = dict(zip(snapshot.users.tolist(), range(n)))  # noqa: B905 (Python 3.7)
        self.base = (snapshot.question, snapshot.response, snapshot.timestamp)
        values = {
            "base_start": snapshot.start,
            "base_length": snapshot.length,
            "filed": snapshot.filed,
            "pending": snapshot.length - snapshot.filed,
            "revealed": np.ones(n, dtype=bool),
            "explained": snapshot.explained,
            "explanation_known": snapshot.explanation_known,
            "elapsed_sum": snapshot.elapsed_sum,
            "elapsed_count": snapshot.elapsed_count,
            "previous_elapsed": snapshot.previous_elapsed,
        }
        for name, value in values.items():
            self.slots[name][:n] = value

    def _slot(self, user: int) -> int:
        slot = self.slot_of.get(user)
        if slot is None:
            slot = len(self.slot_of)
            self._grow(slot + 1)
            self.slot_of[user] = slot
        return slot

    def history(self, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(question, outcome, timestamp) of the slot's whole history, filed and pending."""
        start, length = self.slots["base_start"][slot], self.slots["base_length"][slot]
        base = tuple(a[start : start + length] for a in self.base)
        extra = self.extra.get(slot)
        if extra is None:
            return base  # type: ignore[return-value]
        return _joined(base, extra)

    def state_bytes(self) -> dict[str, int]:
        """What the state holds: the snapshot's history, the per-slot arrays (for
        `capacity` slots, with their index entries) and the stream's own entries."""
        history = sum(a.nbytes for a in self.base)
        slots = slot_bytes() * self.capacity
        extra = sum(a.nbytes for arrays in self.extra.values() for a in arrays)
        total = history + slots + extra
        return {"history": history, "slots": slots, "stream": extra, "total": total}

    def bytes_per_student(self) -> float:
        return self.state_bytes()["total"] / max(len(self.slot_of), 1)

    # -- one container ---------------------------------------------------------------
    def features(
        self,
        user: int,
        questions: np.ndarray,
        timestamp: int,
        prior_elapsed_ms: float,
        prior_explanation: int,
    ) -> np.ndarray:
        """(len(questions), len(FEATURE_NAMES)) features of a student's new container.
        prior_elapsed_ms (NaN: unknown) and prior_explanation (-1 blank, 0, 1) are its
        first question row's prior_question_* fields: they complete the pending
        container, which is filed first. The new container becomes the pending one."""
        slot = self._slot(int(user))
        if self.slots["pending"][slot]:
            self._file(slot, prior_elapsed_ms, prior_explanation)
        questions = np.asarray(questions, dtype=np.int64)
        values = self._rows(slot, questions, float(timestamp))
        self._append(slot, questions, int(timestamp))
        return values

    def reveal(self, user: int, outcomes: np.ndarray) -> None:
        """The outcomes (0/1) of the student's pending container, in its question order."""
        slot = self.slot_of[int(user)]
        pending = int(self.slots["pending"][slot])
        outcomes = np.asarray(outcomes, dtype=np.int8)
        if pending == 0 or len(outcomes) != pending or slot not in self.extra:
            raise ValueError(f"user {user}: outcomes do not match the pending container")
        self.extra[slot][1][-pending:] = outcomes
        self.slots["revealed"][slot] = True

    def _append(self, slot: int, questions: np.ndarray, timestamp: int) -> None:
        new = (
            questions.astype(np.int32),
            np.full(len(questions), -1, dtype=np.int8),
            np.full(len(questions), timestamp, dtype=np.int64),
        )
        old = self.extra.get(slot)
        self.extra[slot] = new if old is None else _joined(old, new)
        self.slots["pending"][slot] = len(questions)
        self.slots["revealed"][slot] = False

    def _file(self, slot: int, prior_elapsed_ms: float, prior_explanation: int) -> None:
        """The pending container joins the revealed history, with the elapsed time and
        explanation flag its successor's first row reports."""
        if not self.slots["revealed"][slot]:
            raise ValueError("a student's next container arrived before the outcomes of the last")
        size = int(self.slots["pending"][slot])
        elapsed = _elapsed_seconds(prior_elapsed_ms)
        code = int(explanation_code(np.array([prior_explanation]))[0])
        s = self.slots
        s["explained"][slot] += size * (code == EXPLAINED)
        s["explanation_known"][slot] += size * (code > 0)
        if not np.isnan(elapsed):
            s["elapsed_sum"][slot] += size * elapsed
            s["elapsed_count"][slot] += size
        s["previous_elapsed"][slot] = elapsed
        s["filed"][slot] += size
        s["pending"][slot] = 0

    def _lookup(self, table: np.ndarray, question: np.ndarray) -> np.ndarray:
        inside = (question >= 0) & (question < len(table))
        return np.where(inside, table[np.where(inside, question, 0)], -1).astype(np.int64)

    def _rows(self, slot: int, questions: np.ndarray, timestamp: float) -> np.ndarray:
        """The container's feature rows from the slot's filed history."""
        question, outcome, seen = self.history(slot)  # all filed: the pending one was filed
        first_time = float(seen[0]) if len(seen) else timestamp
        out = np.full((len(questions), len(FEATURE_NAMES)), np.nan)
        self._student_columns(out, slot, outcome, seen, timestamp, first_time)
        out[:, COLUMN["container_size"]] = len(questions)
        self._keyed_columns(out, questions, question, outcome, seen, timestamp)
        out[:, COLUMN["question_rate"]] = self.rates(questions)
        out[:, COLUMN["question_count"]] = question_count(self.rates, questions)
        return out

    def _student_columns(self, out, slot, outcome, seen, timestamp: float, first: float) -> None:
        s, answered = self.slots, len(outcome)
        recent = outcome[-RECENT:]
        out[:, COLUMN["answered"]] = answered
        out[:, COLUMN["correct_rate"]] = _ratio(float(outcome.sum()), answered)
        out[:, COLUMN["recent_rate"]] = _ratio(float(recent.sum()), len(recent))
        out[:, COLUMN["seconds_since_first"]] = (timestamp - first) / 1000.0
        out[:, COLUMN["explanation_rate"]] = _ratio(
            float(s["explained"][slot]), float(s["explanation_known"][slot])
        )
        out[:, COLUMN["mean_elapsed"]] = _ratio(
            float(s["elapsed_sum"][slot]), float(s["elapsed_count"][slot])
        )
        if answered:
            out[:, COLUMN["last_correct"]] = outcome[-1]
            out[:, COLUMN["seconds_since_previous"]] = (timestamp - float(seen[-1])) / 1000.0
            out[:, COLUMN["previous_elapsed"]] = s["previous_elapsed"][slot]

    def _keyed_columns(self, out, questions, question, outcome, seen, timestamp: float) -> None:
        """The part, skill and question columns: the filed answers with the same key."""
        part, skill = self._lookup(self.parts, questions), self._lookup(self.skill, questions)
        out[:, COLUMN["part"]] = part
        history_part = self._lookup(self.parts, question.astype(np.int64))
        history_skill = self._lookup(self.skill, question.astype(np.int64))
        correct = outcome.astype(np.float64)
        for i in range(len(questions)):
            on_part = history_part == part[i]
            out[i, COLUMN["part_answered"]] = on_part.sum()
            out[i, COLUMN["part_correct_rate"]] = _ratio(correct[on_part].sum(), on_part.sum())
            if skill[i] >= 0:
                on_skill = np.flatnonzero(history_skill == skill[i])
                out[i, COLUMN["skill_answered"]] = len(on_skill)
                out[i, COLUMN["skill_correct_rate"]] = _ratio(
                    correct[on_skill].sum(), len(on_skill)
                )
                if len(on_skill):
                    out[i, COLUMN["skill_last_correct"]] = correct[on_skill[-1]]
            on_question = np.flatnonzero(question == questions[i])
            out[i, COLUMN["question_attempts"]] = len(on_question)
            out[i, COLUMN["question_correct_rate"]] = _ratio(
                correct[on_question].sum(), len(on_question)
            )
            if len(on_question):
                last = on_question[-1]
                out[i, COLUMN["question_last_correct"]] = correct[last]
                out[i, COLUMN["seconds_since_question"]] = (timestamp - float(seen[last])) / 1000.0

    # -- one API group -----------------------------------------------------------------
    def group_features(self, test_df: pd.DataFrame) -> np.ndarray:
        """Features of test_df's question rows, in their order, as common.data.api_group
        reads the group: the previous group's outcomes first, then each student's one
        container (two of a student are refused), with its first row's timestamp and
        prior_question_* fields."""
        return self.features_of_group(read_group(test_df))

    def features_of_group(self, group: ApiGroup) -> np.ndarray:
        """`group_features` of a group already read (the blend's state reads each group
        once for both of its states)."""
        if self.previous is not None and group.prior_correct is not None:
            self._reveal_group(self.previous, group.prior_correct)
        self.previous = group
        out = np.zeros((len(group.content), len(FEATURE_NAMES)))
        for c, rows in enumerate(group.container_rows()):
            out[rows] = self.features(
                int(group.students[c]),
                group.content[rows],
                int(group.timestamp[c]),
                group.prior_elapsed_ms[c],
                int(group.prior_explanation[c]),
            )
        return out

    def _reveal_group(self, previous: ApiGroup, correct: np.ndarray) -> None:
        """Each container of the `previous` group gets its outcomes from `correct` (the
        lists' entry of every row of it, lectures included)."""
        if len(correct) != previous.n_rows:
            raise ValueError(
                f"prior_group_answers_correct has {len(correct)} entries; the previous "
                f"group had {previous.n_rows} rows"
            )
        on_questions = correct[previous.is_question]
        for c, rows in enumerate(previous.container_rows()):
            self.reveal(int(previous.students[c]), on_questions[rows])
