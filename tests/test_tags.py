"""Question tags as an encoder input (common/model/tags.py): parsing, the padded tag matrix, the
buffer in the checkpoint, its effect on the encoder, and 03_train.py --tags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from common.data.fold_data import load_fold_data
from common.data.schema import InputError
from common.model.checkpoint import load_model, save_checkpoint
from common.model.inputs import AnsweredQuestion
from common.model.saint import SAINT, ModelConfig
from common.model.tags import install_tags, parse_tags, question_tag_matrix, tag_shape
from common.workspace import Workspace
from tests.helpers import RUN, fold0_folder, make_tiny_demo

QUESTIONS = pd.DataFrame(
    {
        "question_id": [0, 1, 2, 3],
        "tags": pd.array(["5 2", "7", "", None], dtype="string"),
    }
)


def test_parse_shape_and_matrix_by_hand() -> None:
    assert parse_tags(QUESTIONS) == [[5, 2], [7], [], []]
    assert tag_shape(QUESTIONS) == (8, 2)
    matrix = question_tag_matrix(QUESTIONS, n_questions=5, n_tags=8, max_tags=2)
    expected = [[5, 2], [7, 8], [8, 8], [8, 8], [8, 8], [8, 8]]  # rows 4 (no row), 5 (unknown)
    assert matrix.tolist() == expected


@pytest.mark.parametrize("bad", ["1 x", "-3", "2.5"])
def test_bad_tags_name_the_row_and_column(bad: str) -> None:
    questions = QUESTIONS.assign(tags=pd.array(["1", bad, "", None], dtype="string"))
    with pytest.raises(InputError, match=r"data row 2.*column 'tags'"):
        parse_tags(questions)


def test_matrix_refuses_tags_that_do_not_fit_the_model() -> None:
    with pytest.raises(ValueError, match="at most 1 tags"):
        question_tag_matrix(QUESTIONS, n_questions=4, n_tags=8, max_tags=1)


def tag_model(n_tags: int = 8, max_tags: int = 2) -> SAINT:
    torch.manual_seed(0)
    config = ModelConfig(
        n_questions=4, d_model=16, n_heads=2, window=8, dropout=0.0, n_tags=n_tags,
        max_tags=max_tags,
    )  # fmt: skip
    return SAINT(config).eval()


def test_encoder_input_adds_the_mean_tag_embedding() -> None:
    model = tag_model()
    install_tags(model, QUESTIONS)
    batch = {"question": torch.tensor([[0, 1, 2, 4]]), "part": torch.tensor([[1, 1, 1, 0]])}
    with torch.no_grad():
        base = model.question_embed(batch["question"]) + model.part_embed(batch["part"])
        got = model.encoder_input(batch) - base
        tag = model.tag_embed.weight
    torch.testing.assert_close(got[0, 0], (tag[5] + tag[2]) / 2)
    torch.testing.assert_close(got[0, 1], tag[7])
    assert torch.count_nonzero(got[0, 2:]) == 0  # no tags, unknown id: the zero padding row


def test_rasch_embedding_is_tag_mean_plus_difficulty_times_variation() -> None:
    torch.manual_seed(0)
    config = ModelConfig(
        n_questions=4, d_model=16, n_heads=2, window=8, dropout=0.0, n_tags=8, max_tags=2,
        question_embedding="rasch", decoder_features=("question",),
    )  # fmt: skip
    model = SAINT(config).eval()
    install_tags(model, QUESTIONS)
    assert model.question_embed.weight.shape == (5, 1)  # one scalar per question
    assert torch.count_nonzero(model.question_embed.weight) == 0  # starts at the skills
    assert not hasattr(model, "interaction_embed")  # no vector per question anywhere
    with torch.no_grad():
        model.question_embed.weight.copy_(torch.tensor([[0.5], [-2.0], [1.0], [3.0], [0.0]]))
        batch = {"question": torch.tensor([[0, 1, 2]]), "part": torch.tensor([[1, 1, 1]])}
        got = model.encoder_input(batch) - model.part_embed(batch["part"])
        tag, variation = model.tag_embed.weight, model.tag_variation.weight
        torch.testing.assert_close(
            got[0, 0], (tag[5] + tag[2]) / 2 + 0.5 * (variation[5] + variation[2]) / 2
        )
        torch.testing.assert_close(got[0, 1], tag[7] - 2.0 * variation[7])
        assert torch.count_nonzero(got[0, 2]) == 0  # no tags: nothing but the part
        # decoder: (tag, response) rows are tag + 8 * response; the start token adds nothing
        keys = torch.tensor([[1, 1, 4]])
        response = torch.tensor([[1, 0, 2]])
        got = AnsweredQuestion()(model, {"key_question": keys, "key_response": response})
        pair, pair_variation = (
            model.tag_interaction_embed.weight,
            model.tag_interaction_variation.weight,
        )
        torch.testing.assert_close(got[0, 0], pair[15] - 2.0 * pair_variation[15])
        torch.testing.assert_close(got[0, 1], pair[7] - 2.0 * pair_variation[7])
        assert torch.count_nonzero(got[0, 2]) == 0


def test_rasch_needs_tags() -> None:
    with pytest.raises(ValueError, match="needs the questions' tags"):
        ModelConfig(n_questions=4, question_embedding="rasch")
    with pytest.raises(ValueError, match="'id' or 'rasch'"):
        ModelConfig(n_questions=4, n_tags=3, question_embedding="vector")


def test_install_rejects_a_model_without_the_input() -> None:
    model = SAINT(ModelConfig(n_questions=4, d_model=16, n_heads=2))
    with pytest.raises(ValueError, match="no tag input"):
        install_tags(model, QUESTIONS)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_demo(tmp_path_factory.mktemp("tags"), users=30)


def test_checkpoint_round_trip_keeps_the_tags(demo: Path, tmp_path: Path) -> None:
    data = load_fold_data(Workspace(demo), 0)
    n_tags, max_tags = tag_shape(data.questions)
    config = ModelConfig(
        n_questions=data.n_questions, d_model=16, n_heads=2, window=30, n_tags=n_tags,
        max_tags=max_tags,
    )  # fmt: skip
    model = SAINT(config)
    install_tags(model, data.questions)
    assert (model.question_tags[:-1, 0] < n_tags).any()
    path = tmp_path / "model.pt"
    save_checkpoint(path, {"model_config": config.to_dict(), "model_state": model.state_dict()})
    loaded, _ = load_model(path)
    assert torch.equal(loaded.question_tags, model.question_tags)


@pytest.mark.slow
def test_train_and_stream_scripts_with_tags(demo: Path, run_script) -> None:
    flags = ("--epochs", 1, "--batch-size", 64, "--warmup", 20, "--d-model", 32, "--heads", 4)
    flags = (*flags, "--layers", 1, "--window", 30, "--no-progress", "--output-dir", demo)
    done = run_script(
        "03_train.py", *flags, "--run", RUN, "--tags", "--question-embedding", "rasch"
    )
    assert done.returncode == 0, done.stderr
    model, checkpoint = load_model(fold0_folder(demo).checkpoint())
    data = load_fold_data(Workspace(demo), 0)
    assert checkpoint["model_config"]["n_tags"] == tag_shape(data.questions)[0]
    assert checkpoint["model_config"]["question_embedding"] == "rasch"
    assert torch.count_nonzero(model.question_embed.weight) > 0  # difficulties were learned
    expected = question_tag_matrix(
        data.questions, data.n_questions, model.config.n_tags, model.config.max_tags
    )
    assert np.array_equal(model.question_tags.numpy(), expected)
    done = run_script("04_infer.py", "--output-dir", demo, "--no-progress", "--no-export")
    assert done.returncode == 0, done.stderr
    assert fold0_folder(demo).validation_predictions.exists()
