"""The state of a recurrent model (common.model.interface: `recurrent` True) per student:
its LSTM's hidden and cell states, carried from one step to the next. It plays the part
SAINT's ring cache plays (common.model.saint.cache): predict_tails, the training lanes
and the streaming state make, reset, select and view it alike. Unlike a ring of keys,
it summarizes the whole history, so it is never rebuilt from a student's ring: a
streaming state takes it from the snapshot (to_arrays / load_arrays) or starts empty.

This module ships in the Kaggle bundle: Python 3.7, torch 1.7."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor, nn


@dataclass
class RecurrentState:
    """h and c (layers, R, width) of R students (rows). A view (`rows` set) stands for the
    rows `rows` of its tensors: batch row b is row rows[b]; reads gather them, writes go
    straight into them."""

    h: Tensor
    c: Tensor
    rows: Tensor | None = None

    @classmethod
    def empty(cls, layers: int, rows: int, width: int, device="cpu") -> RecurrentState:
        zeros = torch.zeros(layers, rows, width, device=device)
        return cls(zeros, zeros.clone())

    @property
    def n_rows(self) -> int:
        return self.h.shape[1] if self.rows is None else len(self.rows)

    def read(self) -> tuple[Tensor, Tensor]:
        """(h, c) of this state's rows, (layers, B, width): the initial state of a pass."""
        if self.rows is None:
            return self.h, self.c
        return self.h.index_select(1, self.rows), self.c.index_select(1, self.rows)

    def write(self, h: Tensor, c: Tensor, which: Tensor) -> None:
        """Store the final (h, c) of batch rows `which` (a bool mask over the batch),
        detached: the next pass starts from it and backpropagation stops there."""
        index = which.nonzero(as_tuple=True)[0]
        target = index if self.rows is None else self.rows[index]
        self.h[:, target] = h.detach()[:, index].to(self.h.dtype)
        self.c[:, target] = c.detach()[:, index].to(self.c.dtype)

    def reset(self, rows: Tensor) -> None:
        """A new student takes these rows: the empty state (no history)."""
        target = rows if self.rows is None else self.rows[rows]
        self.h[:, target] = 0
        self.c[:, target] = 0

    def select(self, rows: Tensor) -> RecurrentState:
        """A copy of some rows."""
        h, c = self.read()
        return RecurrentState(h.index_select(1, rows), c.index_select(1, rows))

    def view(self, rows: Tensor) -> RecurrentState:
        return replace(self, rows=rows)

    def grown(self, rows: int) -> RecurrentState:
        """A copy with `rows` rows: these first, then empty ones."""
        h = self.h.new_zeros(self.h.shape[0], rows, self.h.shape[2])
        c = h.clone()
        h[:, : self.h.shape[1]] = self.h
        c[:, : self.c.shape[1]] = self.c
        return RecurrentState(h, c)

    def tensors(self) -> list[Tensor]:
        return [self.h, self.c]

    def absorb(self, source: RecurrentState) -> None:
        """Store `source`'s rows (batch row b) into this state's rows."""
        h, c = source.read()
        self.write(h, c, torch.ones(h.shape[1], dtype=torch.bool, device=h.device))

    def to_arrays(self) -> np.ndarray:
        """(R, 2, layers, width) float32: each row's (h, c), for a snapshot."""
        h, c = self.read()
        return torch.stack((h, c)).permute(2, 0, 1, 3).float().cpu().numpy()

    def load_arrays(self, arrays: np.ndarray) -> None:
        """Store a snapshot's (B, 2, layers, width) states into this state's rows."""
        both = torch.from_numpy(np.ascontiguousarray(arrays)).to(self.h.device)
        both = both.permute(1, 2, 0, 3)  # (2, layers, B, width)
        rows = torch.ones(both.shape[2], dtype=torch.bool, device=self.h.device)
        self.write(both[0], both[1], rows)


def run_lstm(
    lstm: nn.LSTM, x: Tensor, lengths: Tensor, state: RecurrentState | None
) -> tuple[Tensor, Tensor, Tensor]:
    """(outputs (B, S, width), h, c): `lstm` over each row's first lengths[b] steps of x
    (B, S, input), from `state`'s rows (None: the empty state). Rows of other lengths in
    one pass (packed); a row of length 0 keeps its initial state."""
    batch = x.shape[0]
    if state is None:
        zeros = x.new_zeros(lstm.num_layers, batch, lstm.hidden_size)
        h0, c0 = zeros, zeros
    else:
        h0, c0 = state.read()
        h0, c0 = h0.to(x.dtype), c0.to(x.dtype)
    if batch == 0 or x.shape[1] == 0:
        return x.new_zeros(batch, x.shape[1], lstm.hidden_size), h0, c0
    steps = lengths.clamp(min=1).cpu()
    packed = nn.utils.rnn.pack_padded_sequence(x, steps, batch_first=True, enforce_sorted=False)
    out, (h, c) = lstm(packed, (h0.contiguous(), c0.contiguous()))
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    empty = (lengths == 0).view(1, -1, 1)
    return out, torch.where(empty, h0, h), torch.where(empty, c0, c)
