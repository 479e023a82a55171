"""SAINT and SAINT+ (Choi et al. 2020, arXiv 2002.07033; Shin et al. 2021, arXiv 2010.12042).

Encoder: the sum of each question's input embeddings (question and part; optionally
tags, difficulty, past-event features), causal self-attention. Decoder: a start token,
then each previous question's outcome (response; SAINT+ adds elapsed time, and lag time
of the current question), causal self-attention, attention over the encoder output,
feed-forward, and a linear layer to one logit per position. The inputs of both sides are
common/model/inputs.py's registry.

Two choices differ from the papers' text, both so that one student's state can be
extended question by question at inference with cached keys and values (the window
slides; nothing is recomputed): rotary positions over the student's whole history and
banded attention (both in common/model/saint/attention.py); the cache is
common/model/saint/cache.py.

No leakage within a task container (the questions of a bundle are answered before any
feedback): the decoder's first self-attention takes its query at question t from the key
stream at the first question of t's container, and masks keys after that position, so
nothing derived from an outcome in t's container reaches t. Later decoder layers,
whose inputs carry no outcome of their own container, use plain causal masks.
"""

from __future__ import annotations

from functools import partial

from torch import Tensor, nn

from common.model.inputs import decoder_inputs, encoder_inputs, input_sum, registration_order
from common.model.interface import KTModel
from common.model.past_head import add_past_head, past_logit
from common.model.saint.attention import Rotary, rope_tail
from common.model.saint.attention_inputs import AttentionInputs, attention_inputs
from common.model.saint.cache import ModelCache
from common.model.saint.config import ModelConfig
from common.model.saint.heads import add_readout, read_out
from common.model.saint.layers import DecoderLayer, Dropout, EncoderLayer, init_weights
from common.model.saint.priming import empty_cache, prime, trained_layers


class SAINT(KTModel):
    """SAINT / SAINT+ over batches from common.data.features.step_inputs. Its inputs are
    common.model.inputs' embedders; the read-out and the past features' head are
    common.model.saint.heads'; priming a cache and a training pass from trained_from compute
    only what later positions reach (common.model.saint.priming)."""

    arch = "saint"

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.rotary = Rotary(d // config.n_heads, config.rope_base, config.rope_fraction)
        self.encoder_inputs = encoder_inputs(config)  # in the order their sum adds them
        self.decoder_inputs = decoder_inputs(config)
        # registration order is the state_dict's key order and the order construction
        # draws random numbers in: checkpoints and seeded weights depend on both
        inputs, later_inputs = registration_order(config)
        for embedder in inputs:
            embedder.build(self, config)
        self.embed_dropout = Dropout(config.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.decoder_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)
        if config.readout == "akt":
            add_readout(self, config)
        for embedder in later_inputs:
            embedder.build(self, config)
        if config.past_head:
            add_past_head(self, d, Dropout(config.dropout))
        # queries per block of banded attention on long sequences (0: the window); a
        # speed setting only, the result is the same (see Blocks)
        self.attention_block = 0
        self.apply(init_weights)
        for embedder in (*inputs, *later_inputs):
            embedder.init(self, config)

    def encoder_input(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, T, D): the encoder's inputs, one per question (step_inputs' query fields)."""
        return self.embed_dropout(input_sum(self, batch, self.encoder_inputs))

    def key_stream(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, S, D): the decoder's inputs, one per key (step_inputs' key fields)."""
        return self.embed_dropout(input_sum(self, batch, self.decoder_inputs))

    def empty_cache(self, rows: int, size: int | None = None) -> ModelCache:
        """A ring cache for `rows` students (common.model.saint.priming.empty_cache)."""
        return empty_cache(self, rows, size)

    def prime(self, batch: dict[str, Tensor], cache: ModelCache) -> None:
        """Store `batch`'s key states in `cache`, no logits (common.model.saint.priming.prime)."""
        prime(self, batch, cache)

    def forward(
        self,
        batch: dict[str, Tensor],
        cache: ModelCache | None = None,
        trained_from: int = 0,
    ) -> Tensor:
        """Logits (B, T) for the query positions of `batch` (see step_inputs).

        With a cache, this batch's keys are written into it (in place) and queries attend
        to its earlier keys too; a view of a pool's rows (ModelCache.view) writes into
        those rows. trained_from (training, no cache): the first batch position whose
        logit is wanted; each layer computes only the positions such a logit can reach
        (common.model.saint.priming.trained_layers), and the logits cover the positions from
        the last layer's first on, (B, T - first): at most trained_from, a multiple of the
        attention blocks' size. There, logits and gradients are those of the whole pass."""
        attend = attention_inputs(self.config, self.rotary, batch, cache, self.attention_block)
        first = trained_layers(self.config, attend, trained_from)
        memory = self.encode(batch, attend, first)  # (B, T, D)
        keys = self.key_stream(batch)  # (B, S, D)
        x = self.decode(batch, keys, memory, attend, first)  # (B, T - start, D)
        start = first[-1] if first else 0
        x = self.decoder_norm(x)
        logits = self.head(x).squeeze(-1)
        if self.config.past_head:
            logits = logits + past_logit(self, batch, x, start)
        if self.config.readout == "akt":
            logits = logits + read_out(self, batch, keys, attend, start)
        return logits

    def encode(
        self, batch: dict[str, Tensor], attend: AttentionInputs, first: list[int] | None = None
    ) -> Tensor:
        """(B, T, D): the encoder's output, each question attending causally; with
        `first` (prime, or a training pass from trained_from), from the last encoder
        layer's first needed position on."""
        x = self.encoder_input(batch)  # (B, T, D)
        done = 0  # the batch position x starts at
        for i, layer in enumerate(self.encoder):
            start = first[i] if first else 0
            remember = partial(attend.remember, "encoder", i, skip=done)
            rope = rope_tail(attend.query_rope, done) if done else attend.query_rope
            mask = attend.mask("causal", start, done)
            key_rope = attend.rope_from(attend.past_rope, done)
            x = layer(x, rope, remember, key_rope, mask, skip=start - done)
            done = start
        return self.encoder_norm(x)

    def decode(
        self,
        batch: dict[str, Tensor],
        keys: Tensor,
        memory: Tensor,
        attend: AttentionInputs,
        first: list[int] | None = None,
    ) -> Tensor:
        """(B, T, D): the decoder's output from the key stream `keys` (B, S, D) and the
        encoder's output `memory`. The first layer's self-attention reads the key stream
        under the container mask; later layers read their own inputs, causally. With
        `first` (prime, or a training pass), each layer from its first needed position
        on (memory from the last encoder layer's); a layer needed nowhere only stores its
        key states."""
        query_rope, past_rope = attend.query_rope, attend.past_rope
        index = batch["query_key_index"][..., None].expand(-1, -1, keys.shape[-1])
        x = keys.gather(1, index)  # (B, T, D): the key stream at each container's start
        n_encoder = len(self.encoder)
        memory_from = first[n_encoder - 1] if first else 0
        memory_rope = rope_tail(query_rope, memory_from) if memory_from else query_rope
        done = 0  # the batch position x starts at
        for i, layer in enumerate(self.decoder):
            key_start = 0 if i == 0 else done  # the first key of this layer's state
            if i == 0:
                state = layer.self_attention.kv_state(layer.norm1(keys), attend.key_rope)
            else:
                rope = rope_tail(query_rope, done) if done else query_rope
                state = layer.self_attention.kv_state(layer.norm1(x), rope)
            state = attend.remember("decoder", i, state, skip=key_start)
            cross_state = layer.cross_attention.kv_state(memory, memory_rope)
            cross_state = attend.remember("cross", i, cross_state, skip=memory_from)
            start = first[n_encoder + i] if first else 0
            x = x[:, start - done :]
            done = start
            if not x.shape[1]:  # needed nowhere (prime's last layer)
                continue
            self_rope = attend.rope_from(attend.outcome_rope if i == 0 else past_rope, key_start)
            self_mask = attend.mask("container" if i == 0 else "causal", start, key_start)
            memory_mask = attend.mask("causal", start, memory_from)
            rope = rope_tail(query_rope, start) if start else query_rope
            memory_past = attend.rope_from(past_rope, memory_from)
            x = layer(x, rope, state, self_rope, self_mask, cross_state, memory_past, memory_mask)
        return x
