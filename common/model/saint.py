"""SAINT and SAINT+ (Choi et al. 2020, arXiv 2002.07033; Shin et al. 2021, arXiv 2010.12042).

Encoder: question + part (+ difficulty, + mean tag) embeddings, causal self-attention.
Decoder: a start token, then each previous question's outcome (response; SAINT+ adds
elapsed time, and lag time of the current question), causal self-attention, attention
over the encoder output, feed-forward, and a linear layer to one logit per position.

Two choices differ from the papers' text, both so that one student's state can be
extended question by question at inference with cached keys and values (the window
slides; nothing is recomputed): rotary positions over the student's whole history and
banded attention (both in common/model/attention.py); the cache is common/model/cache.py.

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

from common.data.features import (
    N_ANSWER,
    N_ELAPSED,
    N_EXPLANATION,
    N_LAG,
    N_RESPONSE,
    RESPONSE_START,
)
from common.data.past_features import MODEL_FEATURES, MODEL_LOG_FEATURES
from common.data.schema import N_PARTS
from common.model.attention import Attention, Blocks, Rotary, attention_mask
from common.model.cache import ModelCache
from common.options import above, at_least, between, option

# "question": the answered question itself, an embedding per (question, response) pair
# (with --tags also per (tag, response) pair), as SAKT and AKT embed interactions; the
# papers' SAINT decoder sees only the response
DECODER_FEATURES = ("elapsed", "lag", "explanation", "answer", "question")
MODEL_PRESETS = {"saint": (), "saint+": ("elapsed", "lag")}
PAST_FEATURE_PLACES = ("none", "encoder", "head")
LOG_COLUMNS = torch.tensor([name in MODEL_LOG_FEATURES for name in MODEL_FEATURES])


def preset_name(decoder_features) -> str:
    """The --model preset whose decoder features these are, or 'custom'."""
    features = tuple(decoder_features)
    return next((k for k, v in MODEL_PRESETS.items() if tuple(v) == features), "custom")


@dataclass
class ModelConfig:
    # question ids 0..n_questions-1; id n_questions stands for unknown (set from the data)
    n_questions: int = option(0, cli=False)
    d_model: int = option(256, "embedding width", range=at_least(2))
    n_heads: int = option(8, "attention heads", flag="heads", range=at_least(1))
    encoder_layers: int = option(2, "encoder layers (--layers sets both sides)", range=at_least(1))
    decoder_layers: int = option(2, "decoder layers (--layers sets both sides)", range=at_least(1))
    d_ff: int = option(
        0, "feed-forward width; 0: 4 x d-model, as in the Transformer", range=at_least(0)
    )
    dropout: float = option(0.1, "dropout rate", range=between(0, 1, high_open=True))
    window: int = option(
        100, "questions an attention layer looks back (SAINT's sequence length)", range=at_least(1)
    )
    decoder_features: tuple[str, ...] = option(
        MODEL_PRESETS["saint+"],
        "decoder inputs beside the response, from " + ",".join(DECODER_FEATURES) + " "
        "(question: the answered question, embedded per (question, response) pair); "
        "--model sets a preset",
    )
    attention: str = option(
        "mha", "mha, or mla (multi-head latent attention)", choices=("mha", "mla")
    )
    kv_latent_dim: int = option(64, "mla: width of the shared key/value latent", range=at_least(1))
    q_latent_dim: int = option(
        0, "mla: width of the query latent; 0 leaves queries full", range=at_least(0)
    )
    difficulty_buckets: int = option(
        0,
        "> 0 adds an embedding of the question's correct rate, in this many buckets",
        range=at_least(0),
    )
    n_tags: int = option(0, cli=False)  # > 0: the mean embedding of the question's tags
    max_tags: int = option(1, cli=False)  # most tags of one question (question_tags' width)
    # "id": a learned vector per question; "rasch" (needs tags): the question's tags' mean
    # embedding plus a learned scalar difficulty per question times the tags' mean
    # variation vector, as AKT's Rasch embeddings (Ghosh et al. 2020); with the decoder
    # feature "question", (tag, response) pairs get the same form
    question_embedding: str = option(
        "id",
        "id: a vector per question; rasch (with --tags): the tags' embedding plus a scalar "
        "difficulty per question times the tags' variation vector (AKT-Rasch)",
        choices=("id", "rasch"),
    )
    # "akt": a read-out beside the decoder, as AKT's knowledge retriever (Ghosh et al.
    # 2020): the current question's embedding attends to the embeddings of the questions
    # already answered (rotary positions tell how far back), their (question + outcome)
    # embeddings as values, and a small network of what it read and the question adds a
    # logit to the decoder's
    readout: str = option(
        "none",
        "none, or akt: the current question attends to the questions answered before it, "
        "with their outcomes as values (AKT's retriever), beside the decoder",
        choices=("none", "akt"),
    )
    # the student's past-event features of each question (common.data.past_features:
    # MODEL_FEATURES, the trees' features but the rate table and the part), as the trees
    # read them: "encoder" adds their projection to each question's encoder input (they
    # then travel in the streaming state's rings: 76 B a question); "head" feeds them with
    # the decoder's output to a small network that adds a logit (only the current
    # question's are needed)
    past_features: str = option(
        "none",
        "none; encoder: add each question's past-event features (normalized, projected) "
        "to its encoder input; head: feed them with the decoder's output to a small "
        "network that adds to the logit",
        choices=PAST_FEATURE_PLACES,
    )
    rope_base: float = option(10000.0, "rotary embeddings' base", range=above(1))
    # share of each head's channels that rotary embeddings rotate. All of them: a query
    # must single out its own position among a window of keys (the decoder meets the
    # current question only through attention over the encoder's outputs), and with a
    # quarter (GPT-J's choice, cheaper on a CPU) a head has too few frequencies to tell
    # nearby positions apart; trained in the streaming state, with the whole window
    # behind every position, such a model plateaus near the question-rate baseline for
    # epochs (docs/experiments.md: the quarter-width rows)
    rope_fraction: float = option(
        1.0,
        "share of each attention head's channels that rotary positions rotate",
        range=between(0, 1, low_open=True),
    )

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
        if self.past_features not in PAST_FEATURE_PLACES:
            raise ValueError(
                f"past_features must be one of {PAST_FEATURE_PLACES}, got {self.past_features!r}"
            )
        if self.readout not in ("none", "akt"):
            raise ValueError(f"readout must be 'none' or 'akt', got {self.readout!r}")
        if self.question_embedding not in ("id", "rasch"):
            raise ValueError(
                f"question_embedding must be 'id' or 'rasch', got {self.question_embedding!r}"
            )
        # n_questions 0: a config before the data filled in its sizes (TrainConfig.model)
        if self.question_embedding == "rasch" and self.n_questions and not self.n_tags:
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
        function of the history; see common/train/trainer.py and common/stream/online.py."""
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
# dropout and feed-forward


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


# ---------------------------------------------------------------------------------------
# layers


def _tail(rope: tuple[Tensor, Tensor], skip: int) -> tuple[Tensor, Tensor]:
    """A rotary table (B, T, ...) without its first `skip` positions."""
    return rope[0][:, skip:], rope[1][:, skip:]


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
            x, h, query_rope = x[:, skip:], h[:, skip:], _tail(query_rope, skip)
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


@dataclass
class _AttentionInputs:
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
        skip: the state starts at the batch's position `skip` (SAINT.prime)."""
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
        return _tail(rope, key_start)


class SAINT(nn.Module):
    """SAINT / SAINT+ over batches from common.data.features.step_inputs."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.rotary = Rotary(d // config.n_heads, config.rope_base, config.rope_fraction)
        # registration order is the state_dict's key order and the order construction
        # draws random numbers in: checkpoints and seeded weights depend on both
        self._add_question_embeddings(config)
        self._add_outcome_embeddings(config)
        self.embed_dropout = Dropout(config.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.decoder_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)
        if config.readout == "akt":
            self._add_readout(config)
        if config.past_features != "none":
            self._add_past_features(config)
        # queries per block of banded attention on long sequences (0: the window); a
        # speed setting only, the result is the same (see Blocks)
        self.attention_block = 0
        self.apply(self._init_weights)
        if config.question_embedding == "rasch":
            self._init_rasch_embeddings()
        if config.past_features != "none":
            self._init_past_features()

    def _add_question_embeddings(self, config: ModelConfig) -> None:
        """The encoder side's tables: question, part, difficulty bucket and tags."""
        d = config.d_model
        rasch = config.question_embedding == "rasch"
        # rasch: one scalar per question (its difficulty), not a vector
        self.question_embed = nn.Embedding(config.n_questions + 1, 1 if rasch else d)
        self.part_embed = nn.Embedding(N_PARTS + 1, d)
        if config.difficulty_buckets:
            self.difficulty_embed = nn.Embedding(config.difficulty_buckets + 1, d)
            # bucket per question id, from the training rows of the fold (common.model.difficulty)
            self.register_buffer(
                "question_difficulty", torch.zeros(config.n_questions + 1, dtype=torch.long)
            )
        if config.n_tags:
            self.tag_embed = nn.Embedding(config.n_tags + 1, d, padding_idx=config.n_tags)
            # tag ids per question id, padded with n_tags (common.model.tags)
            self.register_buffer(
                "question_tags",
                torch.full((config.n_questions + 1, config.max_tags), config.n_tags),
            )
            if rasch:
                self.tag_variation = nn.Embedding(config.n_tags + 1, d, padding_idx=config.n_tags)

    def _add_outcome_embeddings(self, config: ModelConfig) -> None:
        """The decoder side's tables: response, the decoder features, and the (question,
        response) and (tag, response) interactions."""
        d = config.d_model
        rasch = config.question_embedding == "rasch"
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

    def _add_readout(self, config: ModelConfig) -> None:
        """The AKT-style read-out beside the decoder (ModelConfig.readout 'akt')."""
        d = config.d_model
        # standard attention whatever config.attention: its keys and values come from
        # different inputs (ReadoutAttention)
        self.readout = ReadoutAttention(replace(config, attention="mha"))
        self.readout_norm = nn.LayerNorm(d)
        self.readout_head = nn.Sequential(
            nn.Linear(2 * d, d), nn.ReLU(), Dropout(config.dropout), nn.Linear(d, 1)
        )

    def _add_past_features(self, config: ModelConfig) -> None:
        """The past-event features' normalization (a LayerNorm: counts of thousands and
        durations of months beside rates in [0, 1]) and their projection (encoder) or
        network (head)."""
        d, width = config.d_model, 2 * len(MODEL_FEATURES)  # values and missing flags
        self.past_norm = nn.LayerNorm(width)
        if config.past_features == "encoder":
            self.past_embed = nn.Linear(width, d)
        else:
            self.past_head = nn.Sequential(
                nn.Linear(d + width, d), nn.ReLU(), Dropout(config.dropout), nn.Linear(d, 1)
            )

    def _init_past_features(self) -> None:
        # the encoder's projection starts at zero: the question's embeddings (at 0.02
        # scale) are not drowned by the features at the start, which the model learns to
        # add as they help
        if self.config.past_features == "encoder":
            with torch.no_grad():
                self.past_embed.weight.zero_()

    def _past(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, T, 2F): the past-event features (B, T, F), counts and durations as log1p,
        with a flag per feature where it is undefined (NaN, read as 0), normalized."""
        past = batch["past"].float()
        missing = torch.isnan(past)
        value = past.masked_fill(missing, 0.0)  # (torch 1.7, the bundle's, has no nan_to_num)
        value = torch.where(LOG_COLUMNS.to(past.device), torch.log1p(value.clamp(min=0)), value)
        return self.past_norm(torch.cat((value, missing.float()), -1))

    def _init_rasch_embeddings(self) -> None:
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
        x = self.part_embed(batch["part"]) + self._question_vector(question)
        if self.config.past_features == "encoder":
            x = x + self.past_embed(self._past(batch))
        if self.config.difficulty_buckets:
            # training batches carry each row's bucket from other students' answers
            # (common.model.difficulty.out_of_fold_buckets); otherwise the question's bucket
            bucket = batch.get("difficulty")
            if bucket is None:
                bucket = self.question_difficulty[question]
            x = x + self.difficulty_embed(bucket)
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

    def _question_vector(self, question: Tensor) -> Tensor:
        """(B, L, D): the embedding of questions, the encoder's input beside the part and
        the read-out's keys and queries (ids above n_questions, the start token's, read as
        unknown): the question's vector, with tags their mean embedding, and in Rasch form
        the scalar difficulty times the tags' variation."""
        question = question.clamp(max=self.config.n_questions)
        rasch = self.config.question_embedding == "rasch"
        x = 0 if rasch else self.question_embed(question)
        if self.config.n_tags:
            tags = self.question_tags[question]
            present = tags != self.config.n_tags
            x = x + self._tag_mean(self.tag_embed, tags, present)
            if rasch:
                x = x + self.question_embed(question) * self._tag_mean(
                    self.tag_variation, tags, present
                )
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
        trained_from: int = 0,
    ) -> Tensor:
        """Logits (B, T) for the query positions of `batch` (see step_inputs).

        With a cache, this batch's keys are written into it (in place) and queries attend
        to its earlier keys too; a view of a pool's rows (ModelCache.view) writes into
        those rows. trained_from (training, no cache): the first batch position whose
        logit is wanted; each layer computes only the positions such a logit can reach
        (_first_reached), and the logits cover the positions from the last layer's first
        on, (B, T - first): at most trained_from, a multiple of the attention blocks'
        size. There, logits and gradients are those of the whole pass."""
        attend = self._attention_inputs(batch, cache)
        first = None
        if trained_from and cache is None:
            blocks = attend.causal if isinstance(attend.causal, Blocks) else None
            first = self._first_reached(trained_from, blocks.size if blocks else 1)
        memory = self._encode(batch, attend, first)  # (B, T, D)
        keys = self._key_stream(batch)  # (B, S, D)
        x = self._decode(batch, keys, memory, attend, first)  # (B, T - start, D)
        start = first[-1] if first else 0
        x = self.decoder_norm(x)
        logits = self.head(x).squeeze(-1)
        if self.config.past_features == "head":
            past = self._past(batch)[:, start:]
            logits = logits + self.past_head(torch.cat((x, past), -1)).squeeze(-1)
        if self.config.readout == "akt":
            logits = logits + self._read_out(batch, keys, attend, start)
        return logits

    def _attention_inputs(
        self, batch: dict[str, Tensor], cache: ModelCache | None
    ) -> _AttentionInputs:
        """The masks and rotary tables of this pass; with a cache, this batch's positions
        are stored in it first, so that the masks cover its earlier keys too."""
        window = self.config.window
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
        return _AttentionInputs(
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

    def prime(self, batch: dict[str, Tensor], cache: ModelCache) -> None:
        """Store in `cache` the key states of `batch`'s positions, as forward does, for
        later positions to attend (a streaming state built from a student's history); no
        logits. Each layer's outputs are computed only where a later position can reach
        them through the layers above it (_first_reached): the last decoder layer's
        nowhere, each layer below it one window further back. The states stored are
        forward's wherever a later query can attend them (tests/test_stream.py)."""
        attend = self._attention_inputs(batch, cache)
        first = self._first_reached(int(batch["valid"].sum(1).min()))
        memory = self._encode(batch, attend, first)
        keys = self._key_stream(batch)
        self._decode(batch, keys, memory, attend, first)
        if self.config.readout == "akt":
            self._readout_state(batch, keys, attend)

    def _first_reached(self, last: int, size: int = 1) -> list[int]:
        """Per layer (encoder, then decoder), the first batch position whose output the
        last layer's positions from `last` on can reach: each layer below one window
        further back (a query attends at most window - 1 positions back; the decoder's
        first layer reads the key stream, computed whole), each rounded down to `size`
        (the attention blocks': a layer's queries start at a block). Training passes it
        the first trained position (forward's trained_from); prime the shortest row's
        end (a position after the batch, enough for every row: the last layer is needed
        nowhere)."""
        first = [last // size * size]
        for _ in range(len(self.encoder) + len(self.decoder) - 1):
            first.insert(0, max(0, first[0] - self.config.window) // size * size)
        return first

    def _encode(
        self, batch: dict[str, Tensor], attend: _AttentionInputs, first: list[int] | None = None
    ) -> Tensor:
        """(B, T, D): the encoder's output, each question attending causally; with
        `first` (prime, or a training pass from trained_from), from the last encoder
        layer's first needed position on."""
        x = self._encoder_input(batch)
        done = 0  # the batch position x starts at
        for i, layer in enumerate(self.encoder):
            start = first[i] if first else 0
            remember = partial(attend.remember, "encoder", i, skip=done)
            rope = _tail(attend.query_rope, done) if done else attend.query_rope
            mask = attend.mask("causal", start, done)
            key_rope = attend.rope_from(attend.past_rope, done)
            x = layer(x, rope, remember, key_rope, mask, skip=start - done)
            done = start
        return self.encoder_norm(x)

    def _decode(
        self,
        batch: dict[str, Tensor],
        keys: Tensor,
        memory: Tensor,
        attend: _AttentionInputs,
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
        memory_rope = _tail(query_rope, memory_from) if memory_from else query_rope
        done = 0  # the batch position x starts at
        for i, layer in enumerate(self.decoder):
            key_start = 0 if i == 0 else done  # the first key of this layer's state
            if i == 0:
                state = layer.self_attention.kv_state(layer.norm1(keys), attend.key_rope)
            else:
                rope = _tail(query_rope, done) if done else query_rope
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
            rope = _tail(query_rope, start) if start else query_rope
            memory_past = attend.rope_from(past_rope, memory_from)
            x = layer(x, rope, state, self_rope, self_mask, cross_state, memory_past, memory_mask)
        return x

    def _readout_state(
        self, batch: dict[str, Tensor], keys: Tensor, attend: _AttentionInputs
    ) -> tuple[Tensor, ...]:
        """The read-out's key state: key s carries question s - 1 (its embedding as the
        key) and its outcome (the key stream plus that embedding as the value)."""
        answered = self._question_vector(batch["key_question"])  # (B, S, D)
        state = self.readout.kv_state((answered, keys + answered), attend.key_rope)
        return attend.remember("readout", 0, state)

    def _read_out(
        self, batch: dict[str, Tensor], keys: Tensor, attend: _AttentionInputs, start: int = 0
    ) -> Tensor:
        """(B, T - start): the AKT-style read-out's logit, added to the decoder's, from
        batch position `start` on."""
        # the container mask lets a query read only the questions answered before its
        # container
        asked = self._question_vector(batch["question"][:, start:])  # (B, T - start, D)
        state = self._readout_state(batch, keys, attend)
        read = self.readout(
            self.readout_norm(asked),
            _tail(attend.query_rope, start) if start else attend.query_rope,
            state,
            attend.outcome_rope,
            attend.mask("container", start, 0),
        )
        return self.readout_head(torch.cat((read, asked), -1)).squeeze(-1)
