"""Per-student online state for streaming inference under the test API's rules, in three
parts that OnlineState composes:

    reading a group     common.data.api_group.read_group: a group's question containers,
                        one per student (the API's rule, checked), and the previous
                        group's outcomes;
    the student store   common.stream.student_store.StudentStore: each student's ring of
                        their last questions with the same per-question fields as
                        common.data.features.QuestionSequences, filled only from what the
                        API reveals, within the state's memory budget;
    the model step      ModelStep: the model's inputs built from the rings by the same
                        `step_inputs` as training and validation, and the forward pass.

The rings hold the model's receptive field (common/model/saint/model.py: the latest questions a
prediction can depend on) plus room for the incoming container. Students active in the
stream also keep the model's key/value cache so a new container costs only its own
positions; a student's cache is built from the receptive field's questions before their
first container in the stream, so every prediction is the same function of the history
as in training and validation, wherever the stream began. Caches live in a pool (up to
cache_students entries) with LRU eviction; an evicted student's cache is built again the
same way from their ring, which gives the same predictions (reported as rebuilds).

A group with question rows of two containers of one student is refused
(common.data.api_group.ContainerRuleError): the API never serves one.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from common.data.api_group import ApiGroup, outcome_list, read_group
from common.data.features import QuestionSequences, step_inputs
from common.model.interface import KTModel
from common.model.predict import final_states, to_tensors
from common.stream.cache_pool import CachePool
from common.stream.recurrent_step import RecurrentPool, RecurrentStep
from common.stream.shared_store import SharedStore, shares_rings
from common.stream.snapshot import FIELD_DTYPES, PAST_DTYPE, FileFields, Snapshot, build_snapshot
from common.stream.student_store import (
    MIN_POOL_STUDENTS,
    NEW_STUDENT_SHARE,
    SNAPSHOT_CHUNK,
    RingSource,
    StateMemoryError,
    StudentStore,
)

# what callers import from here: the snapshot, the store's budget and its error
__all__ = [
    "FIELD_DTYPES",
    "MIN_POOL_STUDENTS",
    "NEW_STUDENT_SHARE",
    "PAST_DTYPE",
    "SNAPSHOT_CHUNK",
    "FileFields",
    "OnlineState",
    "Snapshot",
    "StateMemoryError",
    "build_snapshot",
    "model_snapshot",
]

BUILD_PART = 32  # students per forward pass when states are built from their histories


class ModelStep:
    """The model's forward step over a group's new containers, from the store's rings and
    the students' caches in the pool (built first where missing)."""

    def __init__(self, model: KTModel, store: StudentStore, pool: CachePool, device: torch.device):
        self.model, self.store, self.pool, self.device = model, store, pool, device
        self.context = model.config.receptive_field
        self.rebuilds = 0
        self.builds = 0
        self.build_seconds = 0.0  # spent in _build: a student's first group is dearer

    def forward(self, slots, start, container, position) -> np.ndarray:
        """Build missing caches, then one batched step over the new containers: the
        probability of each question row (row q is student container[q]'s question at
        `position[q]`; start: each student's new container's first position).

        The step's batch has a row per question, not per student: a student's questions
        share the student's pool row (each row writes its question's keys there before
        any row reads it; the masks hide a later question from an earlier one), and the
        rows share the key stream of the student's revealed outcomes. So a group whose
        containers hold 1 to 5 questions is computed at one position per question, not
        padded to its largest container (2 to 3 positions per question on the Riiid-size
        rehearsal's stream)."""
        store = self.store
        store.cache_index, missing = self.pool.acquire(slots, store.cache_index)
        if len(missing):
            begin = time.perf_counter()
            self._build(slots[missing], start[missing])
            self.build_seconds += time.perf_counter() - begin
        owner, first = slots[container], start[container]
        key_from = store.key_from[owner]
        inputs = step_inputs(
            RingSource(store),
            owner,
            store.session_start[owner],
            position,
            np.ones(len(owner), dtype=np.int64),
            key_from,
            first - key_from + 1,
            self.model.config.n_questions,
        )
        index = store.cache_index[owner]
        with torch.no_grad():  # the new keys go straight into the students' pool rows
            logits = self.model(to_tensors(inputs, self.device), self.pool.view(index))
        store.key_from[slots] = start + 1
        return torch.sigmoid(logits.float()).cpu().numpy()[:, 0]

    def _build(self, slots: np.ndarray, start: np.ndarray) -> None:
        """Encode each student's last `receptive_field` questions before `start` (the
        state a continuing student starts from), in a temporary cache that holds them
        all, then keep the newest entries in the students' pool rows."""
        store = self.store
        self.builds += int((start > 0).sum())
        self.rebuilds += int(store.built[slots].sum())
        store.built[slots] = True
        block_start = np.maximum(start - self.context, 0)
        has_history = start > 0
        previous_first = store.rings["container_first"][slots, (start - 1) % store.ring]
        last_first = np.where(has_history, np.maximum(previous_first, block_start), block_start)
        store.session_start[slots] = block_start
        key_count = np.where(has_history, last_first - block_start + 1, 0)
        store.key_from[slots] = np.where(has_history, last_first + 1, 0)
        index = store.cache_index[slots]
        self.pool.reset(index)
        # only students with a history have a state to build; shortest first, in parts of
        # similar lengths, so a part is padded to about its own length, not the longest's
        built = np.flatnonzero(has_history)
        built = built[np.argsort(start[built] - block_start[built], kind="stable")]
        n_parts = -(-len(built) // BUILD_PART)
        for part in np.array_split(built, n_parts) if n_parts else ():
            inputs = step_inputs(
                RingSource(store),
                slots[part],
                block_start[part],
                block_start[part],
                start[part] - block_start[part],
                block_start[part],
                key_count[part],
                self.model.config.n_questions,
            )
            block = self.model.empty_cache(len(part), self.context)
            with torch.no_grad():
                self.model.prime(to_tensors(inputs, self.device), block)
            self.pool.view(index[part]).absorb(block)


class OnlineState:
    """Students' rings and the model's cache pool; `predict(test_df)` per API group.

    Memory: the cache pool holds at most cache_students entries; the rings grow with the
    students seen (snapshot students, then every new student), by a quarter at a time.
    With `max_bytes` set, growth stops at the budget and a student who would not fit
    raises StateMemoryError: predictions are never degraded silently. `reserved_bytes`:
    what other state takes out of the budget first (the trees' feature state);
    `member_bytes`: what each slot's members that share its rings hold (shared_slot_bytes).

    `share`: another model's state whose rings this one reads (a recurrent member of the
    run, common.stream.shared_store.shares_rings): it files each group, this state steps
    on it after it (common.stream.blend_state), and `snapshot` gives only the states, of
    the same students in the same order."""

    def __init__(
        self,
        model: KTModel,
        parts: np.ndarray,
        device: torch.device,
        snapshot: Snapshot | None = None,
        cache_students: int = 4096,
        max_bytes: int | None = None,
        reserved_bytes: int = 0,
        member_bytes: int = 0,
        share: OnlineState | None = None,
    ):
        self.model = model.eval()
        self.config = model.config
        self.context = model.config.ring_context
        self.parts, self.device = parts, device
        if model.recurrent:  # its state per student, kept (common.stream.recurrent_step)
            self.pool = RecurrentPool(model, device)
        else:
            self.pool = CachePool(model, max(cache_students, 1), device)
        self.shared = share is not None
        if self.shared:
            self.store = SharedStore.of(model, share, self.pool, snapshot)
        else:
            # this module's budget constants, read now: a caller (a test) may set them here
            self.store = StudentStore(
                self.context,
                model.config.past_features != "none",
                parts,
                self.pool,
                snapshot,
                max_bytes,
                reserved_bytes,
                new_student_share=NEW_STUDENT_SHARE,
                snapshot_chunk=SNAPSHOT_CHUNK,
                member_bytes=member_bytes,
            )
        self.ring = self.store.ring
        if model.recurrent:
            self.step = RecurrentStep(self.model, self.store, self.pool, device)
            self.step.seed(snapshot)
        else:
            self.step = ModelStep(self.model, self.store, self.pool, device)

    def predict(self, test_df: pd.DataFrame, past: np.ndarray | None = None) -> np.ndarray:
        """Probabilities for test_df's question rows, in their order. `past`: their
        past-event features (MODEL_FEATURES, one row per question row), for a model that
        reads them (common.data.past_state computes them online)."""
        return self.predict_group(read_group(test_df), past)

    def predict_group(self, group: ApiGroup, past: np.ndarray | None = None) -> np.ndarray:
        """`predict` of a group already read (the blend's state reads each group once)."""
        # a member that shares another's rings may find past-event features it ignores
        reads = self.config.past_features != "none" if self.shared else "past" in self.store.rings
        if reads != (past is not None):
            raise ValueError(
                "a model that reads past-event features needs them with every group, and "
                "only such a model takes them"
            )
        if self.shared:  # the owner's state has filed the group
            slots, start, position = self.store.opened(group)
        else:
            if group.prior_correct is not None:
                self.store.record_outcomes(group.prior_correct, group.prior_responses)
            slots, start, position = self.store.open_containers(group, past)
        if not len(slots):
            return np.zeros(0, dtype=np.float32)
        return self.step.forward(slots, start, group.container, position)

    def apply_previous_group(self, correct: str | float, responses: str | float) -> None:
        """Record the previous group's outcomes (its first row's string-encoded lists);
        a state that shares another's rings leaves it to that one."""
        if isinstance(correct, str) and not self.shared:
            self.store.record_outcomes(outcome_list(correct), outcome_list(responses))

    def time_split(self) -> dict:
        """Where predicting went so far beside the groups' steps: the cache builds (a
        continuing student's first group in the stream encodes their history first)."""
        return {"cache_builds": self.step.builds, "build_seconds": self.step.build_seconds}

    def state_bytes(self) -> dict[str, int | None]:
        """What the state holds now (StudentStore.state_bytes)."""
        return self.store.state_bytes()

    def student_bytes(self) -> int:
        """Bytes the state holds per student slot, besides the cache pool."""
        return self.store.student_bytes()

    def state_bytes_per_student(self) -> dict[str, float]:
        ring = 0 if self.shared else sum(r[0].nbytes for r in self.store.rings.values()) + 6 * 8
        return {"ring": ring, "cache": self.pool.bytes_per_student()}

    # -- the parts' state, as callers read it ------------------------------------------
    @property
    def rings(self) -> dict[str, np.ndarray]:
        return self.store.rings

    @property
    def slot_of(self) -> dict[int, int]:
        return self.store.slot_of

    @property
    def capacity(self) -> int:
        return self.store.capacity

    @property
    def n_items(self) -> np.ndarray:
        return self.store.n_items

    @property
    def last_first(self) -> np.ndarray:
        return self.store.last_first

    @property
    def last_timestamp(self) -> np.ndarray:
        return self.store.last_timestamp

    @property
    def cache_index(self) -> np.ndarray:
        return self.store.cache_index

    @property
    def builds(self) -> int:
        return self.step.builds

    @property
    def rebuilds(self) -> int:
        return self.step.rebuilds


def model_snapshot(
    model: KTModel,
    sequences: QuestionSequences,
    users: np.ndarray,
    length: np.ndarray,
    device: torch.device,
) -> Snapshot:
    """The start state of `model`'s stream: each student's first length[s] questions,
    the last ring_context of them in the rings (build_snapshot; their past-event features
    only for a model that reads them) and, for a recurrent model, its state after the
    whole history (common.model.predict.final_states)."""
    snapshot = build_snapshot(sequences, users, length, model.config.ring_context)
    if model.config.past_features == "none":  # attached for another model of the run
        snapshot.fields.pop("past", None)
    if model.recurrent:
        kept = np.flatnonzero(length > 0)  # build_snapshot's students, in its order
        snapshot.states = final_states(model, sequences, kept, length[kept], device)
    return snapshot


def run_states(
    model: KTModel,
    snapshot: Snapshot | None,
    members: dict,
    parts: np.ndarray,
    device: torch.device,
    cache_students: int = 4096,
    max_bytes: int | None = None,
    reserved_bytes: int = 0,
) -> tuple[OnlineState, dict[str, OnlineState]]:
    """The model's online state and its members' (`members`, name: (model, a function
    that gives its snapshot)), by name. A member that can read the model's rings
    (shares_rings) does, its state per slot planned in the model's budget; any other
    keeps rings of its own, built first, its bytes taken out of the budget before the
    model's state is sized. The members' snapshots are asked for one at a time."""
    shared = {n: m for n, (m, _) in members.items() if shares_rings(m, model)}
    own = {
        name: OnlineState(m, parts, device, snapshot_of(), cache_students)
        for name, (m, snapshot_of) in members.items()
        if name not in shared
    }
    reserved_bytes += sum(state.state_bytes()["total"] for state in own.values())
    per_slot = sum(SharedStore.slot_bytes(RecurrentPool(m, device)) for m in shared.values())
    owner = OnlineState(
        model, parts, device, snapshot, cache_students, max_bytes, reserved_bytes, per_slot
    )
    states = {}
    for name, (m, snapshot_of) in members.items():
        states[name] = own.get(name) or OnlineState(
            m, parts, device, snapshot_of(), cache_students, share=owner
        )
    return owner, states
