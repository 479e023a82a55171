"""A recurrent member's view of another model's student store (common.stream.student_store):
the rings, slots and history positions are the owner's, filled once per group by the
owner's state; the step's per-student arrays are the member's own.

A run of several architectures streams each member beside the model
(common.stream.blend_state). A recurrent member keeps no cache of the rings, only its
state per student (common.stream.recurrent_step), and reads from the rings the keys
its state has not absorbed and its attention's window: at most its ring_context of a
student's latest questions. Where the owner's rings hold as many (SAINT's hold its
receptive field, four windows), and the same fields, the member reads them instead of
keeping rings of its own: at Riiid's size that is 2.6 KB a student, about 1 GB a member.

This module ships in the Kaggle bundle: Python 3.7.
"""

from __future__ import annotations

import numpy as np

from common.data.api_group import ApiGroup
from common.stream.student_store import STUDENT_ARRAYS, grown_array

# the step's arrays a member keeps per student slot (StudentStore's STUDENT_ARRAYS that
# its step writes), with the value of a new slot
STEP_ARRAYS = tuple(
    (name, fill)
    for name, fill in STUDENT_ARRAYS
    if name in ("session_start", "key_from", "cache_index", "built")
)
STEP_ARRAYS_BYTES = sum(np.asarray(fill).dtype.itemsize for _, fill in STEP_ARRAYS)


def shares_rings(member, owner) -> bool:
    """Whether `member` (a model) can stream from `owner`'s rings: it is recurrent (its
    state is per slot, nothing is rebuilt from the rings), the owner's rings hold its
    ring_context, and they hold the past-event features if the member reads them (the
    member's steps read only the fields it needs)."""
    return (
        member.recurrent
        and member.config.ring_context <= owner.config.ring_context
        and (member.config.past_features == "none" or owner.config.past_features != "none")
    )


class SharedStore:
    """The StudentStore interface a member's step reads (rings, ring, slot_of, n_items,
    last_first, capacity) over the `owner` store, with STEP_ARRAYS of its own grown with
    the owner's slots. `opened(group)`: the owner's filing of the group, which must come
    first."""

    shared = True

    @classmethod
    def of(cls, model, owner_state, pool, snapshot) -> SharedStore:
        """`model`'s view of the rings of `owner_state` (an OnlineState), its snapshot's
        students checked to be the owner's, in the owner's slot order."""
        owner, owner_model = owner_state.store, owner_state.model
        if not shares_rings(model, owner_model):
            raise ValueError(
                f"the {model.arch} model cannot read the {owner_model.arch} model's rings "
                "(common.stream.shared_store.shares_rings)"
            )
        known = len(snapshot.users) if snapshot is not None else 0
        if known != len(owner.slot_of) or (
            known and not np.array_equal(snapshot.users, np.fromiter(owner.slot_of, np.int64))
        ):
            raise ValueError(
                f"the {model.arch} model's snapshot holds other students than the "
                f"{owner_model.arch} model's state whose rings it shares"
            )
        return cls(owner, cls.slot_bytes(pool))

    @staticmethod
    def slot_bytes(pool) -> int:
        """Bytes a member with `pool` (its RecurrentPool) holds per student slot: its
        state and its step's arrays (the owner's budget counts them with its own slots)."""
        return pool.bytes_per_student() + STEP_ARRAYS_BYTES

    def __init__(self, owner, slot_bytes: int):
        self.owner = owner
        self.bytes_per_slot = slot_bytes
        self.capacity = 0
        for name, fill in STEP_ARRAYS:
            setattr(self, name, np.zeros(0, dtype=np.asarray(fill).dtype))
        self.follow()

    def follow(self) -> None:
        """Grow the step's arrays to the owner's slots."""
        capacity = self.owner.capacity
        if capacity <= self.capacity:
            return
        for name, fill in STEP_ARRAYS:
            setattr(self, name, grown_array(getattr(self, name), capacity, fill))
        self.capacity = capacity

    def opened(self, group: ApiGroup) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slots, start, position) of `group` as the owner filed it (StudentStore.
        open_containers); a group the owner has not filed is refused."""
        filed = self.owner.last_opened
        if filed is None or filed[0] is not group:
            raise RuntimeError(
                "a member that shares the model's rings steps after the model's state has "
                "filed the same group (common.stream.blend_state steps the model first)"
            )
        self.follow()
        return filed[1]

    # -- the owner's, read ---------------------------------------------------------------
    @property
    def rings(self) -> dict[str, np.ndarray]:
        return self.owner.rings

    @property
    def ring(self) -> int:
        return self.owner.ring

    @property
    def slot_of(self) -> dict[int, int]:
        return self.owner.slot_of

    @property
    def n_items(self) -> np.ndarray:
        return self.owner.n_items

    @property
    def last_first(self) -> np.ndarray:
        return self.owner.last_first

    @property
    def last_timestamp(self) -> np.ndarray:
        return self.owner.last_timestamp

    def student_bytes(self) -> int:
        """Bytes the member holds per student slot (slot_bytes)."""
        return self.bytes_per_slot

    def state_bytes(self) -> dict[str, int | None]:
        """What the member holds for the owner's slots (StudentStore.state_bytes' keys)."""
        capacity = self.owner.capacity
        held = capacity * self.student_bytes()
        return {
            "students": len(self.owner.slot_of),
            "capacity": capacity,
            "student_state": held,
            "cache_pool": 0,
            "cache_students": 0,
            "total": held,
            "max_bytes": None,
        }
