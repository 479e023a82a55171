"""Peak memory of the Kaggle notebook's state at Riiid's size, on the CPU: a synthetic bundle
of 393,656 students (the model's snapshot of each student's last questions, and the trees'
feature snapshot of every student's whole history: histories of Riiid's mean length, about
101M questions in all; trees of the full 300 rounds fitted on a small synthetic sample, their
size does not grow with the students) loaded as the notebook loads it
(common.stream.kaggle_notebook.bundle_state: the feature state's planned bytes reserved out of
the default budget, COMPETITION_STATE_GB, first; the rest sizes the model's cache pool) for
the reference model (d256, 2+2 layers); then a group with a new student, then groups of
students until the cache pool is full. Each phase prints the process's peak RSS so far; the
bundle is written by a child process, so the peak is the state's alone.

    python -m bench.bench_state_memory          # bench/results/state_memory.txt
    python -m bench.bench_state_memory --families  # bench/results/state_memory_families.txt

--families: the bundle ships every architecture family (configs/riiid.toml's LSTM and
LQ-RNN beside SAINT, fresh weights, each student's recurrent state in their snapshots)
and the notebook streams their stacked blend with the trees; the state's memory, and
the stream's rows/s over groups of 18 to 33 students who are cached already (the
steady state) and over the groups that filled the pool (each student's first group
builds their SAINT cache).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.ensemble import HistGradientBoostingClassifier

from bench.benchlib import RECIPES, RESULTS, Report, load_average, peak_gb
from common.cli import recipe_config
from common.data.past_features import CATEGORICAL, FEATURE_NAMES
from common.data.past_state import FeatureSnapshot
from common.data.question_rates import QuestionRates
from common.model.checkpoint import save_model
from common.model.registry import ARCH_NAMES, build_model
from common.model.saint import SAINT, ModelConfig
from common.model.trees.blend_bundle import TREES_WEIGHT, BlendBundle
from common.model.trees.boosting import TreesConfig, to_trees
from common.stream.blend_state import BlendState
from common.stream.kaggle_notebook import COMPETITION_STATE_GB, bundle_state
from common.stream.online import FIELD_DTYPES, Snapshot
from common.train.config import TrainConfig
from common.workspace import Bundle, ModelFolder

STUDENTS, QUESTIONS = 393_656, 13_523
MODEL = ModelFolder.name_of(0)  # the bundle's model folder
GAP_MS = 30_000  # between a student's questions


def history_lengths(students: int) -> np.ndarray:
    """Questions per student: geometric of Riiid's mean (257), at most 17,000."""
    rng = np.random.default_rng(0)
    return np.minimum(rng.geometric(1 / 257, students), 17_000).astype(np.int64)


def synthetic_snapshot(
    length: int, path: Path, n_items: np.ndarray, states: np.ndarray | None = None
) -> None:
    """The model's snapshot: each student's last `length` questions (and a recurrent
    model's `states`)."""
    rng = np.random.default_rng(0)
    students = len(n_items)
    fields = {k: np.zeros((students, length), dtype=d) for k, d in FIELD_DTYPES.items()}
    fields["question"][:] = rng.integers(0, QUESTIONS, (1, length))
    fields["timestamp"][:] = np.arange(length) * GAP_MS
    users = np.arange(students, dtype=np.int64)
    Snapshot(users, n_items, n_items - 1, fields, states).save(path)


def synthetic_feature_snapshot(n_items: np.ndarray) -> FeatureSnapshot:
    """The trees' feature snapshot: every student's whole history (`n_items` questions,
    the last one pending), with random questions and outcomes."""
    rng = np.random.default_rng(1)
    students, total = len(n_items), int(n_items.sum())
    start = np.cumsum(n_items) - n_items
    timestamp = np.arange(total, dtype=np.int64)
    timestamp -= np.repeat(start, n_items)
    timestamp *= GAP_MS
    filed = n_items - 1
    return FeatureSnapshot(
        users=np.arange(students, dtype=np.int64),
        start=start,
        length=n_items,
        filed=filed,
        question=rng.integers(0, QUESTIONS, total, dtype=np.int16),
        response=rng.integers(0, 2, total, dtype=np.int8),
        timestamp=timestamp,
        explained=filed // 4,
        explanation_known=filed.copy(),
        elapsed_sum=filed * 20.0,
        elapsed_count=filed.copy(),
        previous_elapsed=np.where(filed > 0, 20.0, np.nan),
    )


def synthetic_blend(rows: int = 20_000) -> BlendBundle:
    """Trees of 04's settings (all rounds, no early stopping: the largest they get) fitted
    on `rows` synthetic feature rows, with synthetic question rates and skills; weight 0.5."""
    rng = np.random.default_rng(2)
    config = TreesConfig()
    features = rng.random((rows, len(FEATURE_NAMES)))
    categorical = [name in CATEGORICAL for name in FEATURE_NAMES]
    features[:, categorical] = rng.integers(1, 8, (rows, sum(categorical)))
    signal = features[:, :4].sum(axis=1) - 2.0
    labels = (rng.random(rows) < 1 / (1 + np.exp(-2 * signal))).astype(np.int64)
    model = HistGradientBoostingClassifier(
        max_iter=config.boost_rounds,
        learning_rate=config.boost_learning_rate,
        max_leaf_nodes=config.boost_leaves,
        early_stopping=False,
        categorical_features=categorical,
        random_state=0,
    ).fit(features, labels)
    trees = to_trees(model, np.arange(len(FEATURE_NAMES)))
    rates = QuestionRates(rng.random(QUESTIONS), rng.integers(0, 10**4, QUESTIONS) * 1.0, 0.65)
    skill = rng.integers(0, 188, QUESTIONS + 1)
    skill[-1] = -1
    record = {"trees": f"synthetic: {model.n_iter_} rounds on {rows:,} rows"}
    return BlendBundle(trees, rates, skill, 0.5, record)


def write_bundle(bundle: Bundle, students: int, length: int, families: bool = False) -> None:
    """The bundle's state/ and <MODEL>/ trees, as 04's export lays them out; with
    `families`, every other architecture's checkpoint and snapshot (recurrent states)
    beside them, and the stacked blend's weights."""
    n_items = history_lengths(students)
    bundle.state.mkdir(parents=True)
    np.save(str(bundle.parts), np.random.default_rng(3).integers(1, 8, QUESTIONS, np.int8))
    synthetic_snapshot(length, bundle.snapshot, n_items)
    synthetic_feature_snapshot(n_items).save(bundle.features)
    blend = synthetic_blend()
    np.save(str(bundle.skills), blend.skill)  # skill by question, as 04 ships it
    model = bundle.model(MODEL)
    model.path.mkdir()
    if families:
        for member in family_members():
            model.member(member.arch).path.mkdir()
            save_model(model.member(member.arch).checkpoint(), member)
            states = np.zeros((students, *member.empty_cache(1).to_arrays().shape[1:]), np.float32)
            path = bundle.member_snapshot(member.arch)
            synthetic_snapshot(member.config.ring_context, path, n_items, states)
        names = [*ARCH_NAMES, TREES_WEIGHT]
        blend.weight, blend.weights = None, {name: 0.25 for name in names}
    blend.save(model)


def family_members() -> list:
    """Fresh models of every other architecture, at configs/riiid.toml's sizes."""
    members = []
    for arch in ARCH_NAMES[1:]:
        config, _ = recipe_config(RIIID_RECIPE, "train", TrainConfig, leave_out=("fold",))
        members.append(build_model(arch, config.model_config(QUESTIONS, arch=arch)).eval())
    return members


def write_bundle_apart(bundle: Bundle, students: int, length: int, families: bool) -> None:
    """write_bundle in a child process: its arrays never count in this one's peak."""
    args = (bundle, students, length, families)
    child = get_context("fork").Process(target=write_bundle, args=args)
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"writing the synthetic bundle failed (exit code {child.exitcode})")


def group(users: np.ndarray, timestamp: int, previous_rows: int = 0) -> pd.DataFrame:
    """A test_df of one question per student, as the API serves it; with previous_rows,
    its first row carries the previous group's outcomes (all correct, answer 1)."""
    n = len(users)
    frame = pd.DataFrame(
        {
            "row_id": np.arange(n),
            "timestamp": np.full(n, timestamp, dtype=np.int64),
            "user_id": users.astype(np.int32),
            "content_id": np.full(n, 5, dtype=np.int16),
            "content_type_id": np.zeros(n, dtype=np.int8),
            "task_container_id": np.zeros(n, dtype=np.int16),
            "prior_question_elapsed_time": np.full(n, np.nan, dtype=np.float32),
            "prior_question_had_explanation": pd.array([pd.NA] * n, dtype="boolean"),
            "prior_group_answers_correct": [np.nan] * n,
            "prior_group_responses": [np.nan] * n,
        }
    )
    if previous_rows:
        frame = frame.astype({"prior_group_answers_correct": object})
        frame = frame.astype({"prior_group_responses": object})
        frame.at[0, "prior_group_answers_correct"] = str([1] * previous_rows)
        frame.at[0, "prior_group_responses"] = str([1] * previous_rows)
    return frame


def say_filled(say, state: BlendState, students: int, seconds: float, budget: int) -> None:
    """The state as bundle_state built it: the feature state's bytes (total, per student),
    the reserve taken for it, and the model's rings and pool in what is left."""
    model = state.model_state.state_bytes()
    features = state.features.state_bytes()
    reserved = state.model_state.store.budget.reserved_bytes
    questions = len(state.features.base[0])  # the snapshot's flat history
    say(f"filled {students:,} students in {seconds:.0f} s under a {budget / 1e9:g} GB "
        f"budget: {reserved / 1e9:.2f} GB reserved for the feature state and any other "
        f"architecture with rings of its own, then rings for "
        f"{model['capacity']:,} students {model['student_state'] / 1e9:.2f} GB, the states "
        f"of the members that read them {members_gb(state):.2f} GB and a pool "
        f"of {model['cache_students']:,} caches {model['cache_pool'] / 1e9:.2f} GB; "
        f"peak RSS {peak_gb():.2f} GB")  # fmt: skip
    say(f"feature state: {features['total'] / 1e9:.2f} GB = history of {questions:,} "
        f"questions {features['history'] / 1e9:.2f} GB ({features['history'] / questions:.0f} "
        f"B each) + slots for {state.features.capacity:,} students "
        f"{features['slots'] / 1e9:.3f} GB; {features['total'] / students:,.0f} B per "
        f"student")  # fmt: skip


def members_gb(state: BlendState) -> float:
    """GB the members that read the model's rings hold (common.stream.shared_store)."""
    return sum(s.state_bytes()["total"] for s in state.others.values() if s.shared) / 1e9


def say_members(state: BlendState, held: dict) -> str:
    """Each other architecture's state, and whether it reads the model's rings."""
    return ", ".join(
        f"{n} {held[f'{n}_state'] / 1e9:.2f} GB"
        + (" (reads the model's rings)" if s.shared else " (rings of its own)")
        for n, s in state.others.items()
    )


RIIID_RECIPE = RECIPES / "riiid.toml"  # the families' sizes (its [train.lstm], [train.lqrnn])


def steady_rows_per_s(state: BlendState, pool: int, groups: int, previous: int) -> str:
    """The stream's rows/s over `groups` groups of 18 to 33 cached students, one new
    question each (a later timestamp every group, the previous group's outcomes on its
    first row: `previous` rows before the first): the Kaggle path's steady state."""
    rng = np.random.default_rng(4)
    rows, clock = 0, time.perf_counter()
    for g in range(groups):
        users = rng.choice(pool, size=int(rng.integers(18, 34)), replace=False)
        state.predict(group(users, 10**12 + (g + 1) * GAP_MS, previous))
        rows, previous = rows + len(users), len(users)
    seconds = time.perf_counter() - clock
    return (
        f"steady stream of the blend: {rows:,} rows in {groups:,} groups of 18-33 cached "
        f"students, {seconds:.1f} s, {rows / seconds:,.0f} rows/s; peak RSS {peak_gb():.2f} GB"
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--students", type=int, default=STUDENTS)
    parser.add_argument("--threads", type=int, default=2)
    families = "every architecture family in the bundle, their blend streamed (and timed)"
    parser.add_argument("--families", action="store_true", help=families)
    parser.add_argument("--groups", type=int, default=400, help="--families: groups timed")
    parser.add_argument(
        "--budget-gb", type=float, default=COMPETITION_STATE_GB,
        help=f"the state's budget (default {COMPETITION_STATE_GB:g}, the notebook's)",
    )  # fmt: skip
    parser.add_argument(
        "--results", type=Path, default=None,
        help="the output kept (default: bench/results/state_memory.txt, with --families "
        "state_memory_families.txt; a run of other than Riiid's students keeps nothing "
        "unless given)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not 0 < args.budget_gb <= 64:
        parser.error(f"--budget-gb {args.budget_gb:g}: expected more than 0 and at most 64")
    if args.results is None and args.students == STUDENTS:
        args.results = RESULTS / (
            "state_memory_families.txt" if args.families else "state_memory.txt"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    say = Report("state_memory", args.results)
    say.header("The notebook's state at Riiid's size (bench/bench_state_memory.py)")
    model = SAINT(ModelConfig(n_questions=QUESTIONS)).eval()
    budget = int(args.budget_gb * 1e9)
    with tempfile.TemporaryDirectory() as folder:
        bundle = Bundle(folder)
        write_bundle_apart(bundle, args.students, model.config.receptive_field, args.families)
        say(f"synthetic bundle written (a child process); load avg {load_average()}")
        start = time.time()
        state = bundle_state(bundle, MODEL, model, torch.device("cpu"), 4096, budget)
        assert isinstance(state, BlendState), f"the bundle's state is {type(state).__name__}"
        say_filled(say, state, args.students, time.time() - start, budget)
    state.predict(group(np.array([10**9]), 10**12))
    say(f"a new student's first group (the pool allocated): peak RSS {peak_gb():.2f} GB")
    step, pool = 300, state.model_state.pool.size
    clock = time.perf_counter()
    previous = 0
    for first in range(0, pool, step):
        users = np.arange(first, min(first + step, pool))
        state.predict(group(users, 10**12, previous if args.families else 0))
        previous = len(users)
    filling = time.perf_counter() - clock
    held = state.state_bytes()
    say(f"{pool:,} students cached (the pool full): peak RSS {peak_gb():.2f} GB; the state "
        f"{held['total'] / 1e9:.2f} GB of which the feature state "
        f"{held['feature_state'] / 1e9:.2f} GB (Kaggle's notebooks have 13 GB)")  # fmt: skip
    if args.families:
        say(f"the other architectures' states: {say_members(state, held)}; filling the "
            f"pool ({pool:,} students, each one's first group a SAINT cache build) "
            f"{pool / filling:,.0f} "
            "rows/s")  # fmt: skip
        say(steady_rows_per_s(state, pool, args.groups, previous))
    if args.results is None:
        print(f"not kept: {args.students:,} students, not Riiid's (--results keeps it)")
    else:
        say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
