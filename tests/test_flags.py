"""Every number a user sets is refused outside its declared range, before any work:
each numeric flag of every numbered script (generated from the config dataclasses, or the
few a script adds itself) tried one step beyond each bound, and NaN and infinity for the
real ones. A refusal exits 2 naming the flag and the value, and writes nothing."""

from __future__ import annotations

import pytest

from common import cli
from common.data.folds import FoldConfig
from common.data.preprocess import PreprocessConfig
from common.inputs.demo import DemoConfig
from common.options import Range, at_least
from common.report.evaluate import EvaluateConfig
from common.stream.fold_stream import InferConfig
from common.train.config import TrainConfig
from tests.helpers import run_numbered_script

SCRIPTS = {
    "00_make_demo_input.py": DemoConfig,
    "01_preprocess.py": PreprocessConfig,
    "02_make_folds.py": FoldConfig,
    "03_train.py": TrainConfig,
    "04_infer.py": InferConfig,
    "05_evaluate.py": EvaluateConfig,
}
# the flags a script adds itself (not from a config dataclass): flag -> its range
OWN_FLAGS = {
    "00_convert_kt_dataset.py": {"--timestamp-step-ms": at_least(1), "--input-folds": at_least(-1)},
}
SHOWN_ONLY = {"00_make_demo_input.py": ("n_users", "n_questions", "seed", "max_events")}


def numeric_flags(script: str) -> list[tuple[str, Range, type]]:
    """(flag, range, int or float) of every numeric flag of `script` that has a config
    field; every one must declare its range."""
    cls = SCRIPTS[script]
    found = []
    for path, name, f, annotation in cli._flag_fields(cls):
        if script in SHOWN_ONLY and path not in SHOWN_ONLY[script]:
            continue
        kind, _ = cli._plain_type(annotation)
        if kind in (int, float) and not isinstance(kind, bool):
            assert "range" in f.metadata, f"{script}: --{name} declares no range"
            found.append((f"--{name}", f.metadata["range"], kind))
    return found


def cases() -> list:
    found = []
    for script in SCRIPTS:
        for flag, valid, kind in numeric_flags(script):
            values = [kind(v) if kind is int else v for v in valid.outside()]
            if kind is float:
                values += [float("nan"), float("inf")]
            found += [pytest.param(script, flag, v, id=f"{script[:2]} {flag} {v}") for v in values]
    for script, own in OWN_FLAGS.items():
        for flag, valid in own.items():
            found += [
                pytest.param(script, flag, int(v), id=f"{script[:2]} {flag} {v}")
                for v in valid.outside()
            ]
    return found


def test_every_numeric_flag_declares_a_range():
    total = sum(len(numeric_flags(script)) for script in SCRIPTS)
    assert total > 50  # the trees' boost flags are 04's alone


@pytest.mark.parametrize(("script", "flag", "value"), cases())
def test_a_value_outside_its_range_is_refused_before_any_work(script, flag, value, tmp_path):
    out = tmp_path / "out"
    where = ["--output-dir", out]
    if script == "00_convert_kt_dataset.py":
        where += ["--dataset", "assist2015"]
    done = run_numbered_script(script, *where, flag, value)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    message = done.stderr.strip().splitlines()[-1]
    assert flag in message and str(value) in message.replace(".0:", ":"), message
    assert "Traceback" not in done.stderr
    assert not out.exists() or not any(out.rglob("*")), "something was written"


@pytest.mark.parametrize(
    ("text", "where"),
    [('{"lr": -1}', "lr -1"), ('{"model": {"dropout": 1.5}}', "model.dropout 1.5")],
)
def test_a_config_file_value_outside_its_range_is_refused(tmp_path, text, where):
    """--config FILE: the same ranges, the file and the key named."""
    path = tmp_path / "config.json"
    path.write_text(text)
    done = run_numbered_script("03_train.py", "--output-dir", tmp_path / "out", "--config", path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert str(path) in message and where in message and "must be" in message, message
    assert not (tmp_path / "out").exists()
