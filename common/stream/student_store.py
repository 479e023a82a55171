"""Every student's part of the online state (common.stream.online), within its memory
budget: a ring of their last questions (the Snapshot's fields, common.stream.snapshot) and
where their history and model cache stand, in one slot per student.

The rings are filled only from what the API reveals (common.data.api_group reads it),
each field when common.data.question_fields declares it revealed and as it computes it:
    - a container's questions, part and lag when it arrives (lag = time since the
      student's previous question container);
    - its responses and answers from the next group's prior_group_answers_correct /
      prior_group_responses;
    - its elapsed time and explanation flag from the student's next question container
      (prior_question_elapsed_time / prior_question_had_explanation).

Memory: the slots grow with the students seen (snapshot students, then every new student),
by a quarter at a time. With a budget (max_bytes), the rings and the model's cache pool
(common.stream.cache_pool) are planned at once from it, growth stops at it, and a student
who would not fit raises StateMemoryError: predictions are never degraded silently.
"""

from __future__ import annotations

import numpy as np

from common.data.api_group import ApiGroup
from common.data.past_features import MODEL_FEATURES
from common.data.question_fields import (
    ARRIVAL,
    NEXT_CONTAINER,
    OUTCOME,
    QUESTION_FIELDS,
    StreamFacts,
)
from common.errors import UserError
from common.stream.cache_pool import RING_EXTRA, CachePool
from common.stream.snapshot import FIELD_DTYPES, PAST_DTYPE, Snapshot

# The fewest model caches a state budget may leave (a group's students must all fit in the
# pool at once: the real example test's groups hold 18 to 33 rows)
MIN_POOL_STUDENTS = 256
# A budget sizes the pool leaving ring room for this share of new students beyond the
# snapshot's (at Riiid's size, room for 98k new students; past it a new student who does
# not fit raises StateMemoryError)
NEW_STUDENT_SHARE = 0.25
SNAPSHOT_CHUNK = 16384  # students per step while the rings are filled from a snapshot
# Per student besides the rings: n_items, last_first, last_timestamp, session_start,
# key_from, cache_index (int64) and built (bool); and the slot_of dict entry with its two
# Python ints (measured with tracemalloc: ~116 B; 128 keeps the estimate conservative).
STUDENT_ARRAYS_BYTES = 6 * 8 + 1
SLOT_INDEX_BYTES = 128
# the per-student arrays besides the rings (StudentStore's attributes) and the value of a
# new slot
STUDENT_ARRAYS = (
    ("n_items", 0),
    ("last_first", -1),
    ("last_timestamp", -1),
    ("session_start", 0),
    ("key_from", 0),
    ("cache_index", -1),
    ("built", False),
)


class StateMemoryError(UserError, RuntimeError):
    """The online state would outgrow its memory budget (OnlineState's max_bytes)."""


class StateBudget:
    """The bytes the online state may hold (max_bytes, less reserved_bytes that other
    state takes first: the trees' feature state) and how they split between the student
    slots (student_bytes each) and the model's cache pool. None: unbounded."""

    def __init__(
        self, student_bytes: int, pool: CachePool, max_bytes: int | None, reserved_bytes: int
    ):
        self.student_bytes, self.pool = student_bytes, pool
        self.max_bytes, self.reserved_bytes = max_bytes, reserved_bytes
        self.budget = None if max_bytes is None else max_bytes - reserved_bytes

    def fit_pool(self, known: int, new_student_share: float) -> int:
        """Shrink the cache pool to what the budget leaves beside the slots of the `known`
        students and new_student_share more (new ones): a smaller pool evicts and rebuilds
        more often (the same predictions, more time). The pool is then allocated whole
        at its first use, never grown by copying. Too small a budget for even
        MIN_POOL_STUDENTS caches raises StateMemoryError now, not mid-stream. Returns the
        student slots planned."""
        planned = known + int(known * new_student_share)
        room = self.budget - planned * self.student_bytes
        if self.pool.per_slot:  # a recurrent model's state: counted in each slot's bytes
            if room < 0:
                raise StateMemoryError(self._over_budget(planned))
            return planned
        fits = room // self.pool.bytes_per_student()
        if fits < min(MIN_POOL_STUDENTS, self.pool.size):
            raise StateMemoryError(
                f"a state budget of {self.max_bytes / 1e9:.3g} GB{self._reserved()} leaves "
                f"room for {max(fits, 0):,} model caches beside the rings of {planned:,} students "
                f"({known:,} in the snapshot and {new_student_share:.0%} more for new ones, "
                f"{self.student_bytes:,} B each); at least {MIN_POOL_STUDENTS:,} caches of "
                f"{self.pool.bytes_per_student():,} B are needed: raise the budget "
                f"(--max-state-memory)"
            )
        # no more caches than the students planned (at least the floor): a small stream
        # does not allocate gigabytes it cannot use
        self.pool.size = int(min(self.pool.size, fits, max(planned, MIN_POOL_STUDENTS)))
        self.pool.on_demand = False  # within a budget, the peak is the budget
        return planned

    def slots_that_fit(self, needed: int) -> int | None:
        """How many student slots the budget holds beside the pool (None: unbounded);
        raises StateMemoryError if fewer than `needed`."""
        if self.budget is None:
            return None
        fits = max((self.budget - self.pool.planned_bytes()) // self.student_bytes, 0)
        if needed > fits:
            raise StateMemoryError(self._over_budget(needed))
        return fits

    def _reserved(self) -> str:
        if not self.reserved_bytes:
            return ""
        return (
            f" ({self.reserved_bytes / 1e9:.3g} GB of it for the trees' feature state and any "
            "other architecture's state)"
        )

    def _over_budget(self, needed: int) -> str:
        per, pool = self.student_bytes, self.pool.planned_bytes()
        total = needed * per + pool
        return (
            f"the online state needs {total / 1e9:.3g} GB for {needed:,} students "
            f"({needed:,} x {per:,} B of rings, index and the states of members that share "
            f"them, plus a cache pool of "
            f"{self.pool.size:,} students x {self.pool.bytes_per_student():,} B = "
            f"{pool / 1e9:.3g} GB), above its budget of {self.max_bytes / 1e9:.3g} GB"
            f"{self._reserved()} "
            f"(--max-state-memory); raise the budget or lower --cache-students"
        )


class StudentStore:
    """One slot per student: rings of `context` + RING_EXTRA questions (the model's
    receptive field and room for the incoming container) and the STUDENT_ARRAYS, filled
    from `snapshot` and then group by group. `previous` holds the last group's (slot,
    position) per row (-1: a lecture), where its outcomes go when the next group brings
    them."""

    def __init__(
        self,
        context: int,
        reads_past: bool,
        parts: np.ndarray,
        pool: CachePool,
        snapshot: Snapshot | None = None,
        max_bytes: int | None = None,
        reserved_bytes: int = 0,
        new_student_share: float = NEW_STUDENT_SHARE,
        snapshot_chunk: int = SNAPSHOT_CHUNK,
        member_bytes: int = 0,
    ):
        self.context, self.ring, self.parts = context, context + RING_EXTRA, parts
        # a recurrent model's state lives in the student's slot, with its rings
        self.slot_state_bytes = pool.bytes_per_student() if pool.per_slot else 0
        # the ring fields: the sequences' and, for a model that reads them, the past-event
        # features of each question (a trailing axis of their own)
        self.fields = {name: (dtype, ()) for name, dtype in FIELD_DTYPES.items()}
        if reads_past:
            self.fields["past"] = (PAST_DTYPE, (len(MODEL_FEATURES),))
        self.slot_of: dict[int, int] = {}
        self.capacity = 0
        self.rings: dict[str, np.ndarray] = {}
        self.n_items = np.zeros(0, dtype=np.int64)  # questions so far
        self.last_first = np.zeros(0, dtype=np.int64)  # -1: no question yet
        self.last_timestamp = np.zeros(0, dtype=np.int64)
        # the model step's: where the student's cache begins, the first position whose
        # outcome is not in it yet, its pool row (-1: no cache), and whether it had one
        # before (a build now is a rebuild)
        self.session_start = np.zeros(0, dtype=np.int64)
        self.key_from = np.zeros(0, dtype=np.int64)
        self.cache_index = np.zeros(0, dtype=np.int64)
        self.built = np.zeros(0, dtype=bool)
        # the members that read these rings (common.stream.shared_store) keep their state
        # per slot beside them: the budget plans both
        self.budget = StateBudget(
            self.student_bytes() + member_bytes, pool, max_bytes, reserved_bytes
        )
        known = len(snapshot.users) if snapshot else 0
        slots = known
        if max_bytes is not None:  # the rings planned at once: never grown by copying
            slots = self.budget.fit_pool(known, new_student_share)
        self.grow(max(1, slots))
        if snapshot is not None:
            self.load_snapshot(snapshot, snapshot_chunk)
        self.previous: np.ndarray | None = None  # (rows, 2) slot, position of last group
        # the last group filed and its (slots, start, position): what members that share
        # the rings step on
        self.last_opened: tuple | None = None

    # -- storage -----------------------------------------------------------------------
    def grow(self, needed: int) -> None:
        """Room for at least `needed` students (a quarter more than now, within the
        budget: after a snapshot of all 394k Riiid students, doubling would add 1.2 GB of
        rings for the first new student)."""
        if needed <= self.capacity:
            return
        capacity = max(needed, self.capacity + self.capacity // 4, 1024)
        fits = self.budget.slots_that_fit(needed)
        if fits is not None:
            capacity = min(capacity, fits)
        for name, (dtype, trailing) in self.fields.items():
            old = self.rings.get(name, np.zeros((0, self.ring, *trailing), dtype=dtype))
            ring = np.zeros((capacity, self.ring, *trailing), dtype=dtype)
            ring[: len(old)] = old
            self.rings[name] = ring
        for name, fill in STUDENT_ARRAYS:
            setattr(self, name, grown_array(getattr(self, name), capacity, fill))
        self.capacity = capacity

    def load_snapshot(self, snapshot: Snapshot, chunk: int = SNAPSHOT_CHUNK) -> None:
        """Fill the rings field by field and `chunk` students at a time: with a snapshot
        read from its file (Snapshot.load), one field is in memory at a time and the index
        arrays stay small (at Riiid's size, whole-snapshot index arrays would add about
        4 GB beside the 4 GB of rings)."""
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
        self.slot_of = dict(zip(snapshot.users.tolist(), range(n)))  # noqa: B905 (Python 3.7: the Kaggle bundle)
        for name in list(snapshot.fields):
            values = snapshot.fields[name]
            ring = self.rings[name]
            for lo in range(0, n, chunk):
                hi = min(lo + chunk, n)
                positions = snapshot.n_items[lo:hi, None] - length + np.arange(length)
                rows, cols = np.nonzero(positions >= 0)
                ring[rows + lo, positions[rows, cols] % self.ring] = values[lo:hi][rows, cols]
            if name == "timestamp":
                self.last_timestamp[:n] = values[:, -1]
            del values
        self.n_items[:n] = snapshot.n_items
        self.last_first[:n] = snapshot.last_first

    def slots(self, users: np.ndarray) -> np.ndarray:
        """The students' slots, a new one for each student not seen before."""
        slots = np.empty(len(users), dtype=np.int64)
        for i, user in enumerate(users.tolist()):
            slot = self.slot_of.get(user)
            if slot is None:
                slot = len(self.slot_of)
                self.grow(slot + 1)
                self.slot_of[user] = slot
            slots[i] = slot
        return slots

    def student_bytes(self) -> int:
        """Bytes the state holds per student slot, besides the cache pool."""
        ring = self.ring * sum(
            np.dtype(dtype).itemsize * int(np.prod(trailing))
            for dtype, trailing in self.fields.values()
        )
        return ring + STUDENT_ARRAYS_BYTES + SLOT_INDEX_BYTES + self.slot_state_bytes

    def state_bytes(self) -> dict[str, int | None]:
        """What the state holds now: rings and per-student arrays for `capacity` slots,
        the cache pool, their total, and the budget (None: unbounded)."""
        students = self.capacity * self.student_bytes()
        pool = self.budget.pool.planned_bytes()
        return {
            "students": len(self.slot_of),
            "capacity": self.capacity,
            "student_state": students,
            "cache_pool": pool,
            "cache_students": self.budget.pool.size,
            "total": students + pool,
            "max_bytes": self.budget.max_bytes,
        }

    # -- what the API reveals ----------------------------------------------------------
    def record_outcomes(self, correct: np.ndarray, answers: np.ndarray | None) -> None:
        """The previous group's outcomes (its prior_group_* lists: one entry per row)."""
        if self.previous is None:
            return
        if answers is None:
            raise ValueError(
                "a group has prior_group_answers_correct without prior_group_responses"
            )
        if len(correct) != len(self.previous) or len(answers) != len(self.previous):
            raise ValueError(
                f"prior_group_answers_correct has {len(correct)} entries and "
                f"prior_group_responses {len(answers)}; the previous group had "
                f"{len(self.previous)} rows"
            )
        slot, position = self.previous[:, 0], self.previous[:, 1]
        known = slot >= 0
        column = position[known] % self.ring
        facts = StreamFacts(correct=correct, answers=answers)
        for f in QUESTION_FIELDS:
            if f.revealed == OUTCOME:
                self.rings[f.name][slot[known], column] = f.stream(facts)[known]

    def open_containers(
        self, group: ApiGroup, past: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """File the group's containers, one per student: each student's previous
        container gets its elapsed time and explanation flag, the new one its questions
        (with `past`, their past-event features). Returns (slots, start, position): each
        container's student slot and first position, each question row's position."""
        previous = np.full((group.n_rows, 2), -1, dtype=np.int64)
        if not len(group.students):
            self.previous = previous
            none = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
            self.last_opened = (group, none)
            return none
        slots = self.slots(group.students)
        start = self.n_items[slots].copy()  # (U,) position of each new container
        position = start[group.container] + group.rank
        self._reveal_previous(slots, start, group)
        self._append(slots, start, position, group, past)
        previous[group.is_question, 0] = slots[group.container]
        previous[group.is_question, 1] = position
        self.previous = previous
        self.last_opened = (group, (slots, start, position))
        return slots, start, position

    def _reveal_previous(self, slots, start, group: ApiGroup) -> None:
        """The new container's prior_question_* fill in the previous container's
        elapsed time and explanation flag."""
        last = self.last_first[slots]
        has_previous = last >= 0
        facts = StreamFacts(
            prior_elapsed_ms=group.prior_elapsed_ms, prior_explanation=group.prior_explanation
        )
        revealed = {
            f.name: f.stream(facts) for f in QUESTION_FIELDS if f.revealed == NEXT_CONTAINER
        }
        span = int((start - np.where(has_previous, last, start)).max(initial=0))
        for offset in range(span):
            at = last + offset
            hit = has_previous & (at < start)
            column = at[hit] % self.ring
            for name, values in revealed.items():
                self.rings[name][slots[hit], column] = values[hit]

    def _append(self, slots, start, position, group: ApiGroup, past) -> None:
        if group.counts.max() > RING_EXTRA:
            raise ValueError(
                f"a student has {group.counts.max()} questions in one group; at most "
                f"{RING_EXTRA} fit"
            )
        container = group.container
        lag_ms = np.where(
            self.last_first[slots] >= 0, group.timestamp - self.last_timestamp[slots], np.nan
        )
        facts = StreamFacts(
            content=group.content, container=container, start=start,
            timestamp=group.timestamp, lag_ms=lag_ms, parts=self.parts,
        )  # fmt: skip
        values = {
            f.name: f.stream(facts) if f.revealed == ARRIVAL else f.blank for f in QUESTION_FIELDS
        }
        if past is not None:
            values["past"] = np.asarray(past, dtype=PAST_DTYPE)
        column = position % self.ring
        for name, value in values.items():
            self.rings[name][slots[container], column] = value
        self.last_first[slots] = start
        self.last_timestamp[slots] = group.timestamp
        self.n_items[slots] = start + group.counts


class RingSource:
    """step_inputs source over the rings: fields of (slot, position)."""

    def __init__(self, store: StudentStore):
        self.store = store

    def take(self, owner: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        column = positions % self.store.ring
        return {name: ring[owner[:, None], column] for name, ring in self.store.rings.items()}


def grown_array(array: np.ndarray, capacity: int, fill) -> np.ndarray:
    """`array` with `capacity` entries: its own first, then `fill`."""
    out = np.full(capacity, fill, dtype=array.dtype)
    out[: len(array)] = array
    return out
