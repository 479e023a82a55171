"""Reading an API group (common.data.api_group) and the API's rule that a group holds at
most one question container per student: the reader, the model's online state, the
past-event feature state and the baselines each refuse a group that breaks it, naming the
student and the containers, before writing any state; the real example test keeps it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from common.data.api_group import ContainerRuleError, read_group
from common.data.arrays import TrainArrays
from common.data.features import build_sequences
from common.data.past_features import FEATURE_NAMES
from common.data.past_state import PastFeatureState
from common.data.question_rates import QuestionRates
from common.errors import UserError
from common.model.saint import SAINT, ModelConfig
from common.report.baselines import BaselineConfig, baseline_scores
from common.stream.online import OnlineState
from tests.helpers import shared_file

CPU = torch.device("cpu")
N_QUESTIONS = 8
BROKEN = r"student 9 has question rows of 2 task containers \(task_container_id \[0, 1\]\)"


def group_frame(second_container: int = 0, lists_row: int = 0) -> pd.DataFrame:
    """Group 3 as the API serves it, students' rows interleaved:

        row 0  student 7  container 4  question 1   prior elapsed 15 s, explanation read
        row 1  student 9  container 0  question 3   (a first container: blank priors)
        row 2  student 7  container 4  question 2
        row 3  student 7  container 5  a lecture (rides along: not a question container)
        row 4  student 9  container `second_container`  question 4

    The previous group's lists ('[1, 0]', '[2, 3]') sit on row `lists_row`."""
    lists = [np.nan] * 5
    responses = list(lists)
    lists[lists_row], responses[lists_row] = "[1, 0]", "[2, 3]"
    return pd.DataFrame(
        {
            "row_id": np.arange(5, dtype=np.int64),
            "timestamp": np.array([10, 20, 10, 30, 20], dtype=np.int64),
            "user_id": np.array([7, 9, 7, 7, 9], dtype=np.int32),
            "content_id": np.array([1, 3, 2, 0, 4], dtype=np.int16),
            "content_type_id": np.array([0, 0, 0, 1, 0], dtype=np.int8),
            "task_container_id": np.array([4, 0, 4, 5, second_container], dtype=np.int16),
            "prior_question_elapsed_time": np.array(
                [15000, np.nan, 15000, np.nan, np.nan], dtype=np.float32
            ),
            "prior_question_had_explanation": np.array([True, None, True, None, None]),
            "prior_group_answers_correct": lists,
            "prior_group_responses": responses,
        },
        index=pd.Index(np.full(5, 3, dtype=np.int64), name="group_num"),
    )


def test_a_group_is_read_as_one_container_per_student():
    group = read_group(group_frame())
    assert group.n_rows == 5 and group.is_question.tolist() == [1, 1, 1, 0, 1]
    # question rows 0..3 are frame rows 0, 1, 2, 4; containers by student id: 7, then 9
    assert group.students.tolist() == [7, 9] and group.counts.tolist() == [2, 2]
    assert group.content.tolist() == [1, 3, 2, 4]
    assert group.container.tolist() == [0, 1, 0, 1] and group.rank.tolist() == [0, 0, 1, 1]
    assert [rows.tolist() for rows in group.container_rows()] == [[0, 2], [1, 3]]
    assert group.first.tolist() == [0, 1] and group.timestamp.tolist() == [10, 20]
    assert group.prior_elapsed_ms[0] == 15000 and np.isnan(group.prior_elapsed_ms[1])
    assert group.prior_explanation.tolist() == [1, -1]
    assert group.prior_correct.tolist() == [1, 0] and group.prior_responses.tolist() == [2, 3]
    # the lists are read from whichever row holds them (a reordered frame loses nothing)
    moved = read_group(group_frame(lists_row=3))
    assert moved.prior_correct.tolist() == [1, 0] and moved.prior_responses.tolist() == [2, 3]
    no_lists = group_frame().drop(columns=["prior_group_answers_correct"])
    assert read_group(no_lists).prior_correct is None


def test_the_reader_refuses_two_containers_of_one_student():
    with pytest.raises(ContainerRuleError, match=f"group_num 3: {BROKEN}"):
        read_group(group_frame(second_container=1))
    assert issubclass(ContainerRuleError, UserError)  # the scripts print it, exit 2


def test_the_real_example_test_keeps_the_rule():
    """Every group of the competition's example test reads as one container per student
    (42 students, 4 groups of 18 to 33 question rows)."""
    path = shared_file("riiid_example_test", "example_test_reconstructed.csv")
    stream = pd.read_csv(path)
    for _, frame in stream.groupby("group_num"):
        group = read_group(frame.set_index("group_num"))
        assert len(group.students) == frame["user_id"].nunique()
        assert group.counts.sum() == len(frame)


def test_the_online_state_refuses_two_containers_of_one_student():
    torch.manual_seed(0)
    config = ModelConfig(n_questions=N_QUESTIONS, d_model=16, n_heads=2, window=20)
    state = OnlineState(SAINT(config).eval(), np.ones(N_QUESTIONS, dtype=np.int8), CPU)
    with pytest.raises(ContainerRuleError, match=BROKEN):
        state.predict(group_frame(second_container=1))
    assert state.slot_of == {} and state.store.previous is None  # nothing written
    assert len(state.predict(group_frame())) == 4


def test_the_feature_state_refuses_two_containers_of_one_student():
    rates = QuestionRates(np.full(N_QUESTIONS, 0.5), np.ones(N_QUESTIONS), 0.5)
    parts = np.ones(N_QUESTIONS, dtype=np.int8)
    state = PastFeatureState(parts, np.zeros(N_QUESTIONS, dtype=np.int64), rates)
    with pytest.raises(ContainerRuleError, match=BROKEN):
        state.group_features(group_frame(second_container=1))
    assert state.slot_of == {} and state.previous is None  # nothing written
    assert state.group_features(group_frame()).shape == (4, len(FEATURE_NAMES))


def two_students() -> TrainArrays:
    """student 10: r0 t0 q1 | r1 t10 q2, r2 t10 q3 (one container); student 20: r3 t0 q1 |
    r4 t5 q2."""
    columns = {
        "row_id": np.arange(5, dtype=np.int64),
        "timestamp": np.array([0, 10, 10, 0, 5], dtype=np.int64),
        "content_id": np.array([1, 2, 3, 1, 2], dtype=np.int16),
        "content_type_id": np.zeros(5, dtype=np.int8),
        "task_container_id": np.array([0, 1, 1, 0, 1], dtype=np.int16),
        "user_answer": np.zeros(5, dtype=np.int8),
        "answered_correctly": np.array([1, 0, 1, 1, 0], dtype=np.int8),
        "prior_question_elapsed_time": np.full(5, np.nan, dtype=np.float32),
        "prior_question_had_explanation": np.full(5, -1, dtype=np.int8),
    }
    users, offsets = np.array([10, 20], dtype=np.int32), np.array([0, 3, 5], dtype=np.int64)
    return TrainArrays(users=users, offsets=offsets, columns=columns)


def test_the_baselines_refuse_a_stream_grouped_against_the_rule():
    """The baselines count a student's earlier containers as revealed: a stream whose
    group held two containers of one student is refused; one that keeps the rule scores
    as without its groups."""
    sequences = build_sequences(two_students(), np.ones(N_QUESTIONS, dtype=np.int8))
    entries, cut_row = np.arange(1, 5), np.array([1, 3])  # r0 trains, r1..r4 streamed
    config = BaselineConfig()
    plain = baseline_scores(sequences, entries, cut_row, N_QUESTIONS, config)
    kept = np.array([0, 0, 0, 1])  # student 20's second container in a group of its own
    grouped = baseline_scores(sequences, entries, cut_row, N_QUESTIONS, config, kept)
    for name, values in plain.items():
        np.testing.assert_array_equal(grouped[name], values)
    broken = np.array([0, 0, 0, 0])  # student 20's two containers both in group 0
    match = r"student 1 has question rows of 2 .*question \[0, 1\]\) in group 0"
    with pytest.raises(ContainerRuleError, match=match):
        baseline_scores(sequences, entries, cut_row, N_QUESTIONS, config, broken)
