"""Per-student online state for streaming inference under the test API's rules.

Each student keeps a ring of their last questions with the same per-question fields as
common.data.features.QuestionSequences, filled only from what the API reveals:
    - a container's questions, part and lag when it arrives (lag = time since the
      student's previous question container);
    - its responses and answers from the next group's prior_group_answers_correct /
      prior_group_responses;
    - its elapsed time and explanation flag from the student's next question container
      (prior_question_elapsed_time / prior_question_had_explanation).
Model inputs are then built by the same `step_inputs` as training and validation.

The rings hold the model's receptive field (common/model/saint.py: the latest questions a
prediction can depend on) plus room for the incoming container. Students active in the
stream also keep the model's key/value cache so a new container costs only its own
positions; a student's cache is built from the receptive field's questions before their
first container in the stream, so every prediction is the same function of the history
as in training and validation, wherever the stream began. Caches live in a pool (up to
cache_students entries) with LRU eviction; an evicted student's cache is built again the
same way from their ring, which gives the same predictions (reported as rebuilds).

Several containers of one student inside one group (the emulator never does this) are
merged into one container: none of their outcomes is known before all are predicted.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from common.data.features import (
    ANSWER_PAD,
    QuestionSequences,
    elapsed_bucket,
    explanation_code,
    lag_bucket,
    step_inputs,
)
from common.data.past_features import MODEL_FEATURES
from common.data.schema import QUESTION
from common.errors import UserError
from common.files import atomic_file
from common.model.predict import to_tensors
from common.model.saint import SAINT
from common.stream.cache_pool import RING_EXTRA, CachePool

# The fewest model caches a state budget may leave (a group's students must all fit in the
# pool at once: the real example test's groups hold 18 to 33 rows)
MIN_POOL_STUDENTS = 256
# A budget sizes the pool leaving ring room for this share of new students beyond the
# snapshot's (at Riiid's size, room for 98k new students; past it a new student who does
# not fit raises StateMemoryError)
NEW_STUDENT_SHARE = 0.25
SNAPSHOT_CHUNK = 16384  # students per step while the rings are filled from a snapshot
BUILD_PART = 32  # students per forward pass when states are built from their histories
# Per student besides the rings: n_items, last_first, last_timestamp, session_start,
# key_from, cache_index (int64) and built (bool); and the slot_of dict entry with its two
# Python ints (measured with tracemalloc: ~116 B; 128 keeps the estimate conservative).
STUDENT_ARRAYS_BYTES = 6 * 8 + 1
SLOT_INDEX_BYTES = 128
FIELD_DTYPES = {
    "question": np.int16,
    "part": np.int8,
    "response": np.int8,
    "answer": np.int8,
    "elapsed": np.int16,
    "explanation": np.int8,
    "lag": np.int8,
    "container_first": np.int64,
    "timestamp": np.int64,
}


PAST_DTYPE = np.float32  # a model's past-event features (ModelConfig.past_features)


class StateMemoryError(UserError, RuntimeError):
    """The online state would outgrow its memory budget (OnlineState's max_bytes)."""


# ---------------------------------------------------------------------------------------
# snapshot: the start state of students seen in training


@dataclass
class Snapshot:
    """Each known student's last `length` questions (positions n_items - length ..
    n_items - 1; entries before position 0 unused) and where their history stands."""

    users: np.ndarray  # (n,) int64
    n_items: np.ndarray  # (n,) int64 questions answered so far
    last_first: np.ndarray  # (n,) int64 position of the last container's first question
    fields: dict[str, np.ndarray] | FileFields  # name -> (n, length)

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
                **{f"field_{k}": v for k, v in self.fields.items()},
            )

    @classmethod
    def load(cls, path) -> Snapshot:
        """The snapshot in `path`; its fields are read from the file when used (one at a
        time while a state is filled: the whole of them is 3.9 GB at Riiid's size)."""
        data = np.load(str(path))
        return cls(data["users"], data["n_items"], data["last_first"], FileFields(data))

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.fields.values()) + 3 * 8 * len(self.users)


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

    The last container's elapsed time and explanation flag are blanked: the API reveals
    them only with the student's next container."""
    keep = np.flatnonzero(length > 0)
    n_items = length[keep].astype(np.int64)
    positions = n_items[:, None] - keep_last + np.arange(keep_last)  # (n, L)
    index = sequences.offsets[keep][:, None] + np.clip(positions, 0, None)
    fields = sequences.take(index)  # with the past-event features where attached
    last_first = fields["container_first"][:, -1].astype(np.int64)
    unrevealed = positions >= last_first[:, None]
    fields["elapsed"] = np.where(unrevealed, 0, fields["elapsed"])
    fields["explanation"] = np.where(unrevealed, 0, fields["explanation"])
    fields = {k: v.astype(FIELD_DTYPES.get(k, PAST_DTYPE)) for k, v in fields.items()}
    return Snapshot(np.asarray(users)[keep].astype(np.int64), n_items, last_first, fields)


# ---------------------------------------------------------------------------------------


class RingSource:
    """step_inputs source over the rings: fields of (slot, position)."""

    def __init__(self, state: OnlineState):
        self.state = state

    def take(self, owner: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        column = positions % self.state.ring
        return {name: ring[owner[:, None], column] for name, ring in self.state.rings.items()}


class OnlineState:
    """Students' rings and the model's cache pool; `predict(test_df)` per API group.

    Memory: the cache pool holds at most cache_students entries; the rings grow with the
    students seen (snapshot students, then every new student), by a quarter at a time.
    With `max_bytes` set, growth stops at the budget and a student who would not fit
    raises StateMemoryError: predictions are never degraded silently."""

    def __init__(
        self,
        model: SAINT,
        parts: np.ndarray,
        device: torch.device,
        snapshot: Snapshot | None = None,
        cache_students: int = 4096,
        max_bytes: int | None = None,
        reserved_bytes: int = 0,
    ):
        self.model = model.eval()
        self.config = model.config
        self.context = model.config.receptive_field
        self.ring = self.context + RING_EXTRA
        self.parts = parts
        self.device = device
        # the ring fields: the sequences' and, for a model that reads them, the past-event
        # features of each question (a trailing axis of their own)
        self.fields = {name: (dtype, ()) for name, dtype in FIELD_DTYPES.items()}
        if model.config.past_features != "none":
            self.fields["past"] = (PAST_DTYPE, (len(MODEL_FEATURES),))
        self.slot_of: dict[int, int] = {}
        self.capacity = 0
        self.rings: dict[str, np.ndarray] = {}
        self.n_items = np.zeros(0, dtype=np.int64)
        self.last_first = np.zeros(0, dtype=np.int64)  # -1: no question yet
        self.last_timestamp = np.zeros(0, dtype=np.int64)
        self.session_start = np.zeros(0, dtype=np.int64)
        self.key_from = np.zeros(0, dtype=np.int64)
        self.cache_index = np.zeros(0, dtype=np.int64)  # -1: no cache
        self.built = np.zeros(0, dtype=bool)  # had a cache before (a build now is a rebuild)
        self.pool = CachePool(model, max(cache_students, 1), device)
        self.max_bytes = max_bytes  # the whole state budget
        # what other state takes out of it first (the trees' feature state), and what is
        # left for the rings and the cache pool
        self.reserved_bytes = reserved_bytes
        self.budget = None if max_bytes is None else max_bytes - reserved_bytes
        known = len(snapshot.users) if snapshot else 0
        slots = known
        if max_bytes is not None:  # the rings planned at once: never grown by copying
            slots = self._fit_pool(known)
        self._grow(max(1, slots))
        if snapshot is not None:
            self._load_snapshot(snapshot)
        self.previous: np.ndarray | None = None  # (rows, 2) slot, position of last group
        self.rebuilds = 0
        self.builds = 0
        self.build_seconds = 0.0  # spent in _build: a student's first group is dearer

    def time_split(self) -> dict:
        """Where predicting went so far beside the groups' steps: the cache builds (a
        continuing student's first group in the stream encodes their history first)."""
        return {"cache_builds": self.builds, "build_seconds": self.build_seconds}

    # -- storage -----------------------------------------------------------------------
    def _fit_pool(self, known: int) -> int:
        """Shrink the cache pool to what the budget leaves beside the rings of the `known`
        students and NEW_STUDENT_SHARE more (new ones): a smaller pool evicts and rebuilds
        more often (the same predictions, more time). The pool is then allocated whole
        at its first use, never grown by copying. Too small a budget for even
        MIN_POOL_STUDENTS caches raises StateMemoryError now, not mid-stream. Returns the
        student slots planned."""
        planned = known + int(known * NEW_STUDENT_SHARE)
        room = self.budget - planned * self.student_bytes()
        fits = room // self.pool.bytes_per_student()
        if fits < min(MIN_POOL_STUDENTS, self.pool.size):
            raise StateMemoryError(
                f"a state budget of {self.max_bytes / 1e9:.3g} GB{self._reserved()} leaves "
                f"room for {max(fits, 0):,} model caches beside the rings of {planned:,} students "
                f"({known:,} in the snapshot and {NEW_STUDENT_SHARE:.0%} more for new ones, "
                f"{self.student_bytes():,} B each); at least {MIN_POOL_STUDENTS:,} caches of "
                f"{self.pool.bytes_per_student():,} B are needed: raise the budget "
                f"(--max-state-memory)"
            )
        # no more caches than the students planned (at least the floor): a small stream
        # does not allocate gigabytes it cannot use
        self.pool.size = int(min(self.pool.size, fits, max(planned, MIN_POOL_STUDENTS)))
        self.pool.on_demand = False  # within a budget, the peak is the budget
        return planned

    def _grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        # a quarter of headroom, not a doubling: after a snapshot of all 394k Riiid
        # students, doubling would add 1.2 GB of rings for the first new student
        capacity = max(needed, self.capacity + self.capacity // 4, 1024)
        if self.max_bytes is not None:
            fits = max((self.budget - self.pool.planned_bytes()) // self.student_bytes(), 0)
            if needed > fits:
                raise StateMemoryError(self._over_budget(needed))
            capacity = min(capacity, fits)

        def grown(array: np.ndarray, fill, width: int | None = None) -> np.ndarray:
            shape = (capacity,) if width is None else (capacity, width)
            out = np.full(shape, fill, dtype=array.dtype)
            out[: len(array)] = array
            return out

        for name, (dtype, trailing) in self.fields.items():
            old = self.rings.get(name, np.zeros((0, self.ring, *trailing), dtype=dtype))
            ring = np.zeros((capacity, self.ring, *trailing), dtype=dtype)
            ring[: len(old)] = old
            self.rings[name] = ring
        self.n_items = grown(self.n_items, 0)
        self.last_first = grown(self.last_first, -1)
        self.last_timestamp = grown(self.last_timestamp, -1)
        self.session_start = grown(self.session_start, 0)
        self.key_from = grown(self.key_from, 0)
        self.cache_index = grown(self.cache_index, -1)
        self.built = grown(self.built, False)
        self.capacity = capacity

    def _load_snapshot(self, snapshot: Snapshot) -> None:
        """Fill the rings field by field and SNAPSHOT_CHUNK students at a time: with a
        snapshot read from its file (Snapshot.load), one field is in memory at a time and
        the index arrays stay small (at Riiid's size, whole-snapshot index arrays would
        add about 4 GB beside the 4 GB of rings)."""
        length = snapshot.length
        if length < self.context:
            raise ValueError(
                f"snapshot keeps {length} questions per student, the model's receptive "
                f"field is {self.context}"
            )
        if set(snapshot.fields) != set(self.fields):
            raise ValueError(
                f"the snapshot holds {sorted(snapshot.fields)}, the model's state needs "
                f"{sorted(self.fields)} (a model that reads past-event features needs them "
                "in its snapshot: common.data.past_features.attach_model_features)"
            )
        n = len(snapshot.users)
        slots = np.arange(n)
        self.slot_of = dict(zip(snapshot.users.tolist(), slots.tolist()))  # noqa: B905 (Python 3.7: the Kaggle bundle)
        for name in list(snapshot.fields):
            values = snapshot.fields[name]
            ring = self.rings[name]
            for lo in range(0, n, SNAPSHOT_CHUNK):
                hi = min(lo + SNAPSHOT_CHUNK, n)
                positions = snapshot.n_items[lo:hi, None] - length + np.arange(length)
                rows, cols = np.nonzero(positions >= 0)
                ring[rows + lo, positions[rows, cols] % self.ring] = values[lo:hi][rows, cols]
            if name == "timestamp":
                self.last_timestamp[:n] = values[:, -1]
            del values
        self.n_items[:n] = snapshot.n_items
        self.last_first[:n] = snapshot.last_first

    def _slots(self, users: np.ndarray) -> np.ndarray:
        slots = np.empty(len(users), dtype=np.int64)
        for i, user in enumerate(users.tolist()):
            slot = self.slot_of.get(user)
            if slot is None:
                slot = len(self.slot_of)
                self._grow(slot + 1)
                self.slot_of[user] = slot
            slots[i] = slot
        return slots

    def state_bytes_per_student(self) -> dict[str, float]:
        ring = sum(r[0].nbytes for r in self.rings.values()) + 6 * 8
        return {"ring": ring, "cache": self.pool.bytes_per_student()}

    def student_bytes(self) -> int:
        """Bytes the state holds per student slot, besides the cache pool."""
        ring = self.ring * sum(
            np.dtype(dtype).itemsize * int(np.prod(trailing))
            for dtype, trailing in self.fields.values()
        )
        return ring + STUDENT_ARRAYS_BYTES + SLOT_INDEX_BYTES

    def state_bytes(self) -> dict[str, int | None]:
        """What the state holds now: rings and per-student arrays for `capacity` slots,
        the cache pool, their total, and the budget (None: unbounded)."""
        students = self.capacity * self.student_bytes()
        pool = self.pool.planned_bytes()
        return {
            "students": len(self.slot_of),
            "capacity": self.capacity,
            "student_state": students,
            "cache_pool": pool,
            "cache_students": self.pool.size,
            "total": students + pool,
            "max_bytes": self.max_bytes,
        }

    def _reserved(self) -> str:
        if not self.reserved_bytes:
            return ""
        return f" ({self.reserved_bytes / 1e9:.3g} GB of it for the trees' feature state)"

    def _over_budget(self, needed: int) -> str:
        per, pool = self.student_bytes(), self.pool.planned_bytes()
        total = needed * per + pool
        return (
            f"the online state needs {total / 1e9:.3g} GB for {needed:,} students "
            f"({needed:,} x {per:,} B of rings and index, plus a cache pool of "
            f"{self.pool.size:,} students x {self.pool.bytes_per_student():,} B = "
            f"{pool / 1e9:.3g} GB), above its budget of {self.max_bytes / 1e9:.3g} GB"
            f"{self._reserved()} "
            f"(--max-state-memory); raise the budget or lower --cache-students"
        )

    # -- the API -----------------------------------------------------------------------
    def apply_previous_group(self, correct: str | float, responses: str | float) -> None:
        """Record the previous group's outcomes (its first row's string-encoded lists)."""
        if self.previous is None or not isinstance(correct, str):
            return
        correct_list = np.asarray(json.loads(correct), dtype=np.int64)
        answer_list = np.asarray(json.loads(responses), dtype=np.int64)
        if len(correct_list) != len(self.previous) or len(answer_list) != len(self.previous):
            raise ValueError(
                f"prior_group_answers_correct has {len(correct_list)} entries and "
                f"prior_group_responses {len(answer_list)}; the previous group had "
                f"{len(self.previous)} rows"
            )
        slot, position = self.previous[:, 0], self.previous[:, 1]
        known = slot >= 0
        column = position[known] % self.ring
        self.rings["response"][slot[known], column] = correct_list[known]
        answer = np.where((answer_list >= 0) & (answer_list < ANSWER_PAD), answer_list, ANSWER_PAD)
        self.rings["answer"][slot[known], column] = answer[known]

    def predict(self, test_df: pd.DataFrame, past: np.ndarray | None = None) -> np.ndarray:
        """Probabilities for test_df's question rows, in their order. `past`: their
        past-event features (MODEL_FEATURES, one row per question row), for a model that
        reads them (common.data.past_state computes them online)."""
        if ("past" in self.rings) != (past is not None):
            raise ValueError(
                "a model that reads past-event features needs them with every group, and "
                "only such a model takes them"
            )
        if len(test_df) and "prior_group_answers_correct" in test_df.columns:
            # the API puts the lists on the group's first row, whatever its type; taken
            # from the first row that has them, so a reordered frame loses nothing
            correct = test_df["prior_group_answers_correct"].to_numpy()
            given = np.flatnonzero([isinstance(v, str) for v in correct])
            first = int(given[0]) if len(given) else 0
            self.apply_previous_group(
                correct[first], test_df["prior_group_responses"].to_numpy()[first]
            )
        is_question = test_df["content_type_id"].to_numpy() == QUESTION
        previous = np.full((len(test_df), 2), -1, dtype=np.int64)
        if not is_question.any():
            self.previous = previous
            return np.zeros(0, dtype=np.float32)
        rows = {
            name: test_df[name].to_numpy()[is_question]
            for name in (
                "user_id",
                "timestamp",
                "content_id",
                "prior_question_elapsed_time",
                "prior_question_had_explanation",
            )
        }
        if past is not None:
            rows["past"] = np.asarray(past, dtype=PAST_DTYPE)
        users = rows["user_id"].astype(np.int64)
        unique, first_row, inverse, counts = np.unique(
            users, return_index=True, return_inverse=True, return_counts=True
        )
        slots = self._slots(unique)
        start = self.n_items[slots].copy()  # (U,) position of each new container
        rank = np.zeros(len(users), dtype=np.int64)
        order = np.argsort(inverse, kind="stable")
        rank[order] = np.arange(len(users)) - np.repeat(np.cumsum(counts) - counts, counts)
        position = start[inverse] + rank
        self._reveal_previous(slots, start, rows, first_row)
        self._append(slots, start, counts, rows, inverse, position, first_row)
        probability = self._forward(slots, start, inverse, position)
        previous[is_question, 0] = slots[inverse]
        previous[is_question, 1] = position
        self.previous = previous
        return probability

    # -- steps ---------------------------------------------------------------------------
    def _reveal_previous(self, slots, start, rows: dict[str, np.ndarray], first_row) -> None:
        """The new container's prior_question_* fill in the previous container's
        elapsed time and explanation flag."""
        elapsed_ms = rows["prior_question_elapsed_time"].astype(float)[first_row]
        flag = rows["prior_question_had_explanation"][first_row]
        flag = np.array([-1 if pd.isna(v) else int(bool(v)) for v in flag], dtype=np.int8)
        last = self.last_first[slots]
        has_previous = last >= 0
        elapsed, explanation = elapsed_bucket(elapsed_ms), explanation_code(flag)
        span = int((start - np.where(has_previous, last, start)).max(initial=0))
        for offset in range(span):
            at = last + offset
            hit = has_previous & (at < start)
            column = at[hit] % self.ring
            self.rings["elapsed"][slots[hit], column] = elapsed[hit]
            self.rings["explanation"][slots[hit], column] = explanation[hit]

    def _append(
        self, slots, start, counts, rows: dict[str, np.ndarray], inverse, position, first_row
    ):
        if counts.max() > RING_EXTRA:
            raise ValueError(
                f"a student has {counts.max()} questions in one group; at most {RING_EXTRA} fit"
            )
        timestamp = rows["timestamp"].astype(np.int64)[first_row]
        previous_time = self.last_timestamp[slots]
        lag_ms = np.where(self.last_first[slots] >= 0, timestamp - previous_time, np.nan)
        question = rows["content_id"].astype(np.int64)
        known_part = (question >= 0) & (question < len(self.parts))
        part = np.where(known_part, self.parts[np.clip(question, 0, len(self.parts) - 1)], 0)
        values = {
            "question": question,
            "part": part,
            "response": 0,
            "answer": ANSWER_PAD,
            "elapsed": 0,
            "explanation": 0,
            "lag": lag_bucket(lag_ms)[inverse],
            "container_first": start[inverse],
            "timestamp": timestamp[inverse],
        }
        if "past" in rows:
            values["past"] = rows["past"]
        column = position % self.ring
        for name, value in values.items():
            self.rings[name][slots[inverse], column] = value
        self.last_first[slots] = start
        self.last_timestamp[slots] = timestamp
        self.n_items[slots] = start + counts

    def _forward(self, slots, start, inverse, position) -> np.ndarray:
        """Build missing caches, then one batched step over the new containers: the
        probability of each question row (row q is student inverse[q]'s question at
        `position[q]`; start: each student's new container's first position).

        The step's batch has a row per question, not per student: a student's questions
        share the student's pool row (each row writes its question's keys there before
        any row reads it; the masks hide a later question from an earlier one), and the
        rows share the key stream of the student's revealed outcomes. So a group whose
        containers hold 1 to 5 questions is computed at one position per question, not
        padded to its largest container (2 to 3 positions per question on the Riiid-size
        rehearsal's stream)."""
        cache_index, missing = self.pool.acquire(slots, self.cache_index)
        self.cache_index = cache_index
        if len(missing):
            begin = time.perf_counter()
            self._build(slots[missing], start[missing])
            self.build_seconds += time.perf_counter() - begin
        owner, first = slots[inverse], start[inverse]
        key_from = self.key_from[owner]
        inputs = step_inputs(
            RingSource(self),
            owner,
            self.session_start[owner],
            position,
            np.ones(len(owner), dtype=np.int64),
            key_from,
            first - key_from + 1,
            self.config.n_questions,
        )
        index = self.cache_index[owner]
        with torch.no_grad():  # the new keys go straight into the students' pool rows
            logits = self.model(to_tensors(inputs, self.device), self.pool.view(index))
        self.key_from[slots] = start + 1
        return torch.sigmoid(logits.float()).cpu().numpy()[:, 0]

    def _build(self, slots: np.ndarray, start: np.ndarray) -> None:
        """Encode each student's last `receptive_field` questions before `start` (the
        state a continuing student starts from), in a temporary cache that holds them
        all, then keep the newest entries in the students' pool rows."""
        self.builds += int((start > 0).sum())
        self.rebuilds += int(self.built[slots].sum())
        self.built[slots] = True
        block_start = np.maximum(start - self.context, 0)
        has_history = start > 0
        previous_first = self.rings["container_first"][slots, (start - 1) % self.ring]
        last_first = np.where(has_history, np.maximum(previous_first, block_start), block_start)
        self.session_start[slots] = block_start
        key_count = np.where(has_history, last_first - block_start + 1, 0)
        self.key_from[slots] = np.where(has_history, last_first + 1, 0)
        index = self.cache_index[slots]
        self.pool.reset(index)
        # only students with a history have a state to build; shortest first, in parts of
        # similar lengths, so a part is padded to about its own length, not the longest's
        built = np.flatnonzero(has_history)
        built = built[np.argsort(start[built] - block_start[built], kind="stable")]
        n_parts = -(-len(built) // BUILD_PART)
        for part in np.array_split(built, n_parts) if n_parts else ():
            inputs = step_inputs(
                RingSource(self),
                slots[part],
                block_start[part],
                block_start[part],
                start[part] - block_start[part],
                block_start[part],
                key_count[part],
                self.config.n_questions,
            )
            block = self.model.empty_cache(len(part), self.context)
            with torch.no_grad():
                self.model.prime(to_tensors(inputs, self.device), block)
            self.pool.view(index[part]).absorb(block)
