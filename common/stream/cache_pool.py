"""The streaming state's pool of model caches (common.model.saint.cache.ModelCache): one entry
per active student, least recently used evicted first (an evicted student's cache is
rebuilt from their ring, common.stream.online), grown on demand up to its size."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from common.model.saint import SAINT
from common.model.saint.cache import ModelCache

RING_EXTRA = 16  # ring slack beyond the receptive field: room for the incoming container


class CachePool:
    """The model's ring caches (common.model.saint.cache.ModelCache) for up to `size` students, with
    LRU eviction. The tensors grow (doubling) with the number of students that need an
    entry, up to `size`, so a stream of a few hundred students does not allocate and
    zero the room for thousands (gigabytes for a large model) before its first group."""

    per_slot = False  # an entry per active student, evicted (RecurrentPool: per slot, kept)

    def __init__(self, model: SAINT, size: int, device: torch.device):
        self.model = model
        self.size = size
        self.device = device
        self.cache: ModelCache | None = None
        self.lru: OrderedDict[int, int] = OrderedDict()  # cache index -> slot
        self.free: list[int] = []  # unused indices below capacity; pop() gives the lowest
        self.capacity = 0  # rows allocated
        self.evictions = 0
        self._row_bytes: int | None = None
        # False: the first allocation takes the whole size, so the pool is never copied
        # into a larger one (old and new side by side: 6.7 GB at a time for a 3.8 GB pool)
        self.on_demand = True

    def _grow(self, needed: int) -> None:
        """Room for at least `needed` entries (at most `size`), keeping those there."""
        capacity = min(self.size, max(needed, 2 * self.capacity, 64))
        if not self.on_demand:
            capacity = self.size
        if self.cache is None:
            self.cache = self.model.empty_cache(capacity, self.model.config.window + RING_EXTRA)
        else:
            self.cache = self.cache.grown(capacity)
        self.free = list(range(capacity - 1, self.capacity - 1, -1)) + self.free
        self.capacity = capacity

    def bytes_per_student(self) -> int:
        """Cache bytes per student, measured on a one-row cache (nothing allocated for
        the pool itself)."""
        if self._row_bytes is None:
            one = self.model.empty_cache(1, self.model.config.window + RING_EXTRA)
            self._row_bytes = sum(t.numel() * t.element_size() for t in one.tensors())
        return self._row_bytes

    def planned_bytes(self) -> int:
        """The whole pool's bytes, allocated or not."""
        return self.size * self.bytes_per_student()

    def acquire(self, slots: np.ndarray, cache_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Make sure every slot has a cache entry; returns the updated slot -> index map
        and which of `slots` got a fresh (empty) entry."""
        if len(slots) > self.size:
            raise ValueError(f"a group has {len(slots)} students; the cache pool holds {self.size}")
        new = int((cache_index[slots] < 0).sum())
        if len(self.free) < new and self.capacity < self.size:
            self._grow(len(self.lru) + new)
        missing = []
        active = set(slots.tolist())
        for i, slot in enumerate(slots.tolist()):
            index = int(cache_index[slot])
            if index >= 0:
                self.lru.move_to_end(index)
                continue
            if not self.free:
                victim_index = next(i for i, s in self.lru.items() if s not in active)
                victim_slot = self.lru.pop(victim_index)
                cache_index[victim_slot] = -1
                self.free.append(victim_index)
                self.evictions += 1
            index = self.free.pop()
            self.lru[index] = slot
            cache_index[slot] = index
            missing.append(i)
        return cache_index, np.asarray(missing, dtype=np.int64)

    def _rows(self, index: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(index, device=self.device)

    def reset(self, index: np.ndarray) -> None:
        self.cache.reset(self._rows(index))

    def view(self, index: np.ndarray) -> ModelCache:
        return self.cache.view(self._rows(index))
