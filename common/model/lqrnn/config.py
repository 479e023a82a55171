"""The Last Query Transformer RNN's settings (common.model.lqrnn): the inputs every model
shares (common.model.input_config) and its own."""

from __future__ import annotations

from dataclasses import dataclass

from common.model.input_config import InputConfig
from common.options import at_least, option


@dataclass
class LQRNNConfig(InputConfig):
    window: int = option(
        100,
        "outcomes each question's attention reads back, and questions per step of "
        "truncated backpropagation; the streaming state's rings keep as many",
        range=at_least(1),
    )
    n_heads: int = option(4, "attention heads", flag="heads", range=at_least(1))
    layers: int = option(1, "LSTM layers", range=at_least(1))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} must split into {self.n_heads} heads")

    @property
    def receptive_field(self) -> None:
        """None: the state carries the whole history (common.model.interface)."""
        return None

    @property
    def ring_context(self) -> int:
        """The latest questions a streaming step reads from a student's ring: its
        attention's window of outcomes."""
        return self.window

    @property
    def key_context(self) -> int:
        """Keys a step reads before its first question's container (its attention's
        window), besides those its state has not absorbed: its state is carried along
        the questions, the outcomes are read again from the window."""
        return self.window
