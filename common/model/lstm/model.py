"""An LSTM knowledge tracer over concatenated embeddings, as the Riiid 2nd- and 3rd-place
teams built theirs (arXiv 2102.00845; kurupical/riiid: concatenating the embeddings
through a linear layer was their largest gain).

Two streams, as SAINT's (common.data.features.step_inputs):
- the key stream (one key per question: the previous question's outcome fields, the
  answered question, this question's lag): each key's embeddings concatenated and
  projected, then an LSTM carries the student's state through them, key by key;
- the queries (the questions to predict): each question's embeddings (question, tags,
  part, difficulty, past-event features) concatenated and projected.
A query reads the LSTM's state after the key at its container's first question
(query_key_index): every outcome before its container and nothing of its own container
(the questions of a bundle are answered before any feedback), and a small network of
that state and the query gives its logit.

The state is recurrent (common.model.interface): one (h, c) per student, carried from
one step to the next (common.model.recurrent.RecurrentState), so every prediction reads
the whole history; training backpropagates through one chunk of a student's history at
a time (common.train.recurrent).

This module ships in the Kaggle bundle: Python 3.7, torch 1.7."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.model.inputs import Lookup, decoder_inputs, encoder_inputs
from common.model.interface import KTModel
from common.model.lstm.config import LSTMConfig
from common.model.recurrent import RecurrentState, run_lstm


def concat_projection(count: int, config) -> nn.Sequential:
    """count embeddings of width d_model, concatenated, to one of d_model."""
    d = config.d_model
    return nn.Sequential(nn.Linear(count * d, d), nn.LayerNorm(d), nn.Dropout(config.dropout))


def embed_concat(model: nn.Module, batch: dict[str, Tensor], embedders, project) -> Tensor:
    """(B, L, D): the embedders' outputs on `batch`, concatenated and projected. Without
    gradients (validation, streaming) the projection is applied per embedder, and a
    lookup's through its table projected once (folded_table): the same function, at a
    fraction of the cost of projecting every key's concatenation at every step."""
    if torch.is_grad_enabled():
        return project(torch.cat([e(model, batch) for e in embedders], -1))
    linear, d = project[0], model.config.d_model
    total = linear.bias
    for i, embedder in enumerate(embedders):
        weight = linear.weight[:, i * d : (i + 1) * d]
        if isinstance(embedder, Lookup):
            total = total + folded_table(model, embedder, linear, i)[batch[embedder.field]]
        else:
            total = total + F.linear(embedder(model, batch), weight)
    return project[2](project[1](total))


def folded_table(model: nn.Module, embedder: Lookup, linear: nn.Linear, i: int) -> Tensor:
    """The lookup's table times its block of the projection's weight (rows, D), kept until
    either changes (their tensors' versions: an optimizer step, a load)."""
    table = embedder.table_of(model).weight
    key = (embedder.table, id(linear))
    version = (table._version, linear.weight._version, table.data_ptr())
    cached = model._folded.get(key)
    if cached is None or cached[0] != version:
        d = model.config.d_model
        cached = (version, table @ linear.weight[:, i * d : (i + 1) * d].t())
        model._folded[key] = cached
    return cached[1]


def init_embeddings(module: nn.Module) -> None:
    """Embeddings at SAINT's scale (0.02), a padding row at zero; linear layers keep
    torch's defaults."""
    if isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()


class LSTMModel(KTModel):
    arch = "lstm"
    recurrent = True

    def __init__(self, config: LSTMConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.encoder_inputs = encoder_inputs(config)  # the query's
        self.decoder_inputs = decoder_inputs(config)  # the key stream's
        for embedder in (*self.encoder_inputs, *self.decoder_inputs):
            embedder.build(self, config)
        self.query_project = concat_projection(len(self.encoder_inputs), config)
        self.key_project = concat_projection(len(self.decoder_inputs), config)
        self.lstm = nn.LSTM(
            d,
            d,
            config.layers,
            batch_first=True,
            dropout=config.dropout if config.layers > 1 else 0.0,
        )
        self.head = nn.Sequential(
            nn.Linear(2 * d, d), nn.GELU(), nn.Dropout(config.dropout), nn.Linear(d, 1)
        )
        self.apply(init_embeddings)
        for embedder in (*self.encoder_inputs, *self.decoder_inputs):
            embedder.init(self, config)
        self._folded: dict = {}  # embed_concat's projected lookup tables (not state)

    def empty_cache(self, rows: int, size: int | None = None) -> RecurrentState:
        device = self.head[0].weight.device
        return RecurrentState.empty(self.config.layers, rows, self.config.d_model, device)

    def key_states(self, batch: dict[str, Tensor], cache: RecurrentState | None) -> Tensor:
        """(B, S, D): the LSTM's output after each key, from the cache's state (the empty
        state without one); the cache takes each row's state after its last key."""
        keys = embed_concat(self, batch, self.decoder_inputs, self.key_project)
        lengths = batch["key_valid"].sum(1)
        out, h, c = run_lstm(self.lstm, keys, lengths, cache)
        if cache is not None:
            cache.write(h, c, lengths > 0)
        return out

    def prime(self, batch: dict[str, Tensor], cache: RecurrentState) -> None:
        self.key_states(batch, cache)

    def forward(
        self, batch: dict[str, Tensor], cache: RecurrentState | None = None, trained_from: int = 0
    ) -> Tensor:
        """Logits (B, T) of the batch's queries, each from the state after the key of its
        container's first question. trained_from: every position is computed (the state
        must pass through them all)."""
        states = self.key_states(batch, cache)  # (B, S, D)
        index = batch["query_key_index"][..., None].expand(-1, -1, states.shape[-1])
        state = states.gather(1, index)  # (B, T, D)
        query = embed_concat(self, batch, self.encoder_inputs, self.query_project)
        return self.head(torch.cat((state, query), -1)).squeeze(-1)
