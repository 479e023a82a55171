"""An emulator of the competition's test API (the `riiideducation` module).

    env = Emulator(stream_rows)
    for test_df, sample_prediction_df in env.iter_test():
        sample_prediction_df["answered_correctly"] = model(test_df)
        env.predict(sample_prediction_df)
    env.results()   # every question row with its label and prediction

Like the real API: groups arrive in time order and each must be predicted before the next
is handed out; test_df has index group_num and the columns of common.data.schema.TEST_COLUMNS
with the competition dtypes; the first row of each group carries the previous group's
answered_correctly and user_answer as string-encoded lists (lectures included, as -1;
'[]' in group 0); lecture rows are in the stream and are not predicted. A group holds at
most one question container per student (lectures ride along); its number of students is
drawn log-uniformly in 1..max_group_students, or its rows in a range (see group_order).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.data.arrays import TrainArrays, opens_container
from common.data.fold_data import Fold
from common.data.schema import QUESTION, TEST_COLUMNS, TRAIN_COLUMNS, TRAIN_DTYPES
from common.metrics import auc_or_nan
from common.options import at_least, option

# The dtypes of the test_df frames served. Where they come from: the competition's data
# page documents train.csv's types (row_id int64, timestamp int64, user_id int32,
# content_id int16, content_type_id int8, task_container_id int16,
# prior_question_elapsed_time float32, prior_question_had_explanation bool) and says the
# test frames carry the same columns, plus prior_group_answers_correct and
# prior_group_responses as string representations of lists. That the API serves exactly
# these numpy dtypes is NOT verified (the example test CSV carries no dtypes); the
# explanation flag is served as object (True / False / NaN: blank on a first bundle), also
# unverified. tests/test_stream.py pins the served types to the literal types above.
TEST_DTYPES = {name: TRAIN_DTYPES[name] for name in TEST_COLUMNS if name in TRAIN_DTYPES}
TEST_DTYPES["prior_question_had_explanation"] = "object"  # True / False / NaN, as served
TEST_DTYPES["prior_group_answers_correct"] = "object"  # a string per group's first row
TEST_DTYPES["prior_group_responses"] = "object"


class StreamError(RuntimeError):
    """The API was used out of its rules (out of turn, or a malformed prediction)."""


@dataclass
class EmulatorConfig:
    seed: int = option(0, "seed of the emulated stream's group sizes", range=at_least(0))
    # The real API served up to about a thousand students per group (Riiid's data page).
    max_group_students: int = option(1000, "most students in one emulated group", range=at_least(1))
    # (low, high): rows per group drawn uniformly in low..high instead, as in the real
    # example stream (groups of 18 to 33 rows, 15 to 23 students, many interleaved)
    group_rows: tuple[int, int] | None = option(
        None,
        "MIN,MAX: emulated groups of MIN to MAX rows, many students each (the real example "
        "test: 18,33) instead of a log-uniform number of students",
        range=at_least(1),
    )

    def __post_init__(self) -> None:
        if self.group_rows is not None:
            self.group_rows = tuple(self.group_rows)
            if len(self.group_rows) != 2 or not 0 < self.group_rows[0] <= self.group_rows[1]:
                raise ValueError(
                    f"group_rows: expected MIN,MAX with 0 < MIN <= MAX, got {self.group_rows}"
                )


def stream_frame(arrays: TrainArrays, stream_index: np.ndarray) -> pd.DataFrame:
    """Rows `stream_index` (stream order) as a frame with train.csv's columns and dtypes."""
    student = np.searchsorted(arrays.offsets, stream_index, side="right") - 1
    frame = {"user_id": np.asarray(arrays.users)[student].astype(np.int32)}
    for name in TRAIN_COLUMNS:
        if name == "user_id":
            continue
        values = np.asarray(arrays[name])[stream_index]
        if name == "prior_question_had_explanation":
            frame[name] = pd.array(np.where(values < 0, None, values == 1), dtype="boolean")
        else:
            frame[name] = values.astype(TRAIN_DTYPES[name])
    out = pd.DataFrame(frame)[TRAIN_COLUMNS]
    out["global_row"] = stream_index
    return out


def group_order(frame: pd.DataFrame, config: EmulatorConfig) -> tuple[np.ndarray, np.ndarray]:
    """Cut the stream into groups of whole containers, at most one question container per
    student (a lecture container rides along: it never counts toward that limit, so a
    student's lecture and next question bundle can share a group, as in the real API).

    Containers are taken in stream order. Group g holds up to n_g students' question
    containers (n_g drawn log-uniformly in 1..max_group_students), or, with group_rows,
    up to its number of rows (drawn uniformly in that range; the container that reaches
    it closes the group). A question container whose student already has one in the
    group that is filling goes to the student's next group instead, so each student's
    containers keep their order and groups stay close to time order even when few
    students are active at once.

    Returns (order, bounds): row order of the stream group by group, and group offsets
    (n_groups + 1,) into that order.
    """
    user = frame["user_id"].to_numpy()
    time = frame["timestamp"].to_numpy()
    container = frame["task_container_id"].to_numpy()
    starts = opens_container(time, container, np.r_[True, user[1:] != user[:-1]][: len(user)])
    first = np.flatnonzero(starts)
    rows = np.diff(np.append(first, len(frame)))
    question = frame["content_type_id"].to_numpy()[first] == QUESTION
    assigned = _assign_groups(user[first], rows, question, config)
    row_group = np.repeat(assigned, rows)
    order = np.lexsort((np.arange(len(frame)), row_group))
    sizes = np.bincount(row_group)
    sizes = sizes[sizes > 0]
    return order, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def _assign_groups(
    owner: np.ndarray, rows: np.ndarray, question: np.ndarray, config: EmulatorConfig
) -> np.ndarray:
    """The group of each container (in stream order), as group_order describes; owner,
    rows, question: each container's user id, number of rows, and whether it holds
    questions."""
    rng = np.random.default_rng(config.seed)
    top = np.log(config.max_group_students + 1)

    def draw_capacity() -> int:
        if config.group_rows is not None:
            low, high = config.group_rows
            return int(rng.integers(low, high + 1))
        return max(1, int(np.exp(rng.uniform(0, top))))

    capacity: list[int] = []
    fill: list[int] = []
    next_group: dict[int, int] = {}
    lowest_open = 0
    assigned = np.empty(len(owner), dtype=np.int64)
    for c in range(len(owner)):
        student = int(owner[c])
        g = max(next_group.get(student, 0), lowest_open)
        while True:
            while g >= len(capacity):
                capacity.append(draw_capacity())
                fill.append(0)
            if fill[g] < capacity[g]:
                break
            g += 1
        assigned[c] = g
        if config.group_rows is not None:
            fill[g] += int(rows[c])
        elif question[c]:
            fill[g] += 1
        if question[c]:
            next_group[student] = g + 1
        while lowest_open < len(capacity) and fill[lowest_open] >= capacity[lowest_open]:
            lowest_open += 1
    return assigned


class Emulator:
    """Serves a validation stream group by group under the API's rules."""

    def __init__(
        self,
        frame: pd.DataFrame,
        config: EmulatorConfig | None = None,
        group_sizes: np.ndarray | None = None,
    ):
        """frame: the stream's rows in time order with train.csv's columns. group_sizes
        (rows per group, in order) replays a known grouping instead of drawing one."""
        self.config = config or EmulatorConfig()
        frame = frame.reset_index(drop=True)
        if group_sizes is None:
            order, self.bounds = group_order(frame, self.config)
            frame = frame.iloc[order].reset_index(drop=True)
        else:
            self.bounds = np.concatenate(([0], np.cumsum(group_sizes))).astype(np.int64)
            if self.bounds[-1] != len(frame):
                raise ValueError(
                    f"group_sizes sum to {self.bounds[-1]}, the frame has {len(frame)} rows"
                )
        self.frame = frame
        is_question = self.frame["content_type_id"].to_numpy() == QUESTION
        self.is_question = is_question
        self.predictions = np.full(len(self.frame), np.nan)
        self._served = -1  # last group handed out
        self._predicted = -1  # last group predicted
        self._row_id = self.frame["row_id"].to_numpy()
        self._outcomes = {
            name: self.frame[name].to_numpy() for name in ("answered_correctly", "user_answer")
        }
        # every group's test_df and sample rows, built once: a group is then a slice of
        # each (a frame built per group cost most of the loop's own time)
        self._groups, self._samples, self._sample_bounds = self._group_frames()

    @classmethod
    def from_fold(cls, arrays: TrainArrays, fold: Fold, config: EmulatorConfig | None = None):
        return cls(stream_frame(arrays, fold.stream_index), config)

    @property
    def n_groups(self) -> int:
        return len(self.bounds) - 1

    def _test_columns(self) -> pd.DataFrame:
        test = self.frame[[c for c in TEST_COLUMNS if c in self.frame.columns]].copy()
        explanation = self.frame["prior_question_had_explanation"]
        test["prior_question_had_explanation"] = pd.Series(
            [np.nan if pd.isna(v) else bool(v) for v in explanation], dtype=object
        )
        typed = {c: d for c, d in TEST_DTYPES.items() if c in test.columns and d != "object"}
        return test.astype(typed)

    def _prior_lists(self, group: int) -> tuple[str, str]:
        if group == 0:
            return "[]", "[]"
        lo, hi = self.bounds[group - 1], self.bounds[group]
        correct, answers = (self._outcomes[name][lo:hi] for name in self._outcomes)
        return str(correct.astype(np.int64).tolist()), str(answers.astype(np.int64).tolist())

    def _group_frames(self) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
        """(every row as the groups' test_df serve it: the test columns, then the two
        prior_group_* columns, NaN but on each group's first row, indexed by group_num;
        the questions' sample rows, the same index; where each group's samples start)."""
        test = self._test_columns()
        sizes = np.diff(self.bounds)
        group_num = np.repeat(np.arange(self.n_groups, dtype=np.int64), sizes)
        test.index = pd.Index(group_num, name="group_num")
        firsts = self.bounds[:-1][sizes > 0]
        lists = [self._prior_lists(g) for g in np.flatnonzero(sizes > 0)]
        for i, column in enumerate(("prior_group_answers_correct", "prior_group_responses")):
            values = np.full(len(test), np.nan, dtype=object)
            values[firsts] = [pair[i] for pair in lists]
            # a Series keeps the object dtype (a bare array would become str)
            test[column] = pd.Series(values, index=test.index, dtype=object)
        question = self.is_question
        samples = pd.DataFrame(
            {"row_id": self._row_id[question], "answered_correctly": 0.5},
            index=pd.Index(group_num[question], name="group_num"),
        )
        questions_before = np.concatenate(([0], np.cumsum(question)))
        return test, samples, questions_before[self.bounds]

    def iter_test(self) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
        for group in range(self.n_groups):
            if self._predicted != group - 1:
                raise StreamError(
                    f"group {group - 1} was handed out but never predicted: call "
                    "env.predict(sample_prediction_df) once per group before the next"
                )
            lo, hi = self.bounds[group], self.bounds[group + 1]
            first, last = self._sample_bounds[group], self._sample_bounds[group + 1]
            # copies: the caller may change them
            test_df = self._groups.iloc[lo:hi].copy()
            sample = self._samples.iloc[first:last].copy()
            self._served = group
            yield test_df, sample

    def predict(self, df: pd.DataFrame) -> None:
        group = self._served
        if group < 0:
            raise StreamError("predict() called before iter_test() handed out a group")
        if self._predicted == group:
            raise StreamError(f"predict() called twice for group {group}")
        for column in ("row_id", "answered_correctly"):
            if column not in df.columns:
                raise StreamError(f"predict(): the frame has no column {column!r}")
        lo, hi = self.bounds[group], self.bounds[group + 1]
        expected = self._row_id[lo:hi][self.is_question[lo:hi]]
        given = df["row_id"].to_numpy()
        same_order = len(given) == len(expected) and np.array_equal(given, expected)
        if not same_order:
            self._check_row_ids(group, given, expected)
        values = df["answered_correctly"]
        if values.dtype.kind != "f":
            values = pd.to_numeric(values, errors="coerce")
        values = values.to_numpy(dtype=float)
        bad = np.isnan(values) | (values < 0) | (values > 1)
        if bad.any():
            i = int(np.argmax(bad))
            raise StreamError(
                f"predict(): answered_correctly must be a probability in [0, 1]; row_id "
                f"{given[i]} has {values[i]}"
            )
        position = lo + np.flatnonzero(self.is_question[lo:hi])
        if not same_order:
            values = pd.Series(values, index=given)[expected].to_numpy()
        self.predictions[position] = values
        self._predicted = group

    @staticmethod
    def _check_row_ids(group: int, given: np.ndarray, expected: np.ndarray) -> None:
        index = pd.Index(given)
        if index.has_duplicates:
            raise StreamError(
                f"predict(): row_id {index[index.duplicated()][0]} appears more than once in "
                f"group {group}"
            )
        missing = np.setdiff1d(expected, given)
        if len(missing):
            raise StreamError(
                f"predict(): {len(missing)} question rows of group {group} are missing, "
                f"e.g. row_id {missing[0]}"
            )
        extra = np.setdiff1d(given, expected)
        if len(extra):
            raise StreamError(
                f"predict(): row_id {extra[0]} is not a question row of group {group}"
            )

    def results(self) -> pd.DataFrame:
        """Every question row with label and prediction; only after the last group."""
        if self._predicted != self.n_groups - 1:
            raise StreamError(
                f"results(): {self.n_groups - 1 - self._predicted} groups were not predicted"
            )
        rows = self.frame[self.is_question]
        predictions = self.predictions[self.is_question]
        if np.isnan(predictions).any():
            raise StreamError("results(): some question rows have no prediction")
        group = np.searchsorted(self.bounds, np.flatnonzero(self.is_question), side="right") - 1
        return pd.DataFrame(
            {
                "row_id": rows["row_id"].to_numpy(),
                "global_row": rows["global_row"].to_numpy()
                if "global_row" in rows
                else np.full(len(rows), -1),
                "user_id": rows["user_id"].to_numpy(),
                "content_id": rows["content_id"].to_numpy(),
                "group_num": group,
                "answered_correctly": rows["answered_correctly"].to_numpy(),
                "prediction": predictions,
            }
        )

    def score(self) -> float:
        results = self.results()
        return auc_or_nan(
            results["answered_correctly"].to_numpy(), results["prediction"].to_numpy()
        )
