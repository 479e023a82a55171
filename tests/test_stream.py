"""Streaming inference: the emulator against the real example stream, predict()'s rules,
streaming == teacher-forced batch predictions, no look-ahead, one feature path, and the
Kaggle bundle running on its own."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from common.data.arrays import TrainArrays, load_questions, question_parts
from common.data.features import SEQUENCE_FIELDS, build_sequences, window_inputs
from common.data.fold_data import Fold, load_fold_data
from common.data.folds import FoldConfig, make_folds
from common.data.past_features import attach_model_features, question_skills
from common.data.past_state import build_feature_snapshot
from common.data.schema import TEST_COLUMNS, TRAIN_COLUMNS, TRAIN_DTYPES
from common.model.predict import predict_tails, to_tensors
from common.model.saint import SAINT, ModelConfig
from common.model.tags import install_tags, tag_shape
from common.stream import online
from common.stream.api_loop import stream_loop
from common.stream.blend_state import BlendState
from common.stream.cache_pool import CachePool
from common.stream.emulator import TEST_DTYPES, Emulator, EmulatorConfig, StreamError, stream_frame
from common.stream.online import OnlineState, Snapshot, build_snapshot
from common.train.trainer import Trainer
from common.workspace import Workspace
from tests.helpers import make_tiny_demo, preprocess_real_rows, shared_file, train_config

CPU = torch.device("cpu")


# ---------------------------------------------------------------------------------------
# the emulator against the competition's real example stream


def example_rows() -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """The real example stream, and the train-format rows behind it: labels of groups 0-2
    come from the next group's prior_group_* lists (group 3's are unknown: zeros)."""
    example = pd.read_csv(shared_file("riiid_example_test", "example_test_reconstructed.csv"))
    sizes = example.groupby("group_num").size().to_numpy()
    correct = np.zeros(len(example), dtype=np.int8)
    answer = np.zeros(len(example), dtype=np.int8)
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    for group in range(1, len(sizes)):
        first = example.iloc[bounds[group]]
        lo, hi = bounds[group - 1], bounds[group]
        correct[lo:hi] = json.loads(first["prior_group_answers_correct"])
        answer[lo:hi] = json.loads(first["prior_group_responses"])
    rows = example.drop(
        columns=["group_num", "prior_group_answers_correct", "prior_group_responses"]
    )
    rows["user_answer"] = answer
    rows["answered_correctly"] = correct
    rows["prior_question_had_explanation"] = rows["prior_question_had_explanation"].astype(
        "boolean"
    )
    return example, rows, sizes


# the test frames' types as the competition's data page gives them (common/stream/emulator.py:
# TEST_DTYPES says which are documented and which are not verified)
DOCUMENTED_DTYPES = {
    "row_id": "int64", "timestamp": "int64", "user_id": "int32", "content_id": "int16",
    "content_type_id": "int8", "task_container_id": "int16",
    "prior_question_elapsed_time": "float32", "prior_question_had_explanation": "object",
    "prior_group_answers_correct": "object", "prior_group_responses": "object",
}  # fmt: skip


def test_emulator_reproduces_the_real_example_stream():
    example, rows, sizes = example_rows()
    env = Emulator(rows, group_sizes=sizes)
    expected = example.set_index("group_num").astype(TEST_DTYPES)
    served = []
    for test_df, sample in env.iter_test():
        group = int(test_df.index[0])
        want = expected.loc[[group]]
        assert list(test_df.columns) == TEST_COLUMNS == list(want.columns)
        assert test_df.index.name == "group_num" and test_df.index.dtype == np.int64
        assert {c: str(t) for c, t in test_df.dtypes.items()} == DOCUMENTED_DTYPES
        pd.testing.assert_frame_equal(test_df, want)
        # the string-encoded lists, byte for byte (group 0 carries '[]')
        assert (
            test_df["prior_group_answers_correct"].iloc[0]
            == want["prior_group_answers_correct"].iloc[0]
        )
        assert test_df["prior_group_responses"].iloc[0] == want["prior_group_responses"].iloc[0]
        assert test_df["prior_group_answers_correct"].iloc[1:].isna().all()
        assert list(sample.columns) == ["row_id", "answered_correctly"]
        assert (sample["answered_correctly"] == 0.5).all()
        assert sample["row_id"].tolist() == test_df["row_id"].tolist()  # all questions here
        env.predict(sample.assign(answered_correctly=0.25))
        served.append(group)
    assert served == [0, 1, 2, 3]
    assert len(env.results()) == len(example)


def test_lectures_are_served_but_not_predicted(tmp_path):
    output_dir, arrays, _ = preprocess_real_rows(
        tmp_path, "train_prefix_histories_420users.csv", assign_row_ids=True
    )
    workspace = Workspace(output_dir)
    make_folds(workspace, FoldConfig(n_folds=5, seed=1, strategy="unseen"))
    frame = stream_frame(arrays, Fold.load(workspace, 0).stream_index)
    env = Emulator(frame, EmulatorConfig(seed=3, max_group_students=50))
    lectures = shared = 0
    previous_rows = None
    # the first 1,500 of the stream's ~8,500 groups (a group holds at most one container
    # per student: most are small) meet every rule checked here, lectures included
    for test_df, sample in itertools.islice(env.iter_test(), 1500):
        lecture = test_df["content_type_id"].to_numpy() == 1
        lectures += int(lecture.sum())
        assert set(sample["row_id"]) == set(test_df["row_id"][~lecture])
        questions = test_df[~lecture]
        assert questions.groupby("user_id")["task_container_id"].nunique().max() == 1
        shared += int(test_df[lecture]["user_id"].isin(questions["user_id"]).sum())
        if previous_rows is not None:  # lists cover every row of the previous group
            assert len(json.loads(test_df["prior_group_answers_correct"].iloc[0])) == previous_rows
        previous_rows = len(test_df)
        env.predict(sample)
    assert lectures > 0
    # a lecture never counts as the student's one question bundle of the group: some
    # arrive beside that student's next bundle
    assert shared > 0


def interleaved_stream(n_students: int = 200, containers: int = 6) -> pd.DataFrame:
    """Many students active at once, in time order: each student's containers are one or
    two questions (a bundle) or a lecture, one container per student per time step."""
    rng = np.random.default_rng(4)
    rows = []
    for step in range(containers):
        for student in rng.permutation(n_students):
            kind = rng.integers(0, 3)  # 0: one question, 1: a bundle of two, 2: a lecture
            for _ in range(2 if kind == 1 else 1):
                rows.append(
                    (len(rows), 1000 * step + int(student), 100 + int(student), 7,
                     int(kind == 2), step, 1, 1, 5000.0, True)
                )  # fmt: skip
    frame = pd.DataFrame(rows, columns=TRAIN_COLUMNS)
    return frame.astype({c: TRAIN_DTYPES[c] for c in TRAIN_COLUMNS})


def test_groups_sized_like_the_real_example():
    """group_rows: groups of 18 to 33 rows (the real example's range) holding many
    students, still one question bundle per student per group, every row served once."""
    frame = interleaved_stream()
    env = Emulator(frame, EmulatorConfig(seed=2, group_rows=(18, 33)))
    sizes = np.diff(env.bounds)
    # a group closes with the container that reaches its size: at most a bundle beyond
    assert sizes[:-1].min() >= 18 and sizes.max() <= 33 + 1, np.bincount(sizes)
    assert len(np.unique(sizes)) > 8  # drawn, not one size
    for test_df, sample in env.iter_test():
        questions = test_df[test_df["content_type_id"] == 0]
        assert questions.groupby("user_id")["task_container_id"].nunique().max() <= 1
        assert test_df["user_id"].nunique() >= 9  # at most two rows per student's bundle
        env.predict(sample)
    assert env.bounds[-1] == len(frame)
    for bad in ((33, 18), (0, 5), (18,)):
        with pytest.raises(ValueError, match="expected MIN,MAX"):
            EmulatorConfig(group_rows=bad)


BAD_PREDICTIONS = [
    ("missing row", lambda s: s.iloc[1:], "missing"),
    ("extra row", lambda s: pd.concat([s, s.iloc[:1].assign(row_id=-5)]), "not a question row"),
    ("duplicate row", lambda s: pd.concat([s, s.iloc[:1]]), "more than once"),
    ("NaN", lambda s: s.assign(answered_correctly=np.nan), r"probability in \[0, 1\]"),
    ("above one", lambda s: s.assign(answered_correctly=1.5), r"probability in \[0, 1\]"),
    ("below zero", lambda s: s.assign(answered_correctly=-0.1), r"probability in \[0, 1\]"),
    ("no column", lambda s: s.drop(columns="answered_correctly"), "no column"),
]


@pytest.mark.parametrize(
    ("name", "corrupt", "message"), BAD_PREDICTIONS, ids=[c[0] for c in BAD_PREDICTIONS]
)
def test_predict_rejects_bad_predictions(name, corrupt, message):
    _, rows, sizes = example_rows()
    env = Emulator(rows, group_sizes=sizes)
    _, sample = next(env.iter_test())
    with pytest.raises(StreamError, match=message):
        env.predict(corrupt(sample))


def test_predict_rejects_calls_out_of_turn():
    _, rows, sizes = example_rows()
    env = Emulator(rows, group_sizes=sizes)
    with pytest.raises(StreamError, match="before iter_test"):
        env.predict(pd.DataFrame({"row_id": [0], "answered_correctly": [0.5]}))
    groups = env.iter_test()
    _, sample = next(groups)
    env.predict(sample)
    with pytest.raises(StreamError, match="twice"):
        env.predict(sample)
    next(groups)  # group 1 handed out, never predicted
    with pytest.raises(StreamError, match="never predicted"):
        next(groups)
    with pytest.raises(StreamError, match="not predicted"):
        env.results()


# ---------------------------------------------------------------------------------------
# streaming against teacher-forced batches, on a tiny demo with a random model


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    return make_tiny_demo(tmp_path_factory.mktemp("demo"))


def random_model(n_questions: int, **overrides) -> SAINT:
    torch.manual_seed(1)
    config = dict(
        n_questions=n_questions,
        d_model=32,
        n_heads=4,
        window=24,
        dropout=0.0,
        decoder_features=("elapsed", "lag", "explanation", "answer", "question"),
    )
    config.update(overrides)
    model = SAINT(ModelConfig(**config))
    with torch.no_grad():  # weights large enough that questions far back move predictions
        for parameter in model.parameters():
            parameter.mul_(3.0)
        if hasattr(model, "past_embed"):  # zero at the start of training: make it count
            model.past_embed.weight.normal_()
    return model.eval()


def attach_if_read(model: SAINT, data) -> np.ndarray | None:
    """For a model that reads past-event features: attach them to the fold's sequences
    (the batch computation) and return each question's skill; else None."""
    if model.config.past_features == "none":
        return None
    skill = question_skills(data.questions, data.n_questions)
    attach_model_features(data.sequences, skill)
    return skill


def stream_predictions(
    output_dir: Path, model: SAINT, frame=None, group_sizes=None, cache=4096, max_group=60
):
    env, state, _ = streamed(output_dir, model, frame, group_sizes, cache, max_group)
    return env, state


def streamed(output_dir: Path, model: SAINT, frame=None, group_sizes=None, cache=4096,
             max_group=60):  # fmt: skip
    """The emulator and state after fold 0's stream (or `frame`), and the loop's timing."""
    workspace = Workspace(output_dir)
    data = load_fold_data(workspace, 0)
    arrays = TrainArrays.load(workspace.data)
    parts = question_parts(load_questions(workspace.data))
    skill = attach_if_read(model, data)
    snapshot = build_snapshot(
        data.sequences, arrays.users, data.train_length, model.config.receptive_field
    )
    state = OnlineState(model, parts, CPU, snapshot, cache_students=cache)
    if skill is not None:  # the features, computed online beside the model's state
        features = build_feature_snapshot(data.sequences, arrays.users, data.train_length)
        state = BlendState(state, None, parts, skill, features)
    if frame is None:
        frame = stream_frame(arrays, Fold.load(workspace, 0).stream_index)
        env = Emulator(frame, EmulatorConfig(seed=5, max_group_students=max_group))
    else:
        env = Emulator(frame, group_sizes=group_sizes)
    timing = stream_loop(env, state, progress=False)
    return env, state, timing


@pytest.mark.parametrize(
    ("attention", "tags"),
    [
        ("mha", False),
        ("mla", False),
        ("mha", True),
        ("mha", "rasch"),
        pytest.param("mla", "rasch-readout", marks=pytest.mark.slow),
        ("mha", "past-head"),
        ("mha", "past-encoder"),
        ("mha", "past-both"),
    ],
)
def test_streaming_equals_teacher_forced_batches(demo_dir, attention, tags, monkeypatch):
    # states are built in parts of 2 students (sorted by length), so a build here takes
    # several parts
    monkeypatch.setattr(online, "BUILD_PART", 2)
    data = load_fold_data(Workspace(demo_dir), 0)
    tagged = tags is True or str(tags).startswith("rasch")
    n_tags, max_tags = tag_shape(data.questions) if tagged else (0, 1)
    model = random_model(
        data.n_questions,
        attention=attention,
        kv_latent_dim=16,
        n_tags=n_tags,
        max_tags=max_tags,
        question_embedding="rasch" if str(tags).startswith("rasch") else "id",
        readout="akt" if str(tags).endswith("readout") else "none",
        past_features=str(tags).split("-")[1] if str(tags).startswith("past") else "none",
    )
    attach_if_read(model, data)  # the teacher-forced side reads the batch features
    if tags is True or str(tags).startswith("rasch"):
        install_tags(model, data.questions)
    if str(tags).startswith("rasch"):  # difficulties start at zero; make them count
        with torch.no_grad():
            model.question_embed.weight.normal_()
    env, state = stream_predictions(demo_dir, model)
    results = env.results()
    batch = predict_tails(
        model,
        data.sequences,
        data.valid_students,
        data.valid_history,
        data.valid_end,
        CPU,
        batch_size=37,
        chunk=11,
    )
    # the batch output follows (student, position) order; map it to global rows
    seq = data.sequences
    rows = np.concatenate(
        [
            seq.row[seq.offsets[s] + h : seq.offsets[s + 1]]
            for s, h in zip(data.valid_students, data.valid_history, strict=True)
        ]
    )
    expected = pd.Series(batch, index=rows)[results["global_row"].to_numpy()].to_numpy()
    assert len(results) == len(rows) > 300
    model_state = getattr(state, "model_state", state)  # beside the feature state, if any
    assert model_state.builds > 0 and model_state.rebuilds == 0
    np.testing.assert_allclose(results["prediction"].to_numpy(), expected, atol=1e-5)


def test_training_computes_what_the_stream_predicts(demo_dir, tmp_path):
    """Train as you serve, for the validation students with the longest histories: each
    streamed prediction equals a forward pass over the student's whole history, and what
    the training forward pass computes at the same position in every training sequence
    of the Trainer's epoch that trains on it (sequences that start after the history's
    beginning, behind their context, included). A state that starts `window` questions
    back, as the stream's did before, gives other predictions: the check can fail."""
    data = load_fold_data(Workspace(demo_dir), 0)
    config = train_config(
        d_model=32, heads=4, layers=2, window=12, dropout=0.0, span=30, select_on="fold",
        decoder_features=("elapsed", "lag", "explanation", "answer", "question"),
    )  # fmt: skip
    # every question is a training question here, so spans cover the validation tails
    everything = dataclasses.replace(data, fit_length=data.sequences.lengths())
    trainer = Trainer(config, Workspace(tmp_path).run("train"), everything, CPU)
    model = trainer.model.eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(3.0)  # as random_model: far questions move predictions
    env, _ = stream_predictions(demo_dir, model)
    results = env.results()
    seq, window, reach = data.sequences, model.config.window, model.config.receptive_field
    flat = np.searchsorted(seq.row, results["global_row"].to_numpy())
    streamed = pd.Series(results["prediction"].to_numpy(), index=flat)
    (student, start, begin, stop), _ = trainer.epoch_batches(0)
    long_ones = np.flatnonzero(data.valid_history > reach + window)
    assert len(long_ones) >= 3
    compared = behind_context = 0
    for s, h, e in zip(
        data.valid_students[long_ones],
        data.valid_history[long_ones],
        data.valid_end[long_ones],
        strict=True,
    ):
        owner, tail = np.array([s]), streamed[seq.offsets[s] + np.arange(h, e)].to_numpy()
        with torch.no_grad():
            whole = torch.sigmoid(
                model(
                    to_tensors(
                        window_inputs(seq, owner, np.array([0]), np.array([e]), data.n_questions),
                        CPU,
                    )
                )
            )[0]
            old = torch.sigmoid(
                model(
                    to_tensors(
                        window_inputs(
                            seq,
                            owner,
                            np.array([h - window]),
                            np.array([e - h + window]),
                            data.n_questions,
                        ),
                        CPU,
                    )
                )
            )[0]
        np.testing.assert_allclose(tail, whole[h:e].numpy(), atol=1e-5)
        assert np.abs(tail - old[window:].numpy()).max() > 1e-3
        for i in np.flatnonzero((student == s) & (begin < e) & (stop > h)):
            inputs = trainer.batch_inputs(student, start, begin, stop, np.array([i]))
            with torch.no_grad():
                trained = torch.sigmoid(model(to_tensors(inputs, CPU)))[0].numpy()
            position = inputs["position"][0]
            scored = inputs["trained"][0] & (position >= h) & (position < e)
            assert scored.any()
            np.testing.assert_allclose(trained[scored], tail[position[scored] - h], atol=1e-5)
            compared += int(scored.sum())
            behind_context += int(scored.sum()) * bool(start[i] > 0)
    assert compared == int((data.valid_end - data.valid_history)[long_ones].sum())
    assert behind_context > 50


def first_groups(env: Emulator, share: float) -> tuple[pd.DataFrame, np.ndarray]:
    """The first `share` of `env`'s groups: their rows (a prefix of its frame, in its
    order) and their sizes."""
    count = int(len(env.bounds) * share)
    return env.frame.iloc[: env.bounds[count]].reset_index(drop=True), np.diff(env.bounds)[:count]


@pytest.mark.slow
def test_nothing_after_a_group_changes_its_predictions(demo_dir):
    """The first third of the fold's stream, its rows after a group (the first, one a
    third in, one of the last) changed at random: that group's predictions and all
    before it stay the same, later ones move."""
    workspace = Workspace(demo_dir)
    data = load_fold_data(workspace, 0)
    model = random_model(data.n_questions)
    grouped = Emulator.from_fold(
        TrainArrays.load(workspace.data),
        Fold.load(workspace, 0),
        EmulatorConfig(seed=5, max_group_students=60),
    )
    env, _ = stream_predictions(demo_dir, model, *first_groups(grouped, 1 / 3))
    frame, bounds = env.frame.copy(), env.bounds
    base = env.results()
    rng = np.random.default_rng(0)
    for group in (0, len(bounds) // 3, len(bounds) - 3):
        after = slice(int(bounds[group + 1]), None)
        changed = frame.copy()
        n = len(changed) - int(bounds[group + 1])
        question = changed["content_type_id"].to_numpy()[after] == 0
        replace = {
            "answered_correctly": np.where(question, rng.integers(0, 2, n), -1),
            "user_answer": np.where(question, rng.integers(0, 4, n), -1),
            "prior_question_elapsed_time": rng.integers(1000, 90000, n),
            "content_id": np.where(
                question,
                rng.integers(0, data.n_questions, n),
                frame["content_id"].to_numpy()[after],
            ),
        }
        for column, values in replace.items():
            column_values = changed[column].to_numpy().copy()
            column_values[after] = values
            changed[column] = column_values.astype(frame[column].dtype)
        env2, _ = stream_predictions(demo_dir, model, changed, np.diff(bounds))
        again = env2.results()
        upto = base["group_num"].to_numpy() <= group
        np.testing.assert_array_equal(again["prediction"][upto], base["prediction"][upto])
        assert not np.allclose(again["prediction"][~upto], base["prediction"][~upto])


def round_robin_stream(output_dir: Path) -> pd.DataFrame:
    """The fold's stream with students interleaved container by container (every student
    active at once), so a small cache pool must evict and rebuild."""
    workspace = Workspace(output_dir)
    arrays = TrainArrays.load(workspace.data)
    frame = stream_frame(arrays, Fold.load(workspace, 0).stream_index)
    container = frame.groupby("user_id")["timestamp"].rank(method="dense")
    order = np.lexsort((frame["global_row"], frame["user_id"], container))
    return frame.iloc[order].reset_index(drop=True)


@pytest.mark.slow
def test_cache_eviction_is_bounded_and_exact(demo_dir):
    """A student whose cache was evicted is built again from their ring (the receptive
    field's questions), which gives the very predictions of a pool that never evicts."""
    data = load_fold_data(Workspace(demo_dir), 0)
    model = random_model(data.n_questions)
    grouped = Emulator(round_robin_stream(demo_dir), EmulatorConfig(seed=1, max_group_students=3))
    frame, sizes = first_groups(grouped, 1 / 3)
    env, state = stream_predictions(demo_dir, model, frame, sizes, cache=4)
    assert state.pool.evictions > 0 and state.rebuilds > 0
    full, full_state = stream_predictions(demo_dir, model, frame, sizes)
    assert full_state.rebuilds == 0
    np.testing.assert_allclose(
        env.results()["prediction"], full.results()["prediction"], rtol=0, atol=1e-5
    )


def test_the_loop_times_the_cache_builds_apart(demo_dir):
    """stream_loop's timing splits out the cache builds (a continuing student's first
    group): counted as the state counts them, a part of the predicting time, and the
    rate without them that of the loop's other seconds."""
    model = random_model(load_fold_data(Workspace(demo_dir), 0).n_questions)
    _, state, timing = streamed(demo_dir, model)
    assert timing["cache_builds"] == state.builds > 0
    assert 0 < timing["build_seconds"] < timing["predict_seconds"] <= timing["seconds"]
    steps = timing["seconds"] - timing["build_seconds"]
    assert timing["rows_per_s_without_builds"] == pytest.approx(timing["rows"] / steps)
    assert timing["rows_per_s_without_builds"] > timing["rows_per_s"]


def test_cache_pool_grows_with_the_students_and_keeps_their_entries():
    model = random_model(50)
    pool = CachePool(model, size=200, device=CPU)
    cache_index = np.full(1000, -1, dtype=np.int64)
    cache_index, missing = pool.acquire(np.arange(10), cache_index)
    assert pool.capacity == 64 and len(missing) == 10 and pool.evictions == 0
    pool.cache.encoder[0][0][cache_index[3]] = 7.0  # an entry of slot 3
    pool.cache.query_position[cache_index[3], 5] = 5
    before = [t.clone() for t in pool.cache.select(pool._rows(cache_index[:10])).tensors()]
    cache_index, missing = pool.acquire(np.arange(10, 110), cache_index)
    assert pool.capacity == 128 and len(missing) == 100
    after = pool.cache.select(pool._rows(cache_index[:10])).tensors()
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert sorted(cache_index[:110].tolist()) == list(range(110))  # no index given twice
    assert (pool.cache.query_position[110:] == -1).all()  # new rows are empty
    cache_index, _ = pool.acquire(np.arange(110, 260), cache_index)
    assert pool.capacity == 200 and pool.evictions == 60  # capped at size, then LRU


def test_online_state_matches_batch_features_on_real_rows(tmp_path):
    """One feature path: after streaming real students' rows through the API, each
    student's ring holds exactly the batch features of those questions (outcomes of the
    last group, never revealed, excepted)."""
    output_dir, arrays, parts = preprocess_real_rows(tmp_path, "train_strict_format_5users.csv")
    make_folds(Workspace(output_dir), FoldConfig(n_folds=1, seed=2, strategy="last-n", last_n=250))
    model = random_model(13523, window=30)
    env, state = stream_predictions(output_dir, model)
    seq = build_sequences(arrays, parts)
    last_group = env.results()["group_num"].to_numpy() == env.n_groups - 1
    unrevealed_rows = set(env.results()["global_row"][last_group])
    compared = 0
    for student, user in enumerate(arrays.users.tolist()):
        slot = state.slot_of[user]
        n = int(state.n_items[slot])
        assert n == seq.lengths()[student]
        for position in range(max(0, n - state.context), n):
            flat = seq.offsets[student] + position
            for name in SEQUENCE_FIELDS:
                got = state.rings[name][slot, position % state.ring]
                want = getattr(seq, name)[flat]
                if name in ("response", "answer") and seq.row[flat] in unrevealed_rows:
                    continue
                assert got == want, (user, position, name, got, want)
            compared += 1
    assert compared > 100


def test_a_snapshot_read_from_its_file_fills_the_same_state(demo_dir, tmp_path, monkeypatch):
    """The rings filled from a saved snapshot (fields read one at a time, students a chunk
    at a time, the chunk cut small here) equal those filled from the snapshot in memory."""
    workspace = Workspace(demo_dir)
    model = random_model(load_fold_data(workspace, 0).n_questions)
    data = load_fold_data(workspace, 0)
    arrays = TrainArrays.load(workspace.data)
    parts = question_parts(load_questions(workspace.data))
    snapshot = build_snapshot(
        data.sequences, arrays.users, data.train_length, model.config.receptive_field
    )
    snapshot.save(tmp_path / "snapshot.npz")
    in_memory = OnlineState(model, parts, CPU, snapshot)
    monkeypatch.setattr(online, "SNAPSHOT_CHUNK", 7)
    from_file = OnlineState(model, parts, CPU, Snapshot.load(tmp_path / "snapshot.npz"))
    assert len(snapshot.users) > 7 * 3 and from_file.slot_of == in_memory.slot_of
    for name, ring in in_memory.rings.items():
        assert np.array_equal(from_file.rings[name], ring), name
    for name in ("n_items", "last_first", "last_timestamp"):
        assert np.array_equal(getattr(from_file, name), getattr(in_memory, name)), name
    # and both hold what the snapshot says, position by position
    n, length = len(snapshot.users), snapshot.length
    assert np.array_equal(from_file.last_timestamp[:n], snapshot.fields["timestamp"][:, -1])
    assert np.array_equal(from_file.n_items[:n], snapshot.n_items)
    for s in range(n):
        first = max(0, int(snapshot.n_items[s]) - length)
        positions = np.arange(first, snapshot.n_items[s])
        kept = positions - (snapshot.n_items[s] - length)
        for name, values in snapshot.fields.items():
            ring = from_file.rings[name][s, positions % from_file.ring]
            assert np.array_equal(ring, values[s, kept]), (s, name)
