"""The recurrent architectures (common.model.lstm, common.model.lqrnn): one state per
student, carried through the whole history. Training's lanes, validation's steps, the
snapshot and the stream must all hold the same state at the same question: parity of
the state across chunks, across training and validation, after a snapshot (saved and
read back) and in the stream; no question reads an outcome of its own container; the
registry rebuilds them from their checkpoints."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from common.data.api_group import read_group
from common.data.arrays import TrainArrays, load_questions, question_parts
from common.data.features import FlatSource, step_inputs
from common.data.fold_data import Fold, load_fold_data
from common.data.past_features import attach_model_features, question_skills
from common.device import Distributed
from common.model.checkpoint import load_model, save_model
from common.model.lqrnn.config import LQRNNConfig
from common.model.lstm.config import LSTMConfig
from common.model.predict import predict_tails, to_tensors
from common.model.registry import build_model
from common.model.saint import SAINT, ModelConfig
from common.stream.api_loop import stream_loop
from common.stream.emulator import Emulator, EmulatorConfig, stream_frame
from common.stream.online import OnlineState, Snapshot, model_snapshot, run_states
from common.stream.shared_store import STEP_ARRAYS_BYTES
from common.train.build import build
from common.train.config import TrainConfig
from common.train.recurrent import epoch_schedule, lane_resets, rank_lanes, step_batch
from common.workspace import Workspace
from tests.helpers import make_tiny_demo, run_numbered_script

CPU = torch.device("cpu")
CONFIGS = {
    "lstm": LSTMConfig(d_model=8, window=20, layers=2, decoder_features=("elapsed", "lag")),
    "lqrnn": LQRNNConfig(d_model=8, window=20, n_heads=2, decoder_features=("elapsed", "lag")),
}
ARCHS = sorted(CONFIGS)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_tiny_demo(tmp_path_factory.mktemp("recurrent"), users=30, max_events=120)


def fresh(arch: str, n_questions: int, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(arch, replace(CONFIGS[arch], n_questions=n_questions)).eval()


def one_student_batch(sequences, student, query_from, query_count, key_from, key_count, n):
    inputs = step_inputs(
        FlatSource(sequences), np.array([student]), np.array([0]), np.array([query_from]),
        np.array([query_count]), np.array([key_from]), np.array([key_count]), n,
    )  # fmt: skip
    return to_tensors(inputs, CPU)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_state_carried_across_steps_is_the_state_of_one_pass(demo, arch):
    """predict_tails in chunks of the window, 20 questions (the state carried from one to
    the next), gives the logits of one pass over each student's whole history; in chunks
    of 7, the same."""
    data = load_fold_data(Workspace(demo), 0)
    model = fresh(arch, data.n_questions)
    sequences = data.sequences
    students = np.flatnonzero(sequences.lengths() >= 30)[:3]
    end = sequences.lengths()[students]
    zero = np.zeros_like(end)
    chunked = predict_tails(model, sequences, students, zero, end, CPU)
    short = predict_tails(model, sequences, students, zero, end, CPU, chunk=7, batch_size=2)
    whole = []
    for s, n in zip(students, end, strict=True):
        cf = sequences.container_first[sequences.offsets[s] : sequences.offsets[s] + n]
        # every question, and the whole key stream up to the last container's first
        batch = one_student_batch(sequences, s, 0, n, 0, int(cf[-1]) + 1, data.n_questions)
        with torch.no_grad():
            whole.append(torch.sigmoid(model(batch)[0]).numpy())
    np.testing.assert_allclose(chunked, np.concatenate(whole), atol=2e-6)
    np.testing.assert_allclose(short, chunked, atol=2e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_training_lanes_carry_the_state_validation_starts_from(demo, arch):
    """The training epoch's lanes (common.train.recurrent: students side by side, each
    lane's state carried from chunk to chunk, reset when it takes a new student) give
    every trained question the logit validation's steps give it (eval mode: no
    dropout)."""
    workspace = Workspace(demo)
    data = load_fold_data(workspace, 0, 0.1, 0)
    section = CONFIGS[arch]
    config = TrainConfig(arch=(arch,), **{"lstm" if arch == "lstm" else "lqrnn": section})
    config = replace(config, batch_size=4, epochs=1)
    setup = build(config, data, CPU, Distributed())
    model = setup.model.eval()
    schedule = rank_lanes(epoch_schedule(setup.plan, setup.chunks, 0), setup.plan)
    state = model.empty_cache(schedule.shape[2])
    trained = {}
    with torch.no_grad():
        for step in range(schedule.shape[1]):
            state.reset(torch.as_tensor(lane_resets(schedule, step)))
            lanes = np.flatnonzero(schedule[0, step] >= 0)
            student, chunk = schedule[0, step, lanes], schedule[1, step, lanes]
            inputs = step_batch(
                data.sequences, setup.chunks, student, chunk, data.n_questions, None
            )
            logits = model(to_tensors(inputs, CPU), state.view(torch.as_tensor(lanes)))
            for row, s in enumerate(student):
                for t in np.flatnonzero(inputs["valid"][row]):
                    trained[(int(s), int(inputs["position"][row, t]))] = float(logits[row, t])
    students = np.flatnonzero(data.fit_length > 0)
    probability = predict_tails(
        model, data.sequences, students, np.zeros_like(students), data.fit_length[students], CPU
    )
    expected = {}
    at = 0
    for s in students:
        for p in range(int(data.fit_length[s])):
            expected[(int(s), p)] = float(torch.logit(torch.tensor(probability[at]).double()))
            at += 1
    assert trained.keys() == expected.keys()  # every training question, once
    gap = max(abs(trained[k] - expected[k]) for k in expected)
    assert gap < 1e-4


@pytest.mark.parametrize("arch", ARCHS)
def test_a_snapshot_state_continues_the_history(demo, arch, tmp_path):
    """final_states after the first n questions, saved in a snapshot and read back, then
    the next container from that state: the logits of the whole history in one pass."""
    workspace = Workspace(demo)
    data = load_fold_data(workspace, 0)
    model = fresh(arch, data.n_questions)
    sequences = data.sequences
    student = int(np.flatnonzero(sequences.lengths() >= 30)[0])
    cf = sequences.container_first[sequences.offsets[student] : sequences.offsets[student + 1]]
    cut = int(cf[20])  # a container's first question
    users = np.arange(sequences.n_students)
    length = np.zeros(sequences.n_students, dtype=np.int64)
    length[student] = cut
    snapshot = model_snapshot(model, sequences, users, length, CPU)
    snapshot.save(tmp_path / "snapshot.npz")
    loaded = Snapshot.load(tmp_path / "snapshot.npz")
    assert loaded.states is not None and loaded.states.shape[0] == 1
    state = model.empty_cache(1)
    state.load_arrays(loaded.states)
    stop = cut + 1
    while stop < len(cf) and cf[stop] == cut:
        stop += 1
    key_from = (
        cut - model.config.key_context + 1 if model.config.key_context else int(cf[cut - 1]) + 1
    )
    key_from = max(0, min(key_from, int(cf[cut - 1]) + 1))
    batch = one_student_batch(
        sequences, student, cut, stop - cut, key_from, cut - key_from + 1, data.n_questions
    )
    with torch.no_grad():
        continued = torch.sigmoid(model(batch, state)[0]).numpy()
    whole = predict_tails(
        model, sequences, np.array([student]), np.array([cut]), np.array([stop]), CPU
    )
    np.testing.assert_allclose(continued, whole, atol=2e-6)


class MemberStream:
    """The API loop's state that streams `owner` (the run's model) and returns `member`'s
    probabilities, as BlendState steps them: the owner files each group first."""

    def __init__(self, owner: OnlineState, member: OnlineState):
        self.owner, self.member = owner, member

    def predict(self, test_df: pd.DataFrame) -> np.ndarray:
        group = read_group(test_df)
        self.owner.predict_group(group)
        return self.member.predict_group(group)

    def time_split(self) -> dict:
        return self.member.time_split()


def streamed_against_validation(demo, model, state_of) -> tuple[np.ndarray, np.ndarray]:
    """The fold's validation rows streamed group by group through the emulated API by
    `state_of(snapshot, parts)`'s state, from the snapshot of every student's training
    questions, and the probabilities validation's steps give the same rows
    (predict_tails from each history's first question)."""
    workspace = Workspace(demo)
    data = load_fold_data(workspace, 0)
    arrays = TrainArrays.load(workspace.data)
    parts = question_parts(load_questions(workspace.data))
    snapshot = model_snapshot(model, data.sequences, arrays.users, data.train_length, CPU)
    state = state_of(data, arrays, snapshot, parts)
    frame = stream_frame(arrays, Fold.load(workspace, 0).stream_index)
    env = Emulator(frame, EmulatorConfig(seed=3, max_group_students=30))
    stream_loop(env, state, progress=False)
    results = env.results()
    tails = data.fold_tails
    expected = predict_tails(model, data.sequences, tails.students, tails.history, tails.end, CPU)
    rows = data.sequences.row[tails.flat_index(data.sequences)]
    expected = pd.Series(expected, index=rows)[results["global_row"].to_numpy()].to_numpy()
    assert len(results) == len(rows) > 50
    return results["prediction"].to_numpy(), expected


@pytest.mark.parametrize("arch", ARCHS)
def test_streaming_equals_validation(demo, arch):
    """The fold's validation rows streamed by the model's own state: the probabilities
    of validation's steps."""
    model = fresh(arch, load_fold_data(Workspace(demo), 0).n_questions)
    streamed, expected = streamed_against_validation(
        demo, model, lambda data, arrays, snapshot, parts: OnlineState(model, parts, CPU, snapshot)
    )
    np.testing.assert_allclose(streamed, expected, atol=2e-6)


def owner_saint(n_questions: int) -> SAINT:
    """A SAINT whose rings (its receptive field, 2 x 20) hold a member's 20."""
    torch.manual_seed(1)
    config = ModelConfig(
        n_questions=n_questions, d_model=8, n_heads=2, encoder_layers=1, decoder_layers=1,
        window=20,
    )  # fmt: skip
    return SAINT(config).eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_a_member_reading_the_models_rings_streams_as_validation(demo, arch):
    """A recurrent member of a run streamed from the run model's rings
    (common.stream.shared_store), not rings of its own: the probabilities of
    validation's steps, as when it streams alone; its state per slot is planned in the
    model's budget."""
    model = fresh(arch, load_fold_data(Workspace(demo), 0).n_questions)
    held = {}

    def shared(data, arrays, snapshot, parts):
        owner = owner_saint(data.n_questions)
        owner_shot = model_snapshot(
            owner, data.sequences, arrays.users, data.train_length, CPU
        )  # fmt: skip
        state, members = run_states(
            owner, owner_shot, {arch: (model, lambda: snapshot)}, parts, CPU, max_bytes=10**9
        )
        held.update(owner=state, member=members[arch])
        return MemberStream(state, members[arch])

    streamed, expected = streamed_against_validation(demo, model, shared)
    member, owner = held["member"], held["owner"]
    assert member.shared and member.store.owner is owner.store
    assert "response" not in vars(member.store)  # no rings of its own
    per_slot = member.pool.bytes_per_student() + STEP_ARRAYS_BYTES
    assert owner.store.budget.student_bytes == owner.store.student_bytes() + per_slot
    np.testing.assert_allclose(streamed, expected, atol=2e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_member_steps_only_on_the_group_the_model_filed(demo, arch):
    """A member that shares the rings refuses a group its owner has not filed; a member
    whose ring context the owner's rings do not hold keeps rings of its own."""
    data = load_fold_data(Workspace(demo), 0)
    model = fresh(arch, data.n_questions)
    parts = np.ones(data.n_questions, dtype=np.int8)
    owner, members = run_states(
        owner_saint(data.n_questions), None, {arch: (model, lambda: None)}, parts, CPU
    )
    assert members[arch].shared
    test_df = pd.DataFrame(
        {
            "row_id": [0], "timestamp": [5], "user_id": [7], "content_id": [1],
            "content_type_id": [0], "task_container_id": [0],
            "prior_question_elapsed_time": [np.nan], "prior_question_had_explanation": [np.nan],
            "prior_group_answers_correct": ["[]"], "prior_group_responses": ["[]"],
        }
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="steps after the model's state has filed"):
        members[arch].predict(test_df)
    group = read_group(test_df)
    owner.predict_group(group)
    assert members[arch].predict_group(group).shape == (1,)
    wide = build_model(arch, replace(CONFIGS[arch], n_questions=data.n_questions, window=60))
    _, members = run_states(
        owner_saint(data.n_questions), None, {arch: (wide, lambda: None)}, parts, CPU
    )
    assert not members[arch].shared


@pytest.mark.parametrize("arch", ARCHS)
def test_no_question_reads_an_outcome_of_its_own_container(demo, arch):
    """Flipping the response of one question of a multi-question container changes no
    prediction of that container, and changes a prediction of a later container (the
    outcome does reach the model once revealed)."""
    data = load_fold_data(Workspace(demo), 0)
    model = fresh(arch, data.n_questions)
    sequences = data.sequences
    for s in range(sequences.n_students):
        begin, n = sequences.offsets[s], sequences.lengths()[s]
        cf = sequences.container_first[begin : begin + n]
        bundles = [p for p in range(1, n - 1) if cf[p] == cf[p - 1] and cf[p] == p - 1]
        bundles = [p for p in bundles if cf[-1] > p]
        if bundles:
            break
    else:
        pytest.skip("the demo has no multi-question container")
    first = bundles[0] - 1  # a container starting here with at least two questions
    stop = first + 1
    while cf[stop] == first:
        stop += 1

    def probabilities() -> np.ndarray:
        batch = one_student_batch(sequences, s, 0, n, 0, int(cf[-1]) + 1, data.n_questions)
        with torch.no_grad():
            return torch.sigmoid(model(batch)[0]).numpy()

    before = probabilities()
    saved = sequences.response[begin + first].copy()
    sequences.response[begin + first] = 1 - saved
    try:
        after = probabilities()
    finally:
        sequences.response[begin + first] = saved
    np.testing.assert_array_equal(before[:stop], after[:stop])  # its container, and before
    assert np.abs(before[stop:] - after[stop:]).max() > 1e-6  # later containers read it


def test_the_lqrnn_s_head_reads_each_question_s_own_past_features(demo):
    """past_features "both": the features reach the query (its projection starts at
    zero) and the head, which shares their normalization. At the start only the head
    reads them, so changing one question's features moves its logit alone; once the
    query's projection is trained, later logits move too (through the LSTM). The LSTM,
    whose head reads its query already, refuses a head."""
    data = load_fold_data(Workspace(demo), 0)
    attach_model_features(data.sequences, question_skills(data.questions, data.n_questions))
    config = replace(CONFIGS["lqrnn"], n_questions=data.n_questions, past_features="both")
    torch.manual_seed(0)
    model = build_model("lqrnn", config).eval()
    assert [n for n, _ in model.named_children() if n.startswith("past")] == [
        "past_norm",
        "past_embed",
        "past_head",
    ]
    sequences = data.sequences
    student = int(np.flatnonzero(sequences.lengths() >= 30)[0])
    cf = sequences.container_first[sequences.offsets[student] : sequences.offsets[student] + 30]
    batch = one_student_batch(sequences, student, 0, 30, 0, int(cf[-1]) + 1, data.n_questions)

    def moved() -> np.ndarray:
        changed = {**batch, "past": batch["past"].clone()}
        changed["past"][0, 10] += 1.0
        with torch.no_grad():
            return (model(changed) - model(batch))[0].abs().numpy() > 1e-6

    assert np.flatnonzero(moved()).tolist() == [10]
    with torch.no_grad():
        model.past_embed.weight.normal_()
    after = moved()  # the LSTM's memory of it fades over the next questions
    assert after[10:15].all() and not after[:10].any()
    with pytest.raises(ValueError, match="has no place"):
        LSTMConfig(past_features="both")


@pytest.mark.parametrize("arch", ARCHS)
def test_a_checkpoint_rebuilds_the_architecture(arch, tmp_path):
    model = fresh(arch, 30)
    save_model(tmp_path / "m.pt", model)
    loaded, checkpoint = load_model(tmp_path / "m.pt")
    assert checkpoint["arch"] == arch and type(loaded) is type(model)
    assert loaded.config == model.config
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name])


def test_a_resumed_run_of_every_family_ends_with_the_uninterrupted_weights(demo, tmp_path):
    """03 --arch saint,lstm,lqrnn for 2 epochs; then, from each member's epoch 1
    checkpoint alone (where a kill after epoch 1 leaves it), --resume: every member ends
    with the same weights (the lanes' schedule of each epoch, the dropout's draws and the
    optimizer continue where the checkpoint left them)."""
    tiny = [
        "--run", "r", "--arch", "saint,lstm,lqrnn", "--d-model", 8, "--heads", 2,
        "--layers", 1, "--window", 20, "--lstm-d-model", 8, "--lstm-window", 20,
        "--lqrnn-d-model", 8, "--lqrnn-heads", 2, "--lqrnn-window", 20, "--batch-size", 8,
        "--no-progress", "--device", "cpu", "--epochs", 2,
    ]  # fmt: skip
    folders = {}
    for name in ("whole", "resumed"):
        out = tmp_path / name
        shutil.copytree(demo / "data", out / "data")
        shutil.copytree(demo / "folds", out / "folds")
        folders[name] = Workspace(out).run("r").fold(0)
    done = run_numbered_script("03_train.py", "--output-dir", tmp_path / "whole", *tiny)
    assert done.returncode == 0, done.stdout + done.stderr
    members = {arch: (lambda f, a=arch: f if a == "saint" else f.member(a)) for arch in CONFIGS}
    members["saint"] = lambda f: f
    for member in members.values():
        source, target = member(folders["whole"]), member(folders["resumed"])
        target.path.mkdir(parents=True, exist_ok=True)
        for name in (source.epoch_checkpoint(1).name, source.config.name):
            shutil.copyfile(source.path / name, target.path / name)
    done = run_numbered_script(
        "03_train.py", "--output-dir", tmp_path / "resumed", *tiny, "--resume"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for arch, member in members.items():
        got = torch.load(member(folders["resumed"]).epoch_checkpoint(2), weights_only=False)
        want = torch.load(member(folders["whole"]).epoch_checkpoint(2), weights_only=False)
        state, reference = got["model_state"], want["model_state"]
        assert all(torch.equal(state[k], reference[k]) for k in reference), arch
        assert "resumed after epoch 1" in done.stdout


def test_a_run_takes_more_architectures_with_resume_and_keeps_the_trained_one(demo, tmp_path):
    """A run of SAINT, then the same config with --arch saint,lstm --resume: SAINT's
    fold is kept as it was (finished, not trained again) and the LSTM trains beside it;
    without --resume the wider config is another run's and is refused."""
    out = tmp_path / "out"
    shutil.copytree(demo / "data", out / "data")
    shutil.copytree(demo / "folds", out / "folds")
    base = [
        "--output-dir", out, "--run", "x", "--d-model", 8, "--heads", 2, "--layers", 1,
        "--window", 20, "--batch-size", 8, "--epochs", 1, "--no-progress",
    ]  # fmt: skip
    wider = ["--arch", "saint,lstm", "--lstm-d-model", 8, "--lstm-window", 20]
    assert run_numbered_script("03_train.py", *base).returncode == 0
    fold = Workspace(out).run("x").fold(0)
    saint = fold.checkpoint().read_bytes()
    refused = run_numbered_script("03_train.py", *base, *wider)
    assert refused.returncode == 2 and "another config" in refused.stderr
    done = run_numbered_script("03_train.py", *base, *wider, "--resume")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fold.checkpoint().read_bytes() == saint and "finished already" in done.stdout
    assert fold.member("lstm").checkpoint().exists()
