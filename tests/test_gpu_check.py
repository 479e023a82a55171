"""bench/gpu_check.py, the one command for the day a GPU is lent: its --quick run on the
CPU goes through every step and ends in the one table, with the CUDA plan's ratio within
its target; bad flags are refused."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bench.bench_stream import main as bench_stream_main
from bench.gpu_check import main as gpu_check_main

STEPS = (
    "training, demo size (--quick), eager",
    "training, demo size (--quick), torch.compile",
    "03's CUDA batch plan",
    "03 demo recipe, saint, 1 epoch",
    "03 demo recipe, lstm, 1 epoch",
    "03 demo recipe, lqrnn, 1 epoch",
    "04 streaming, demo, groups of 18-33 rows",
    "04 streaming, the demo run's blend of every family and the trees",
)


def gpu_check(*flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "bench.gpu_check", *flags]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def refused_in_process(monkeypatch, capsys, *flags: str) -> subprocess.CompletedProcess:
    """gpu_check's main() with these flags in this process (a refusal is argparse's exit
    2 before any work: no process of its own needed)."""
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", *flags])
    with pytest.raises(SystemExit) as stop:
        gpu_check_main()
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(flags, stop.value.code, captured.out, captured.err)


@pytest.mark.slow
def test_the_quick_check_ends_in_one_table_of_every_step(tmp_path):
    results = tmp_path / "gpu_check.txt"
    done = gpu_check(
        "--device", "cpu", "--quick", "--work-dir", str(tmp_path / "work"),
        "--results", str(results),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    text = results.read_text()
    table = text[text.index("| step | measured | target | reading |") :]
    rows = [line for line in table.splitlines()[2:] if line.startswith("| ")]
    assert [row.split(" | ")[0][2:] for row in rows] == list(STEPS)
    measured = {row.split(" | ")[0][2:]: row.split(" | ")[1] for row in rows}
    plan = float(re.fullmatch(r"([\d.]+) positions per trained question", measured[STEPS[2]])[1])
    assert 1.0 < plan <= 1.3
    for step in (*STEPS[:2], *STEPS[3:]):
        assert float(measured[step].split()[0].replace(",", "")) > 0
    assert "device cpu, amp auto (fp32)" in text  # a CPU's bf16 is emulated: off


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--users", "10"], "--users"),
        (["--device", "tpu"], "--device"),
        (["--amp", "fp8"], "--amp"),
    ],
)
def test_bad_flags_are_refused(tmp_path, flags, named, monkeypatch, capsys):
    done = refused_in_process(monkeypatch, capsys, *flags, "--work-dir", str(tmp_path / "work"))
    assert done.returncode == 2
    assert named in done.stderr
    assert not (tmp_path / "work").exists()


def test_the_stream_bench_refuses_a_data_dir_without_folds(tmp_path, monkeypatch, capsys):
    """gpu_check hands bench_stream.py its demo through --data-dir: one without 02's fold 0
    is refused before any work."""
    work = tmp_path / "work"
    flags = ["--data-dir", str(tmp_path / "prep"), "--work-dir", str(work)]
    monkeypatch.setattr(sys, "argv", ["bench_stream.py", *flags])
    with pytest.raises(SystemExit) as stop:
        bench_stream_main()
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "--data-dir" in error and "02_make_folds.py" in error
    assert not work.exists()
