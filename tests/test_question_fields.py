"""Each per-question field is declared once (common.data.question_fields): the question
sequences, the stream's dtypes and rings, the snapshot's blanks and the key stream are
built from the declaration, and no other module spells the list of fields."""

from __future__ import annotations

import re
from dataclasses import fields

import numpy as np

from common.data.features import KEY_FIELDS, SEQUENCE_FIELDS, QuestionSequences
from common.data.question_fields import (
    FIELD_DTYPES,
    NEXT_CONTAINER,
    QUESTION_FIELDS,
    StreamFacts,
)
from common.stream.cache_pool import CachePool
from common.stream.snapshot import build_snapshot
from common.stream.student_store import StudentStore
from tests.helpers import REPO


def tiny_sequences() -> QuestionSequences:
    """Two students of 3 and 2 questions; the first's last two share a container."""
    n = 5
    values = {f.name: np.arange(n).astype(f.dtype) for f in QUESTION_FIELDS}
    values["container_first"] = np.array([0, 1, 1, 0, 1], dtype=np.int32)
    return QuestionSequences(offsets=np.array([0, 3, 5]), row=np.arange(n), **values)


def test_the_sequences_and_the_stream_are_built_from_the_declaration():
    declared = tuple(f.name for f in QUESTION_FIELDS)
    assert declared == SEQUENCE_FIELDS
    assert [f.name for f in fields(QuestionSequences)] == ["offsets", "row", *declared, "past"]
    assert {f.name: f.dtype for f in QUESTION_FIELDS} == FIELD_DTYPES
    ranked = sorted(
        (f for f in QUESTION_FIELDS if f.key_rank is not None), key=lambda f: f.key_rank
    )
    assert [(k.name, k.size, k.start, k.own) for k in KEY_FIELDS] == [
        (f.name, f.key_size, f.key_start, f.own) for f in ranked
    ]
    # the store's rings: one per declared field, of its dtype
    store = StudentStore(4, False, np.arange(8), CachePool.__new__(CachePool))
    assert {name: ring.dtype for name, ring in store.rings.items()} == {
        name: np.dtype(dtype) for name, dtype in FIELD_DTYPES.items()
    }


def test_a_snapshot_blanks_what_the_next_container_reveals():
    sequences = tiny_sequences()
    snapshot = build_snapshot(sequences, np.array([10, 11]), np.array([3, 2]), 3)
    for f in QUESTION_FIELDS:
        values = snapshot.fields[f.name]
        assert values.dtype == np.dtype(f.dtype)
        last = values[0, -2:]  # the first student's last container: positions 1 and 2
        if f.revealed == NEXT_CONTAINER:
            assert (last == f.blank).all(), f.name
        else:
            assert (last == getattr(sequences, f.name)[1:3]).all(), f.name


def test_the_stream_computes_each_field_as_declared():
    facts = StreamFacts(
        content=np.array([3, 9, 99]), container=np.array([0, 0, 1]), start=np.array([5, 0]),
        timestamp=np.array([100, 200]), lag_ms=np.array([1000.0, np.nan]),
        parts=np.arange(10) % 7 + 1, correct=np.array([1, 0]), answers=np.array([2, -1]),
        prior_elapsed_ms=np.array([20_000.0, np.nan]), prior_explanation=np.array([1, -1]),
    )  # fmt: skip
    by_name = {f.name: f.stream(facts) for f in QUESTION_FIELDS}
    assert by_name["part"].tolist() == [4, 3, 0]  # an unknown question: part 0
    assert by_name["container_first"].tolist() == [5, 5, 0]
    assert by_name["answer"].tolist() == [2, 4]  # unknown: the pad
    assert by_name["elapsed"].tolist() == [21, 0]
    assert by_name["lag"].tolist()[2] == 0


def test_no_other_module_lists_the_fields():
    """A module that spelled the fields' names beside each other (the stream's dtypes,
    the store's filling) would have to change with every new field."""
    names = [f.name for f in QUESTION_FIELDS if f.name not in ("question", "part")]
    listing = re.compile("|".join(rf'"{n}"' for n in names))
    allowed = {"common/data/question_fields.py"}
    found = []
    for path in sorted((REPO / "common").rglob("*.py")):
        where = str(path.relative_to(REPO))
        if where in allowed:
            continue
        hits = set(listing.findall(path.read_text()))
        if len(hits) >= 4:
            found.append(f"{where}: {sorted(hits)}")
    assert found == []
