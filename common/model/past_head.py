"""The past-event features' head (InputConfig.past_features "head" or "both"): a small
network of the current question's features and a model's last hidden state, whose output
adds to the model's logit. SAINT reads it beside its decoder, the LQ-RNN beside its
feed-forward block; only the current question's features are read.

Its tables register on the model itself, under the names checkpoints know (past_norm,
past_head).

This module ships in the Kaggle bundle: Python 3.7, torch 1.7."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from common.model.inputs import add_past_norm, past_values


def add_past_head(model: nn.Module, d_model: int, dropout: nn.Module) -> None:
    """The features' normalization (shared with the query's features under "both") and a
    small network of them and a hidden state of width d_model."""
    width = add_past_norm(model)
    model.past_head = nn.Sequential(
        nn.Linear(d_model + width, d_model), nn.ReLU(), dropout, nn.Linear(d_model, 1)
    )


def past_logit(model: nn.Module, batch: dict[str, Tensor], x: Tensor, start: int = 0) -> Tensor:
    """(B, T - start): the head's logit from the hidden state x (B, T - start, D) and the
    features of the same positions."""
    past = past_values(model, batch["past"])[:, start:]
    return model.past_head(torch.cat((x, past), -1)).squeeze(-1)
