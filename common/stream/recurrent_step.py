"""The streaming step of a recurrent model (common.model.interface: `recurrent`), the part
common.stream.online.ModelStep plays for SAINT: its per-student state and the forward
step over a group's new containers.

The state (RecurrentPool) is one row per student slot, never evicted: it summarizes the
student's whole history, which no ring holds. A student of the snapshot starts from the
state the snapshot carries (common.model.predict.final_states: the model's pass over
their whole training history, every key up to their last container's first absorbed);
a new student from the empty state. Each step absorbs the keys since the student's last
container (the outcomes the API has revealed since, read from the ring) up to the new
container's first question, whose queries read the state there: the same keys, in the
same chunks of whole containers, as training and validation step through.

This module ships in the Kaggle bundle: Python 3.7."""

from __future__ import annotations

import numpy as np
import torch

from common.data.features import step_inputs
from common.model.interface import KTModel
from common.model.predict import to_tensors
from common.model.recurrent import RecurrentState
from common.stream.snapshot import Snapshot
from common.stream.student_store import RingSource


class RecurrentPool:
    """A recurrent model's state of every student slot (row = slot), grown to the store's
    slots (`fit`: the rows its budget planned, never more); the CachePool interface
    StudentStore and its budget read (size, bytes_per_student, planned_bytes, acquire,
    view)."""

    per_slot = True

    def __init__(self, model: KTModel, device: torch.device):
        self.model, self.device = model, device
        self.state: RecurrentState = model.empty_cache(0)
        self.size = 1 << 62  # every student keeps a row: the budget caps the slots instead
        self.on_demand = True
        self.evictions = 0  # never: the interface's counter

    @property
    def capacity(self) -> int:
        return self.state.n_rows

    def bytes_per_student(self) -> int:
        one = self.model.empty_cache(1)
        return sum(t.numel() * t.element_size() for t in one.tensors())

    def planned_bytes(self) -> int:
        return 0  # counted with each student slot (StudentStore.student_bytes)

    def fit(self, rows: int) -> None:
        """Rows for `rows` slots (the store's capacity): grown once per store growth."""
        if rows > self.capacity:
            self.state = self.state.grown(rows)

    def _grow(self, rows: int) -> None:
        if rows > self.capacity:
            self.fit(max(rows, self.capacity + self.capacity // 4, 1024))

    def acquire(self, slots: np.ndarray, cache_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every slot's row is the slot; returns the slot -> row map and which of `slots`
        had none yet (a student new to the state: the empty state)."""
        missing = np.flatnonzero(cache_index[slots] < 0)
        self._grow(int(slots.max(initial=-1)) + 1)
        cache_index[slots] = slots
        return cache_index, missing

    def view(self, index: np.ndarray) -> RecurrentState:
        return self.state.view(torch.as_tensor(index, device=self.device))

    def load_snapshot(self, states: np.ndarray) -> None:
        """The snapshot students' states, into rows 0..n-1 (their slots)."""
        self._grow(len(states))
        rows = torch.arange(len(states), device=self.device)
        self.state.view(rows).load_arrays(states)


class RecurrentStep:
    """A recurrent model's forward step over a group's new containers: one row per
    student, its container's questions as the queries, the keys since its last step."""

    def __init__(self, model: KTModel, store, pool: RecurrentPool, device: torch.device):
        self.model, self.store, self.pool, self.device = model, store, pool, device
        self.builds = self.rebuilds = 0  # nothing is built: the ModelStep interface's
        self.build_seconds = 0.0

    def seed(self, snapshot: Snapshot | None) -> None:
        """Start the snapshot's students from its states (their slots are 0..n-1), every
        key up to their last container's first absorbed."""
        if snapshot is None:
            return
        if snapshot.states is None:
            raise ValueError(
                f"the snapshot holds no state of the {self.model.arch} model: a recurrent "
                "model streams from states built over each student's history "
                "(common.model.predict.final_states)"
            )
        n = len(snapshot.users)
        self.pool.fit(self.store.capacity)  # at once: not grown by copying later
        self.pool.load_snapshot(np.asarray(snapshot.states))
        store = self.store
        store.cache_index[:n] = np.arange(n)
        store.key_from[:n] = store.last_first[:n] + 1
        store.session_start[:n] = 0

    def forward(self, slots, start, container, position) -> np.ndarray:
        """The probability of each question row (row q is student container[q]'s
        question at position[q]; start: each student's new container's first position)."""
        store = self.store
        self.pool.fit(store.capacity)
        store.cache_index, _ = self.pool.acquire(slots, store.cache_index)
        counts = np.bincount(container, minlength=len(slots)).astype(np.int64)
        key_from = store.key_from[slots]
        context = self.model.config.key_context  # keys read again: an attention's window
        if context:
            key_from = np.maximum(0, np.minimum(key_from, start - context + 1))
        inputs = step_inputs(
            RingSource(store), slots, store.session_start[slots], start, counts, key_from,
            start - key_from + 1, self.model.config.n_questions,
        )  # fmt: skip
        with torch.no_grad():
            logits = self.model(to_tensors(inputs, self.device), self.pool.view(slots))
        store.key_from[slots] = start + 1
        probability = torch.sigmoid(logits.float()).cpu().numpy()
        return probability[container, position - start[container]]
