"""SAINT's layers (common.model.saint): dropout, the feed-forward block, the encoder's
and decoder's layers, and the weights' initialization."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.model.saint.attention import Attention, rope_tail
from common.model.saint.config import ModelConfig


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
        # random bytes 8 at a time: a full-range int64 draw costs what a byte's draw does
        words = torch.empty(-(-x.numel() // 8), dtype=torch.int64, device=x.device)
        noise = words.random_(-(2**63), 2**63 - 1).view(torch.uint8)[: x.numel()]
        keep = noise.view(x.shape) >= self.threshold
        return _MaskMultiply.apply(x, keep, 256.0 / (256 - self.threshold))


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


class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attention = Attention(config)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config)
        self.dropout = Dropout(config.dropout)

    def forward(self, x, query_rope, remember, key_rope, mask, skip: int = 0) -> Tensor:
        """x (B, T, D). remember(state of this call's keys) -> the state of every key to
        attend to (a cache adds earlier keys); key_rope covers those keys. skip: the
        first positions are keys only (B, T - skip, D out); the mask is that of the
        queries after them."""
        h = self.norm1(x)
        state = remember(self.attention.kv_state(h, query_rope))
        if skip:
            x, h, query_rope = x[:, skip:], h[:, skip:], rope_tail(query_rope, skip)
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


def init_weights(module: nn.Module) -> None:
    """SAINT's initialization, for nn.Module.apply: linear and embedding weights from
    N(0, 0.02) (as BERT and GPT-2), biases and padding rows zero."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
