"""Every architecture the pipeline trains, streams and ships, by the name a run, a
checkpoint and --arch give it: its config class and its model class
(common.model.interface is their contract). A new architecture is a package of
common/model/ and one entry here.

This module ships in the Kaggle bundle: Python 3.7."""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import UserError
from common.model.interface import KTModel
from common.model.lqrnn.config import LQRNNConfig
from common.model.lqrnn.model import LQRNN
from common.model.lstm.config import LSTMConfig
from common.model.lstm.model import LSTMModel
from common.model.saint import SAINT, ModelConfig


@dataclass(frozen=True)
class Architecture:
    name: str
    config: type  # its config dataclass (common.model.input_config.InputConfig's kind)
    model: type  # its KTModel
    section: str  # TrainConfig's field holding its config (recipes' [train.<section>])
    summary: str


ARCHITECTURES = {
    "saint": Architecture(
        "saint", ModelConfig, SAINT, "model",
        "SAINT/SAINT+: encoder over the questions, decoder over the previous outcomes",
    ),
    "lstm": Architecture(
        "lstm", LSTMConfig, LSTMModel, "lstm",
        "an LSTM over the outcomes' concatenated embeddings, read by each question",
    ),
    "lqrnn": Architecture(
        "lqrnn", LQRNNConfig, LQRNN, "lqrnn",
        "Last Query Transformer RNN: each question attends to its window of outcomes, then "
        "an LSTM over the questions",
    ),
}  # fmt: skip
ARCH_NAMES = tuple(ARCHITECTURES)
# a checkpoint without "arch" was written before the registry: SAINT's
DEFAULT_ARCH = "saint"


def architecture(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise UserError(f"architecture {name!r}: expected one of {', '.join(ARCH_NAMES)}") from None


def build_model(arch: str, config) -> KTModel:
    """A fresh model of architecture `arch` with `config` (its config class)."""
    entry = architecture(arch)
    if not isinstance(config, entry.config):
        raise TypeError(f"{arch} takes a {entry.config.__name__}, got {type(config).__name__}")
    return entry.model(config)


def config_from_dict(arch: str, values: dict):
    """The config of architecture `arch` from its to_dict() (a checkpoint's
    model_config); unknown keys are refused."""
    return architecture(arch).config.from_dict(values)


def checkpoint_arch(checkpoint: dict) -> str:
    """The architecture a checkpoint records (none: an older SAINT checkpoint)."""
    return checkpoint.get("arch", DEFAULT_ARCH)
