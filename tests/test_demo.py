"""The demo generator writes the competition's formats and follows its documented model."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common.data.schema import LECTURES_DTYPES, QUESTIONS_DTYPES, TRAIN_COLUMNS, TRAIN_DTYPES
from common.inputs.demo import OUTPUT_FILES, DemoConfig, generate_demo, make_demo
from common.inputs.demo_items import ItemBank, make_item_bank
from common.inputs.demo_students import _Simulation

REPO = Path(__file__).resolve().parents[1]
REAL_DATA = REPO.parent / "shared" / "data"
N_USERS = 60


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo")
    make_demo(DemoConfig(n_users=N_USERS, seed=3), path)
    return path


@pytest.fixture(scope="module")
def train(demo_dir: Path) -> pd.DataFrame:
    return pd.read_csv(demo_dir / "train.csv", dtype=TRAIN_DTYPES)


@pytest.fixture(scope="module")
def questions(demo_dir: Path) -> pd.DataFrame:
    return pd.read_csv(demo_dir / "questions.csv", dtype=QUESTIONS_DTYPES)


@pytest.fixture(scope="module")
def lectures(demo_dir: Path) -> pd.DataFrame:
    return pd.read_csv(demo_dir / "lectures.csv", dtype=LECTURES_DTYPES)


def _question_rows(train: pd.DataFrame) -> pd.DataFrame:
    return train[train["content_type_id"] == 0]


def test_headers_match_the_competition_files(demo_dir: Path) -> None:
    expected = {
        "train.csv": ",".join(TRAIN_COLUMNS),
        "questions.csv": "question_id,bundle_id,correct_answer,part,tags",
        "lectures.csv": "lecture_id,tag,part,type_of",
        "demo_truth.csv": "row_id,p_true",
    }
    for name in OUTPUT_FILES:
        with open(demo_dir / name) as f:
            assert f.readline().rstrip("\n") == expected[name], name


def test_headers_match_the_real_files(demo_dir: Path) -> None:
    real = {
        "train.csv": REAL_DATA / "riiid_train_sample" / "train_strict_format_5users.csv",
        "questions.csv": REAL_DATA / "riiid_metadata" / "questions.csv",
        "lectures.csv": REAL_DATA / "riiid_metadata" / "lectures.csv",
    }
    if not all(path.exists() for path in real.values()):
        pytest.skip(f"real Riiid files not found under {REAL_DATA}")
    for name, path in real.items():
        with open(path) as real_file, open(demo_dir / name) as demo_file:
            assert demo_file.readline() == real_file.readline(), name


def test_train_text_form(demo_dir: Path) -> None:
    text = pd.read_csv(demo_dir / "train.csv", dtype=str, keep_default_na=False)
    assert text["prior_question_elapsed_time"].str.fullmatch(r"(\d+\.0)?").all()
    assert set(text["prior_question_had_explanation"]) <= {"True", "False", ""}
    assert (text["row_id"] == [str(i) for i in range(len(text))]).all()


def test_values_fit_the_competition_dtypes(
    train: pd.DataFrame, questions: pd.DataFrame, lectures: pd.DataFrame
) -> None:
    assert list(train.columns) == TRAIN_COLUMNS
    assert train["user_id"].min() > 0
    assert train["timestamp"].min() == 0
    assert train.groupby("user_id")["timestamp"].min().eq(0).all()
    assert set(train["content_type_id"]) == {0, 1}

    q_ids = questions["question_id"].to_numpy()
    assert (q_ids == np.arange(len(questions))).all()
    assert _question_rows(train)["content_id"].isin(q_ids).all()
    assert questions["correct_answer"].between(0, 3).all()
    assert questions["part"].between(1, 7).all() and questions["part"].nunique() == 7
    tags = questions["tags"].str.split().explode().astype(int)
    assert tags.between(0, 187).all()

    assert lectures["lecture_id"].is_unique
    assert lectures["lecture_id"].between(0, 32767).all()
    assert lectures["tag"].between(0, 187).all()
    assert lectures["part"].between(1, 7).all()
    assert set(lectures["type_of"]) <= {"concept", "solving question", "intention", "starter"}


def test_bundles_follow_toeic_parts(questions: pd.DataFrame) -> None:
    first_of_bundle = questions.groupby("bundle_id")["question_id"].min()
    assert (first_of_bundle.index == first_of_bundle.to_numpy()).all()
    sizes = questions.groupby("bundle_id").agg(part=("part", "first"), size=("part", "size"))
    assert questions.groupby("bundle_id")["part"].nunique().eq(1).all()
    assert sizes.loc[sizes["part"].isin([1, 2, 5]), "size"].eq(1).all()
    # each part's last bundle may be cut short to hit the requested number of questions
    assert sizes.loc[sizes["part"].isin([3, 4]), "size"].le(3).mean() == 1.0
    assert sizes.loc[sizes["part"].isin([3, 4]), "size"].eq(3).mean() > 0.9
    assert sizes.loc[sizes["part"] == 6, "size"].eq(4).mean() > 0.9
    assert sizes.loc[sizes["part"] == 7, "size"].between(1, 5).all()


def test_answers_match_the_key(train: pd.DataFrame, questions: pd.DataFrame) -> None:
    rows = _question_rows(train)
    key = questions.set_index("question_id")["correct_answer"]
    assert rows["user_answer"].between(0, 3).all()
    is_key = rows["user_answer"].to_numpy() == key.loc[rows["content_id"]].to_numpy()
    assert (rows["answered_correctly"].to_numpy() == is_key).all()


def test_lecture_rows(train: pd.DataFrame, lectures: pd.DataFrame) -> None:
    rows = train[train["content_type_id"] == 1]
    assert len(rows) > 0
    assert rows["content_id"].isin(lectures["lecture_id"]).all()
    assert (rows["user_answer"] == -1).all() and (rows["answered_correctly"] == -1).all()
    assert rows["prior_question_elapsed_time"].isna().all()
    assert (rows["prior_question_had_explanation"] == False).all()  # noqa: E712 (nullable)
    per_container = train.groupby(["user_id", "task_container_id"]).size()
    lecture_keys = pd.MultiIndex.from_frame(rows[["user_id", "task_container_id"]])
    assert per_container.loc[lecture_keys].eq(1).all(), "a lecture has its own container"


def test_containers_share_timestamp_and_bundle(
    train: pd.DataFrame, questions: pd.DataFrame
) -> None:
    rows = _question_rows(train).copy()
    bundle_of = questions.set_index("question_id")["bundle_id"]
    rows["bundle_id"] = bundle_of.loc[rows["content_id"]].to_numpy()
    containers = rows.groupby(["user_id", "task_container_id"])
    assert containers["timestamp"].nunique().eq(1).all()
    assert containers["bundle_id"].nunique().eq(1).all()
    for column in ["prior_question_elapsed_time", "prior_question_had_explanation"]:
        assert containers[column].nunique(dropna=False).eq(1).all(), column
    bundle_size = questions.groupby("bundle_id").size()
    assert (containers.size().to_numpy() == bundle_size.loc[containers["bundle_id"].first()]).all()


def test_histories_are_ordered(train: pd.DataFrame) -> None:
    assert (train["row_id"].to_numpy() == np.arange(len(train))).all()
    assert train["user_id"].is_monotonic_increasing
    events = train.drop_duplicates(["user_id", "task_container_id"])
    by_user = events.groupby("user_id")
    assert (by_user["timestamp"].diff().dropna() > 0).all(), "events strictly later"
    assert (by_user["task_container_id"].diff().dropna() == 1).all(), "containers 0, 1, 2, ..."
    assert by_user["task_container_id"].min().eq(0).all()
    assert by_user["content_type_id"].first().eq(0).all(), "a history starts with questions"


def test_priors_missing_exactly_at_the_first_question_container(train: pd.DataFrame) -> None:
    rows = _question_rows(train)
    first = rows["task_container_id"] == rows.groupby("user_id")["task_container_id"].transform(
        "min"
    )
    assert rows.loc[first, "prior_question_elapsed_time"].isna().all()
    assert rows.loc[first, "prior_question_had_explanation"].isna().all()
    assert rows.loc[~first, "prior_question_elapsed_time"].notna().all()
    assert rows.loc[~first, "prior_question_had_explanation"].notna().all()
    assert train["prior_question_had_explanation"].isna().sum() == first.sum()
    elapsed = rows["prior_question_elapsed_time"].dropna()
    assert (elapsed >= 0).all() and (elapsed == elapsed.round()).all()
    assert (elapsed <= 300_000).all(), "the real elapsed times stop at 300 s"


def test_truth_covers_every_question_row(demo_dir: Path, train: pd.DataFrame) -> None:
    truth = pd.read_csv(demo_dir / "demo_truth.csv")
    rows = _question_rows(train)
    assert (truth["row_id"].to_numpy() == rows["row_id"].to_numpy()).all()
    assert truth["p_true"].gt(0.25).all() and truth["p_true"].lt(1.0).all()


def test_oracle_auc_and_elapsed_time_carry_signal(demo_dir: Path, train: pd.DataFrame) -> None:
    roc_auc_score = pytest.importorskip("sklearn.metrics").roc_auc_score
    truth = pd.read_csv(demo_dir / "demo_truth.csv")
    label = _question_rows(train)["answered_correctly"].to_numpy()
    assert roc_auc_score(label, truth["p_true"]) > 0.7
    # the elapsed time shown on a container is that of the previous one: slow students and
    # hard skills both show through
    rows = _question_rows(train)
    known = rows["prior_question_elapsed_time"].notna()
    elapsed = rows.loc[known, "prior_question_elapsed_time"]
    assert roc_auc_score(rows.loc[known, "answered_correctly"], -elapsed) > 0.53


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    for name, seed in [("a", 5), ("b", 5), ("c", 6)]:
        config = DemoConfig(n_users=30, n_questions=300, n_lectures=30, max_events=300, seed=seed)
        make_demo(config, tmp_path / name)
    for name in OUTPUT_FILES:
        same = (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert same, name
    assert (tmp_path / "a" / "train.csv").read_bytes() != (
        tmp_path / "c" / "train.csv"
    ).read_bytes()


def test_in_memory_frame_matches_the_file(demo_dir: Path, train: pd.DataFrame) -> None:
    frame = generate_demo(DemoConfig(n_users=N_USERS, seed=3)).train_frame()
    pd.testing.assert_frame_equal(frame, train)


def test_requested_sizes() -> None:
    config = DemoConfig(n_users=7, n_questions=123, n_lectures=20, max_events=100, seed=1)
    demo = generate_demo(config)
    assert len(demo.questions) == 123 and len(demo.lectures) == 20
    assert demo.summary()["students"] == 7


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="n_questions"):
        DemoConfig(n_questions=10)
    with pytest.raises(ValueError, match="answer_seconds"):
        DemoConfig(answer_seconds=(1.0, 2.0))
    with pytest.raises(TypeError):
        DemoConfig(n_student=3)  # type: ignore[call-arg]


def _simulation(config: DemoConfig) -> _Simulation:
    rng = np.random.default_rng(0)
    bank: ItemBank = make_item_bank(config, rng)
    return _Simulation(bank, config, rng)


def test_knowledge_compounds_then_fades() -> None:
    config = DemoConfig(n_users=2, n_questions=100, n_lectures=10)
    simulation = _simulation(config)
    k_max, tau_ms = config.knowledge_max, config.forgetting_days * 86_400_000
    users, tags = np.array([1, 1, 0]), np.array([7, 7, 7])
    simulation._learn(users, tags, np.array([0.1, 0.2, 0.5]), np.array([1000, 1000, 1000]))
    knowledge = simulation.students.knowledge
    assert knowledge[1, 7] == pytest.approx(k_max * (1 - 0.9 * 0.8))
    assert knowledge[0, 7] == pytest.approx(k_max * 0.5)
    assert knowledge[1, 6] == 0.0
    later = 1000 + int(tau_ms)  # one time constant later: faded to 1/e, then learned
    simulation._learn(np.array([0]), np.array([7]), np.array([0.5]), np.array([later]))
    faded = k_max * 0.5 / math.e
    assert knowledge[0, 7] == pytest.approx(k_max - (k_max - faded) * 0.5, rel=1e-6)


def test_script_prints_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = importlib.util.spec_from_file_location("make_demo", REPO / "00_make_demo_input.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(
        ["--users", "5", "--questions", "200", "--seed", "2", "--output-dir", str(tmp_path)]
    )
    line = capsys.readouterr().out.strip()
    assert "5 students" in line and "200 questions" in line and "correct" in line
    assert all((tmp_path / name).exists() for name in OUTPUT_FILES)
