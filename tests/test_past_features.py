"""The trees' features: the batch computation equals the online one fed as
the API feeds it, and no feature reads an outcome the API has not revealed yet."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from common.data.dataset import Dataset
from common.data.features import build_sequences
from common.data.fold_data import Fold, load_fold_data
from common.data.folds import FoldConfig, make_folds
from common.data.past_features import FEATURE_NAMES, past_features, question_skills
from common.data.past_state import FeatureSnapshot, PastFeatureState, build_feature_snapshot
from common.data.question_rates import question_rates, training_entries
from common.model.trees.boosting import TreesConfig, training_matrix
from common.stream.emulator import Emulator, EmulatorConfig, stream_frame
from common.workspace import Workspace
from tests.helpers import preprocess_real_rows


@pytest.fixture(scope="module")
def real_rows(tmp_path_factory):
    """420 real students' history prefixes (blank fields included) with the real
    question metadata."""
    tmp = tmp_path_factory.mktemp("real420")
    output_dir, arrays, parts = preprocess_real_rows(
        tmp, "train_prefix_histories_420users.csv", assign_row_ids=True
    )
    data = Dataset.load(Workspace(output_dir))
    sequences = build_sequences(arrays, parts)
    skill = question_skills(data.questions, data.n_questions)
    train = np.zeros(len(sequences.row), dtype=bool)
    train[: len(train) // 2] = True  # any rows will do for the rate table
    rates = question_rates(sequences, train, data.n_questions, 20.0)
    return arrays, parts, sequences, skill, rates


ONLINE_STUDENTS = 420  # every student of the sample


def _stream_online(arrays, parts, skill, rates):
    """Feed the first ONLINE_STUDENTS students' question containers to a
    PastFeatureState in time order (students interleaved), revealing each container's
    outcomes after it is predicted, as the API's next group would. Returns {global row:
    features}."""
    state = PastFeatureState(parts, skill, rates)
    question = np.flatnonzero(np.asarray(arrays["content_type_id"]) == 0)
    question = question[question < arrays.offsets[ONLINE_STUDENTS]]
    student = np.searchsorted(arrays.offsets, question, side="right") - 1
    timestamp = np.asarray(arrays["timestamp"])[question]
    container = np.asarray(arrays["task_container_id"])[question]
    order = np.lexsort((question, student, timestamp))
    keys = np.stack([student[order], timestamp[order], container[order]], axis=1)
    starts = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
    features = {}
    for rows in np.split(question[order], starts):
        first = rows[0]
        user = int(arrays.users[np.searchsorted(arrays.offsets, first, side="right") - 1])
        values = state.features(
            user,
            np.asarray(arrays["content_id"])[rows],
            int(np.asarray(arrays["timestamp"])[first]),
            float(np.asarray(arrays["prior_question_elapsed_time"])[first]),
            int(np.asarray(arrays["prior_question_had_explanation"])[first]),
        )
        state.reveal(user, np.asarray(arrays["answered_correctly"])[rows])
        features.update(zip(rows.tolist(), values, strict=True))
    return features


def assert_features_equal(got: np.ndarray, want: np.ndarray) -> None:
    """Column by column, exactly (every feature is a ratio of whole numbers or a
    difference of times, computed the same way in both paths)."""
    for column, name in enumerate(FEATURE_NAMES):
        np.testing.assert_array_equal(got[:, column], want[:, column], err_msg=name)


def test_online_features_equal_the_batch_features_on_real_rows(real_rows):
    arrays, parts, sequences, skill, rates = real_rows
    batch = past_features(sequences, np.arange(len(sequences.row)), skill, rates)
    online = _stream_online(arrays, parts, skill, rates)
    mine = sequences.row < arrays.offsets[ONLINE_STUDENTS]
    assert len(online) == mine.sum() > 3_000
    streamed = np.stack([online[row] for row in sequences.row[mine].tolist()])
    assert_features_equal(streamed, batch[mine])
    # the features are not degenerate on real rows: each one is defined and varies
    for column, name in enumerate(FEATURE_NAMES):
        defined = batch[~np.isnan(batch[:, column]), column]
        assert len(np.unique(defined)) > 1, name


def test_no_feature_reads_its_own_container_or_later(real_rows):
    """Flipping the outcomes of one task container leaves the features of that container
    and of every earlier question unchanged, and changes the student's later ones."""
    _, _, sequences, skill, rates = real_rows
    everything = np.arange(len(sequences.row))
    base = past_features(sequences, everything, skill, rates)
    student = int(np.argmax(sequences.lengths()))
    first = sequences.offsets[student]
    positions = np.arange(sequences.lengths()[student])
    container_first = sequences.container_first[first + positions]
    # a bundle late in a long history (each key already answered, so the rates over it
    # are defined), with questions after it
    sizes = np.bincount(container_first)
    chosen = int(np.flatnonzero(sizes[: int(container_first[-1])] >= 2)[-1])
    members = first + np.flatnonzero(container_first == chosen)
    saved = sequences.response[members].copy()
    try:
        sequences.response[members] ^= 1
        changed = past_features(sequences, everything, skill, rates)
    finally:
        sequences.response[members] = saved
    upto = members[-1] + 1
    np.testing.assert_array_equal(changed[:upto], base[:upto])
    later = slice(upto, sequences.offsets[student + 1])
    assert not np.allclose(changed[later], base[later], equal_nan=True)


def test_a_training_row_never_reads_its_own_answer_in_its_question_rate(real_rows):
    """The trees' training rows get out-of-fold question rates: flipping one training
    row's answer leaves its own rate feature as it was, and moves the same question's
    rate in the other student groups' rows."""
    _, _, sequences, skill, _ = real_rows
    config = TreesConfig()
    train = np.ones(len(sequences.row), dtype=bool)
    n_questions = int(sequences.question.max()) + 1
    column = FEATURE_NAMES.index("question_rate")

    def rate_feature():
        _, entries, features = training_matrix(sequences, train, n_questions, 20.0, skill, config)
        return entries, features[:, column]

    entries, before = rate_feature()
    flat = int(np.argmax(np.bincount(sequences.question)[sequences.question]))  # a common one
    saved = sequences.response[flat]
    try:
        sequences.response[flat] ^= 1
        _, after = rate_feature()
    finally:
        sequences.response[flat] = saved
    same_question = sequences.question[entries] == sequences.question[flat]
    delta = np.abs(after - before)
    assert delta[np.searchsorted(entries, flat)] == 0
    # other groups' rows of the question move; elsewhere only the global rate does
    moved = same_question & (delta > 0)
    assert moved.sum() > 10
    assert delta[moved].min() > 10 * delta[~same_question].max()


@pytest.fixture(scope="module")
def real_fold(tmp_path_factory):
    """The real students' rows with 2 user folds (a quarter of fold 0's students new),
    and fold 0's data."""
    tmp = tmp_path_factory.mktemp("real420-fold")
    output_dir, arrays, parts = preprocess_real_rows(
        tmp, "train_prefix_histories_420users.csv", assign_row_ids=True
    )
    workspace = Workspace(output_dir)
    make_folds(workspace, FoldConfig(n_folds=2, seed=3))
    data = load_fold_data(workspace, 0)
    skill = question_skills(data.questions, data.n_questions)
    train = training_entries(data.sequences, arrays.offsets[:-1] + Fold.load(workspace, 0).user_cut)
    rates = question_rates(data.sequences, train, data.n_questions, 20.0)
    return output_dir, arrays, parts, data, skill, rates


def stream_features(output_dir, arrays, parts, data, skill, rates, snapshot):
    """Fold 0's validation stream through the emulated API, group by group, the state
    started from `snapshot`; {global row: features}."""
    state = PastFeatureState(parts, skill, rates, snapshot)
    frame = stream_frame(arrays, Fold.load(Workspace(output_dir), 0).stream_index)
    env = Emulator(frame, EmulatorConfig(seed=5, max_group_students=40))
    global_row = dict(zip(np.asarray(arrays["row_id"]).tolist(), range(arrays.n_rows), strict=True))
    features = {}
    for test_df, _ in env.iter_test():
        values = state.group_features(test_df)
        questions = test_df[test_df["content_type_id"] == 0]
        rows = [global_row[r] for r in questions["row_id"].tolist()]
        features.update(zip(rows, values, strict=True))
        env.predict(pd.DataFrame({"row_id": questions["row_id"], "answered_correctly": 0.5}))
    return features, state


def training_snapshot(data, users) -> FeatureSnapshot:
    """The snapshot as train.csv alone gives it: each student's last training container
    has no elapsed time or explanation flag yet (the stream's next row brings them)."""
    seq = data.sequences
    saved = seq.elapsed.copy(), seq.explanation.copy()
    has = np.flatnonzero(data.train_length > 0)
    last = seq.offsets[has] + data.train_length[has] - 1
    first = seq.offsets[has] + seq.container_first[last]
    blank = np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last, strict=True)])
    try:
        seq.elapsed[blank], seq.explanation[blank] = 0, 0
        return build_feature_snapshot(seq, users, data.train_length)
    finally:
        seq.elapsed[:], seq.explanation[:] = saved


def test_a_stream_from_a_snapshot_equals_the_batch_features(real_fold, tmp_path):
    """From each student's training history (a snapshot, saved and read back), the
    stream's features, group by group with the outcomes from the next group's lists and
    the elapsed times from the next container, equal the batch features of those rows."""
    output_dir, arrays, parts, data, skill, rates = real_fold
    snapshot = training_snapshot(data, arrays.users)
    snapshot.save(tmp_path / "features.npz")
    loaded = FeatureSnapshot.load(tmp_path / "features.npz")
    streamed, state = stream_features(output_dir, arrays, parts, data, skill, rates, loaded)
    entries = np.flatnonzero(np.isin(data.sequences.row, list(streamed)))
    assert len(entries) == len(streamed) > 2_000
    got = np.stack([streamed[row] for row in data.sequences.row[entries].tolist()])
    assert_features_equal(got, past_features(data.sequences, entries, skill, rates))
    new = data.train_length[np.searchsorted(data.sequences.offsets, entries, "right") - 1] == 0
    assert 0 < new.mean() < 1  # new and continuing students both streamed
    used = state.state_bytes()
    assert used["history"] == sum(
        a.nbytes for a in (loaded.question, loaded.response, loaded.timestamp)
    )
    assert used["total"] == used["history"] + used["slots"] + used["stream"]
