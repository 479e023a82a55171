"""Knowledge distillation from a frozen SAINT teacher (Hinton et al. 2015, "Distilling the
Knowledge in a Neural Network", arXiv 1503.02531), for a binary outcome.

The student is trained on a mix of the teacher's temperature-softened predictions and the
true labels:

    loss = alpha * T^2 * KL(teacher || student)  +  (1 - alpha) * BCE(student, label)

where both Bernoulli distributions are softened as p = sigmoid(logit / T). The T^2 factor
keeps the soft term's gradients on the same scale as the hard term's as T changes
(Hinton et al., section 2). Both terms are means over the same non-padded positions.

The teacher is rebuilt from its checkpoint alone and sees exactly the student's batches.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from common.model.checkpoint import load_model
from common.model.saint import SAINT, ModelConfig


def load_teacher(
    path: str | Path,
    device: torch.device | str,
    student: ModelConfig | None = None,
    fingerprint: dict | None = None,
) -> SAINT:
    """The teacher of checkpoint `path`, frozen (no gradients, eval mode) on `device`.

    With `student` given, the teacher must be compatible with it:
    - the same n_questions: both read the same question ids from the batch (ids past
      n_questions are mapped to the unknown id n_questions by common.data.features);
    - a window at least the student's: attention is banded to the model's window, and
      with a shorter one the teacher would condition on fewer recent questions than the
      student, and its soft targets would be worse than the labels. (The student's
      training sequences carry enough context for the larger of the two receptive
      fields, so the teacher's targets are its own streaming predictions.)
    Size (d_model, heads, layers), decoder features, attention kind and the difficulty
    input may differ: the batch carries every feature, and the teacher's difficulty
    buckets come from its own checkpoint.

    With `fingerprint` given (common.data.fold_data.fold_fingerprint of the student's fold), the
    teacher must have been trained on that very fold of the same folds: a teacher from
    another fold, or from folds made again with another seed, has trained on this fold's
    validation rows and would leak them into the soft targets.
    """

    teacher, checkpoint = load_model(path, device)
    if teacher.arch != "saint":
        raise ValueError(f"{path}: a {teacher.arch} model; a teacher is a SAINT checkpoint")
    if student is not None:
        check_teacher(teacher.config, student, path)
    recorded = checkpoint.get("fold_fingerprint") or {}
    wanted = None if fingerprint is None else (fingerprint["fold"], fingerprint["sha256"])
    if wanted is not None and (recorded.get("fold"), recorded.get("sha256")) != wanted:
        raise ValueError(
            f"teacher {path} was trained on fold {recorded.get('fold')} of folds with "
            f"fingerprint {recorded.get('sha256')}, the student on fold {wanted[0]} of folds "
            f"with fingerprint {wanted[1]}: a teacher from another fold, or from other "
            f"folds, has seen this fold's validation rows"
        )
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    return teacher.eval()


def check_teacher(teacher: ModelConfig, student: ModelConfig, path: str | Path = "teacher") -> None:
    """Raise ValueError unless a teacher of config `teacher` can label `student`'s batches
    (see load_teacher)."""
    if teacher.n_questions != student.n_questions:
        raise ValueError(
            f"teacher {path} has n_questions {teacher.n_questions}, the student "
            f"{student.n_questions}: both must be trained on the same question set"
        )
    if teacher.window < student.window:
        raise ValueError(
            f"teacher {path} has window {teacher.window}, shorter than the student's "
            f"{student.window}: the teacher must see every question the student sees "
            f"(use a student --window <= {teacher.window})"
        )


def check_distill_options(alpha: float, temperature: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"distillation alpha must be in [0, 1], got {alpha}")
    if not temperature > 0.0:
        raise ValueError(f"distillation temperature must be > 0, got {temperature}")


def bernoulli_kl(teacher_logits: Tensor, student_logits: Tensor) -> Tensor:
    """Elementwise KL(Bernoulli(sigmoid(t)) || Bernoulli(sigmoid(s))), from logits through
    logsigmoid (log p = logsigmoid(x), log(1 - p) = logsigmoid(-x)), so it stays finite
    for saturated logits."""
    p_teacher = torch.sigmoid(teacher_logits)
    log_ratio_one = F.logsigmoid(teacher_logits) - F.logsigmoid(student_logits)
    log_ratio_zero = F.logsigmoid(-teacher_logits) - F.logsigmoid(-student_logits)
    return p_teacher * log_ratio_one + (1.0 - p_teacher) * log_ratio_zero


def masked_mean(values: Tensor, valid: Tensor) -> Tensor:
    """Mean of `values` over positions where the 0/1 float mask `valid` is 1 (padded
    positions are selected out, not multiplied by 0, so whatever is there stays out)."""
    total = torch.where(valid > 0, values, torch.zeros_like(values)).sum()
    return total / valid.sum().clamp(min=1)


def distillation_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    labels: Tensor,
    valid: Tensor,
    alpha: float,
    temperature: float,
) -> Tensor:
    """alpha * T^2 * KL(teacher || student) at temperature T + (1 - alpha) * BCE(labels).

    student_logits, teacher_logits, labels (0/1 float) and valid (0/1 float mask) are all
    (B, T). The teacher is detached: gradients reach the student only. Computed in float32
    (the logits may come from bf16/fp16 autocast).
    """
    check_distill_options(alpha, temperature)
    shapes = {tuple(t.shape) for t in (student_logits, teacher_logits, labels, valid)}
    if len(shapes) != 1:
        raise ValueError(
            f"student logits {tuple(student_logits.shape)}, teacher logits "
            f"{tuple(teacher_logits.shape)}, labels {tuple(labels.shape)} and valid "
            f"{tuple(valid.shape)} must have one shape (B, T)"
        )
    student = student_logits.float()
    teacher = teacher_logits.detach().float()
    valid = valid.float()
    hard = F.binary_cross_entropy_with_logits(student, labels.float(), reduction="none")
    soft = bernoulli_kl(teacher / temperature, student / temperature)
    return alpha * temperature**2 * masked_mean(soft, valid) + (1.0 - alpha) * masked_mean(
        hard, valid
    )
