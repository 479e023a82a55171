"""What the submission streams when the run has trees: the model's online state (and,
for a run of several architectures, every other member's) and the past-event feature
state side by side, each fed every group as the API serves it, and per group the blend
of the models' probabilities with the trees' (common.model.trees.blend_bundle). The
Kaggle notebook and 04's local stream both run it.

This module ships in the Kaggle bundle: Python 3.7, torch 1.7, pandas 1.1.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from common.data.api_group import read_group
from common.data.past_features import MODEL_COLUMNS
from common.data.past_state import FeatureSnapshot, PastFeatureState, slot_bytes
from common.data.question_rates import QuestionRates
from common.model.trees.blend_bundle import BlendBundle
from common.stream.online import NEW_STUDENT_SHARE, OnlineState


class BlendState:
    """`predict(test_df)`: the submission's probabilities for test_df's question rows:
    the blend where the run has trees (`bundle`), else the model alone, whose past-event
    features (a model with ModelConfig.past_features) come from the same feature state.
    With `record` and trees, each group's model and tree probabilities are kept by row_id
    (04 scores them as rows of their own). `others`: the other architectures' states, by
    name (03 --arch), whose probabilities the stacked blend reads beside the model's."""

    def __init__(
        self,
        model_state: OnlineState,
        bundle: BlendBundle | None,
        parts: np.ndarray,
        skill: np.ndarray,
        snapshot: FeatureSnapshot | None,
        record: bool = False,
        others: dict | None = None,
        primary: str = "model",
    ):
        self.model_state = model_state
        self.others: dict[str, OnlineState] = others or {}
        self.primary = primary
        self.bundle = bundle
        # without trees the rate table's columns are read by nothing: any table will do
        rates = bundle.rates if bundle else QuestionRates(np.zeros(1), np.zeros(1), 0.0)
        self.features = PastFeatureState(parts, skill, rates, snapshot)
        self.model_reads = model_state.config.past_features != "none"
        self.reads = {n: s.config.past_features != "none" for n, s in self.others.items()}
        self.record = record and bundle is not None
        self.recorded: list[pd.DataFrame] = []
        self.feature_seconds = 0.0  # in the feature state's group_features
        self.trees_seconds = 0.0

    def predict(self, test_df: pd.DataFrame) -> np.ndarray:
        group = read_group(test_df)  # once, for both states
        begin = time.perf_counter()
        features = self.features.features_of_group(group)
        self.feature_seconds += time.perf_counter() - begin
        past = features[:, MODEL_COLUMNS]
        model = self.model_state.predict_group(group, past if self.model_reads else None)
        members = {self.primary: model}
        for name, state in self.others.items():
            members[name] = state.predict_group(group, past if self.reads[name] else None)
        if self.bundle is None:
            return model
        begin = time.perf_counter()
        trees = self.bundle.trees.probability(features)
        self.trees_seconds += time.perf_counter() - begin
        if self.record:
            columns = {
                "row_id": test_df["row_id"].to_numpy()[group.is_question],
                "model_prediction": model,
                "trees_prediction": trees,
            }
            for name in self.others:
                columns[member_column(name)] = members[name]
            self.recorded.append(pd.DataFrame(columns))
        return self.bundle.blend(model, trees, members)

    def time_split(self) -> dict:
        """The model state's split (OnlineState.time_split), the feature state's and the
        trees' seconds beside it."""
        split = dict(self.model_state.time_split())
        split["feature_seconds"] = self.feature_seconds
        split["trees_seconds"] = self.trees_seconds
        return split

    def parts_of_predictions(self) -> pd.DataFrame:
        """The recorded groups' row_id, model_prediction and trees_prediction (and each
        other member's, member_column)."""
        columns = ["row_id", "model_prediction", "trees_prediction"]
        columns += [member_column(name) for name in self.others]
        return pd.concat(self.recorded) if self.recorded else pd.DataFrame(columns=columns)

    def state_bytes(self) -> dict:
        """The model's state (common.stream.online.OnlineState.state_bytes: its budget
        is the whole state's) with the feature state's and the other members' states'
        bytes added to its total."""
        held = dict(self.model_state.state_bytes())
        held["feature_state"] = self.features.state_bytes()["total"]
        held["total"] += held["feature_state"]
        for name, state in self.others.items():
            held[f"{name}_state"] = state.state_bytes()["total"]
            held["total"] += held[f"{name}_state"]
        return held


def member_column(name: str) -> str:
    """The column of another architecture's own probabilities in 04's stream predictions
    (the model's: model_prediction)."""
    return f"{name}_prediction"


def feature_state_budget(snapshot: FeatureSnapshot | None) -> int:
    """The bytes a feature state started from `snapshot` is planned at, taken from the
    state budget before the model's state is sized: the snapshot's history and slots
    for its students and NEW_STUDENT_SHARE more."""
    students = len(snapshot.users) if snapshot is not None else 0
    history = snapshot.nbytes() if snapshot is not None else 0
    slots = int(students * (1 + NEW_STUDENT_SHARE)) * slot_bytes()
    return history + slots
