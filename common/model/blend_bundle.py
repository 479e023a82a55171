"""The submission's second scorer, as files beside the checkpoint it is blended with:
the boosted trees (common.model.trees), the inputs their past-event features read (the
training rows' question-rate table, each question's skill) and the blend's weight with how
it was chosen. 04 writes them into fold{k}/ or full/, the Kaggle bundle ships them in
<model>/, 05 and the notebook read them.

This module ships in the Kaggle bundle: Python 3.7, numpy 1.19.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from common.data.question_rates import QuestionRates
from common.files import atomic_file, write_json
from common.model.trees import Trees, logit_blend
from common.workspace import ModelFolder


@dataclass
class BlendBundle:
    trees: Trees
    rates: QuestionRates  # of the training rows the trees were fitted on
    skill: np.ndarray  # (n_questions + 1,) each question's first tag, -1: none
    # the model's weight in the logit blend (common.model.trees.logit_blend); None: no
    # weight could be chosen (no inner split), the submission is the model alone
    weight: float | None
    record: dict  # blend.json: the weight, how it was chosen, what the trees were fitted on

    def save(self, folder: ModelFolder) -> None:
        self.trees.save(folder.trees)
        with atomic_file(folder.tree_inputs) as tmp, open(tmp, "wb") as handle:
            np.savez(
                handle,
                rate=self.rates.rate,
                count=self.rates.count,
                global_rate=np.float64(self.rates.global_rate),
                skill=self.skill,
            )
        write_json(folder.blend, dict(self.record, weight=self.weight))

    @classmethod
    def load(cls, folder: ModelFolder) -> BlendBundle | None:
        """The bundle in `folder`, or None where 04 wrote none (the model alone)."""
        if not all(folder.file(name).exists() for name in ModelFolder.BLEND_FILES):
            return None
        record = json.loads(folder.blend.read_text())
        with np.load(str(folder.tree_inputs), allow_pickle=False) as inputs:
            rates = QuestionRates(inputs["rate"], inputs["count"], float(inputs["global_rate"]))
            skill = inputs["skill"]
        return cls(Trees.load(folder.trees), rates, skill, record.get("weight"), record)

    def blend(self, model: np.ndarray, trees: np.ndarray) -> np.ndarray:
        """What is submitted: the logit blend, or the model alone without a weight."""
        if self.weight is None:
            return np.asarray(model, dtype=np.float64)
        return logit_blend(model, trees, self.weight)
