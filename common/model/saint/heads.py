"""What SAINT (common.model.saint) adds to the decoder's logit: the AKT-style read-out
(ModelConfig.readout "akt": the current question attends to the questions answered
before it, their outcomes as values, as AKT's knowledge retriever, Ghosh et al. 2020);
the past-event features' head is every model's (common.model.past_head).

Its tables register on the model itself, under the names checkpoints know (readout,
readout_norm, readout_head)."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.model.inputs import question_vector
from common.model.saint.attention import Attention, Rotary, rope_tail
from common.model.saint.attention_inputs import AttentionInputs
from common.model.saint.config import ModelConfig
from common.model.saint.layers import Dropout


class ReadoutAttention(Attention):
    """Attention whose keys and values come from different inputs: kv_state takes
    (key input, value input), each (B, S, D), and projects them with the two halves of
    the key/value matrix. Standard (not latent) attention only."""

    def kv_state(self, x: tuple[Tensor, Tensor], key_rope) -> tuple[Tensor, ...]:
        key_input, value_input = x
        key_weight, value_weight = self.key_value.weight.chunk(2)
        key_bias, value_bias = self.key_value.bias.chunk(2)
        key = F.linear(key_input, key_weight, key_bias)
        batch, length, width = key.shape
        key = Rotary.rotate(key.reshape(batch, length, self.n_heads, -1), key_rope)
        return key.view(batch, length, width), F.linear(value_input, value_weight, value_bias)


def add_readout(model: nn.Module, config: ModelConfig) -> None:
    """The AKT-style read-out beside the decoder (ModelConfig.readout 'akt')."""
    d = config.d_model
    # standard attention whatever config.attention: its keys and values come from
    # different inputs (ReadoutAttention)
    model.readout = ReadoutAttention(replace(config, attention="mha"))
    model.readout_norm = nn.LayerNorm(d)
    model.readout_head = nn.Sequential(
        nn.Linear(2 * d, d), nn.ReLU(), Dropout(config.dropout), nn.Linear(d, 1)
    )


def readout_state(
    model: nn.Module, batch: dict[str, Tensor], keys: Tensor, attend: AttentionInputs
) -> tuple[Tensor, ...]:
    """The read-out's key state: key s carries question s - 1 (its embedding as the key)
    and its outcome (the key stream `keys` (B, S, D) plus that embedding as the value)."""
    answered = question_vector(model, batch["key_question"])  # (B, S, D)
    state = model.readout.kv_state((answered, keys + answered), attend.key_rope)
    return attend.remember("readout", 0, state)


def read_out(
    model: nn.Module,
    batch: dict[str, Tensor],
    keys: Tensor,
    attend: AttentionInputs,
    start: int = 0,
) -> Tensor:
    """(B, T - start): the AKT-style read-out's logit, added to the decoder's, from batch
    position `start` on."""
    # the container mask lets a query read only the questions answered before its
    # container
    asked = question_vector(model, batch["question"][:, start:])  # (B, T - start, D)
    state = readout_state(model, batch, keys, attend)
    read = model.readout(
        model.readout_norm(asked),
        rope_tail(attend.query_rope, start) if start else attend.query_rope,
        state,
        attend.outcome_rope,
        attend.mask("container", start, 0),
    )
    return model.readout_head(torch.cat((read, asked), -1)).squeeze(-1)
