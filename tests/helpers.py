"""Shared test helpers (plain functions; fixtures that use them live in the test files)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import shutil
import subprocess
import sys
import traceback
from dataclasses import fields
from pathlib import Path

import pytest

from common.data.arrays import TrainArrays, load_questions, question_parts
from common.data.folds import FoldConfig, make_folds
from common.data.preprocess import PreprocessConfig, preprocess
from common.inputs.demo import DemoConfig, make_demo
from common.model.saint import MODEL_PRESETS, ModelConfig
from common.train.config import TrainConfig
from common.workspace import ModelFolder, Run, Workspace

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
RUN = "test"  # the run the tests train (03_train.py --run test)


def run_of(output_dir: Path, run: str = RUN) -> Run:
    """The tests' run (output_dir/runs/RUN): where 03, 04 and 05 write."""
    return Workspace(output_dir).run(run)


def run_folder(output_dir: Path, run: str = RUN) -> Path:
    """output_dir/runs/RUN: where 03, 04 and 05 write for the tests' run."""
    return run_of(output_dir, run).path


def fold0_folder(output_dir: Path, run: str = RUN) -> ModelFolder:
    """The tests' run's fold0/ (a ModelFolder)."""
    return run_of(output_dir, run).fold(0)


def fold0(output_dir: Path, run: str = RUN) -> Path:
    return fold0_folder(output_dir, run).path


def shared_file(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data {path} is not here (it sits beside the checkout in CI)")
    return path


def preprocess_real_rows(tmp: Path, train_file: str, assign_row_ids: bool = False):
    """Run 01 on real train rows with the real question/lecture metadata; returns
    (output_dir, arrays, parts)."""
    source = shared_file("riiid_train_sample", train_file)
    input_dir = tmp / "input"
    input_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, input_dir / "train.csv")
    for name in ("questions.csv", "lectures.csv"):
        shutil.copyfile(shared_file("riiid_metadata", name), input_dir / name)
    output_dir = tmp / "output"
    workspace = Workspace(output_dir)
    preprocess(
        PreprocessConfig(input_dir, output_dir, assign_row_ids=assign_row_ids, progress=False),
        workspace,
    )
    data = workspace.data
    return output_dir, TrainArrays.load(data), question_parts(load_questions(data))


# Tests' demos cap a history at 1,000 events: the simulation steps once per event of the
# longest history, so the generator's 10,000 (the real data's) costs seconds per demo
TEST_MAX_EVENTS = 1_000


def tiny_demo_config(
    users: int, questions: int = 300, seed: int = 0, max_events: int = TEST_MAX_EVENTS
) -> DemoConfig:
    """The one demo config of the tests (sizes aside)."""
    return DemoConfig(n_users=users, n_questions=questions, seed=seed, max_events=max_events)


# Where make_tiny_demo keeps the demos it built in this test process (conftest sets it to a
# session temp dir): a demo through 01 and 02 costs seconds, a copy of one milliseconds,
# and several test files ask for the same size
TINY_DEMOS: dict[str, Path] = {}


def make_tiny_demo(
    tmp: Path, users: int = 150, questions: int = 300, seed: int = 0, **options: int
) -> Path:
    """A small demo dataset through 01 and 02 (user strategy) in tmp/input and tmp/output;
    returns the output dir. options: max_events (see tiny_demo_config). Built once per
    process and size, then copied, the recorded paths (01's and 02's records) made tmp's."""
    root = TINY_DEMOS.get("root")
    if root is None:
        return build_tiny_demo(tmp, users, questions, seed, **options)
    named = "".join(f"-{key}{value}" for key, value in sorted(options.items()))
    source = root / f"users{users}-questions{questions}-seed{seed}{named}"
    if not source.exists():
        build_tiny_demo(source, users, questions, seed, **options)
    shutil.copytree(source, tmp, dirs_exist_ok=True)
    for record in (tmp / "output").rglob("*.json"):
        text = record.read_text()
        if str(source) in text:
            record.write_text(text.replace(str(source), str(tmp)))
    return tmp / "output"


def build_tiny_demo(tmp: Path, users: int, questions: int, seed: int, **options: int) -> Path:
    """make_tiny_demo's build: the demo's CSVs (00), then 01 and 02, in this process."""
    input_dir = tmp / "input"
    make_demo(tiny_demo_config(users, questions, seed, **options), input_dir)
    output_dir = tmp / "output"
    workspace = Workspace(output_dir)
    preprocess(PreprocessConfig(input_dir, output_dir, progress=False), workspace)
    make_folds(workspace, FoldConfig(n_folds=5, seed=seed))
    return output_dir


MODEL_FIELDS = {f.name for f in fields(ModelConfig)}


def train_config(*, layers: int | None = None, heads: int | None = None, preset=None, **values):
    """TrainConfig from flat keyword arguments as the flags spell them: ModelConfig's
    fields go to `model`, layers sets both sides, heads is n_heads, preset is --model."""
    model = {k: values.pop(k) for k in list(values) if k in MODEL_FIELDS}
    if layers is not None:
        model |= {"encoder_layers": layers, "decoder_layers": layers}
    if heads is not None:
        model["n_heads"] = heads
    if preset is not None:
        model["decoder_features"] = MODEL_PRESETS[preset]
    return TrainConfig(model=ModelConfig(**model), **values)


def run_numbered_script(
    script: str,
    *args: object,
    process: bool = False,
    launcher: list[str] | None = None,
    timeout: float = 300,
    env=None,
) -> subprocess.CompletedProcess:
    """The one way tests run a numbered script (see conftest.run_script); launcher (e.g.
    torchrun's command) implies its own process."""
    argv = [str(a) for a in args]
    if process or launcher:
        command = [*(launcher or [sys.executable]), str(REPO / script), *argv]
        return subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip
    spec = importlib.util.spec_from_file_location(f"script_{script[:2]}", REPO / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = module.main(argv)
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 1
        except Exception:
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess([script, *argv], code or 0, out.getvalue(), err.getvalue())
