"""What the attention layers of one SAINT pass share (common.model.saint): its masks
(dense, or banded by blocks), rotary tables, and, with a cache, where its positions go in
the cache's rings and the key states its layers store there."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from common.model.saint.attention import Blocks, Rotary, attention_mask, rope_tail
from common.model.saint.cache import ModelCache
from common.model.saint.config import ModelConfig


@dataclass
class AttentionInputs:
    """What the attention layers of one forward pass share. Masks: `causal` over the
    query stream's positions, `container` over the key stream's (tensors, or Blocks).
    Rotary tables: of this batch's query and key positions, and, for latent attention
    (which rotates stored keys at use), of every position in view (`past_rope`: the
    query stream's, `outcome_rope`: the key stream's; None otherwise). With a cache: where
    this batch's query and key positions go in its rings."""

    causal: Tensor | Blocks
    container: Tensor | Blocks
    query_rope: tuple[Tensor, Tensor]
    key_rope: tuple[Tensor, Tensor]
    past_rope: tuple[Tensor, Tensor] | None
    outcome_rope: tuple[Tensor, Tensor] | None
    cache: ModelCache | None
    q_where: tuple | None
    k_where: tuple | None

    def remember(
        self, group: str, i: int, state: tuple[Tensor, ...], skip: int = 0
    ) -> tuple[Tensor, ...]:
        """A layer's new key state; with a cache, stored, and the whole ring returned.
        skip: the state starts at the batch's position `skip` (common.model.saint.priming)."""
        cache = self.cache
        if cache is None:
            return state
        ring = getattr(cache, group)[i]
        key_side = group == "readout" or (group == "decoder" and i == 0)
        where = self.k_where if key_side else self.q_where
        if skip:
            row, column, slot = where
            kept = column >= skip
            where = row[kept], column[kept] - skip, slot[kept]
        for target, new in zip(ring, state):  # noqa: B905 (Python 3.7: the Kaggle bundle)
            cache.store(target, new, where, cache.rows)
        return tuple(cache.read(target) for target in ring)

    def mask(self, kind: str, start: int, key_start: int) -> Tensor | Blocks:
        """The `kind` ("causal" or "container") mask of the queries from batch position
        `start` on, over the keys a layer's state holds: from `key_start` on without a
        cache, the whole ring with one."""
        mask = self.causal if kind == "causal" else self.container
        if isinstance(mask, Blocks):
            return mask.tail(start, key_start)
        return mask[:, :, start:, key_start if self.cache is None else 0 :]

    def rope_from(self, rope: tuple[Tensor, Tensor] | None, key_start: int):
        """A latent attention's rotary table (past_rope, outcome_rope) over the keys a
        layer's state holds (see mask); None stays None."""
        if rope is None or self.cache is not None or not key_start:
            return rope
        return rope_tail(rope, key_start)


def banded_blocks(
    config: ModelConfig, batch: dict[str, Tensor], block_size: int = 0
) -> Blocks | None:
    """Blocks of `block_size` queries (0: the window) for a sequence long enough that
    banded attention by blocks is cheaper than dense (a training sequence; its keys share
    the queries' positions); None otherwise. A query's keys reach window - 1 positions
    before its limit, which is at most the task container's length before the query
    itself."""
    position, length = batch["position"], batch["position"].shape[1]
    if batch["key_position"].shape != position.shape:
        return None
    size = block_size or config.window
    behind = (position - batch["query_limit"]).masked_fill(~batch["valid"], 0)
    reach = config.window - 1 + int(behind.max()) if length else 0
    return Blocks(size, reach, length) if length > size + reach else None


def attention_inputs(
    config: ModelConfig,
    rotary: Rotary,
    batch: dict[str, Tensor],
    cache: ModelCache | None,
    block_size: int = 0,
) -> AttentionInputs:
    """The masks and rotary tables of a pass over `batch` (attention by blocks of
    `block_size` queries where banded_blocks finds it cheaper); with a cache, this
    batch's positions are stored in it first, so that the masks cover its earlier keys
    too."""
    window = config.window
    position, valid = batch["position"], batch["valid"]
    key_position, key_valid = batch["key_position"], batch["key_valid"]
    q_pos = position.masked_fill(~valid, -1)  # (B, T)
    k_pos = key_position.masked_fill(~key_valid, -1)  # (B, S)
    if cache is None:
        all_q, all_k = q_pos, k_pos
        q_where = k_where = None
    else:
        q_where, k_where = cache.place(q_pos), cache.place(k_pos)
        cache.store(cache.query_position, q_pos, q_where, cache.rows)
        cache.store(cache.key_position, k_pos, k_where, cache.rows)
        all_q, all_k = cache.read(cache.query_position), cache.read(cache.key_position)
    blocks = banded_blocks(config, batch, block_size) if cache is None else None
    if blocks is None:
        causal = attention_mask(position, valid, all_q, all_q >= 0, window)
        container = attention_mask(batch["query_limit"], valid, all_k, all_k >= 0, window)
    else:
        causal = blocks.masked(position, valid, all_q, window)
        container = blocks.masked(batch["query_limit"], valid, all_k, window)
    query_rope = rotary.table(position)
    key_rope = rotary.table(key_position)
    # standard attention stores keys rotated; latent attention rotates all at use
    latent = config.attention == "mla"
    past_rope = rotary.table(all_q) if latent else None
    outcome_rope = rotary.table(all_k) if latent else None
    return AttentionInputs(
        causal=causal,
        container=container,
        query_rope=query_rope,
        key_rope=key_rope,
        past_rope=past_rope,
        outcome_rope=outcome_rope,
        cache=cache,
        q_where=q_where,
        k_where=k_where,
    )
