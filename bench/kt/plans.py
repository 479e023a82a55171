"""What the KT benchmark (bench/kt/run.py) and its report (bench/kt/report.py) share: the
models' 03_train.py flags and table names, the data sets' plans (conversion and split; the
splits of the public data sets' recipes, configs/assist2009_pid.toml and assist2015.toml),
the training settings of every fold and the context every step is given. It imports
neither of them, so the report reads these types without importing the script.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.benchlib import RECIPES, recipe_flags
from common.cli import recipe_config, to_argv
from common.data.folds import FoldConfig
from common.runs.folders import trained_fields
from common.train.config import TrainConfig
from common.workspace import ModelFolder

# 03_train.py flags of each model name: the papers' SAINT and SAINT+, and extensions:
# "-tags" adds the mean embedding of the question's skills to the encoder (--tags);
# "-interaction" also embeds each answered question per (question, response) pair, and its
# skills per (skill, response) pair, in the decoder (--decoder-features ... question);
# "-rasch-encoder" has AKT's Rasch form of the question: no vector per question, only a
# scalar difficulty that scales a variation of the skills' mean embedding; "-rasch" has it
# in the decoder too, for the (skill, response) pairs of the answered questions
MODEL_FLAGS = {
    "saint": ("--model", "saint"),
    "saint+": ("--model", "saint+"),
    "saint-tags": ("--model", "saint", "--tags"),
    "saint+-tags": ("--model", "saint+", "--tags"),
    "saint-interaction": ("--model", "saint", "--tags", "--decoder-features", "question"),
    "saint-rasch-encoder": ("--model", "saint", "--tags", "--question-embedding", "rasch"),
    "saint-rasch": (
        "--model", "saint", "--tags", "--question-embedding", "rasch",
        "--decoder-features", "question",
    ),
    "saint-rasch-readout": (
        "--model", "saint", "--tags", "--question-embedding", "rasch", "--readout", "akt",
    ),
    "saint-readout": ("--model", "saint", "--readout", "akt"),
    "saint-rasch-readout-difficulty": (
        "--model", "saint", "--tags", "--question-embedding", "rasch", "--readout", "akt",
        "--difficulty-buckets", "20",
    ),
    "saint-rasch-readout-past-encoder": (
        "--model", "saint", "--tags", "--question-embedding", "rasch", "--readout", "akt",
        "--past-features", "encoder",
    ),
    "saint-rasch-readout-past-head": (
        "--model", "saint", "--tags", "--question-embedding", "rasch", "--readout", "akt",
        "--past-features", "head",
    ),
}  # fmt: skip


def family_flags(arch: str, d_model: int, lqrnn_past: str = "encoder") -> tuple[str, ...]:
    """03 flags of a families model: SAINT's recipe (the run of FAMILY_BASE's flags), the
    architectures `arch` (03 --arch) and the recurrent members at `d_model`: the LSTM and
    the Last Query Transformer RNN over the same inputs (Rasch skill embeddings, the
    answered question per (question, response) pair in the key stream, the past-event
    features with the query; the LQ-RNN's where `lqrnn_past` says); 04 blends them with
    the trees."""
    recurrent = tuple(
        flag
        for member, past in (("lstm", "encoder"), ("lqrnn", lqrnn_past))
        for flag in (
            f"--{member}-d-model", str(d_model), f"--{member}-question-embedding", "rasch",
            f"--{member}-decoder-features", "question", f"--{member}-past-features", past,
        )
    )  # fmt: skip
    base = MODEL_FLAGS["saint-rasch-readout-past-head"]
    return (*base, "--arch", arch, *recurrent, "--lqrnn-heads", "4")


# the families: SAINT, the LSTM and the LQ-RNN; the same with the recurrent members twice
# as wide (configs/riiid.toml's d 128); the LQ-RNN alone, the member that carries most of
# the families' blend (what more epochs give it, without SAINT's cost); the LQ-RNN alone
# with the past-event features' head beside its query's
MODEL_FLAGS["families"] = family_flags("saint,lstm,lqrnn", 64)
MODEL_FLAGS["families-wide"] = family_flags("saint,lstm,lqrnn", 128)
MODEL_FLAGS["lqrnn"] = family_flags("lqrnn", 64)
MODEL_FLAGS["lqrnn-head"] = family_flags("lqrnn", 64, lqrnn_past="both")
# a model whose first architecture is another model's whole run: a fold finished there
# seeds it (its 03 files copied; --resume trains the other architectures beside it)
FAMILY_BASE = dict.fromkeys(("families", "families-wide"), "saint-rasch-readout-past-head")
# the baselines alone (05's three, the trees included) on each fold's stream
# rows, without a model: cheap rows for the table
BASELINES_ONLY = "baselines"
MODELS = (*MODEL_FLAGS, BASELINES_ONLY)
DEFAULT_MODELS = ("saint", "saint+")
MODEL_NAMES = {
    "saint": "SAINT", "saint+": "SAINT+",
    "saint-tags": "SAINT + skill tags", "saint+-tags": "SAINT+ + skill tags",
    "saint-interaction": "SAINT + skill tags + interaction decoder",
    "saint-rasch-encoder": "SAINT + Rasch skill embeddings (encoder)",
    "saint-rasch": "SAINT + Rasch skill embeddings (encoder and decoder)",
    "saint-rasch-readout": "SAINT + Rasch skill embeddings + AKT read-out",
    "saint-readout": "SAINT + AKT read-out",
    "saint-rasch-readout-difficulty": "SAINT + Rasch skill embeddings + AKT read-out + difficulty",
    "saint-rasch-readout-past-encoder": (
        "SAINT + Rasch skill embeddings + AKT read-out + past features (encoder)"
    ),
    "saint-rasch-readout-past-head": (
        "SAINT + Rasch skill embeddings + AKT read-out + past features (head)"
    ),
    "families": "SAINT, LSTM and LQ-RNN, stacked with the trees",
    "families-wide": "SAINT, LSTM and LQ-RNN (d 128), stacked with the trees",
    "lqrnn": "the families' LQ-RNN alone, blended with the trees",
    "lqrnn-head": "the families' LQ-RNN alone + past features' head, blended with the trees",
    BASELINES_ONLY: BASELINES_ONLY,
}  # fmt: skip
# the TrainConfig fields a bench run sets (their flags), and the bench's defaults: cosine
# with a short warm-up, as 03's Noam default would never end warm-up here (79 steps per
# epoch on an assist2009_pid fold, about 270 on assist2015, at batch 64)
BENCH_KNOBS = (
    "epochs", "model.d_model", "model.encoder_layers", "model.decoder_layers", "model.n_heads",
    "model.window", "batch_size", "lr", "schedule", "warmup", "model.dropout", "seed", "device",
)  # fmt: skip
BENCH_DEFAULTS = {
    "epochs": 10, "model.d_model": 128, "batch_size": 64, "schedule": "cosine", "warmup": 200,
}  # fmt: skip


def recipe_split(name: str) -> tuple[tuple[str, ...], int]:
    """02_make_folds.py's flags and fold count in the recipe configs/<name>.toml."""
    path = RECIPES / f"{name}.toml"
    config, _ = recipe_config(path, "folds", FoldConfig)
    return recipe_flags(path, "folds", FoldConfig), config.n_folds


def recipe_knobs(path: Path) -> list[str]:
    """This benchmark's training flags (BENCH_KNOBS) as the recipe at `path` sets them."""
    config, paths = recipe_config(path, "train", TrainConfig, leave_out=("fold",))
    return to_argv(config, only=[p for p in paths if p in BENCH_KNOBS])


@dataclass(frozen=True)
class DatasetPlan:
    """How one dataset is converted and split."""

    preset: str  # a PRESETS name of common/inputs/kt_datasets.py
    split: str  # short name of the split, part of the work directory's name
    fold_flags: tuple[str, ...]  # 02_make_folds.py flags
    n_folds: int
    note: str


PLANS: dict[str, dict[str, DatasetPlan]] = {
    "assist2009_pid": {
        "akt5": DatasetPlan(  # the recipe's split
            "assist2009_pid", "akt5", *recipe_split("assist2009_pid"),
            "AKT's 5 disjoint user folds (user_folds.csv from 00): the same test students "
            "as AKT's assist2009_pid_test{1..5}.csv",
        ),
    },
    "assist2015": {
        "unseen5": DatasetPlan(  # the recipe's split
            "assist2015", "unseen5", *recipe_split("assist2015"),
            "5 random folds of wholly new students (seed 0) over DKVMN's train+test "
            "students; DKVMN itself ships a single train/test split",
        ),
        "dkvmn": DatasetPlan(
            "assist2015", "dkvmn", ("--strategy", "dataset", "--n-folds", "1"), 1,
            "DKVMN's single split: fold 0 = the 5,905 students of assist2015_test.csv",
        ),
        "pykt": DatasetPlan(
            "assist2015_pykt", "pykt", ("--strategy", "dataset", "--n-folds", "1"), 1,
            "pyKT's own split: train on its train_valid.csv students (15,275), stream and "
            "score its test.csv students (3,818), the same test students as pyKT's "
            "leaderboard",
        ),
    },
}  # fmt: skip


@dataclass
class TrainSettings:
    """The 03_train.py config of every fold; part of the model directory's name (hash)."""

    train: TrainConfig  # the BENCH_KNOBS fields are what the bench sets
    checkpoint: str = "last"  # last epoch (no selection on the test fold) or best
    extra: tuple[str, ...] = ()  # further 03_train.py flags, verbatim

    def train_flags(self) -> list[str]:
        flags = {
            "--patience": self.train.epochs,  # no early stopping: it would look at the test fold
            # last: every training student trains (no best.pt is scored); best: best.pt,
            # chosen on an inner split of them, never on the test fold
            "--select-on": "inner" if self.checkpoint == "best" else "fold",
        }
        pairs = [str(x) for pair in flags.items() for x in pair]
        return to_argv(self.train, BENCH_KNOBS) + pairs + list(self.extra)

    def checkpoint_file(self) -> str:
        """The checkpoint 04 streams (--checkpoint): best.pt, or the last epoch's."""
        if self.checkpoint == "best":
            return ModelFolder.BEST
        return ModelFolder(Path()).epoch_checkpoint(self.train.epochs).name

    def key(self) -> str:
        settings = asdict(self) | {"train": trained_fields(asdict(self.train))}
        text = json.dumps(settings, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]


@dataclass
class Context:
    """What every step needs: the settings and the parsed command line (args)."""

    settings: TrainSettings
    args: argparse.Namespace
    argv: list[str]

    def dataset_dir(self, plan: DatasetPlan) -> Path:
        name = f"{plan.preset}-{self.args.multi_skill_rows}-{plan.split}"
        if self.args.slice_students:
            name += f"-slice{self.args.slice_students}"
        return self.args.work_dir / name

    def model_dir(self, plan: DatasetPlan, model: str) -> Path:
        return self.dataset_dir(plan) / f"{model}-{self.settings.key()}"
