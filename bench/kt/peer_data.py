"""A fold of a KT data set as the pyKT peers read it (bench/kt/pykt_peer.py): every
student as a sequence of steps, one step per task container, cut exactly where our 03
cuts the fold (the fold's validation students, the training students and 03's inner
split of them, `common.data.fold_data.load_fold_data` with the same share and seed).

A step is one answered question: on the KT data sets each task container holds one
question (assist2009_pid's `bundle` rows: one problem's copies, one per skill, sharing
its container and answer), so the step's question, concept and response are those of
every row of the container, and the peer's one probability is given to each of them
(the copies are predicted together, before their answer, as our stream predicts them).
The concept is the question's set of skills (`questions.csv` tags): one id per distinct
set, as DKT-style models have read multi-skill problems since Xiong et al. (EDM 2016).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.kt.plans import Context, DatasetPlan
from common.data.dataset import Dataset
from common.data.fold_data import FoldData
from common.files import atomic_file


def peer_fold_dir(ctx: Context, plan: DatasetPlan, k: int) -> Path:
    """Where fold k's peer data (data.npz), each peer's outputs and logs are written."""
    return ctx.dataset_dir(plan) / "peers" / f"fold{k}"


@dataclass
class Steps:
    """Every student's steps, flat: student s owns steps offsets[s]:offsets[s+1]."""

    offsets: np.ndarray  # (n_students + 1,) int64
    first_entry: np.ndarray  # (n_steps,) flat question entry of the step's first row
    entry_step: np.ndarray  # (n_entries,) the step of each flat question entry
    student: np.ndarray  # (n_steps,) the step's student
    position: np.ndarray  # (n_steps,) the student's questions before the step
    rows: np.ndarray  # (n_steps,) int64 question rows in the step


def student_steps(data: FoldData) -> Steps:
    """The steps of every student: an entry opens a step where it opens its container."""
    sequences = data.sequences
    student = np.repeat(np.arange(sequences.n_students), sequences.lengths())
    position = np.arange(len(sequences.row)) - sequences.offsets[student]
    opens = sequences.container_first == position
    entry_step = np.cumsum(opens) - 1
    counts = np.bincount(student[opens], minlength=sequences.n_students)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = np.bincount(entry_step, minlength=int(opens.sum())).astype(np.int64)
    return Steps(offsets, np.flatnonzero(opens), entry_step, student[opens], position[opens], rows)


def check_one_question_per_step(data: FoldData, steps: Steps) -> None:
    """Each container holds one question and one response (the peers model one step per
    answered question); raises naming the first container that does not."""
    sequences = data.sequences
    first = steps.first_entry[steps.entry_step]
    for name in ("question", "response"):
        values = getattr(sequences, name)
        differs = values != values[first]
        if differs.any():
            e = int(np.argmax(differs))
            raise ValueError(
                f"row {int(sequences.row[e])}: its task container holds another {name} "
                f"({values[e]} against {values[first[e]]}); the KT peers read one answered "
                "question per container (the KT data sets' converter writes them so)"
            )


def concept_ids(dataset: Dataset) -> tuple[np.ndarray, bool]:
    """(concept of each question id, whether the data has questions of its own): the
    concept is the dense id of the question's skill set; skill-level data (each
    question its own single skill) has no question ids of its own."""
    tags = dataset.questions.set_index("question_id")["tags"].astype(str)
    tags = tags.reindex(np.arange(dataset.n_questions), fill_value="")
    distinct, concept = np.unique(tags.to_numpy(), return_inverse=True)
    has_questions = len(distinct) < dataset.n_questions
    return concept.astype(np.int64), bool(has_questions)


def _split(
    data: FoldData,
    steps: Steps,
    concept: np.ndarray,
    end: np.ndarray,
    scored_from: np.ndarray,
    scored_only: bool = True,
) -> dict[str, np.ndarray]:
    """Each student's steps of entries [0, end), scored from entry scored_from on;
    students with no step are left out, and with `scored_only` those with no scored step."""
    sequences = data.sequences
    student, position = steps.student, steps.position
    kept = position < end[student]
    if scored_only:
        kept &= scored_from[student] < end[student]
    counts = np.bincount(student[kept], minlength=sequences.n_students)
    chosen = steps.first_entry[kept]
    return {
        "offsets": np.concatenate([[0], np.cumsum(counts[counts > 0])]).astype(np.int64),
        "q": sequences.question[chosen].astype(np.int64),
        "c": concept[sequences.question[chosen]],
        "r": sequences.response[chosen].astype(np.int64),
        "scored": position[kept] >= scored_from[student[kept]],
        "rows": steps.rows[kept],
        "step": np.flatnonzero(kept),  # the global step of each kept step
    }


def fold_splits(dataset: Dataset, data: FoldData) -> tuple[dict, dict]:
    """(splits, meta): train (entries [0, fit_length)), inner ([0, train_length),
    scored from fit_length) and test ([0, length), scored from train_length), and the
    test split's scored rows (their row_id and step)."""
    steps = student_steps(data)
    check_one_question_per_step(data, steps)
    concept, has_questions = concept_ids(dataset)
    lengths = data.sequences.lengths()
    splits = {
        "train": _split(data, steps, concept, data.fit_length, data.fit_length, False),
        "inner": _split(data, steps, concept, data.train_length, data.fit_length),
        "test": _split(data, steps, concept, lengths, data.train_length),
    }
    test = splits["test"]
    entries = data.fold_tails.flat_index(data.sequences)
    local = np.searchsorted(test["step"], steps.entry_step[entries])
    splits["test"]["row_id"] = np.asarray(dataset.arrays["row_id"])[data.sequences.row[entries]]
    splits["test"]["row_step"] = local
    meta = {
        "num_q": int(dataset.n_questions),
        "num_c": int(concept.max()) + 1,
        "has_questions": has_questions,
        "students": {k: len(v["offsets"]) - 1 for k, v in splits.items()},
        "steps": {k: len(v["q"]) for k, v in splits.items()},
        "scored_rows": len(entries),
    }
    return splits, meta


def write_fold_file(path: Path, splits: dict, meta: dict) -> None:
    """The npz bench/kt/pykt_peer.py reads (written to a temporary name, then renamed)."""
    arrays = {"meta": np.array(json.dumps(meta))}
    for name, split in splits.items():
        for key in ("offsets", "q", "c", "r", "scored", "rows"):
            arrays[f"{name}_{key}"] = split[key]
    arrays["test_row_id"] = splits["test"]["row_id"]
    arrays["test_row_step"] = splits["test"]["row_step"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp, open(tmp, "wb") as handle:
        np.savez_compressed(handle, **arrays)
