"""The rehearsal's Kaggle bundle with trees (bench/rehearsal/stages.py's `trees` stage): the
boosted trees over past-event features fitted as 04 fits them (common.model.trees.boosting:
fit_trees, 04's default settings) on the fold's training rows of a sample of
students, saved beside the stream's checkpoint with a fixed blend weight (the rehearsal
has no inner split to choose one on; speed does not depend on it), then 04's export
(common.stream.kaggle_export), which ships them with every student's whole history
(state/features.npz).

Why a sample of students: fit_trees samples its rows (boost_max_rows), but
its batch features (common.data.past_features) cover every question of the sequences it
is handed, 99M at Riiid's size."""

from __future__ import annotations

import argparse
import time
import tracemalloc
from dataclasses import fields

import numpy as np

from bench.benchlib import bench_fold, peak_gb
from common.data.dataset import Dataset
from common.data.features import QuestionSequences
from common.data.fold_data import Fold
from common.data.past_features import question_skills
from common.model.trees.blend_bundle import BlendBundle
from common.model.trees.blending import fold_training
from common.model.trees.boosting import TreesConfig, fit_trees
from common.stream.kaggle_export import KaggleConfig, export_kaggle
from common.workspace import Bundle, KaggleFolder, ModelFolder, Workspace


def student_subset(sequences: QuestionSequences, students: np.ndarray):
    """(the sequences of `students` alone, their flat indices in `sequences`)."""
    lengths = sequences.lengths()[students]
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    index = np.repeat(sequences.offsets[students] - offsets[:-1], lengths)
    index += np.arange(offsets[-1])
    per_entry = {}
    for f in fields(sequences):
        value = getattr(sequences, f.name)
        if f.name != "offsets" and value is not None:  # past: only when the model reads it
            per_entry[f.name] = value[index]
    return QuestionSequences(offsets=offsets, **per_entry), index


def fit_sample_trees(data: Workspace, students: int, weight: float, seed: int = 0) -> dict:
    """The fold's trees fitted on the training rows of `students` students drawn at random
    (0: every student), saved beside the checkpoint of fold 0 of the workspace's benchmark
    run with `weight`."""
    begin = time.perf_counter()
    dataset = Dataset.of(data)
    train = fold_training(dataset, Fold.of(data, 0))
    sequences = dataset.sequences
    if 0 < students < sequences.n_students:
        chosen = np.sort(np.random.default_rng(seed).choice(sequences.n_students, students, False))
        sequences, index = student_subset(sequences, chosen)
        train = train[index]
    loaded = time.perf_counter()
    loaded_gb = peak_gb()
    config = TreesConfig()
    skill = question_skills(dataset.questions, dataset.n_questions)
    tracemalloc.start()  # numpy's arrays are traced: the fit's own peak, beside the data's
    fitted = fit_trees(
        sequences, train, skill, dataset.n_questions, config.boost_question_prior, config,
        config.boost_seed,
    )  # fmt: skip
    fit_bytes = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    record = {
        "trees": {"rounds": fitted.rounds, "train_rows": fitted.train_rows},
        "chosen_on": "the rehearsal: a fixed weight (no inner split)",
        "choice": None,
        "no_blend": None,
    }
    BlendBundle(fitted.trees, fitted.rates, skill, weight, record).save(bench_fold(data))
    return {
        "students": sequences.n_students,
        "questions": len(sequences.row),
        "train_questions": int(train.sum()),
        "rows": fitted.train_rows,
        "rounds": fitted.rounds,
        "weight": weight,
        "load_s": loaded - begin,
        "fit_s": time.perf_counter() - loaded,
        "peak_gb_loaded": loaded_gb,  # this process's peak RSS so far (the data's load)
        "peak_gb_fit": peak_gb(),
        "fit_traced_bytes": fit_bytes,  # the arrays the fit allocated, at their peak
    }


def stage_trees(args: argparse.Namespace) -> dict:
    """Fit and save the trees, then export the Kaggle bundle with them: the model of
    fold 0 (the stream's) of the benchmark run of --data-dir, to --bundle-dir."""
    data = Workspace(args.data_dir)
    figures = fit_sample_trees(data, args.tree_students, args.weight)
    begin = time.perf_counter()
    kaggle = KaggleFolder(args.bundle_dir)
    dataset_dir, _ = export_kaggle(
        data, bench_fold(data), ModelFolder.BEST, kaggle, KaggleConfig().ids()
    )
    features = Bundle(dataset_dir).features
    return figures | {
        "export_s": time.perf_counter() - begin,
        "features_bytes": features.stat().st_size,
    }
