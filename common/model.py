"""SAINT and SAINT+ (Choi et al. 2020, arXiv 2002.07033; Shin et al. 2021, arXiv 2010.12042).

Encoder: question + part (+ difficulty) embeddings, causal self-attention.
Decoder: a start token, then each previous question's outcome (response; SAINT+ adds
elapsed time, and lag time of the current question), causal self-attention, attention
over the encoder output, feed-forward, and a linear layer to one logit per position.

Two choices differ from the papers' text, both so that one student's state can be
extended question by question at inference with cached keys and values (the window
slides; nothing is recomputed):
- Position enters through rotary embeddings (Su et al. 2021, RoFormer) on queries and
  keys, indexed by the question's position in the student's whole history, instead of a
  learned embedding of the position inside the window.
- Attention is banded: a query sees at most the `window` most recent keys up to its
  limit. Inside a training window of `window` questions this is plain causal attention.

No leakage within a task container (the questions of a bundle are answered before any
feedback): the decoder's first self-attention takes its query at question t from the key
stream at the first question of t's container, and masks keys after that position, so
nothing derived from an outcome in t's container reaches t. Later decoder layers,
whose inputs carry no outcome of their own container, use plain causal masks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.features import N_ANSWER, N_ELAPSED, N_EXPLANATION, N_LAG, N_RESPONSE
from common.schema import N_PARTS

DECODER_FEATURES = ("elapsed", "lag", "explanation", "answer")
MODEL_PRESETS = {"saint": (), "saint+": ("elapsed", "lag")}


@dataclass
class ModelConfig:
    n_questions: int  # question ids 0..n_questions-1; id n_questions stands for unknown
    d_model: int = 256
    n_heads: int = 8
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 0  # 0: 4 * d_model, as in the Transformer
    dropout: float = 0.1
    window: int = 100  # SAINT's sequence length
    decoder_features: tuple[str, ...] = ("elapsed", "lag")  # SAINT+; () is SAINT
    attention: str = "mha"  # "mha" or "mla" (multi-head latent attention)
    kv_latent_dim: int = 64  # mla: width of the shared key/value latent
    q_latent_dim: int = 0  # mla: width of the query latent; 0 leaves queries full
    difficulty_buckets: int = 0  # > 0 adds an embedding of the question's correct rate
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        self.decoder_features = tuple(self.decoder_features)
        unknown = set(self.decoder_features) - set(DECODER_FEATURES)
        if unknown:
            raise ValueError(
                f"unknown decoder features {sorted(unknown)}; known {DECODER_FEATURES}"
            )
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model {self.d_model} must split into {self.n_heads} heads of even width"
            )
        if self.attention not in ("mha", "mla"):
            raise ValueError(f"attention must be 'mha' or 'mla', got {self.attention!r}")
        if self.d_ff == 0:
            self.d_ff = 4 * self.d_model

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown ModelConfig keys {sorted(unknown)}")
        return cls(**values)


# ---------------------------------------------------------------------------------------
# masks and positions


def attention_mask(
    query_limit: Tensor, query_valid: Tensor, key_position: Tensor, key_valid: Tensor, window: int
) -> Tensor:
    """Boolean mask (B, 1, T, S); True means "may attend", the convention of
    F.scaled_dot_product_attention (nn.MultiheadAttention reads True as blocked).

    Query t may attend key s iff the key is valid and limit_t - window < pos_s <= limit_t:
    limit_t is t itself for causal attention, or the first position of t's task container
    for the decoder's first self-attention. Padded queries may attend every key, so that
    no row is empty (an empty row would give NaN); their outputs are ignored.
    """
    limit = query_limit[:, :, None]  # (B, T, 1)
    position = key_position[:, None, :]  # (B, 1, S)
    allowed = key_valid[:, None, :] & (position <= limit) & (position > limit - window)
    allowed = allowed | ~query_valid[:, :, None]
    return allowed[:, None]  # (B, 1, T, S)


class Rotary(nn.Module):
    """Rotary position embedding: rotates pairs of channels by angle position * freq, so a
    query-key product depends on their distance only. The cos/sin table is computed in
    float64 and grows on demand to the largest position seen."""

    def __init__(self, head_dim: int, base: float):
        super().__init__()
        self.head_dim = head_dim
        self.base = base
        self.register_buffer("cos", torch.zeros(0, head_dim // 2), persistent=False)
        self.register_buffer("sin", torch.zeros(0, head_dim // 2), persistent=False)

    def _grow(self, size: int, device: torch.device) -> None:
        size = max(size, 2 * len(self.cos), 1024)
        inv_freq = self.base ** (
            -torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim
        )
        angle = torch.arange(size, dtype=torch.float64)[:, None] * inv_freq  # (P, hd/2)
        self.cos = angle.cos().float().to(device)
        self.sin = angle.sin().float().to(device)

    def forward(self, x: Tensor, position: Tensor) -> Tensor:
        """x (B, H, S, hd), position (B, S) -> x rotated."""
        top = int(position.max()) + 1 if position.numel() else 1
        if top > len(self.cos):
            self._grow(top, x.device)
        index = position.clamp(min=0)
        cos = self.cos[index][:, None].to(x.dtype)  # (B, 1, S, hd/2)
        sin = self.sin[index][:, None].to(x.dtype)
        first, second = x.chunk(2, dim=-1)
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


# ---------------------------------------------------------------------------------------
# attention


class Attention(nn.Module):
    """Multi-head attention with separate query, key and value projections per head
    (computed as one wide linear each), through F.scaled_dot_product_attention.

    Keys and values are kept as a "state" that a cache can hold: (k, v) each (B, S, D)
    for standard attention; for multi-head latent attention (DeepSeek-V2, arXiv
    2405.04434) a single (B, S, kv_latent_dim) latent from which every head's keys and
    values are up-projected when used.
    """

    def __init__(self, config: ModelConfig, rotary: Rotary):
        super().__init__()
        d, self.n_heads = config.d_model, config.n_heads
        self.rotary = rotary
        self.latent = config.attention == "mla"
        if self.latent and config.q_latent_dim:
            self.query = nn.Sequential(
                nn.Linear(d, config.q_latent_dim, bias=False),
                nn.LayerNorm(config.q_latent_dim),
                nn.Linear(config.q_latent_dim, d),
            )
        else:
            self.query = nn.Linear(d, d)
        if self.latent:
            self.kv_down = nn.Linear(d, config.kv_latent_dim, bias=False)
            self.kv_norm = nn.LayerNorm(config.kv_latent_dim)
            self.key_up = nn.Linear(config.kv_latent_dim, d)
            self.value_up = nn.Linear(config.kv_latent_dim, d)
        else:
            self.key = nn.Linear(d, d)
            self.value = nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def kv_state(self, x: Tensor) -> tuple[Tensor, ...]:
        """(B, S, D) -> what a cache keeps for these keys."""
        if self.latent:
            return (self.kv_norm(self.kv_down(x)),)  # (B, S, r)
        return self.key(x), self.value(x)  # (B, S, D) each

    def _heads(self, x: Tensor) -> Tensor:
        batch, length, width = x.shape
        return x.view(batch, length, self.n_heads, width // self.n_heads).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        query_position: Tensor,
        state: tuple[Tensor, ...],
        key_position: Tensor,
        mask: Tensor,
    ) -> Tensor:
        """x (B, T, D) queries; state from kv_state over S keys at key_position (B, S);
        mask (B, 1, T, S). Returns (B, T, D)."""
        if self.latent:
            key, value = self.key_up(state[0]), self.value_up(state[0])
        else:
            key, value = state
        q = self.rotary(self._heads(self.query(x)), query_position)  # (B, H, T, hd)
        k = self.rotary(self._heads(key), key_position)  # (B, H, S, hd)
        v = self._heads(value)  # (B, H, S, hd)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        batch, _, length, _ = y.shape
        return self.out(y.transpose(1, 2).reshape(batch, length, -1))  # (B, T, D)


class Dropout(nn.Module):
    """Dropout that is cheap on CPU: the keep mask comes from random bytes compared with a
    threshold (p rounded to a multiple of 1/256), about 3x faster there than
    torch.bernoulli_; on CUDA it is F.dropout."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.threshold = round(p * 256)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        if x.is_cuda:
            return F.dropout(x, self.p, training=True)
        keep = torch.empty(x.shape, dtype=torch.uint8, device=x.device).random_() >= self.threshold
        return x * keep.to(x.dtype) * (256.0 / (256 - self.threshold))


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            nn.ReLU(),  # SAINT's feed-forward activation
            nn.Linear(config.d_ff, config.d_model),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


# ---------------------------------------------------------------------------------------
# cache


@dataclass
class ModelCache:
    """Keys and values of earlier positions, per student (batch row).

    query_position (B, Sq): positions behind the encoder, cross-attention and later
    decoder self-attention states; key_position (B, Sk): positions behind the first
    decoder self-attention (the outcome key stream). -1 marks an empty slot.
    """

    query_position: Tensor
    key_position: Tensor
    encoder: list[tuple[Tensor, ...]] = field(default_factory=list)
    cross: list[tuple[Tensor, ...]] = field(default_factory=list)
    decoder: list[tuple[Tensor, ...]] = field(default_factory=list)

    def tensors(self) -> list[Tensor]:
        groups = self.encoder + self.cross + self.decoder
        return [self.query_position, self.key_position] + [t for g in groups for t in g]


def _last_entries(position: Tensor, keep: int) -> Tensor:
    """Indices (B, keep) of the `keep` largest positions per row, in increasing order."""
    keep = min(keep, position.shape[1])
    index = position.topk(keep, dim=1).indices
    order = position.gather(1, index).argsort(dim=1)
    return index.gather(1, order)


def _take(tensor: Tensor, index: Tensor) -> Tensor:
    """tensor (B, S, X...) rows picked by index (B, K) along S."""
    shape = index.shape + tensor.shape[2:]
    expanded = index.view(*index.shape, *([1] * (tensor.dim() - 2))).expand(shape)
    return tensor.gather(1, expanded)


def _extend(
    old: tuple[Tensor, ...] | None, new: tuple[Tensor, ...], index: Tensor
) -> tuple[Tensor, ...]:
    joined = new if old is None else tuple(torch.cat(p, dim=1) for p in zip(old, new, strict=True))
    return tuple(_take(t, index) for t in joined)


# ---------------------------------------------------------------------------------------
# layers


class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, rotary: Rotary):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attention = Attention(config, rotary)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config)
        self.dropout = Dropout(config.dropout)

    def forward(self, x, position, past, past_position, mask) -> tuple[Tensor, tuple]:
        """x (B, T, D). Returns the output and the new keys' state."""
        h = self.norm1(x)
        state = self.attention.kv_state(h)
        full = (
            state if past is None else tuple(torch.cat(p, 1) for p in zip(past, state, strict=True))
        )
        key_position = position if past is None else torch.cat((past_position, position), 1)
        x = x + self.dropout(self.attention(h, position, full, key_position, mask))
        x = x + self.dropout(self.feed_forward(self.norm2(x)))
        return x, state


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, rotary: Rotary):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.self_attention = Attention(config, rotary)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.cross_attention = Attention(config, rotary)
        self.norm3 = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config)
        self.dropout = Dropout(config.dropout)

    def forward(
        self, x, position, self_kv, self_position, self_mask, memory, memory_position, memory_mask
    ) -> Tensor:
        """x (B, T, D) queries; self_kv: (state over keys, or raw (B, S, D) keys to
        normalize and project); memory: cross-attention state."""
        h = self.norm1(x)
        x = x + self.dropout(self.self_attention(h, position, self_kv, self_position, self_mask))
        h = self.norm2(x)
        x = x + self.dropout(
            self.cross_attention(h, position, memory, memory_position, memory_mask)
        )
        return x + self.dropout(self.feed_forward(self.norm3(x)))


# ---------------------------------------------------------------------------------------


class SAINT(nn.Module):
    """SAINT / SAINT+ over batches from common.features.step_inputs."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.rotary = Rotary(d // config.n_heads, config.rope_base)
        self.question_embed = nn.Embedding(config.n_questions + 1, d)
        self.part_embed = nn.Embedding(N_PARTS + 1, d)
        if config.difficulty_buckets:
            self.difficulty_embed = nn.Embedding(config.difficulty_buckets + 1, d)
            # bucket per question id, from the training rows of the fold (common.difficulty)
            self.register_buffer(
                "question_difficulty", torch.zeros(config.n_questions + 1, dtype=torch.long)
            )
        self.response_embed = nn.Embedding(N_RESPONSE, d)
        sizes = {
            "elapsed": N_ELAPSED,
            "lag": N_LAG,
            "explanation": N_EXPLANATION,
            "answer": N_ANSWER,
        }
        self.feature_embed = nn.ModuleDict(
            {name: nn.Embedding(sizes[name], d) for name in config.decoder_features}
        )
        self.embed_dropout = Dropout(config.dropout)
        self.encoder = nn.ModuleList(
            EncoderLayer(config, self.rotary) for _ in range(config.encoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(
            DecoderLayer(config, self.rotary) for _ in range(config.decoder_layers)
        )
        self.decoder_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _encoder_input(self, batch: dict[str, Tensor]) -> Tensor:
        x = self.question_embed(batch["question"]) + self.part_embed(batch["part"])
        if self.config.difficulty_buckets:
            x = x + self.difficulty_embed(self.question_difficulty[batch["question"]])
        return self.embed_dropout(x)  # (B, T, D)

    def _key_stream(self, batch: dict[str, Tensor]) -> Tensor:
        x = self.response_embed(batch["key_response"])
        for name, embed in self.feature_embed.items():
            x = x + embed(batch[f"key_{name}"])
        return self.embed_dropout(x)  # (B, S, D)

    def forward(
        self, batch: dict[str, Tensor], cache: ModelCache | None = None, return_cache: bool = False
    ) -> Tensor | tuple[Tensor, ModelCache]:
        """Logits (B, T) for the query positions of `batch` (see step_inputs), given the
        cached keys of earlier positions; with return_cache, also the cache extended by
        this batch and cut to the last `window` positions."""
        window = self.config.window
        position, valid = batch["position"], batch["valid"]
        key_position, key_valid = batch["key_position"], batch["key_valid"]
        q_pos = position.masked_fill(~valid, -1)
        k_pos = key_position.masked_fill(~key_valid, -1)
        past_q = None if cache is None else cache.query_position
        past_k = None if cache is None else cache.key_position
        all_q = q_pos if cache is None else torch.cat((past_q, q_pos), 1)  # (B, Sq)
        all_k = k_pos if cache is None else torch.cat((past_k, k_pos), 1)  # (B, Sk)
        causal = attention_mask(position, valid, all_q, all_q >= 0, window)
        container = attention_mask(batch["query_limit"], valid, all_k, all_k >= 0, window)

        new_encoder, new_cross, new_decoder = [], [], []
        x = self._encoder_input(batch)
        for i, layer in enumerate(self.encoder):
            past = None if cache is None else cache.encoder[i]
            x, state = layer(x, position, past, past_q, causal)
            new_encoder.append(state)
        memory = self.encoder_norm(x)  # (B, T, D)

        keys = self._key_stream(batch)  # (B, S, D)
        index = batch["query_key_index"][..., None].expand(-1, -1, keys.shape[-1])
        x = keys.gather(1, index)  # (B, T, D): the key stream at each container's start
        for i, layer in enumerate(self.decoder):
            attention = layer.self_attention
            if i == 0:
                state = attention.kv_state(layer.norm1(keys))
                self_position, self_mask = all_k, container
            else:
                state = attention.kv_state(layer.norm1(x))
                self_position, self_mask = all_q, causal
            cross_state = layer.cross_attention.kv_state(memory)
            new_decoder.append(state)
            new_cross.append(cross_state)
            if cache is not None:
                state = tuple(torch.cat(p, 1) for p in zip(cache.decoder[i], state, strict=True))
                cross_state = tuple(
                    torch.cat(p, 1) for p in zip(cache.cross[i], cross_state, strict=True)
                )
            x = layer(x, position, state, self_position, self_mask, cross_state, all_q, causal)
        logits = self.head(self.decoder_norm(x)).squeeze(-1)  # (B, T)
        if not return_cache:
            return logits

        keep_q = _last_entries(all_q, window)
        keep_k = _last_entries(all_k, window)

        def past(group: str, i: int) -> tuple[Tensor, ...] | None:
            return None if cache is None else getattr(cache, group)[i]

        updated = ModelCache(
            query_position=all_q.gather(1, keep_q),
            key_position=all_k.gather(1, keep_k),
            encoder=[_extend(past("encoder", i), s, keep_q) for i, s in enumerate(new_encoder)],
            cross=[_extend(past("cross", i), s, keep_q) for i, s in enumerate(new_cross)],
            decoder=[
                _extend(past("decoder", i), s, keep_k if i == 0 else keep_q)
                for i, s in enumerate(new_decoder)
            ],
        )
        return logits, updated
