"""04's stream in the Riiid-size rehearsal (bench/rehearsal/stages.py): the fold's tail bounded
to its first rows, and a stand-in for the competition's `riiideducation` module that serves
it, so that 04 runs its Kaggle path (the exported dataset's snapshot of every student)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from bench.benchlib import REPO, bench_fold, link_data
from common.data.arrays import TrainArrays, load_questions
from common.data.fold_data import Fold, fold_fingerprint
from common.data.schema import QUESTION
from common.model.checkpoint import save_model
from common.model.saint import SAINT, ModelConfig
from common.stream.emulator import stream_frame
from common.workspace import Bundle, KaggleFolder, Workspace

REFERENCE = dict(d_model=256, n_heads=8, encoder_layers=2, decoder_layers=2, window=100)
GROUP_ROWS = "18,33"  # the real example test's group sizes


# ---------------------------------------------------------------------------------------
# 04's stream: bounded, and served as the competition's API would


def prepare_stream(prep: Workspace, out: Path, max_rows: int | None, seed: int = 0) -> dict:
    """The workspace `out` with prep's data/ linked and a copy of its fold 0 whose stream
    holds the first `max_rows` question rows (None: all), cut where virtual time moves on
    (a container is never split); a checkpoint of the reference size with fresh weights
    (speed does not depend on them) for that fold; the stream as a parquet frame for the
    stand-in API. Returns the whole stream's figures and the bounded one's."""
    stream = link_data(out, prep, folds=False)
    arrays = TrainArrays.load(prep.data)
    fold = Fold.load(prep, 0)
    index = fold.stream_index
    question = np.asarray(arrays["content_type_id"])[index] == QUESTION
    student = np.searchsorted(arrays.offsets, index, side="right") - 1
    new = fold.user_cut[student] == 0
    whole = {
        "rows": len(index),
        "question_rows": int(question.sum()),
        "students": len(np.unique(student)),
        "new_students": len(np.unique(student[new])),
        "new_student_question_share": float(new[question].mean()) if question.any() else 0.0,
    }
    cut = len(index)
    if max_rows is not None and max_rows < whole["question_rows"]:
        virtual = fold.virtual_offset[student] + np.asarray(arrays["timestamp"])[index]
        cut = int(np.searchsorted(np.cumsum(question), max_rows))
        cut = int(np.searchsorted(virtual, virtual[cut], side="right"))
    stream.folds.path.mkdir(exist_ok=True)
    shutil.copyfile(prep.folds.manifest, stream.folds.manifest)
    np.savez(
        stream.folds.fold(0),
        user_cut=fold.user_cut,
        virtual_offset=fold.virtual_offset,
        stream_index=index[:cut],
    )
    stream_frame(arrays, index[:cut]).to_parquet(out / "stream.parquet", index=False)
    torch.manual_seed(seed)
    # as common.data.dataset.Dataset.n_questions: ids 0..max, the model's unknown id after them
    n_questions = int(load_questions(prep.data)["question_id"].max()) + 1
    config = ModelConfig(n_questions=n_questions, **REFERENCE)
    model = SAINT(config)
    fingerprint = fold_fingerprint(stream, 0)
    save_model(bench_fold(stream).checkpoint(), model, epoch=0, fold_fingerprint=fingerprint)
    bounded = {
        "rows": cut,
        "question_rows": int(question[:cut].sum()),
        "students": len(np.unique(student[:cut])),
        "new_student_question_share": float(new[:cut][question[:cut]].mean()) if cut else 0.0,
    }
    return {"whole": whole, "streamed": bounded, "parameters": model.n_parameters()}


KAGGLE_API = '''"""A stand-in for the competition's `riiideducation` module, written by
bench/rehearsal/stream.py: make_env() serves the rehearsal's stream through the emulator,
so 04_infer.py --competition runs its Kaggle path on it. With REHEARSAL_COUNT_GROUPS=N the
first N groups' predictions run under bench/rehearsal/measure.py's counters (entered
when a group is handed out, left when its predictions come back), written to
REHEARSAL_COUNTS at the end."""

import json
import os

import pandas as pd

from bench.rehearsal.measure import Counters
from common.stream.emulator import Emulator, EmulatorConfig


class CountingEnv:
    def __init__(self, env, groups, out):
        self.env, self.groups, self.out = env, groups, out
        self.counters, self.rows, self.counted = None, 0, 0

    def iter_test(self):
        for test_df, sample in self.env.iter_test():
            if self.counted < self.groups:
                self.counters = Counters().__enter__()
            yield test_df, sample
        if self.out:
            with open(self.out, "w") as handle:
                json.dump(self.figures(), handle)

    def predict(self, sample):
        if self.counters is not None:
            self.counters.__exit__(None, None, None)
            self.counters.add_to(self)
            self.counters = None
            self.counted += 1
            self.rows += len(sample)
        self.env.predict(sample)

    def figures(self):
        return {"groups": self.counted, "rows": self.rows, **getattr(self, "totals", {})}


def make_env():
    frame = pd.read_parquet(os.environ["REHEARSAL_STREAM"])
    low, high = map(int, os.environ["REHEARSAL_GROUP_ROWS"].split(","))
    env = Emulator(frame, EmulatorConfig(group_rows=(low, high)))
    groups = int(os.environ.get("REHEARSAL_COUNT_GROUPS", "0"))
    return CountingEnv(env, groups, os.environ.get("REHEARSAL_COUNTS"))
'''


def bundle_root(kaggle_dir: Path) -> Bundle:
    """The Kaggle dataset (its model, state/ and code/) 04's export put in `kaggle_dir`
    (its dataset/, or the folder itself)."""
    dataset = KaggleFolder(kaggle_dir).dataset
    return Bundle(dataset if dataset.is_dir() else kaggle_dir)


def kaggle_api(folder: Path, stream: Path, count_groups: int = 0, counts: Path | None = None):
    """A folder holding the stand-in `riiideducation` module, and the environment that
    puts it and the repository (the project and the package `bench`) on 04's path,
    serving `stream` (and counting the first `count_groups` groups into `counts`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "riiideducation.py").write_text(KAGGLE_API)
    path = os.pathsep.join([str(folder), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {
        "PYTHONPATH": path.rstrip(os.pathsep),
        "REHEARSAL_STREAM": str(stream),
        "REHEARSAL_GROUP_ROWS": GROUP_ROWS,
        "REHEARSAL_COUNT_GROUPS": str(count_groups),
    }
    if counts is not None:
        env["REHEARSAL_COUNTS"] = str(counts)
    return env


def last_json(log: Path) -> dict:
    """The last line of `log` that parses as a JSON object (04 prints its timing so)."""
    for line in reversed(log.read_text().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError(f"no JSON line in {log}")
