"""The inputs every model reads (common.model.inputs' embedders), as config fields each
architecture's config inherits (InputConfig): the data's sizes, the width and dropout,
the window, the key stream's features, the question's embedding and the optional inputs
(tags, difficulty, past-event features). An architecture's config (SAINT's ModelConfig,
the recurrent models') adds its own fields and may restate one of these with its own
default or help.

This module ships in the Kaggle bundle: Python 3.7."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from common.data.features import KEY_FIELDS
from common.options import at_least, between, option

# The key stream's inputs beside the response: its other fields (each a lookup,
# common.model.inputs.key_lookup), and "question": the answered question, an embedding per
# (question, response) pair (with tags also per (tag, response) pair), as SAKT and AKT
# embed interactions (common.model.inputs.AnsweredQuestion); the papers' SAINT decoder
# sees only the response
DECODER_FEATURES = (*(f.name for f in KEY_FIELDS if f.name != "response"), "question")
PAST_FEATURE_PLACES = ("none", "encoder", "head", "both")


@dataclass
class InputConfig:
    # question ids 0..n_questions-1; id n_questions stands for unknown (set from the data)
    n_questions: int = option(0, cli=False)
    d_model: int = option(128, "embedding width", range=at_least(2))
    dropout: float = option(0.1, "dropout rate", range=between(0, 1, high_open=True))
    window: int = option(100, "questions a step reads back", range=at_least(1))
    decoder_features: tuple[str, ...] = option(
        ("elapsed", "lag"),
        "key stream inputs beside the response, from " + ",".join(DECODER_FEATURES) + " "
        "(question: the answered question, embedded per (question, response) pair)",
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
    # the student's past-event features of each question (common.data.past_features:
    # MODEL_FEATURES, the trees' features but the rate table and the part), as the trees
    # read them: "encoder" adds their projection to each question's encoder input (they
    # then travel in the streaming state's rings: 76 B a question); "head" feeds them with
    # the model's last hidden state to a small network that adds a logit (only the
    # current question's are needed; common.model.past_head); "both" does both
    past_features: str = option(
        "none",
        "none; encoder: add each question's past-event features (normalized, projected) "
        "to its encoder input; head: feed them with the model's last hidden state to a "
        "small network that adds to the logit; both: encoder and head",
        choices=PAST_FEATURE_PLACES,
    )

    def __post_init__(self) -> None:
        self.decoder_features = tuple(self.decoder_features)
        unknown = set(self.decoder_features) - set(DECODER_FEATURES)
        if unknown:
            raise ValueError(
                f"unknown decoder features {sorted(unknown)}; known {DECODER_FEATURES}"
            )
        if self.past_features not in PAST_FEATURE_PLACES:
            raise ValueError(
                f"past_features must be one of {PAST_FEATURE_PLACES}, got {self.past_features!r}"
            )
        if self.question_embedding not in ("id", "rasch"):
            raise ValueError(
                f"question_embedding must be 'id' or 'rasch', got {self.question_embedding!r}"
            )
        # n_questions 0: a config before the data filled in its sizes (TrainConfig's)
        if self.question_embedding == "rasch" and self.n_questions and not self.n_tags:
            raise ValueError("question_embedding 'rasch' needs the questions' tags (--tags)")

    @property
    def past_in_query(self) -> bool:
        """Whether each question's input carries its past-event features."""
        return self.past_features in ("encoder", "both")

    @property
    def past_head(self) -> bool:
        """Whether the past-event features' head adds to the logit."""
        return self.past_features in ("head", "both")

    @property
    def key_context(self) -> int:
        """Keys a step reads again before its first question's container (0: only those
        its state or cache has not absorbed; common.model.interface)."""
        return 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict):
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown {cls.__name__} keys {sorted(unknown)}")
        return cls(**values)
