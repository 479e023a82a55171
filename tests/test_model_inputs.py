"""SAINT's inputs (common/model/inputs.py): the registry's embedders summed into the
encoder's input and the decoder's key stream, checked against sums written out by hand
from the tables; each embedder reading the field it names; the decoder features the
config accepts; and the state_dict keys old checkpoints hold."""

from __future__ import annotations

import torch

from common.data.features import KEY_FIELDS
from common.data.past_features import MODEL_FEATURES
from common.model.input_config import DECODER_FEATURES
from common.model.inputs import DECODER_FEATURE, INPUTS
from common.model.saint import SAINT, ModelConfig

ALL_FEATURES = ("elapsed", "lag", "explanation", "answer", "question")
N_QUESTIONS, N_TAGS = 6, 3


def every_input_model(**overrides) -> SAINT:
    """A tiny model with every input, each table random (none starts at zero), question 1
    tagged 2 and 0, question 2 tagged 1, the others untagged."""
    torch.manual_seed(0)
    values = dict(
        n_questions=N_QUESTIONS, d_model=8, n_heads=2, window=4, dropout=0.0, n_tags=N_TAGS,
        max_tags=2, difficulty_buckets=3, past_features="encoder", decoder_features=ALL_FEATURES,
    )  # fmt: skip
    model = SAINT(ModelConfig(**{**values, **overrides})).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()
        for table in (model.tag_embed, getattr(model, "tag_interaction_embed", None)):
            if table is not None:
                table.weight[table.padding_idx].zero_()
        model.question_tags[1] = torch.tensor([2, 0])
        model.question_tags[2] = torch.tensor([1, N_TAGS])
    return model


def query_batch() -> dict[str, torch.Tensor]:
    """Two questions: question 1 (part 3, difficulty bucket 2) and an unknown one (id
    N_QUESTIONS: part 0, bucket 1); past-event features all 0."""
    return {
        "question": torch.tensor([[1, N_QUESTIONS]]),
        "part": torch.tensor([[3, 0]]),
        "difficulty": torch.tensor([[2, 1]]),
        "past": torch.zeros(1, 2, len(MODEL_FEATURES)),
    }


def key_batch() -> dict[str, torch.Tensor]:
    """Three keys, each field its own values: the start token (response 2, question
    N_QUESTIONS + 1), question 1 answered right, question 3 answered wrong."""
    return {
        "key_response": torch.tensor([[2, 1, 0]]),
        "key_question": torch.tensor([[N_QUESTIONS + 1, 1, 3]]),
        "key_elapsed": torch.tensor([[0, 5, 9]]),
        "key_lag": torch.tensor([[3, 4, 1]]),
        "key_explanation": torch.tensor([[0, 1, 2]]),
        "key_answer": torch.tensor([[4, 2, 3]]),
    }


def test_encoder_input_is_the_sum_of_every_input_by_hand():
    model = every_input_model()
    with torch.no_grad():
        got = model.encoder_input(query_batch())[0]  # (T, D)
        question, tag = model.question_embed.weight, model.tag_embed.weight
        part, difficulty = model.part_embed.weight, model.difficulty_embed.weight
        # features of 0 are not missing: their normalization gives its bias
        past = model.past_embed(model.past_norm.bias)
    torch.testing.assert_close(
        got[0], question[1] + (tag[2] + tag[0]) / 2 + part[3] + past + difficulty[2]
    )
    torch.testing.assert_close(got[1], question[N_QUESTIONS] + part[0] + past + difficulty[1])


def test_without_a_batch_bucket_the_encoder_reads_the_question_s_bucket():
    model = every_input_model()
    batch = query_batch()
    with torch.no_grad():
        model.question_difficulty[1] = 2
        model.question_difficulty[N_QUESTIONS] = 1
        given = model.encoder_input(batch)
        del batch["difficulty"]
        torch.testing.assert_close(model.encoder_input(batch), given)


def test_key_stream_is_the_sum_of_every_decoder_input_by_hand():
    model = every_input_model()
    with torch.no_grad():
        got = model.key_stream(key_batch())[0]  # (S, D)
        response = model.response_embed.weight
        feature = {name: model.feature_embed[name].weight for name in ALL_FEATURES[:-1]}
        pair, tag_pair = model.interaction_embed.weight, model.tag_interaction_embed.weight

    def outcome(elapsed: int, lag: int, explanation: int, answer: int):
        values = {"elapsed": elapsed, "lag": lag, "explanation": explanation, "answer": answer}
        return sum(feature[name][value] for name, value in values.items())

    n = N_QUESTIONS + 1  # (question, response) rows: question + n * response; 2n: start
    # the start token: its own (question, response) row, no tags
    torch.testing.assert_close(got[0], response[2] + outcome(0, 3, 0, 4) + pair[2 * n])
    # question 1 right: tags 2 and 0 as (tag, right) rows tag + N_TAGS
    right = pair[1 + n] + (tag_pair[2 + N_TAGS] + tag_pair[0 + N_TAGS]) / 2
    torch.testing.assert_close(got[1], response[1] + outcome(5, 4, 1, 2) + right)
    torch.testing.assert_close(got[2], response[0] + outcome(9, 1, 2, 3) + pair[3])


def test_each_input_reads_the_field_it_names():
    """Changing one field at one position moves the sum there, and nowhere else, for
    every input of the registry (an input left out of the sum, or reading another field,
    fails)."""
    model = every_input_model()
    sides = [(model.encoder_input, query_batch(), model.encoder_inputs, 1)]
    sides.append((model.key_stream, key_batch(), model.decoder_inputs, 2))
    assert {e for _, _, inputs, _ in sides for e in inputs} == set(INPUTS)
    for assemble, batch, inputs, column in sides:
        with torch.no_grad():
            base = assemble(batch)
            for embedder in inputs:
                changed = {**batch, embedder.field: batch[embedder.field].clone()}
                value = changed[embedder.field]  # (B, L) ids, or (B, L, F) features
                if value.is_floating_point():
                    value[0, column] += 1
                else:
                    value[0, column] = 1 - value[0, column].clamp(max=1)  # another valid id
                after = assemble(changed)
                assert not torch.allclose(after[0, column], base[0, column]), embedder.name
                others = [c for c in range(base.shape[1]) if c != column]
                assert torch.equal(after[:, others], base[:, others]), embedder.name


def test_the_config_s_decoder_features_are_the_registry_s():
    registered = tuple(e.name for e in INPUTS if e.side == DECODER_FEATURE)
    assert registered == DECODER_FEATURES == ALL_FEATURES
    assert {e.field for e in INPUTS} >= {f"key_{f.name}" for f in KEY_FIELDS}


def test_input_keys_are_those_old_checkpoints_hold():
    """The inputs' and heads' state_dict keys, in order (the order construction draws
    seeded weights in), as the model had them before the registry."""
    model = every_input_model(readout="akt")
    layers = ("encoder.", "decoder.", "readout.")
    assert [k for k in model.state_dict() if not k.startswith(layers)] == [
        "question_difficulty", "question_tags", "question_embed.weight", "part_embed.weight",
        "difficulty_embed.weight", "tag_embed.weight", "response_embed.weight",
        "feature_embed.elapsed.weight", "feature_embed.lag.weight",
        "feature_embed.explanation.weight", "feature_embed.answer.weight",
        "interaction_embed.weight", "tag_interaction_embed.weight", "encoder_norm.weight",
        "encoder_norm.bias", "decoder_norm.weight", "decoder_norm.bias", "head.weight",
        "head.bias", "readout_norm.weight", "readout_norm.bias", "readout_head.0.weight",
        "readout_head.0.bias", "readout_head.3.weight", "readout_head.3.bias",
        "past_norm.weight", "past_norm.bias", "past_embed.weight", "past_embed.bias",
    ]  # fmt: skip
    config = dict(
        question_embedding="rasch", past_features="head", difficulty_buckets=0,
        decoder_features=("answer", "question", "lag"),
    )  # fmt: skip
    model = every_input_model(**config)
    assert [k for k in model.state_dict() if not k.startswith(layers)] == [
        "question_tags", "question_embed.weight", "part_embed.weight", "tag_embed.weight",
        "tag_variation.weight", "response_embed.weight", "feature_embed.answer.weight",
        "feature_embed.lag.weight", "tag_interaction_embed.weight",
        "tag_interaction_variation.weight", "encoder_norm.weight", "encoder_norm.bias",
        "decoder_norm.weight", "decoder_norm.bias", "head.weight", "head.bias",
        "past_norm.weight", "past_norm.bias", "past_head.0.weight", "past_head.0.bias",
        "past_head.3.weight", "past_head.3.bias",
    ]  # fmt: skip
