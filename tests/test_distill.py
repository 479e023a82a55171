"""Knowledge distillation (common/model/distill.py): the loss against hand-computed values, the
teacher's loading and compatibility checks, and 03_train.py with --teacher."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from common.model.checkpoint import save_checkpoint
from common.model.distill import distillation_loss, load_teacher
from common.model.saint import SAINT, ModelConfig
from common.workspace import Workspace
from tests.helpers import RUN, fold0_folder, make_tiny_demo, run_of, train_config

# 2 students x 3 positions; the last position of student 1 is padding, with logits that
# would dominate every term if they were counted
STUDENT = [[0.5, -1.0, 2.0], [1.5, 0.0, 30.0]]
TEACHER = [[1.0, -0.5, 1.0], [-2.0, 0.3, -30.0]]
LABELS = [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
VALID = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def hand_bce() -> float:
    """Mean over the 5 valid positions of -(y log p + (1 - y) log(1 - p))."""
    terms = [
        -(y * math.log(sigmoid(s)) + (1 - y) * math.log(1 - sigmoid(s)))
        for s_row, y_row, v_row in zip(STUDENT, LABELS, VALID, strict=True)
        for s, y, v in zip(s_row, y_row, v_row, strict=True)
        if v
    ]
    return sum(terms) / len(terms)


def hand_kl(temperature: float) -> float:
    """Mean over the valid positions of KL(Bernoulli(p_t) || Bernoulli(p_s)) at T."""
    terms = []
    for s_row, t_row, v_row in zip(STUDENT, TEACHER, VALID, strict=True):
        for s, t, v in zip(s_row, t_row, v_row, strict=True):
            if v:
                p_s, p_t = sigmoid(s / temperature), sigmoid(t / temperature)
                terms.append(
                    p_t * math.log(p_t / p_s) + (1 - p_t) * math.log((1 - p_t) / (1 - p_s))
                )
    return sum(terms) / len(terms)


def loss(alpha: float, temperature: float, student=STUDENT, teacher=TEACHER) -> torch.Tensor:
    return distillation_loss(
        torch.tensor(student),
        torch.tensor(teacher),
        torch.tensor(LABELS),
        torch.tensor(VALID),
        alpha,
        temperature,
    )


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_alpha_zero_is_the_masked_bce(temperature: float) -> None:
    valid = torch.tensor(VALID).bool()
    reference = F.binary_cross_entropy_with_logits(
        torch.tensor(STUDENT)[valid], torch.tensor(LABELS)[valid]
    )
    assert loss(0.0, temperature).item() == pytest.approx(reference.item(), rel=1e-6)
    assert loss(0.0, temperature).item() == pytest.approx(hand_bce(), rel=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_alpha_one_is_t_squared_kl(temperature: float) -> None:
    expected = temperature**2 * hand_kl(temperature)
    assert loss(1.0, temperature).item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(("alpha", "temperature"), [(0.7, 2.0), (0.3, 1.0)])
def test_mix(alpha: float, temperature: float) -> None:
    expected = alpha * temperature**2 * hand_kl(temperature) + (1 - alpha) * hand_bce()
    assert loss(alpha, temperature).item() == pytest.approx(expected, rel=1e-5)


def test_hand_values_pinned() -> None:
    # the hand formulas themselves, pinned so that a slip in them cannot hide
    assert hand_bce() == pytest.approx(0.661765, abs=1e-6)
    assert hand_kl(1.0) == pytest.approx(0.261061, abs=1e-6)
    assert hand_kl(2.0) == pytest.approx(0.079758, abs=1e-6)


def test_kl_is_zero_when_teacher_equals_student() -> None:
    for temperature in (1.0, 2.0, 5.0):
        assert loss(1.0, temperature, teacher=STUDENT).item() == pytest.approx(0.0, abs=1e-6)


def test_saturated_logits_stay_finite() -> None:
    student = [[80.0, -80.0, 0.0], [-80.0, 80.0, 0.0]]
    teacher = [[-80.0, 80.0, 0.0], [80.0, -80.0, 0.0]]
    value = loss(0.5, 1.0, student=student, teacher=teacher)
    assert torch.isfinite(value)
    assert value.item() > 10  # confident and opposite: a large KL, not inf or nan


def test_gradient_reaches_the_student_only() -> None:
    student = torch.tensor(STUDENT, requires_grad=True)
    teacher = torch.tensor(TEACHER, requires_grad=True)
    value = distillation_loss(student, teacher, torch.tensor(LABELS), torch.tensor(VALID), 0.7, 2.0)
    value.backward()
    assert teacher.grad is None
    assert student.grad is not None
    assert student.grad[1, 2].item() == 0.0  # padding takes no gradient
    assert (student.grad[torch.tensor(VALID).bool()] != 0).all()


@pytest.mark.parametrize(
    ("alpha", "temperature", "message"),
    [
        (-0.1, 2.0, "alpha must be in"),
        (1.1, 2.0, "alpha must be in"),
        (0.5, 0.0, "temperature must be > 0"),
        (0.5, -1.0, "temperature must be > 0"),
    ],
)
def test_rejects_bad_options(alpha: float, temperature: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        loss(alpha, temperature)


def test_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="must have one shape"):
        distillation_loss(
            torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2, 3), torch.ones(2, 3), 0.5, 2.0
        )


# ---------------------------------------------------------------------------------------
# the teacher


def small_config(**overrides) -> ModelConfig:
    values = dict(n_questions=50, d_model=32, n_heads=4, encoder_layers=1, decoder_layers=1)
    values.update(window=30)
    values.update(overrides)
    return ModelConfig(**values)


FOLDS = {"fold": 0, "sha256": "0123456789abcdef"}  # a fold fingerprint (common.data.folds)


def write_teacher(path: Path, config: ModelConfig, fingerprint: dict | None = None) -> Path:
    torch.manual_seed(0)
    model = SAINT(config)
    fingerprint = FOLDS if fingerprint is None else fingerprint
    save_checkpoint(
        path,
        {
            "model_config": config.to_dict(),
            "model_state": model.state_dict(),
            "fold": fingerprint.get("fold"),
            "fold_fingerprint": fingerprint or None,
        },
    )
    return path


def test_load_teacher_is_frozen_and_rebuilt_from_the_checkpoint(tmp_path: Path) -> None:
    config = small_config(d_model=64, window=60)
    path = write_teacher(tmp_path / "teacher.pt", config)
    student = small_config(d_model=16, window=30)
    teacher = load_teacher(path, "cpu", student, FOLDS)
    assert teacher.config == config
    assert not teacher.training
    assert all(not p.requires_grad for p in teacher.parameters())


@pytest.mark.parametrize(
    ("student", "folds", "recorded", "message"),
    [
        (small_config(n_questions=51), FOLDS, FOLDS, "n_questions 50, the student 51"),
        (small_config(window=31), FOLDS, FOLDS, "window 30, shorter than the student's 31"),
        (
            small_config(),
            FOLDS | {"fold": 1},
            FOLDS,
            "trained on fold 0 of folds with fingerprint 0123456789abcdef, the student on "
            "fold 1 of folds with fingerprint 0123456789abcdef",
        ),
        (  # fold 0 of folds made again (another seed): other rows
            small_config(),
            FOLDS | {"sha256": "fedcba9876543210"},
            FOLDS,
            "fingerprint 0123456789abcdef, the student on fold 0 of folds with fingerprint "
            "fedcba9876543210",
        ),
        (small_config(), FOLDS, {}, "trained on fold None of folds with fingerprint None"),
    ],
)
def test_load_teacher_rejects_an_incompatible_teacher(
    tmp_path: Path, student: ModelConfig, folds: dict, recorded: dict, message: str
) -> None:
    path = write_teacher(tmp_path / "teacher.pt", small_config(), recorded)
    with pytest.raises(ValueError, match=message):
        load_teacher(path, "cpu", student, folds)


# ---------------------------------------------------------------------------------------
# 03_train.py --teacher

# one epoch of a one-layer model on 30-question windows
TINY_FLAGS = ("--epochs", 1, "--batch-size", 64, "--warmup", 20, "--heads", 4, "--layers", 1)
TINY_FLAGS = (*TINY_FLAGS, "--window", 30, "--no-progress")


@pytest.mark.slow
def test_train_script_distills_from_a_teacher(tmp_path: Path, run_script) -> None:
    output = make_tiny_demo(tmp_path, users=30)  # 30 students: both runs in ~30 s on CPU
    teacher_run = ("--run", "teacher", "--output-dir", output)
    done = run_script("03_train.py", *TINY_FLAGS, "--d-model", 32, *teacher_run)
    assert done.returncode == 0, done.stderr
    teacher_path = tmp_path / "teacher.pt"
    shutil.copyfile(fold0_folder(output, "teacher").checkpoint(), teacher_path)
    teacher_config = torch.load(teacher_path, weights_only=False)["model_config"]

    done = run_script(
        "03_train.py",
        *TINY_FLAGS,
        "--d-model",
        16,
        "--teacher",
        teacher_path,
        "--distill-alpha",
        0.7,
        "--distill-temperature",
        2,
        "--output-dir",
        output,
        "--run",
        RUN,
    )
    assert done.returncode == 0, done.stderr
    checkpoint = torch.load(fold0_folder(output).checkpoint(), weights_only=False)
    assert checkpoint["model_config"]["d_model"] == 16
    assert checkpoint["teacher"] == {"path": str(teacher_path), "model_config": teacher_config}
    assert checkpoint["train_config"]["distill_alpha"] == 0.7
    assert checkpoint["train_config"]["distill_temperature"] == 2.0
    assert math.isfinite(checkpoint["history"][0]["train_loss"])


def test_trainer_rejects_an_incompatible_teacher(tmp_path: Path) -> None:
    from common.data.fold_data import load_fold_data
    from common.train.trainer import Trainer

    output = make_tiny_demo(tmp_path, users=30)
    data = load_fold_data(Workspace(output), 0)
    teacher_config = small_config(n_questions=data.n_questions, encoder_layers=3)
    teacher = write_teacher(tmp_path / "teacher.pt", teacher_config, data.fingerprint)
    config = train_config(
        d_model=16, heads=4, layers=1, window=40, teacher=str(teacher), select_on="fold"
    )
    with pytest.raises(ValueError, match="shorter than the student's 40"):
        Trainer(config, run_of(output), data, torch.device("cpu"))
    # a deeper teacher sees further back: the student's sequences carry its context
    trainer = Trainer(
        train_config(
            d_model=16, heads=4, layers=1, window=20, teacher=str(teacher), select_on="fold"
        ),
        run_of(output),
        data,
        torch.device("cpu"),
    )
    assert trainer.plan.context == teacher_config.receptive_field == 120 > 2 * 20
