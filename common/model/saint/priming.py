"""Passes of SAINT (common.model.saint) that compute each layer only where a later
position can reach it: priming a cache (common.model.saint.cache) with a student's history, the
start of a streaming state, and a training pass from a first trained position
(SAINT.forward's trained_from). Also the cache a model's streaming passes use."""

from __future__ import annotations

from torch import Tensor, nn

from common.model.saint.attention import Blocks
from common.model.saint.attention_inputs import AttentionInputs, attention_inputs
from common.model.saint.cache import ModelCache
from common.model.saint.config import ModelConfig
from common.model.saint.heads import readout_state


def empty_cache(model: nn.Module, rows: int, size: int | None = None) -> ModelCache:
    """A ring cache for `rows` students of `model` (a SAINT); size defaults to twice the window
    (room for a pass of up to `window` new positions)."""
    device = model.question_embed.weight.device
    return ModelCache.empty(model.config, rows, size or 2 * model.config.window, device)


def first_reached(config: ModelConfig, last: int, size: int = 1) -> list[int]:
    """Per layer (encoder, then decoder), the first batch position whose output the last
    layer's positions from `last` on can reach: each layer below one window further back
    (a query attends at most window - 1 positions back; the decoder's first layer reads
    the key stream, computed whole), each rounded down to `size` (the attention blocks':
    a layer's queries start at a block). A training pass gives it the first trained
    position (trained_layers); prime the shortest row's end (a position after the batch,
    enough for every row: the last layer is needed nowhere)."""
    first = [last // size * size]
    for _ in range(config.encoder_layers + config.decoder_layers - 1):
        first.insert(0, max(0, first[0] - config.window) // size * size)
    return first


def trained_layers(
    config: ModelConfig, attend: AttentionInputs, trained_from: int
) -> list[int] | None:
    """For a training pass (no cache) whose logits are wanted from batch position
    `trained_from` on, each layer's first position to compute (first_reached, at the
    attention blocks' size); None: every position (no trained_from, or a cache)."""
    if not trained_from or attend.cache is not None:
        return None
    blocks = attend.causal if isinstance(attend.causal, Blocks) else None
    return first_reached(config, trained_from, blocks.size if blocks else 1)


def prime(model: nn.Module, batch: dict[str, Tensor], cache: ModelCache) -> None:
    """Store in `cache` the key states of `batch`'s positions, as `model`'s (a SAINT's)
    forward does, for
    later positions to attend (a streaming state built from a student's history); no
    logits. Each layer's outputs are computed only where a later position can reach them
    through the layers above it (first_reached): the last decoder layer's nowhere, each
    layer below it one window further back. The states stored are forward's wherever a
    later query can attend them (tests/test_stream.py)."""
    attend = attention_inputs(model.config, model.rotary, batch, cache)
    first = first_reached(model.config, int(batch["valid"].sum(1).min()))
    memory = model.encode(batch, attend, first)
    keys = model.key_stream(batch)
    model.decode(batch, keys, memory, attend, first)
    if model.config.readout == "akt":
        readout_state(model, batch, keys, attend)
