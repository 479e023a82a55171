"""bench/bench_train_before.py: the rate it reads from each code's epoch line, and the
flags it refuses (the 03 runs themselves are the benchmark's, not run here)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.bench_train_before import epoch_rate
from bench.bench_train_before import main as train_before_main

# the epoch lines of the code of 179d689 and of this code, as 03 prints them
BEFORE = (
    "epoch 1: train loss 0.5947  valid loss 0.5688  valid AUC 0.6837  26,141 "
    "interactions/s  (17+2 s)"
)
THIS = (
    "epoch 1: train loss 0.5919  inner loss 0.5478 AUC 0.7298  fold loss 0.5716 AUC 0.6853  "
    "(selects: inner)  17,973 interactions/s  (23+3 s)"
)


def test_the_rate_is_read_from_either_codes_epoch_line():
    assert epoch_rate(f"run x: fold0\n{BEFORE}\nwrote\n") == 26141
    assert epoch_rate(f"sequences: ...\n{THIS}\n") == 17973
    with pytest.raises(ValueError, match="no epoch line"):
        epoch_rate("epoch 2: 900 interactions/s\n")


@pytest.mark.parametrize(
    "flags",
    [["--configs", "demo,d512"], ["--rounds", "0"], ["--users", "10"], []],
)
def test_bad_flags_are_refused(tmp_path, flags, monkeypatch, capsys):
    """main() in this process: a refusal is argparse's exit 2 before any work."""
    command = ["bench_train_before.py", "--before-code", str(tmp_path)]
    if flags:  # a checkout that looks like one, so that the flag itself is refused
        (tmp_path / "03_train.py").write_text("")
    monkeypatch.setattr(sys, "argv", [*command, *flags])
    with pytest.raises(SystemExit) as stop:
        train_before_main()
    done = subprocess.CompletedProcess(command, stop.value.code, "", capsys.readouterr().err)
    assert done.returncode == 2
    assert "--before-code" in done.stderr if not flags else flags[0] in done.stderr
