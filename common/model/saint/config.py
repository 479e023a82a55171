"""SAINT's settings (common.model.saint): ModelConfig (the inputs every model shares,
common.model.input_config, and SAINT's own), and its presets of decoder features."""

from __future__ import annotations

from dataclasses import dataclass

from common.model.input_config import DECODER_FEATURES, InputConfig
from common.options import above, at_least, between, option

MODEL_PRESETS = {"saint": (), "saint+": ("elapsed", "lag")}


def preset_name(decoder_features) -> str:
    """The --model preset whose decoder features these are, or 'custom'."""
    features = tuple(decoder_features)
    return next((k for k, v in MODEL_PRESETS.items() if tuple(v) == features), "custom")


@dataclass
class ModelConfig(InputConfig):
    d_model: int = option(256, "embedding width", range=at_least(2))
    window: int = option(
        100, "questions an attention layer looks back (SAINT's sequence length)", range=at_least(1)
    )
    decoder_features: tuple[str, ...] = option(
        MODEL_PRESETS["saint+"],
        "decoder inputs beside the response, from " + ",".join(DECODER_FEATURES) + " "
        "(question: the answered question, embedded per (question, response) pair); "
        "--model sets a preset",
    )
    n_heads: int = option(8, "attention heads", flag="heads", range=at_least(1))
    encoder_layers: int = option(2, "encoder layers (--layers sets both sides)", range=at_least(1))
    decoder_layers: int = option(2, "decoder layers (--layers sets both sides)", range=at_least(1))
    d_ff: int = option(
        0, "feed-forward width; 0: 4 x d-model, as in the Transformer", range=at_least(0)
    )
    attention: str = option(
        "mha", "mha, or mla (multi-head latent attention)", choices=("mha", "mla")
    )
    kv_latent_dim: int = option(64, "mla: width of the shared key/value latent", range=at_least(1))
    q_latent_dim: int = option(
        0, "mla: width of the query latent; 0 leaves queries full", range=at_least(0)
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
        super().__post_init__()
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model {self.d_model} must split into {self.n_heads} heads of even width"
            )
        if not 0 < self.rope_fraction <= 1:
            raise ValueError(f"rope_fraction must be in (0, 1], got {self.rope_fraction}")
        if self.attention not in ("mha", "mla"):
            raise ValueError(f"attention must be 'mha' or 'mla', got {self.attention!r}")
        if self.readout not in ("none", "akt"):
            raise ValueError(f"readout must be 'none' or 'akt', got {self.readout!r}")
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

    @property
    def ring_context(self) -> int:
        """The latest questions a streaming step reads from a student's ring: the
        receptive field (common.model.interface)."""
        return self.receptive_field
