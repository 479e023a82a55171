"""SAINT's inputs in one place: one embedder per input, registered once in INPUTS with
the batch field it reads and the size of its table, and the one function that adds the
embeddings into the encoder's input (per question) and the decoder's key stream (per key),
as the 4th-place Riiid model sums its list of embeddings.

An embedder registers its tables on the model itself, under the names checkpoints know
(question_embed, feature_embed.elapsed, ...), so a model's state_dict keys do not depend
on this registry. Adding an input: an entry in INPUTS (a decoder field: an entry in
common.data.features.KEY_FIELDS, which INPUTS reads).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common.data.features import KEY_FIELDS, RESPONSE_START, KeyField
from common.data.past_features import MODEL_FEATURES, MODEL_LOG_FEATURES
from common.data.schema import N_PARTS
from common.model.input_config import DECODER_FEATURES, InputConfig

ENCODER = "encoder"  # added into each question's encoder input
DECODER = "decoder"  # added into each key of the decoder's key stream
DECODER_FEATURE = "decoder feature"  # the decoder's, when InputConfig.decoder_features names it
LOG_COLUMNS = torch.tensor([name in MODEL_LOG_FEATURES for name in MODEL_FEATURES])


class Embedder:
    """One input of SAINT: `name` (a decoder feature's is its name in
    InputConfig.decoder_features), the batch `field` it reads, and its `side`."""

    name: str
    field: str
    side: str

    def wanted(self, config: InputConfig) -> bool:
        """Whether a model of `config` has this input (a decoder feature: when named)."""
        if self.side == DECODER_FEATURE:
            return self.name in config.decoder_features
        return True

    def build(self, model: nn.Module, config: InputConfig) -> None:
        """Register this input's tables (and buffers) on `model`."""
        raise NotImplementedError

    def init(self, model: nn.Module, config: InputConfig) -> None:
        """Initialization after the model's own (common.model.saint.layers.init_weights)."""

    def embed(self, model: nn.Module, values: Tensor) -> Tensor:
        """(B, L, D) from the field's values (B, L)."""
        raise NotImplementedError

    def __call__(self, model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        return self.embed(model, batch[self.field])  # (B, L, D)


def _register(model: nn.Module, path: str, module: nn.Module) -> None:
    """Add `module` to `model` at `path`: an attribute, or "dict.key" in an nn.ModuleDict
    attribute that exists already."""
    owner, _, name = path.rpartition(".")
    (getattr(model, owner) if owner else model).add_module(name, module)


def _table(model: nn.Module, path: str) -> nn.Module:
    owner, _, name = path.rpartition(".")
    return getattr(getattr(model, owner) if owner else model, name)


@dataclass(frozen=True)
class Lookup(Embedder):
    """A learned vector per value of the field: `size` rows in the table at `table`."""

    name: str
    field: str
    side: str
    table: str
    size: int

    def build(self, model: nn.Module, config: InputConfig) -> None:
        _register(model, self.table, nn.Embedding(self.size, config.d_model))

    def embed(self, model: nn.Module, values: Tensor) -> Tensor:
        return _table(model, self.table)(values)

    def table_of(self, model: nn.Module) -> nn.Embedding:
        """The embedding table this lookup reads, on `model`."""
        return _table(model, self.table)


@dataclass(frozen=True)
class Response(Lookup):
    """The previous question's response (or the start token), every decoder's input.
    Its build adds the (possibly empty) dict the decoder features' lookups fill."""

    def build(self, model: nn.Module, config: InputConfig) -> None:
        super().build(model, config)
        model.feature_embed = nn.ModuleDict()  # decoder features' tables: feature_embed.<name>


def key_lookup(field: KeyField) -> Lookup:
    """The lookup of a key stream field (step_inputs' key_<name>): a decoder feature
    (InputConfig.decoder_features), or the response, every decoder's input."""
    if field.name not in DECODER_FEATURES:
        return Response(field.name, f"key_{field.name}", DECODER, "response_embed", field.size)
    table = f"feature_embed.{field.name}"
    return Lookup(field.name, f"key_{field.name}", DECODER_FEATURE, table, field.size)


def tag_mean(table: nn.Embedding, index: Tensor, present: Tensor) -> Tensor:
    """(B, L, D): mean of table rows over the present entries of index (B, L, K);
    absent entries must index the table's zero padding row."""
    count = present.sum(-1, keepdim=True).clamp(min=1)
    return table(index).sum(-2) / count


def question_tags(model: nn.Module, question: Tensor) -> tuple[Tensor, Tensor]:
    """The tag ids (B, L, max_tags) of questions (B, L), and which are present (the rest
    are n_tags, the tables' padding rows)."""
    tags = model.question_tags[question]  # (B, L, max_tags)
    return tags, tags != model.config.n_tags


@dataclass(frozen=True)
class QuestionId(Embedder):
    """The question: a learned vector per question id (n_questions + 1 rows; the last,
    unknown, also reads ids above it, such as the start token's). Rasch form (AKT, Ghosh
    et al. 2020): a learned scalar difficulty per question times the mean variation
    vector of its tags (Tags registers that table)."""

    name: str = "question"
    field: str = "question"
    side: str = ENCODER

    def build(self, model: nn.Module, config: InputConfig) -> None:
        rasch = config.question_embedding == "rasch"
        model.question_embed = nn.Embedding(config.n_questions + 1, 1 if rasch else config.d_model)

    def init(self, model: nn.Module, config: InputConfig) -> None:
        if config.question_embedding == "rasch":  # as AKT: every question starts at its tags
            with torch.no_grad():
                model.question_embed.weight.zero_()

    def embed(self, model: nn.Module, values: Tensor) -> Tensor:
        question = values.clamp(max=model.config.n_questions)
        if model.config.question_embedding != "rasch":
            return model.question_embed(question)
        tags, present = question_tags(model, question)
        return model.question_embed(question) * tag_mean(model.tag_variation, tags, present)


def _init_variation(table: nn.Embedding) -> None:
    # as AKT: variation vectors start at unit scale, so that a difficulty's Adam step
    # moves the input as much as a step of a vector per question would (at the 0.02
    # scale of the other embeddings, difficulties barely learn)
    with torch.no_grad():
        nn.init.normal_(table.weight, std=1.0)
        table.weight[table.padding_idx].zero_()


@dataclass(frozen=True)
class Tags(Embedder):
    """The question's tags (InputConfig.n_tags > 0): the mean of their embeddings
    (n_tags + 1 rows, the last pads), read through the model's question_tags buffer (tag
    ids per question id, padded with n_tags; common.model.tags fills it)."""

    name: str = "tags"
    field: str = "question"
    side: str = ENCODER

    def wanted(self, config: InputConfig) -> bool:
        return config.n_tags > 0

    def build(self, model: nn.Module, config: InputConfig) -> None:
        n_tags = config.n_tags
        model.tag_embed = nn.Embedding(n_tags + 1, config.d_model, padding_idx=n_tags)
        padded = torch.full((config.n_questions + 1, config.max_tags), n_tags)
        model.register_buffer("question_tags", padded)
        if config.question_embedding == "rasch":  # read by QuestionId
            model.tag_variation = nn.Embedding(n_tags + 1, config.d_model, padding_idx=n_tags)

    def init(self, model: nn.Module, config: InputConfig) -> None:
        if config.question_embedding == "rasch":
            _init_variation(model.tag_variation)

    def embed(self, model: nn.Module, values: Tensor) -> Tensor:
        question = values.clamp(max=model.config.n_questions)
        return tag_mean(model.tag_embed, *question_tags(model, question))


@dataclass(frozen=True)
class Difficulty(Embedder):
    """The question's correct-rate bucket (InputConfig.difficulty_buckets > 0; buckets + 1
    rows): a training batch's own field (common.model.difficulty.out_of_fold_buckets, from
    other students' answers), otherwise the question's bucket in the model's
    question_difficulty buffer (common.model.difficulty fills it)."""

    name: str = "difficulty"
    field: str = "difficulty"
    side: str = ENCODER

    def wanted(self, config: InputConfig) -> bool:
        return config.difficulty_buckets > 0

    def build(self, model: nn.Module, config: InputConfig) -> None:
        model.difficulty_embed = nn.Embedding(config.difficulty_buckets + 1, config.d_model)
        bucket = torch.zeros(config.n_questions + 1, dtype=torch.long)
        model.register_buffer("question_difficulty", bucket)

    def embed(self, model: nn.Module, values: Tensor) -> Tensor:
        return model.difficulty_embed(values)

    def __call__(self, model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        bucket = batch.get(self.field)
        if bucket is None:
            bucket = model.question_difficulty[batch["question"]]
        return self.embed(model, bucket)


def past_values(model: nn.Module, past: Tensor) -> Tensor:
    """(B, T, 2F): the past-event features (B, T, F), counts and durations as log1p, with a
    flag per feature where it is undefined (NaN, read as 0), normalized (past_norm)."""
    past = past.float()
    missing = torch.isnan(past)
    value = past.masked_fill(missing, 0.0)  # (torch 1.7, the bundle's, has no nan_to_num)
    value = torch.where(LOG_COLUMNS.to(past.device), torch.log1p(value.clamp(min=0)), value)
    return model.past_norm(torch.cat((value, missing.float()), -1))


def add_past_norm(model: nn.Module) -> int:
    """The past-event features' normalization, a LayerNorm (counts of thousands and
    durations of months beside rates in [0, 1]); returns its width, 2F (values and
    missing flags). One per model: the query's features and the head share it."""
    width = 2 * len(MODEL_FEATURES)
    if not hasattr(model, "past_norm"):
        model.past_norm = nn.LayerNorm(width)
    return width


@dataclass(frozen=True)
class PastFeatures(Embedder):
    """The student's past-event features of the question (InputConfig.past_features
    "encoder" or "both"; common.data.past_features.MODEL_FEATURES), normalized and
    projected; the head is common.model.past_head's."""

    name: str = "past"
    field: str = "past"
    side: str = ENCODER

    def wanted(self, config: InputConfig) -> bool:
        return config.past_in_query

    def build(self, model: nn.Module, config: InputConfig) -> None:
        model.past_embed = nn.Linear(add_past_norm(model), config.d_model)

    def init(self, model: nn.Module, config: InputConfig) -> None:
        # the projection starts at zero: the question's embeddings (at 0.02 scale) are
        # not drowned by the features at the start; the model learns to add them
        with torch.no_grad():
            model.past_embed.weight.zero_()

    def embed(self, model: nn.Module, values: Tensor) -> Tensor:
        return model.past_embed(past_values(model, values))


@dataclass(frozen=True)
class AnsweredQuestion(Embedder):
    """The decoder feature "question": the answered question per (question, response)
    pair, as SAKT and AKT embed interactions (the papers' SAINT decoder sees only the
    response): 2 (n_questions + 1) + 1 rows (question + (n_questions + 1) x response; the
    last, the start token's), plus, with tags, the mean (tag, response) embedding (2 n_tags
    + 1 rows, the last pads). Rasch form: the mean (tag, response) embedding plus the
    question's scalar difficulty times the mean (tag, response) variation."""

    name: str = "question"
    field: str = "key_question"  # ids above n_questions: the start token
    side: str = DECODER_FEATURE

    def build(self, model: nn.Module, config: InputConfig) -> None:
        d, rasch = config.d_model, config.question_embedding == "rasch"
        if not rasch:
            model.interaction_embed = nn.Embedding(2 * (config.n_questions + 1) + 1, d)
        if config.n_tags:
            pad = 2 * config.n_tags
            model.tag_interaction_embed = nn.Embedding(pad + 1, d, padding_idx=pad)
            if rasch:
                model.tag_interaction_variation = nn.Embedding(pad + 1, d, padding_idx=pad)

    def init(self, model: nn.Module, config: InputConfig) -> None:
        if config.question_embedding == "rasch" and config.n_tags:
            _init_variation(model.tag_interaction_variation)

    def __call__(self, model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        config = model.config
        n = config.n_questions
        question = batch[self.field].clamp(max=n)
        response = batch["key_response"]
        answered, start = response.clamp(max=1), response == RESPONSE_START
        rasch = config.question_embedding == "rasch"
        x = 0
        if not rasch:
            index = question + (n + 1) * answered
            x = model.interaction_embed(index.masked_fill(start, 2 * (n + 1)))
        if config.n_tags:
            tags, present = question_tags(model, question)
            present = present & ~start[..., None]
            index = (tags + config.n_tags * answered[..., None]).masked_fill(
                ~present, 2 * config.n_tags
            )
            x = x + tag_mean(model.tag_interaction_embed, index, present)
            if rasch:
                variation = tag_mean(model.tag_interaction_variation, index, present)
                x = x + model.question_embed(question) * variation
        return x  # (B, S, D)


# Every input, in the order the sums add them (a float sum depends on its order; this is
# the model's own from before the registry): the encoder's, those reading the question id
# first (their sum is the question's embedding, which the read-out reads alone), then the
# decoder's (common.data.features.KEY_FIELDS' lookups, the response first)
INPUTS: tuple[Embedder, ...] = (
    QuestionId(),
    Tags(),
    Lookup("part", "part", ENCODER, "part_embed", N_PARTS + 1),
    PastFeatures(),
    Difficulty(),
    *(key_lookup(field) for field in KEY_FIELDS),
    AnsweredQuestion(),
)
# Where the inputs' tables register (old checkpoints' key order, and the order seeded
# weights are drawn in), an order older than the sums': these encoder inputs first, in
# this order, then the decoder's in its sum's order (decoder_inputs), then the model's
# layers and read-out, then any other input in INPUTS' order
REGISTERED_FIRST = ("question", "part", "difficulty", "tags")


def encoder_inputs(config: InputConfig) -> tuple[Embedder, ...]:
    """The encoder's embedders of a model of `config`, in the order its sum adds them."""
    return tuple(e for e in INPUTS if e.side == ENCODER and e.wanted(config))


def decoder_inputs(config: InputConfig) -> tuple[Embedder, ...]:
    """The decoder's, in the order its sum adds them: the response, the key fields that
    InputConfig.decoder_features names, in its order, then the others it names (the
    answered question)."""
    features = {e.name: e for e in INPUTS if e.side == DECODER_FEATURE}
    named = [features[name] for name in dict.fromkeys(config.decoder_features)]
    lookups = [e for e in named if isinstance(e, Lookup)]
    others = [e for e in named if not isinstance(e, Lookup)]
    return (*(e for e in INPUTS if e.side == DECODER), *lookups, *others)


def registration_order(config: InputConfig) -> tuple[tuple[Embedder, ...], tuple[Embedder, ...]]:
    """(the embedders that register their tables before the model's layers, those that
    register after its layers and read-out), each in its order (REGISTERED_FIRST)."""
    encoder = {e.name: e for e in encoder_inputs(config)}
    first = [encoder.pop(name) for name in REGISTERED_FIRST if name in encoder]
    return (*first, *decoder_inputs(config)), tuple(encoder.values())


def input_sum(model: nn.Module, batch: dict[str, Tensor], embedders: Iterable[Embedder]) -> Tensor:
    """(B, L, D): the embeddings of `batch` by `embedders`, added in their order (the
    encoder's input: model.encoder_inputs; the decoder's key stream: model.decoder_inputs)."""
    total = None
    for embedder in embedders:
        x = embedder(model, batch)
        total = x if total is None else total + x
    return total


def question_vector(model: nn.Module, question: Tensor) -> Tensor:
    """(B, L, D): the embedding of questions (B, L), the sum of the encoder's inputs that
    read the question id alone (the read-out's keys and queries)."""
    return input_sum(
        model, {"question": question}, [e for e in model.encoder_inputs if e.field == "question"]
    )
