"""The model learns: a tiny seeded SAINT, trained for two epochs (03's Trainer, selection
on the inner split), streamed through the API emulator (04) and scored by 05, beats the
question-rate baseline on the same rows by a clear margin. A model that stops learning
(a sign flipped in the loss, labels shifted off their questions, a feature that no
longer reaches the model) fails here."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import torch

from common.data.fold_data import load_fold_data
from common.report.evaluate import EvaluateConfig, evaluate
from common.stream.fold_stream import InferConfig, run_emulated
from common.train.trainer import Trainer
from common.workspace import Workspace
from tests.helpers import make_tiny_demo, run_of, train_config


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_a_trained_model_streams_above_the_question_rate(tmp_path: Path) -> None:
    output = make_tiny_demo(tmp_path, users=150, questions=100, max_events=10_000)
    config = train_config(
        preset="saint", d_model=32, heads=4, layers=1, window=24, dropout=0.0, batch_size=16,
        lr=5e-3, schedule="cosine", warmup=10, epochs=2, progress=False,
    )  # fmt: skip
    data = load_fold_data(Workspace(output), 0, config.inner_share, config.seed)
    with contextlib.redirect_stdout(io.StringIO()):
        Trainer(config, run_of(output), data, torch.device("cpu")).fit()
    infer = InferConfig(device="cpu", progress=False)
    streamed = run_emulated(run_of(output), infer)
    head = evaluate(
        run_of(output),
        tmp_path / "no_truth",
        EvaluateConfig(bootstrap=0, progress=False),
    )
    assert head.auc == pytest.approx(streamed["model_auc"])  # 05's model row: the model alone
    baseline = head.baselines["question rate"]
    assert head.rows > 1000
    assert head.auc > baseline + 0.015, (head.auc, baseline)
