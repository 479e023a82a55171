"""Attention for SAINT (common.model.saint): masks, banded blocks, rotary positions, and
multi-head (latent) attention.

Two choices differ from the papers' text, both so that one student's state can be
extended question by question at inference with cached keys and values (the window
slides; nothing is recomputed; common.model.saint.cache):
- Position enters through rotary embeddings (Su et al. 2021, RoFormer) on queries and
  keys, indexed by the question's position in the student's whole history, instead of a
  learned embedding of the position inside the window.
- Attention is banded: a query sees at most the `window` most recent keys up to its
  limit. Inside a training window of `window` questions this is plain causal attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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
    Queries and keys share positions (a training sequence: no cache). A tail (`tail`)
    covers the queries from column `offset` on, whose keys start `lead` columns before
    them: the layers of a training pass above the first compute only the positions a
    trained one can reach (SAINT.forward's trained_from)."""

    size: int
    reach: int
    length: int  # queries: columns offset .. offset + length - 1
    mask: Tensor | None = None  # (B * n_blocks, 1, size, size + reach)
    offset: int = 0
    lead: int = 0
    # the mask as fused attention's additive form, per dtype, and the tails: made once
    # for the layers that share them (fused attention would convert a boolean mask at
    # every call)
    _additive: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _tails: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def n_blocks(self) -> int:
        return -(-self.length // self.size)

    def queries(self, x: Tensor, fill=0) -> Tensor:
        """(B, T, ...) -> (B * n_blocks, size, ...)"""
        x = _pad_positions(x, 0, self.n_blocks * self.size - self.length, fill)
        return x.reshape(x.shape[0] * self.n_blocks, self.size, *x.shape[2:])

    def keys(self, x: Tensor) -> Tensor:
        """(B, T, ...) -> (B * n_blocks, reach + size, ...), a view without copies: block
        j's keys are its row's positions j * size - reach .. (j + 1) * size - 1, with the
        rows laid end to end, so that the slots before a row's position 0 hold the
        previous row's last positions (zeros for the first row, and past T). The mask
        (`masked`, from row_keys) lets no valid query attend those slots; padded queries
        may, and their outputs are never read. A tail's keys are copied (row_keys): its
        first block's keys lie in its own row."""
        if self.offset:
            return self.row_keys(x, 0)
        x = _pad_positions(x, 0, self.n_blocks * self.size - self.length, 0)
        flat = x.reshape(-1, *x.shape[2:])  # (B * n_blocks * size, ...)
        flat = torch.cat((flat.new_zeros(self.reach, *flat.shape[1:]), flat))
        return _Windows.apply(flat, self.size, self.reach + self.size)

    def row_keys(self, x: Tensor, fill) -> Tensor:
        """keys' layout, with each row's own slots before its first key and past T set to
        `fill` (a copy): the key positions that masks are computed from, and a tail's
        keys (x starting `lead` columns before the first query)."""
        x = x[:, max(0, self.lead - self.reach) :]
        before = self.reach - min(self.lead, self.reach)
        x = _pad_positions(x, before, self.n_blocks * self.size - self.length, fill)
        span = self.reach + self.size
        windows = x.unfold(1, span, self.size).movedim(-1, 2)  # (B, n_blocks, span, ...)
        return windows.reshape(-1, span, *x.shape[2:])

    def merge(self, y: Tensor) -> Tensor:
        """(B * n_blocks, size, ...) -> (B, T, ...)"""
        y = y.reshape(-1, self.n_blocks * self.size, *y.shape[2:])
        return y[:, : self.length]

    def mask_for(self, dtype: torch.dtype) -> Tensor:
        """The mask as `dtype` queries' fused attention reads it: 0 where a query may
        attend, -inf elsewhere (boolean where torch has no fused attention)."""
        if fused_attention() is None:
            return self.mask
        if dtype not in self._additive:
            additive = torch.zeros(self.mask.shape, dtype=dtype, device=self.mask.device)
            self._additive[dtype] = additive.masked_fill_(~self.mask, float("-inf"))
        return self._additive[dtype]

    def tail(self, start: int, key_start: int) -> Blocks:
        """These blocks for the queries from column `start` on (a multiple of size),
        their keys from column `key_start` (at most start): the same blocks from
        start / size on, so the same rows of the mask."""
        if not start and not key_start:
            return self
        if start % self.size or key_start > start or self.offset:
            raise ValueError(f"no tail of blocks of {self.size} from {start} (keys {key_start})")
        if (start, key_start) not in self._tails:
            rows = self.mask.unflatten(0, (-1, self.n_blocks))[:, start // self.size :]
            self._tails[start, key_start] = Blocks(
                self.size, self.reach, self.length - start, rows.flatten(0, 1), start,
                start - key_start,
            )  # fmt: skip
        return self._tails[start, key_start]

    def masked(self, query_limit: Tensor, valid: Tensor, key_position: Tensor, window: int):
        """These blocks with attention_mask's mask, from (B, T) query limits and validity
        and (B, T) key positions (-1: no key)."""
        key_position = self.row_keys(key_position, -1)
        mask = attention_mask(
            self.queries(query_limit), self.queries(valid, False), key_position,
            key_position >= 0, window,
        )  # fmt: skip
        return replace(self, mask=mask)


class _Windows(torch.autograd.Function):
    """Overlapping windows of `span` positions every `size` positions of a (L, ...)
    tensor, (N, span, ...), as a view. Its gradient adds each window's gradient back in
    chunks of `size` positions: a few strided additions, where unfold's own backward
    (a generic index scatter) costs several times more."""

    @staticmethod
    def forward(ctx, flat: Tensor, size: int, span: int) -> Tensor:
        ctx.length, ctx.size, ctx.span = flat.shape[0], size, span
        return flat.unfold(0, span, size).movedim(-1, 1)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        size, span, windows = ctx.size, ctx.span, grad.shape[0]
        chunks = -(-span // size)
        total = grad.new_zeros(windows + chunks - 1, size, *grad.shape[2:])
        for c in range(chunks):
            width = min(size, span - c * size)
            total[c : c + windows, :width] += grad[:, c * size : c * size + width]
        return total.flatten(0, 1)[: ctx.length], None, None


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
        width, half = cos.shape[-1], cos.shape[-1] // 2
        rotated = x[..., :width]
        turned = rotated * cos
        turned[..., :half].addcmul_(rotated[..., half:], sin[..., :half])
        turned[..., half:].addcmul_(rotated[..., :half], sin[..., half:])
        return turned if width == x.shape[-1] else torch.cat((turned, x[..., width:]), -1)

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        ctx.save_for_backward(cos, sin)
        return _Rotate._turn(x, cos, sin)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        return _Rotate._turn(grad, cos, -sin), None, None


def rope_tail(rope: tuple[Tensor, Tensor], skip: int) -> tuple[Tensor, Tensor]:
    """A rotary table (B, T, ...) without its first `skip` positions."""
    return rope[0][:, skip:], rope[1][:, skip:]


def written_out_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(hd), masked) v for (B, H, T, hd) queries and (B, H, S, hd) keys
    and values, `mask` True where a query may attend: F.scaled_dot_product_attention's
    result, computed with the operations of torch 1.x (the Kaggle bundle runs on the
    competition's 2020 PyTorch, which has no fused attention)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def fused_attention():
    """F.scaled_dot_product_attention where torch has it (2.0 and later), else None: read
    at each call, so that the mask's form (Blocks.mask_for) and the attention that reads
    it always agree."""
    return getattr(F, "scaled_dot_product_attention", None)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Attention of (B, H, T, hd) queries over (B, H, S, hd) keys and values: fused where
    torch has it (fused_attention), written out otherwise."""
    fused = fused_attention()
    if fused is None:
        return written_out_attention(q, k, v, mask)
    return fused(q, k, v, attn_mask=mask)


# ---------------------------------------------------------------------------------------
# attention


class Attention(nn.Module):
    """Multi-head attention with separate query, key and value projections per head
    (computed as one wide linear each), through scaled_dot_product_attention.

    Keys and values are kept as a "state" that a cache can hold: (k, v) each (B, S, D)
    for standard attention; for multi-head latent attention (DeepSeek-V2, arXiv
    2405.04434) a single (B, S, kv_latent_dim) latent from which every head's keys and
    values are up-projected when used.

    `config` is the model's ModelConfig (common.model.saint.config).
    """

    def __init__(self, config):
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
            q, k, v = blocks.queries(q), blocks.keys(k), blocks.keys(v)
            mask = blocks.mask_for(q.dtype)
        q = q.transpose(1, 2)  # (B, H, T, hd)
        y = scaled_dot_product_attention(q, self._heads(k), self._heads(v), mask)
        y = y.transpose(1, 2).flatten(2)  # (B, T, D)
        return self.out(y if blocks is None else blocks.merge(y))
