"""A local stand-in for the competition's `riiideducation` module, to try an exported
notebook before pushing it (04_infer.py --test-csv): make_env() serves the test file named
by $STAND_IN_STREAM (the competition's test format, as example_test.csv: a group_num
column, and prior_group_answers_correct / prior_group_responses on each group's first
row) group by group, holds the API's rules (one iteration; predict() once per group,
exactly the group's question rows, probabilities), and writes submission.csv in the
working folder at the end, as the competition's module does.

It imports nothing of this package: 04 copies this file as riiideducation/__init__.py
beside the exported code, where the notebook imports it as it would the real module.
"""

import os

import pandas as pd

STREAM_VARIABLE = "STAND_IN_STREAM"
_made = False


class LocalEnv:
    def __init__(self, path: str):
        stream = pd.read_csv(path)
        if "group_num" not in stream.columns:
            raise ValueError(f"{path}: a test file has a group_num column (see example_test.csv)")
        self.groups = [group for _, group in stream.groupby("group_num", sort=False)]
        self.iterated = False
        self.waiting = None
        self.predicted = []

    def iter_test(self):
        if self.iterated:
            raise Exception("You can only iterate over `iter_test()` once.")
        self.iterated = True
        for frame in self.groups:
            test_df = frame.set_index("group_num")
            question = test_df[test_df["content_type_id"] == 0]
            sample = pd.DataFrame({"row_id": question["row_id"], "answered_correctly": 0.5})
            self.waiting = set(question["row_id"])
            yield test_df, sample
            if self.waiting is not None:
                raise Exception(
                    "You must call `predict()` successfully before you can continue with "
                    "`iter_test()`"
                )
        pd.concat(self.predicted).to_csv("submission.csv", index=False)

    def predict(self, df):
        if self.waiting is None:
            raise Exception("You must get the next test sample from `iter_test()` first.")
        if list(df.columns) != ["row_id", "answered_correctly"]:
            raise Exception("predict() takes a DataFrame of row_id and answered_correctly")
        if set(df["row_id"]) != self.waiting or len(df) != len(self.waiting):
            raise Exception("predict(): not the group's question rows")
        values = df["answered_correctly"]
        if values.isna().any() or not values.between(0, 1).all():
            raise Exception("predict(): answered_correctly must be probabilities in [0, 1]")
        self.predicted.append(df.copy())
        self.waiting = None


def make_env():
    global _made
    if _made:
        raise Exception("You can only call `make_env()` once.")
    _made = True
    return LocalEnv(os.environ[STREAM_VARIABLE])
