"""The Last Query Transformer RNN of the Riiid 1st place (Jeon, arXiv 2102.05038): a
Transformer encoder in which only the last position queries, then an LSTM, then a small
feed-forward network, over concatenated embeddings.

Here each question is "the last position" of its own pass, all at once: question t's
embeddings (question, tags, part, difficulty, past-event features; concatenated and
projected) query, with one multi-head attention, the last `window` outcomes before its
container (the key stream: each previous question's outcome fields and the answered
question, concatenated and projected; nothing of t's own container, whose questions are
answered together after it). An LSTM then runs over the questions in order, each
question's input its embedding plus what its attention read, and a feed-forward block
(residual) and a linear layer give its logit; with InputConfig.past_features "head"
or "both", the past-event features' head adds to it (common.model.past_head). An LSTM
step at t reads the attention of questions up to t only, each of which read outcomes
before its own container: no question sees an outcome of its own container.

The state is recurrent (common.model.interface): the LSTM's (h, c) after the student's
last question, carried from step to step; the attention's window of outcomes is read
again from the batch (the streaming state's rings) at every step (config.key_context).

This module ships in the Kaggle bundle: Python 3.7, torch 1.7."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.model.inputs import decoder_inputs, encoder_inputs
from common.model.interface import KTModel
from common.model.lqrnn.config import LQRNNConfig
from common.model.lstm.model import concat_projection, embed_concat, init_embeddings
from common.model.past_head import add_past_head, past_logit
from common.model.recurrent import RecurrentState, run_lstm


class LastQueryAttention(nn.Module):
    """Multi-head attention of each query over the keys in its window: the keys at
    positions (limit - window, limit] of the query's limit (its container's first
    question), valid ones only. A query with no such key reads zeros."""

    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(d, d)
        self.key_value = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)
        self.dropout = dropout

    def forward(self, x: Tensor, keys: Tensor, allowed: Tensor) -> Tensor:
        """x (B, T, D), keys (B, S, D), allowed (B, T, S) -> (B, T, D)."""
        batch, length, width = x.shape
        heads, head = self.heads, width // self.heads
        q = self.query(x).view(batch, length, heads, head).transpose(1, 2)
        k, v = self.key_value(keys).chunk(2, -1)
        k = k.view(batch, -1, heads, head).transpose(1, 2)
        v = v.view(batch, -1, heads, head).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / head**0.5  # (B, H, T, S)
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        weights = torch.softmax(scores, -1)
        weights = torch.where(allowed[:, None], weights, torch.zeros_like(weights))
        weights = F.dropout(weights, self.dropout, self.training)
        read = (weights @ v).transpose(1, 2).reshape(batch, length, width)
        return self.out(read)


class LQRNN(KTModel):
    arch = "lqrnn"
    recurrent = True

    def __init__(self, config: LQRNNConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.encoder_inputs = encoder_inputs(config)  # the query's
        self.decoder_inputs = decoder_inputs(config)  # the key stream's
        for embedder in (*self.encoder_inputs, *self.decoder_inputs):
            embedder.build(self, config)
        self.query_project = concat_projection(len(self.encoder_inputs), config)
        self.key_project = concat_projection(len(self.decoder_inputs), config)
        self.attention = LastQueryAttention(d, config.n_heads, config.dropout)
        self.attention_norm = nn.LayerNorm(d)
        between = config.dropout if config.layers > 1 else 0.0  # between LSTM layers
        self.lstm = nn.LSTM(d, d, config.layers, batch_first=True, dropout=between)
        self.feed_forward = nn.Sequential(
            nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(config.dropout), nn.Linear(4 * d, d)
        )
        self.output_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)
        if config.past_head:
            add_past_head(self, d, nn.Dropout(config.dropout))
        self.apply(init_embeddings)
        for embedder in (*self.encoder_inputs, *self.decoder_inputs):
            embedder.init(self, config)
        self._folded: dict = {}  # embed_concat's projected lookup tables (not state)

    def empty_cache(self, rows: int, size: int | None = None) -> RecurrentState:
        device = self.head.weight.device
        return RecurrentState.empty(self.config.layers, rows, self.config.d_model, device)

    def allowed(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, T, S): which keys each query reads: valid, at or before its limit, within
        the window."""
        limit = batch["query_limit"][..., None]  # (B, T, 1)
        position = batch["key_position"][:, None, :]  # (B, 1, S)
        window = self.config.window
        return batch["key_valid"][:, None, :] & (position <= limit) & (position > limit - window)

    def forward(
        self, batch: dict[str, Tensor], cache: RecurrentState | None = None, trained_from: int = 0
    ) -> Tensor:
        """Logits (B, T) of the batch's queries; the LSTM runs over them from the cache's
        state (the empty state without one), which takes its state after each row's last
        valid query. trained_from: every position is computed (the state passes through
        them all)."""
        query = embed_concat(self, batch, self.encoder_inputs, self.query_project)
        keys = embed_concat(self, batch, self.decoder_inputs, self.key_project)
        x = self.attention_norm(query + self.attention(query, keys, self.allowed(batch)))
        lengths = batch["valid"].sum(1)
        out, h, c = run_lstm(self.lstm, x, lengths, cache)
        if cache is not None:
            cache.write(h, c, lengths > 0)
        y = self.output_norm(out + self.feed_forward(out))
        logits = self.head(y).squeeze(-1)
        if self.config.past_head:
            logits = logits + past_logit(self, batch, y)
        return logits

    def prime(self, batch: dict[str, Tensor], cache: RecurrentState) -> None:
        self.forward(batch, cache)
