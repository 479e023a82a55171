"""SAINT and SAINT+ (Choi et al. 2020, arXiv 2002.07033; Shin et al. 2021, arXiv 2010.12042).

Encoder: question + part (+ difficulty, + mean tag) embeddings, causal self-attention.
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

from dataclasses import asdict, dataclass, fields, replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.features import (
    N_ANSWER,
    N_ELAPSED,
    N_EXPLANATION,
    N_LAG,
    N_RESPONSE,
    RESPONSE_START,
)
from common.schema import N_PARTS

# "question": the answered question itself, an embedding per (question, response) pair
# (with --tags also per (tag, response) pair), as SAKT and AKT embed interactions; the
# papers' SAINT decoder sees only the response
DECODER_FEATURES = ("elapsed", "lag", "explanation", "answer", "question")
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
    n_tags: int = 0  # > 0 adds the mean embedding of the question's tags (common.tags)
    max_tags: int = 1  # most tags of one question (width of the question_tags buffer)
    # "id": a learned vector per question; "rasch" (needs tags): the question's tags' mean
    # embedding plus a learned scalar difficulty per question times the tags' mean
    # variation vector, as AKT's Rasch embeddings (Ghosh et al. 2020); with the decoder
    # feature "question", (tag, response) pairs get the same form
    question_embedding: str = "id"
    rope_base: float = 10000.0
    # share of each head's channels that rotary embeddings rotate. All of them: a query
    # must single out its own position among a window of keys (the decoder meets the
    # current question only through attention over the encoder's outputs), and with a
    # quarter (GPT-J's choice, cheaper on a CPU) a head has too few frequencies to tell
    # nearby positions apart; trained in the streaming state, with the whole window
    # behind every position, such a model plateaus near the question-rate baseline for
    # epochs (BENCHMARKS.md, "Train as you serve": the quarter-width rows)
    rope_fraction: float = 1.0

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
        if not 0 < self.rope_fraction <= 1:
            raise ValueError(f"rope_fraction must be in (0, 1], got {self.rope_fraction}")
        if self.attention not in ("mha", "mla"):
            raise ValueError(f"attention must be 'mha' or 'mla', got {self.attention!r}")
        if self.question_embedding not in ("id", "rasch"):
            raise ValueError(
                f"question_embedding must be 'id' or 'rasch', got {self.question_embedding!r}"
            )
        if self.question_embedding == "rasch" and not self.n_tags:
            raise ValueError("question_embedding 'rasch' needs the questions' tags (--tags)")
        if self.d_ff == 0:
            self.d_ff = 4 * self.d_model

    @property
    def receptive_field(self) -> int:
        """How many of a student's latest questions a prediction can depend on: each
        attention layer reaches `window` positions further back, so (encoder_layers +
        decoder_layers) x window (for task containers of at most `window` questions).
        Training, validation and streaming all give every scored prediction at least this
        much history (or the whole history when it is shorter), so each computes the same
        function of the history; see common/training.py and common/online.py."""
        return (self.encoder_layers + self.decoder_layers) * self.window

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


def _pad_positions(x: Tensor, before: int, after: int, value) -> Tensor:
    """x (B, T, ...) with `before` and `after` entries of `value` added along T."""

    def fill(count: int) -> Tensor:
        return x.new_full((x.shape[0], count, *x.shape[2:]), value)

    return torch.cat([fill(before), x, fill(after)], 1)


@dataclass
class Blocks:
    """Banded attention over a long sequence (T = length), computed block by block:
    queries in blocks of `size` positions, each block against the keys from `reach`
    positions before its first query through its last query. When every key a query may
    attend lies in that span (reach >= window - 1 + how far a query's limit lies before
    it), the result equals dense attention under the same mask, at T x (size + reach)
    scores instead of T x T: what lets training run on sequences many windows long.
    Queries and keys share positions (a training sequence: no cache)."""

    size: int
    reach: int
    length: int
    mask: Tensor | None = None  # (B * n_blocks, 1, size, size + reach)

    @property
    def n_blocks(self) -> int:
        return -(-self.length // self.size)

    def queries(self, x: Tensor, fill=0) -> Tensor:
        """(B, T, ...) -> (B * n_blocks, size, ...)"""
        x = _pad_positions(x, 0, self.n_blocks * self.size - self.length, fill)
        return x.reshape(x.shape[0] * self.n_blocks, self.size, *x.shape[2:])

    def keys(self, x: Tensor, fill=0) -> Tensor:
        """(B, T, ...) -> (B * n_blocks, reach + size, ...): block j's keys are positions
        j * size - reach .. (j + 1) * size - 1 (fill before 0 and past T)."""
        x = _pad_positions(x, self.reach, self.n_blocks * self.size - self.length, fill)
        span = self.reach + self.size
        windows = x.unfold(1, span, self.size).movedim(-1, 2)  # (B, n_blocks, span, ...)
        return windows.reshape(-1, span, *x.shape[2:])

    def merge(self, y: Tensor) -> Tensor:
        """(B * n_blocks, size, ...) -> (B, T, ...)"""
        y = y.reshape(-1, self.n_blocks * self.size, *y.shape[2:])
        return y[:, : self.length]

    def masked(self, query_limit: Tensor, valid: Tensor, key_position: Tensor, window: int):
        """These blocks with attention_mask's mask, from (B, T) query limits and validity
        and (B, T) key positions (-1: no key)."""
        key_position = self.keys(key_position, -1)
        mask = attention_mask(
            self.queries(query_limit), self.queries(valid, False), key_position,
            key_position >= 0, window,
        )  # fmt: skip
        return replace(self, mask=mask)


class Rotary(nn.Module):
    """Rotary position embedding: rotates pairs of channels by angle position * freq, so a
    query-key product depends on their distance only. The cos/sin table is computed in
    float64 and grows on demand to the largest position seen; `table(position)` is looked
    up once per forward pass and shared by every attention that uses those positions."""

    def __init__(self, head_dim: int, base: float, fraction: float = 1.0):
        super().__init__()
        self.head_dim = max(2, 2 * round(head_dim * fraction / 2))  # rotated channels
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

    def table(self, position: Tensor) -> tuple[Tensor, Tensor]:
        """position (B, S) -> cos, sin (B, S, 1, rotated), to rotate (B, S, H, hd) tensors;
        sin carries the rotation's signs (-sin for the first half of the rotated
        channels, +sin for the second); negative positions (padding) read position 0."""
        top = int(position.max()) + 1 if position.numel() else 1
        if top > len(self.cos):
            self._grow(top, position.device)
        index = position.clamp(min=0)
        cos, sin = self.cos[index][:, :, None], self.sin[index][:, :, None]
        return torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1)

    @staticmethod
    def rotate(x: Tensor, table: tuple[Tensor, Tensor]) -> Tensor:
        """x (B, S, H, hd) with its first cos.shape[-1] channels rotated by `table`."""
        cos, sin = (t.to(x.dtype) for t in table)
        if not torch.is_grad_enabled():
            return _Rotate._turn(x, cos, sin)
        return _Rotate.apply(x, cos, sin)


class _Rotate(torch.autograd.Function):
    """Rotation of channel pairs (i, i + half) for i < half, the rest passed through:
    x * cos + swap(x) * sin over the rotated channels, where swap exchanges their two
    halves (a few kernel calls, which is what a streaming step of a few rows costs). Its
    gradient is the opposite rotation (swap is its own inverse and swap(sin) = -sin);
    written out so that backward needs no zero-filled slice gradients."""

    @staticmethod
    def _turn(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        width = cos.shape[-1]
        rotated = x[..., :width]
        swapped = rotated.unflatten(-1, (2, width // 2)).flip(-2).flatten(-2)
        turned = torch.addcmul(rotated * cos, swapped, sin)
        return turned if width == x.shape[-1] else torch.cat((turned, x[..., width:]), -1)

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        ctx.save_for_backward(cos, sin)
        return _Rotate._turn(x, cos, sin)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        return _Rotate._turn(grad, cos, -sin), None, None


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

    def __init__(self, config: ModelConfig):
        super().__init__()
        d, self.n_heads = config.d_model, config.n_heads
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
            self.key_value = nn.Linear(d, 2 * d)  # keys and values in one matrix product
        self.out = nn.Linear(d, d)

    def kv_state(self, x: Tensor, key_rope: tuple[Tensor, Tensor]) -> tuple[Tensor, ...]:
        """(B, S, D) keys' inputs -> what a cache keeps for them: standard attention keeps
        keys (already rotated to their positions) and values, (B, S, D) each; latent
        attention keeps the (B, S, kv_latent_dim) latent."""
        if self.latent:
            return (self.kv_norm(self.kv_down(x)),)
        key, value = self.key_value(x).chunk(2, dim=-1)
        batch, length, width = key.shape
        key = Rotary.rotate(key.reshape(batch, length, self.n_heads, -1), key_rope)
        return key.view(batch, length, width), value

    def _heads(self, x: Tensor) -> Tensor:
        """(B, S, D) -> (B, H, S, hd)"""
        batch, length, width = x.shape
        return x.view(batch, length, self.n_heads, width // self.n_heads).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        query_rope: tuple[Tensor, Tensor],
        state: tuple[Tensor, ...],
        key_rope: tuple[Tensor, Tensor],
        mask: Tensor | Blocks,
    ) -> Tensor:
        """x (B, T, D) queries; state: kv_state of S keys (earlier ones included); rotary
        tables of the query and key positions; mask (B, 1, T, S), or Blocks (S = T)
        carrying the mask of its blocks. Returns (B, T, D)."""
        batch, length, _ = x.shape
        q = Rotary.rotate(self.query(x).view(batch, length, self.n_heads, -1), query_rope)
        if self.latent:
            latent = state[0]
            key = self.key_up(latent).view(batch, latent.shape[1], self.n_heads, -1)
            k = Rotary.rotate(key, key_rope).flatten(2)  # (B, S, D)
            v = self.value_up(latent)
        else:
            k, v = state
        blocks = mask if isinstance(mask, Blocks) else None
        if blocks is not None:  # batch rows become (row, block) pairs
            q, k, v, mask = blocks.queries(q), blocks.keys(k), blocks.keys(v), blocks.mask
        q = q.transpose(1, 2)  # (B, H, T, hd)
        y = F.scaled_dot_product_attention(q, self._heads(k), self._heads(v), attn_mask=mask)
        y = y.transpose(1, 2).flatten(2)  # (B, T, D)
        return self.out(y if blocks is None else blocks.merge(y))


class _MaskMultiply(torch.autograd.Function):
    """x * keep * scale for a boolean keep mask, which is all backward keeps."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return (x * keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return (grad * keep).mul_(ctx.scale), None, None


class Dropout(nn.Module):
    """Dropout that is cheap on CPU: the keep mask is random bytes compared with a
    threshold (p rounded to a multiple of 1/256), several times faster there than
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
        noise = torch.empty(x.shape, dtype=torch.uint8, device=x.device).random_()
        return _MaskMultiply.apply(x, noise >= self.threshold, 256.0 / (256 - self.threshold))


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
    # a view of some rows of a larger cache (a pool): batch row b is the tensors' row
    # rows[b]; a forward pass stores into those rows and reads them (see `view`)
    rows: Tensor | None = None

    @classmethod
    def empty(
        cls, config: ModelConfig, rows: int, size: int, device: torch.device | str = "cpu"
    ) -> ModelCache:
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
        )

    @property
    def size(self) -> int:
        return self.query_position.shape[1]

    def groups(self) -> list[tuple[Tensor, list[Tensor]]]:
        """(positions, states) pairs: each state is (B, R, X) over those positions."""
        query_side = [t for g in self.encoder + self.cross + self.decoder[1:] for t in g]
        key_side = [t for g in self.decoder[:1] for t in g]
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
        )

    def reset(self, rows: Tensor) -> None:
        """Forget the keys of `rows` (a new student takes them)."""
        self.query_position[rows] = -1
        self.key_position[rows] = -1

    def absorb(self, source: ModelCache) -> None:
        """Store into this cache (just reset; batch row b of both is one student) the
        entries of `source` at the newest `self.size` positions of each side: how a state
        built over a long history in a large temporary cache moves into a smaller ring."""
        for (source_position, source_states), (position, states) in zip(
            source.groups(), self.groups(), strict=True
        ):
            newest = source_position.max(1, keepdim=True).values
            kept = source_position.masked_fill(source_position <= newest - self.size, -1)
            where = self.place(kept)
            self.store(position, kept, where, self.rows)
            for target, new in zip(states, source_states, strict=True):
                self.store(target, new, where, self.rows)


# ---------------------------------------------------------------------------------------
# layers


class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attention = Attention(config)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config)
        self.dropout = Dropout(config.dropout)

    def forward(self, x, query_rope, remember, key_rope, mask) -> Tensor:
        """x (B, T, D). remember(state of this call's keys) -> the state of every key to
        attend to (a cache adds earlier keys); key_rope covers those keys."""
        h = self.norm1(x)
        state = remember(self.attention.kv_state(h, query_rope))
        x = x + self.dropout(self.attention(h, query_rope, state, key_rope, mask))
        return x + self.dropout(self.feed_forward(self.norm2(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.self_attention = Attention(config)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.cross_attention = Attention(config)
        self.norm3 = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config)
        self.dropout = Dropout(config.dropout)

    def forward(
        self, x, query_rope, self_state, self_rope, self_mask, memory, memory_rope, memory_mask
    ) -> Tensor:
        """x (B, T, D) queries; self_state / memory: key states (earlier keys included)
        for self-attention and for attention over the encoder output."""
        h = self.norm1(x)
        x = x + self.dropout(self.self_attention(h, query_rope, self_state, self_rope, self_mask))
        h = self.norm2(x)
        x = x + self.dropout(self.cross_attention(h, query_rope, memory, memory_rope, memory_mask))
        return x + self.dropout(self.feed_forward(self.norm3(x)))


# ---------------------------------------------------------------------------------------


class SAINT(nn.Module):
    """SAINT / SAINT+ over batches from common.features.step_inputs."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.rotary = Rotary(d // config.n_heads, config.rope_base, config.rope_fraction)
        rasch = config.question_embedding == "rasch"
        # rasch: one scalar per question (its difficulty), not a vector
        self.question_embed = nn.Embedding(config.n_questions + 1, 1 if rasch else d)
        self.part_embed = nn.Embedding(N_PARTS + 1, d)
        if config.difficulty_buckets:
            self.difficulty_embed = nn.Embedding(config.difficulty_buckets + 1, d)
            # bucket per question id, from the training rows of the fold (common.difficulty)
            self.register_buffer(
                "question_difficulty", torch.zeros(config.n_questions + 1, dtype=torch.long)
            )
        if config.n_tags:
            self.tag_embed = nn.Embedding(config.n_tags + 1, d, padding_idx=config.n_tags)
            # tag ids per question id, padded with n_tags (common.tags)
            self.register_buffer(
                "question_tags",
                torch.full((config.n_questions + 1, config.max_tags), config.n_tags),
            )
            if rasch:
                self.tag_variation = nn.Embedding(config.n_tags + 1, d, padding_idx=config.n_tags)
        self.response_embed = nn.Embedding(N_RESPONSE, d)
        sizes = {
            "elapsed": N_ELAPSED,
            "lag": N_LAG,
            "explanation": N_EXPLANATION,
            "answer": N_ANSWER,
        }
        tables = {name: sizes[name] for name in config.decoder_features if name in sizes}
        self.feature_embed = nn.ModuleDict(
            {name: nn.Embedding(size, d) for name, size in tables.items()}
        )
        if "question" in config.decoder_features:
            if not rasch:
                # rows q + (n_questions + 1) * response for response 0/1; the last: start
                self.interaction_embed = nn.Embedding(2 * (config.n_questions + 1) + 1, d)
            if config.n_tags:
                # rows tag + n_tags * response; the last row pads
                pad = 2 * config.n_tags
                self.tag_interaction_embed = nn.Embedding(pad + 1, d, padding_idx=pad)
                if rasch:
                    self.tag_interaction_variation = nn.Embedding(pad + 1, d, padding_idx=pad)
        self.embed_dropout = Dropout(config.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.decoder_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)
        # queries per block of banded attention on long sequences (0: the window); a
        # speed setting only, the result is the same (see Blocks)
        self.attention_block = 0
        self.apply(self._init_weights)
        if rasch:
            # as AKT: every question starts as its tags' average (difficulty 0), and the
            # variation vectors start at unit scale, so that a difficulty's Adam step
            # moves the input as much as a step of a vector per question would (at the
            # 0.02 scale of the other embeddings, difficulties barely learn)
            with torch.no_grad():
                self.question_embed.weight.zero_()
                variations = [self.tag_variation]
                if hasattr(self, "tag_interaction_variation"):
                    variations.append(self.tag_interaction_variation)
                for table in variations:
                    nn.init.normal_(table.weight, std=1.0)
                    table.weight[table.padding_idx].zero_()

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _encoder_input(self, batch: dict[str, Tensor]) -> Tensor:
        question = batch["question"]
        x = self.part_embed(batch["part"])
        if self.config.question_embedding == "id":
            x = x + self.question_embed(question)
        if self.config.difficulty_buckets:
            # training batches carry each row's bucket from other students' answers
            # (common.difficulty.out_of_fold_buckets); otherwise the question's bucket
            bucket = batch.get("difficulty")
            if bucket is None:
                bucket = self.question_difficulty[question]
            x = x + self.difficulty_embed(bucket)
        if self.config.n_tags:
            tags = self.question_tags[question]  # (B, T, max_tags)
            present = tags != self.config.n_tags
            x = x + self._tag_mean(self.tag_embed, tags, present)
            if self.config.question_embedding == "rasch":
                variation = self._tag_mean(self.tag_variation, tags, present)
                x = x + self.question_embed(question) * variation
        return self.embed_dropout(x)  # (B, T, D)

    @staticmethod
    def _tag_mean(table: nn.Embedding, index: Tensor, present: Tensor) -> Tensor:
        """(B, T, D): mean of table rows over the present entries of index (B, T, K);
        absent entries must index the table's zero padding row."""
        count = present.sum(-1, keepdim=True).clamp(min=1)
        return table(index).sum(-2) / count

    def _key_stream(self, batch: dict[str, Tensor]) -> Tensor:
        x = self.response_embed(batch["key_response"])
        for name, embed in self.feature_embed.items():
            x = x + embed(batch[f"key_{name}"])
        if "question" in self.config.decoder_features:
            x = x + self._interaction(batch["key_question"], batch["key_response"])
        return self.embed_dropout(x)  # (B, S, D)

    def _interaction(self, question: Tensor, response: Tensor) -> Tensor:
        """(B, S, D): the (question, response) embedding of each key (question ids above
        n_questions mark the start token), plus the mean (tag, response) embedding; with
        Rasch embeddings, the mean (tag, response) embedding plus the question's scalar
        difficulty times the mean (tag, response) variation (zero at the start token)."""
        n = self.config.n_questions
        question = question.clamp(max=n)
        answered = response.clamp(max=1)
        start = response == RESPONSE_START
        rasch = self.config.question_embedding == "rasch"
        x = 0
        if not rasch:
            index = question + (n + 1) * answered
            x = self.interaction_embed(index.masked_fill(start, 2 * (n + 1)))
        if self.config.n_tags:
            n_tags = self.config.n_tags
            tags = self.question_tags[question]  # (B, S, max_tags)
            present = (tags != n_tags) & ~start[..., None]
            index = (tags + n_tags * answered[..., None]).masked_fill(~present, 2 * n_tags)
            x = x + self._tag_mean(self.tag_interaction_embed, index, present)
            if rasch:
                variation = self._tag_mean(self.tag_interaction_variation, index, present)
                x = x + self.question_embed(question) * variation
        return x

    def _blocks(self, batch: dict[str, Tensor]) -> Blocks | None:
        """Blocks for a sequence long enough that banded attention by blocks is cheaper
        than dense (a training sequence; its keys share the queries' positions); None
        otherwise. A query's keys reach window - 1 positions before its limit, which is
        at most the task container's length before the query itself."""
        position, length = batch["position"], batch["position"].shape[1]
        if batch["key_position"].shape != position.shape:
            return None
        size = self.attention_block or self.config.window
        behind = (position - batch["query_limit"]).masked_fill(~batch["valid"], 0)
        reach = self.config.window - 1 + int(behind.max()) if length else 0
        return Blocks(size, reach, length) if length > size + reach else None

    def empty_cache(self, rows: int, size: int | None = None) -> ModelCache:
        """A ring cache for `rows` students; size defaults to twice the window (room for
        a pass of up to `window` new positions)."""
        device = self.question_embed.weight.device
        return ModelCache.empty(self.config, rows, size or 2 * self.config.window, device)

    def forward(
        self,
        batch: dict[str, Tensor],
        cache: ModelCache | None = None,
    ) -> Tensor:
        """Logits (B, T) for the query positions of `batch` (see step_inputs).

        With a cache, this batch's keys are written into it (in place) and queries attend
        to its earlier keys too; a view of a pool's rows (ModelCache.view) writes into
        those rows."""
        window = self.config.window
        position, valid = batch["position"], batch["valid"]
        key_position, key_valid = batch["key_position"], batch["key_valid"]
        q_pos = position.masked_fill(~valid, -1)  # (B, T)
        k_pos = key_position.masked_fill(~key_valid, -1)  # (B, S)
        if cache is None:
            all_q, all_k = q_pos, k_pos
        else:
            q_where, k_where = cache.place(q_pos), cache.place(k_pos)
            cache.store(cache.query_position, q_pos, q_where, cache.rows)
            cache.store(cache.key_position, k_pos, k_where, cache.rows)
            all_q, all_k = cache.read(cache.query_position), cache.read(cache.key_position)
        blocks = self._blocks(batch) if cache is None else None
        if blocks is None:
            causal = attention_mask(position, valid, all_q, all_q >= 0, window)
            container = attention_mask(batch["query_limit"], valid, all_k, all_k >= 0, window)
        else:
            causal = blocks.masked(position, valid, all_q, window)
            container = blocks.masked(batch["query_limit"], valid, all_k, window)
        query_rope = self.rotary.table(position)
        key_rope = self.rotary.table(key_position)
        # standard attention stores keys rotated; latent attention rotates all at use
        latent = self.config.attention == "mla"
        past_rope = self.rotary.table(all_q) if latent else None
        outcome_rope = self.rotary.table(all_k) if latent else None

        def remember(group: str, i: int, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            """A layer's new key state; with a cache, stored, and the whole ring returned."""
            if cache is None:
                return state
            ring = getattr(cache, group)[i]
            where = k_where if (group == "decoder" and i == 0) else q_where
            for target, new in zip(ring, state, strict=True):
                cache.store(target, new, where, cache.rows)
            return tuple(cache.read(target) for target in ring)

        x = self._encoder_input(batch)
        for i, layer in enumerate(self.encoder):
            x = layer(x, query_rope, partial(remember, "encoder", i), past_rope, causal)
        memory = self.encoder_norm(x)  # (B, T, D)

        keys = self._key_stream(batch)  # (B, S, D)
        index = batch["query_key_index"][..., None].expand(-1, -1, keys.shape[-1])
        x = keys.gather(1, index)  # (B, T, D): the key stream at each container's start
        for i, layer in enumerate(self.decoder):
            if i == 0:
                state = layer.self_attention.kv_state(layer.norm1(keys), key_rope)
            else:
                state = layer.self_attention.kv_state(layer.norm1(x), query_rope)
            state = remember("decoder", i, state)
            cross_state = remember("cross", i, layer.cross_attention.kv_state(memory, query_rope))
            self_rope, self_mask = (outcome_rope, container) if i == 0 else (past_rope, causal)
            x = layer(x, query_rope, state, self_rope, self_mask, cross_state, past_rope, causal)
        logits = self.head(self.decoder_norm(x)).squeeze(-1)  # (B, T)
        return logits
