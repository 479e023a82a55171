"""The contract every model of the pipeline keeps: what 03 trains, 04 and the Kaggle
notebook stream, and a checkpoint rebuilds. One architecture is one package of
common/model/ (its model class and its config) plus one entry in
common/model/registry.py; nothing else names it.

Batch fields. A model reads the batches of common.data.features.step_inputs (the same
function builds training windows, validation steps and each streamed group's step):
    queries (B, T)  the questions to predict: question, part, position, valid,
                    query_limit (the last key position a query may read: its container's
                    first), query_key_index (that key's column in the key stream), and
                    the optional inputs (tags through the question id; `difficulty` in a
                    training batch; `past`, the past-event features, (B, T, F));
    keys (B, S)     the key stream of revealed outcomes: key s holds question s - 1's
                    outcome fields (key_response, key_elapsed, key_explanation,
                    key_answer, key_question) and question s's own (key_lag); the start
                    token where a run of computation begins (session_start); key_position,
                    key_valid;
    label (B, T)    the responses, for the loss.
Which of the optional fields a model reads follows from its config, as
common.model.inputs' embedders decide (`wanted`). No query may read a key after its
query_limit: nothing derived from an outcome of its own container reaches it.

Training forward. `model(batch, cache=None, trained_from=0)` returns logits (B, T') of
the last T' query positions (T' = T unless trained_from lets the model skip context
positions no trained logit reaches: SAINT's).

Streaming. `model.empty_cache(rows, size)` makes a state for `rows` students;
`model(batch, cache)` reads and extends it (a view of a pool's rows writes into them);
`model.prime(batch, cache)` stores a history's state without logits. A cache has
reset(rows), select(rows), view(rows), grown(rows), tensors() and absorb(source).

Receptive field. `config.receptive_field`: how many of a student's latest questions a
prediction depends on (SAINT: layers x window), or None for a recurrent model, whose
state carries the whole history (`recurrent` True): such a model trains through each
student's history in order carrying its state between chunks (truncated
backpropagation), is validated from position 0, and its streaming state is kept per
student (seeded from the snapshot), never rebuilt. `config.ring_context`: the latest
questions a streaming step reads from the student's ring (the receptive field, or for a
recurrent model the keys it has not absorbed yet and its attention's window).

Config in the checkpoint. A checkpoint records "arch" (the registry's name; none: an
older SAINT checkpoint) and "model_config", the config's to_dict(); the registry rebuilds
the model from both (common.model.checkpoint.load_model).

This module ships in the Kaggle bundle: Python 3.7.
"""

from __future__ import annotations

from torch import Tensor, nn


class KTModel(nn.Module):
    """The base of every architecture's model class: the contract above. It adds no
    parameters, buffers or submodules (a model's state_dict is its own)."""

    # the registry's name of the architecture; whether its state is recurrent
    arch = ""
    recurrent = False

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def empty_cache(self, rows: int, size: int | None = None):
        """A streaming state for `rows` students (`size`: the ring's slots, for a model
        whose state is a ring of keys)."""
        raise NotImplementedError

    def prime(self, batch: dict[str, Tensor], cache) -> None:
        """Store `batch`'s state in `cache` as forward would, without logits."""
        raise NotImplementedError
