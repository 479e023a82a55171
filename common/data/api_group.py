"""One group of the test API (a `test_df` of iter_test), read once for every state that
streams it: the model's (common.stream.online), the past-event features'
(common.data.past_state); and the API's grouping rule, checked here for them and for the
baselines (common.report.baselines), which rely on it too.

The rule, from the competition's data page: "Each group will contain interactions from
many different users, but no more than one task_container_id of questions from any single
user." So a student's question rows in a group are one task container: answered before
any of their outcomes is known, and revealed together by the next group's lists. Lecture
rows ride along (a student's lecture and next question container may share a group) and
do not count. The real example test holds one task_container_id per student and group,
and so does every group the emulator cuts (common.stream.emulator.group_order); a group
that breaks the rule is refused (ContainerRuleError), never silently merged.

The first row of a group carries the previous group's outcomes, prior_group_answers_correct
and prior_group_responses, as string-encoded lists with one entry per row of that group
(lectures included). This module ships in the Kaggle bundle: Python 3.7, numpy 1.19,
pandas 1.1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.data.schema import LECTURE, N_CHOICES, QUESTION, TEST_COLUMNS
from common.errors import UserError

# the columns a group's question rows are read from (the API serves all of them)
GROUP_COLUMNS = (
    "user_id",
    "timestamp",
    "content_id",
    "content_type_id",
    "task_container_id",
    "prior_question_elapsed_time",
    "prior_question_had_explanation",
)
CORRECT_LIST, RESPONSES_LIST = "prior_group_answers_correct", "prior_group_responses"


class ContainerRuleError(UserError, ValueError):
    """A group held question rows of two task containers of one student: the API serves
    at most one per student and group, and every state streaming it relies on that."""


def check_one_container(
    users: np.ndarray,
    containers: np.ndarray,
    groups: np.ndarray | None = None,
    where: str = "a group",
    container_name: str = "task_container_id",
) -> None:
    """Raise ContainerRuleError where a student's question rows (users[i]) in one group
    (groups[i]; None: all in one group) come from more than one container (containers[i]);
    the message names the first such student, group and containers found."""
    users, containers = np.asarray(users), np.asarray(containers)
    group_of = np.zeros(len(users), dtype=np.int64) if groups is None else np.asarray(groups)
    order = np.lexsort((containers, users, group_of))
    group, user, container = group_of[order], users[order], containers[order]
    same_student = (group[1:] == group[:-1]) & (user[1:] == user[:-1])
    broken = np.flatnonzero(same_student & (container[1:] != container[:-1]))
    if not len(broken):
        return
    i = int(broken[0])
    found = np.unique(container[(group == group[i]) & (user == user[i])]).tolist()
    in_group = "" if groups is None else f" in group {group[i]}"
    raise ContainerRuleError(
        f"{where}: student {user[i]} has question rows of {len(found)} task containers "
        f"({container_name} {found}){in_group}; the API serves at most one question "
        f"container per student and group (a student's question rows in one group share "
        f"one task_container_id), and the streaming states rely on it"
    )


def outcome_list(text: str) -> np.ndarray:
    """A prior_group_* string ('[1, 0, -1]') as an int64 array."""
    return np.asarray(json.loads(text), dtype=np.int64)


class GroupError(UserError, ValueError):
    """A test group the API would not serve (GroupChecker): where, column, found, expected."""


# integer columns of a test group, each with the least value it may hold (None: any; an
# unknown student or question, even a negative id, is predicted as new)
INTEGER_COLUMNS = {
    "row_id": 0,
    "timestamp": 0,
    "user_id": None,
    "content_id": None,
    "content_type_id": None,  # 0 or 1: checked on its own
    "task_container_id": None,
}
CORRECT_VALUES, RESPONSE_VALUES = (0, 1), tuple(range(N_CHOICES))  # of a question row; -1: lecture


class GroupChecker:
    """What every test group must hold before a state reads it, checked group by group
    in the order served: the competition's columns; integers where it has integers;
    content_type_id 0 (question) or 1 (lecture); row_ids unique in the group; a blank or
    non-negative prior_question_elapsed_time; prior_question_had_explanation True, False
    or blank; and on the first row the previous group's outcome lists, parsed, one entry
    per row of that group (-1 on its lectures, 0/1 and 0-3 on its questions; [] before
    the first group). The notebook checks the real API's frames with it
    (common.stream.api_loop) and 04 checks a --test-csv file with it before any work
    (common.data.api_file), so both refuse the same groups.

    `check(test_df, locate)`: `locate(i)` names the frame's row i in the message
    ('group_num 3, row 5' for the API, 'FILE, line 17' for a file)."""

    def __init__(self) -> None:
        self.previous_types: np.ndarray | None = None  # the last group's content types

    def check(self, test_df: pd.DataFrame, locate=None) -> None:
        locate = locate or (lambda i: f"{_name(test_df)}, row {i}")
        missing = [c for c in TEST_COLUMNS if c not in test_df.columns]
        if missing:
            raise GroupError(
                f"{locate(0)}: no column {missing[0]!r}; expected the competition's "
                f"columns {list(TEST_COLUMNS)} (found {list(test_df.columns)})"
            )
        values = {
            name: _integers(test_df, name, low, locate) for name, low in INTEGER_COLUMNS.items()
        }
        kind = values["content_type_id"]
        _refuse_first(
            locate,
            (kind != QUESTION) & (kind != LECTURE),
            "content_type_id",
            kind,
            "0 (question) or 1 (lecture)",
        )
        row_id = values["row_id"]
        if len(np.unique(row_id)) < len(row_id):
            order = np.argsort(row_id, kind="stable")
            twice = np.zeros(len(row_id), dtype=bool)
            twice[order[1:][row_id[order][1:] == row_id[order][:-1]]] = True
            _refuse_first(locate, twice, "row_id", row_id, "a row_id used once")
        raw = test_df["prior_question_elapsed_time"].to_numpy()
        if raw.dtype.kind == "f":
            bad = (raw < 0) | np.isinf(raw)
        else:
            elapsed = pd.to_numeric(test_df["prior_question_elapsed_time"], errors="coerce")
            elapsed = elapsed.to_numpy(dtype=np.float64)
            bad = (np.isnan(elapsed) & ~pd.isna(raw)) | (elapsed < 0) | np.isinf(elapsed)
        _refuse_first(
            locate, bad, "prior_question_elapsed_time", raw, "finite milliseconds >= 0, or blank"
        )
        flags = test_df["prior_question_had_explanation"].to_numpy()
        if flags.dtype != bool:
            bad = np.array(
                [not (v is None or v != v or isinstance(v, (bool, np.bool_))) for v in flags],
                dtype=bool,
            )
            # a CSV column with one bad value reads as text throughout: name it, not a 'True'
            worse = bad & ~np.isin(flags.astype(str), ("True", "False"))
            bad = worse if worse.any() else bad
            _refuse_first(
                locate, bad, "prior_question_had_explanation", flags, "True, False or blank"
            )
        self._check_lists(test_df, locate)
        self.previous_types = kind

    def _check_lists(self, test_df: pd.DataFrame, locate) -> None:
        previous = self.previous_types
        rows = 0 if previous is None else len(previous)
        for name, allowed in ((CORRECT_LIST, CORRECT_VALUES), (RESPONSES_LIST, RESPONSE_VALUES)):
            text = test_df[name].iat[0] if len(test_df) else "[]"
            where = f"{locate(0)}, column {name!r}"
            try:
                found = json.loads(text) if isinstance(text, str) else None
            except ValueError:
                found = None
            if not isinstance(found, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in found
            ):
                raise GroupError(
                    f"{where}: found {text!r}; expected the previous group's outcomes on "
                    f"the group's first row, a list of integers such as [1, 0, -1]"
                )
            if len(found) != rows:
                before = (
                    "no group before this one"
                    if previous is None
                    else (f"the previous group had {rows} rows")
                )
                raise GroupError(
                    f"{where}: {len(found)} entries; expected one per row of the previous "
                    f"group ({before})"
                )
            if not rows:
                continue
            values = np.asarray(found, dtype=np.int64)
            lecture = previous == LECTURE
            low, high = allowed[0], allowed[-1]  # ranges
            bad = np.where(lecture, values != -1, (values < low) | (values > high))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                what = (
                    "-1 (a lecture row)"
                    if lecture[i]
                    else (f"one of {list(allowed)} (a question row)")
                )
                raise GroupError(
                    f"{where}: entry {i} is {values[i]}; expected {what} for row {i} of "
                    "the previous group"
                )


def _refuse_first(locate, bad: np.ndarray, column: str, values, expected: str) -> None:
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        value = values[i].item() if isinstance(values[i], np.generic) else values[i]
        found = "a blank" if pd.isna(value) else repr(value)
        raise GroupError(f"{locate(i)}, column {column!r}: found {found}; expected {expected}")


def _integers(test_df: pd.DataFrame, name: str, low: int, locate) -> np.ndarray:
    """Column `name` as int64, refused (the first row) where a value is blank, not an
    integer or below `low`."""
    raw = test_df[name].to_numpy()
    if raw.dtype.kind in "iu":
        values = raw.astype(np.int64)
    else:
        number = pd.to_numeric(test_df[name], errors="coerce").to_numpy(dtype=np.float64)
        whole = ~np.isnan(number) & (number == np.round(number)) & (np.abs(number) < 2**62)
        _refuse_first(locate, ~whole, name, raw, "an integer")
        values = number.astype(np.int64)
    if low is not None:
        _refuse_first(locate, values < low, name, raw, f"an integer >= {low}")
    return values


@dataclass
class ApiGroup:
    """A group's question rows as containers, one per student (checked), and the previous
    group's outcomes. Question rows are numbered 0..q-1 in the frame's order; containers
    0..U-1 in the order of their students' ids."""

    n_rows: int  # rows of the frame, lectures included
    is_question: np.ndarray  # (n_rows,) bool
    content: np.ndarray  # (q,) int64 content_id of each question row
    container: np.ndarray  # (q,) int64 the container of each question row
    rank: np.ndarray  # (q,) int64 its place in the container, in frame order
    students: np.ndarray  # (U,) int64 the container's student
    first: np.ndarray  # (U,) int64 the container's first question row
    counts: np.ndarray  # (U,) int64 questions in the container
    # of each container's first question row: what the API reports on it
    timestamp: np.ndarray  # (U,) int64 ms
    prior_elapsed_ms: np.ndarray  # (U,) float64, NaN: unknown
    prior_explanation: np.ndarray  # (U,) int8: -1 blank, 0, 1
    # the previous group's outcomes, one per row of it (None: the frame has no lists)
    prior_correct: np.ndarray | None
    prior_responses: np.ndarray | None

    def container_rows(self) -> list[np.ndarray]:
        """Each container's question rows, in frame order."""
        order = np.argsort(self.container, kind="stable")
        return np.split(order, np.cumsum(self.counts)[:-1])


def read_group(test_df: pd.DataFrame) -> ApiGroup:
    """`test_df` read as the API serves it; raises ContainerRuleError if a student has
    question rows of two task containers in it."""
    missing = [name for name in GROUP_COLUMNS if name not in test_df.columns]
    if missing:
        raise ValueError(f"a test group needs the columns {missing}; found {list(test_df)}")
    is_question = test_df["content_type_id"].to_numpy() == QUESTION
    users = test_df["user_id"].to_numpy()[is_question].astype(np.int64)
    check_one_container(
        users, test_df["task_container_id"].to_numpy()[is_question], where=_name(test_df)
    )
    students, first, container, counts = np.unique(
        users, return_index=True, return_inverse=True, return_counts=True
    )
    container = container.reshape(-1).astype(np.int64)  # numpy 2.0 kept the input's shape
    rank = np.zeros(len(users), dtype=np.int64)
    order = np.argsort(container, kind="stable")
    rank[order] = np.arange(len(users)) - np.repeat(np.cumsum(counts) - counts, counts)
    flags = test_df["prior_question_had_explanation"].to_numpy()[is_question][first]
    correct, responses = _previous_outcomes(test_df)
    return ApiGroup(
        n_rows=len(test_df),
        is_question=is_question,
        content=test_df["content_id"].to_numpy()[is_question].astype(np.int64),
        container=container,
        rank=rank,
        students=students,
        first=first.astype(np.int64),
        counts=counts.astype(np.int64),
        timestamp=test_df["timestamp"].to_numpy()[is_question][first].astype(np.int64),
        prior_elapsed_ms=test_df["prior_question_elapsed_time"]
        .to_numpy()[is_question][first]
        .astype(np.float64),
        prior_explanation=np.array(
            [-1 if pd.isna(v) else int(bool(v)) for v in flags], dtype=np.int8
        ),
        prior_correct=correct,
        prior_responses=responses,
    )


def _previous_outcomes(test_df: pd.DataFrame) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(correct, responses) of the previous group: the lists of the first row that holds
    them (the API puts them on the group's first row; a reordered frame loses nothing);
    (None, None) where no row does."""
    if CORRECT_LIST not in test_df.columns:
        return None, None
    correct = test_df[CORRECT_LIST].to_numpy()
    given = [i for i, value in enumerate(correct) if isinstance(value, str)]
    if not given:
        return None, None
    responses = None
    if RESPONSES_LIST in test_df.columns:
        responses = outcome_list(test_df[RESPONSES_LIST].to_numpy()[given[0]])
    return outcome_list(correct[given[0]]), responses


def _name(test_df: pd.DataFrame) -> str:
    """'group_num 3' for a frame indexed by group_num as the API serves it, else 'a group'."""
    if test_df.index.name == "group_num" and len(test_df):
        return f"group_num {test_df.index[0]}"
    return "a group"
