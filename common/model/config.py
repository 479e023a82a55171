"""SAINT's settings (common.model.saint): ModelConfig, its presets, and the decoder
features it may name."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from common.data.features import KEY_FIELDS
from common.options import above, at_least, between, option

# The decoder's inputs beside the response: the key stream's other fields (each a lookup,
# common.model.inputs.key_lookup), and "question": the answered question, an embedding per
# (question, response) pair (with --tags also per (tag, response) pair), as SAKT and AKT
# embed interactions (common.model.inputs.AnsweredQuestion); the papers' SAINT decoder
# sees only the response
DECODER_FEATURES = (*(f.name for f in KEY_FIELDS if f.name != "response"), "question")
MODEL_PRESETS = {"saint": (), "saint+": ("elapsed", "lag")}
PAST_FEATURE_PLACES = ("none", "encoder", "head")


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
