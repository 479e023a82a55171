"""The competition's test-API loop, the same for the local emulator (04_infer.py) and the
real `riiideducation` API in a Kaggle notebook: each group is predicted from its test_df's
question rows, as the organisers' starter code does, and handed back before the next group
is asked for. This module ships in the Kaggle bundle: Python 3.7, torch 1.7, pandas 1.1."""

from __future__ import annotations

import time

import pandas as pd
from tqdm import tqdm

from common.data.api_group import GroupChecker
from common.data.schema import QUESTION


def group_predictions(test_df: pd.DataFrame, probability) -> pd.DataFrame:
    """The frame env.predict() takes: row_id and answered_correctly of test_df's question
    rows, in test_df's order (`probability` has one value per question row). Built from
    test_df itself, not from sample_prediction_df, whose rows the API does not promise to
    be the group's question rows."""
    question = test_df["content_type_id"].to_numpy() == QUESTION
    row_id = test_df["row_id"].to_numpy()[question]
    if len(row_id) != len(probability):
        raise ValueError(
            f"{len(probability)} predictions for a group of {len(row_id)} question rows"
        )
    return pd.DataFrame({"row_id": row_id, "answered_correctly": probability})


def stream_loop(env, state, progress: bool = True) -> dict:
    """Run the API loop: predict each group with `state.predict(test_df)` (an
    common.stream.online.OnlineState), hand the predictions back. Returns counts and timing: the
    whole loop, the part spent predicting (everything but the API's own calls,
    iter_test and env.predict) and the state's split of it (`time_split`: its cache
    builds' seconds, those of the feature state and trees where it has them), with the
    rate of the loop less the builds (what a stream whose students were all cached runs
    at: a sample of a stream's first rows holds more builds per row than the whole)."""
    rows = groups = 0
    predicting = 0.0
    checker = GroupChecker()  # what the API serves is checked before any state reads it
    begin = time.perf_counter()
    bar = tqdm(env.iter_test(), desc="groups", unit=" groups", disable=not progress)
    for test_df, _sample in bar:
        checker.check(test_df)
        start = time.perf_counter()
        predictions = group_predictions(test_df, state.predict(test_df))
        predicting += time.perf_counter() - start
        env.predict(predictions)
        rows += len(predictions)
        groups += 1
        if progress:
            bar.set_postfix(rows=rows, refresh=False)
    seconds = time.perf_counter() - begin
    split = state.time_split()
    steps = seconds - split["build_seconds"]
    timing = {
        "rows": rows,
        "groups": groups,
        "seconds": seconds,
        "rows_per_s": rows / seconds if seconds else float("nan"),
        "predict_seconds": predicting,
        "predict_rows_per_s": rows / predicting if predicting else float("nan"),
        "rows_per_s_without_builds": rows / steps if steps > 0 else float("nan"),
    }
    timing.update(split)
    return timing
