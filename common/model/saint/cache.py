"""Ring caches of earlier keys per student: what lets SAINT (common.model.saint) extend a
student's state question by question at inference, the window sliding and nothing
recomputed."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from common.model.saint.config import ModelConfig


@dataclass
class ModelCache:
    """Keys of earlier positions per student (row), in ring buffers: the entry for
    position p sits in slot p % size. A forward pass writes its new keys first, then
    attends over the ring, so size must be at least window + the most positions one pass
    adds (nothing a query may attend to is overwritten). Slots are unordered; masks and
    rotations go by the stored positions (-1: empty)."""

    query_position: Tensor  # (B, R)
    key_position: Tensor  # (B, R)
    encoder: list[tuple[Tensor, ...]]  # per layer, states (B, R, X)
    cross: list[tuple[Tensor, ...]]
    decoder: list[tuple[Tensor, ...]]
    # the read-out's states (ModelConfig.readout "akt"): none, or one (keys, values) pair
    # over the key stream's positions
    readout: list[tuple[Tensor, ...]]
    # a view of some rows of a larger cache (a pool): batch row b is the tensors' row
    # rows[b]; a forward pass stores into those rows and reads them (see `view`)
    rows: Tensor | None = None

    @classmethod
    def empty(
        cls, config: ModelConfig, rows: int, size: int, device: torch.device | str = "cpu"
    ) -> ModelCache:
        """An empty cache for `rows` students of a model of `config`, `size` slots each
        (common.model.saint.priming.empty_cache sizes it for a model)."""
        widths = (config.kv_latent_dim,) if config.attention == "mla" else (config.d_model,) * 2

        def blank(layers: int) -> list[tuple[Tensor, ...]]:
            return [
                tuple(torch.zeros(rows, size, w, device=device) for w in widths)
                for _ in range(layers)
            ]

        position = torch.full((rows, size), -1, dtype=torch.long, device=device)
        return cls(
            position,
            position.clone(),
            blank(config.encoder_layers),
            blank(config.decoder_layers),
            blank(config.decoder_layers),
            [tuple(torch.zeros(rows, size, config.d_model, device=device) for _ in range(2))]
            if config.readout == "akt"
            else [],
        )

    @property
    def size(self) -> int:
        return self.query_position.shape[1]

    def groups(self) -> list[tuple[Tensor, list[Tensor]]]:
        """(positions, states) pairs: each state is (B, R, X) over those positions."""
        query_side = [t for g in self.encoder + self.cross + self.decoder[1:] for t in g]
        key_side = [t for g in self.decoder[:1] + self.readout for t in g]
        return [(self.query_position, query_side), (self.key_position, key_side)]

    def tensors(self) -> list[Tensor]:
        return [t for position, states in self.groups() for t in [position, *states]]

    def place(self, position: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Where new entries at `position` (B, L) go: (batch row, column, slot) of each
        valid one."""
        row, column = (position >= 0).nonzero(as_tuple=True)
        return row, column, position[row, column] % self.size

    @staticmethod
    def store(ring: Tensor, new: Tensor, where: tuple, rows: Tensor | None = None) -> None:
        row, column, slot = where
        ring[row if rows is None else rows[row], slot] = new[row, column].to(ring.dtype)

    def grown(self, rows: int) -> ModelCache:
        """A copy with `rows` rows: these rows first, then empty ones."""

        def bigger(tensor: Tensor, fill: int) -> Tensor:
            out = tensor.new_full((rows, *tensor.shape[1:]), fill)
            out[: len(tensor)] = tensor
            return out

        def states(groups: list[tuple[Tensor, ...]]) -> list[tuple[Tensor, ...]]:
            return [tuple(bigger(t, 0) for t in group) for group in groups]

        return ModelCache(
            bigger(self.query_position, -1),
            bigger(self.key_position, -1),
            states(self.encoder),
            states(self.cross),
            states(self.decoder),
            states(self.readout),
        )

    def view(self, rows: Tensor) -> ModelCache:
        """These tensors as the cache of `rows` (batch row b -> row rows[b]), without a
        copy: a forward pass writes its new keys straight into those rows. Cheaper than
        select, forward, write back when each step is a few rows (streaming)."""
        return replace(self, rows=rows)

    def read(self, tensor: Tensor) -> Tensor:
        """A ring tensor's rows of this cache (all of it unless it is a view)."""
        return tensor if self.rows is None else tensor.index_select(0, self.rows)

    def select(self, rows: Tensor) -> ModelCache:
        """The cache of some rows (a copy), e.g. a group's students from a pool."""

        def pick(states: list[tuple[Tensor, ...]]) -> list[tuple[Tensor, ...]]:
            return [tuple(t.index_select(0, rows) for t in group) for group in states]

        return ModelCache(
            self.query_position.index_select(0, rows),
            self.key_position.index_select(0, rows),
            pick(self.encoder),
            pick(self.cross),
            pick(self.decoder),
            pick(self.readout),
        )

    def reset(self, rows: Tensor) -> None:
        """Forget the keys of `rows` (a new student takes them)."""
        self.query_position[rows] = -1
        self.key_position[rows] = -1

    def absorb(self, source: ModelCache) -> None:
        """Store into this cache (just reset; batch row b of both is one student) the
        entries of `source` at the newest `self.size` positions of each side: how a state
        built over a long history in a large temporary cache moves into a smaller ring."""
        pairs = zip(source.groups(), self.groups())  # noqa: B905 (Python 3.7: the Kaggle bundle)
        for (source_position, source_states), (position, states) in pairs:
            newest = source_position.max(1, keepdim=True).values
            kept = source_position.masked_fill(source_position <= newest - self.size, -1)
            where = self.place(kept)
            self.store(position, kept, where, self.rows)
            for target, new in zip(states, source_states):  # noqa: B905 (Python 3.7: the Kaggle bundle)
                self.store(target, new, where, self.rows)
