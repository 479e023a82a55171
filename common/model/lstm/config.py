"""The LSTM's settings (common.model.lstm): the inputs every model shares
(common.model.input_config) and its own."""

from __future__ import annotations

from dataclasses import dataclass

from common.model.input_config import InputConfig
from common.options import at_least, option


@dataclass
class LSTMConfig(InputConfig):
    window: int = option(
        100,
        "questions per step of truncated backpropagation through a student's history (and "
        "per validation step); the streaming state's rings keep as many",
        range=at_least(1),
    )
    layers: int = option(2, "LSTM layers", range=at_least(1))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.past_head:
            raise ValueError(
                "the LSTM reads past features with its query (encoder), which its head "
                f"reads already; past_features {self.past_features!r} has no place"
            )

    @property
    def receptive_field(self) -> None:
        """None: the state carries the whole history (common.model.interface)."""
        return None

    @property
    def ring_context(self) -> int:
        """The latest questions a streaming step reads from a student's ring: the keys the
        state has not absorbed yet (the last container's outcomes) and the new container;
        `window` keeps room for long containers."""
        return self.window
