"""Damaged files a stage reads back (issue 37): the trees, their inputs and the blend's
weight beside a checkpoint, read through one checked reader (common.model.trees.blend_bundle) by
05, 04's export and --full, and the Kaggle notebook; a blend weight changed after 04
streamed; the run table with bytes appended; Kaggle credentials that cannot give the export
its owner; another demo's truth file. Each is refused with one line that names the file,
what is wrong and, where a stage writes the file, the command that writes it again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from common.data.dataset import Dataset
from common.data.question_rates import QuestionRates
from common.inputs.demo import make_demo
from common.model.trees import blending
from common.model.trees.blend_bundle import BlendBundle, BlendFileError, rewrite_in_run
from common.model.trees.forest import Trees
from common.report.scored_rows import TruthFileError, add_oracle
from common.runs.artefacts import fold_weights
from common.runs.table import RunsTableError, append_run_row, read_runs
from common.stream import kaggle_notebook
from common.stream.kaggle_export import KaggleConfig, KaggleCredentialsError, copy_blend_bundle
from common.workspace import Bundle, ModelFolder, Workspace
from tests.helpers import RUN, make_tiny_demo, run_numbered_script, run_of, tiny_demo_config
from tests.test_evaluate import write_stream_predictions

TREES, INPUTS, BLEND = ModelFolder.TREES, ModelFolder.TREE_INPUTS, ModelFolder.BLEND
RESTREAM = f"04_infer.py --run {RUN} --fold 0"  # what writes fold0/'s blend files again


def tiny_bundle(weight: float | None = 0.6, leaf: float = 0.5) -> BlendBundle:
    """One tree over one numeric input (input <= 0.5: left), three questions' rates."""
    trees = Trees(
        columns=np.array([0]), order=np.array([0]), categorical=np.array([False]),
        categories=np.zeros(0), category_offsets=np.array([0]), baseline=np.array(0.1),
        tree_root=np.array([0]), tree_bitset=np.array([0]),
        node_feature=np.array([0, 0, 0]), node_threshold=np.array([0.5, 0.0, 0.0]),
        node_left=np.array([1, -1, -1]), node_right=np.array([2, -1, -1]),
        node_missing_left=np.array([True, False, False]),
        node_is_leaf=np.array([False, True, True]), node_value=np.array([0.0, -leaf, leaf]),
        node_categorical=np.array([False, False, False]), node_bitset=np.array([-1, -1, -1]),
        left_bitsets=np.zeros((0, 8), np.uint32), known_bitsets=np.zeros((0, 8), np.uint32),
        known_row=np.array([0]),
    )  # fmt: skip
    rates = QuestionRates(np.array([0.5, 0.7, 0.6]), np.array([4.0, 10.0, 0.0]), 0.6)
    return BlendBundle(trees, rates, np.array([3, -1, 5, -1]), weight, {"chosen_on": "a test"})


@pytest.fixture
def fold0(tmp_path) -> ModelFolder:
    """A run's fold0/ holding a tiny bundle's three files, as 04 writes them."""
    folder = Workspace(tmp_path).run(RUN).fold(0)
    folder.path.mkdir(parents=True)
    tiny_bundle().save(folder)
    return folder


def refusal(folder: ModelFolder, again: str = "") -> str:
    """BlendBundle.load's one-line refusal of `folder`'s files."""
    with pytest.raises(BlendFileError) as refused:
        BlendBundle.load(folder, again or rewrite_in_run(folder))
    message = str(refused.value)
    assert "\n" not in message
    return message


def save_arrays(path: Path, **arrays) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def edit_record(folder: ModelFolder, **values) -> None:
    record = json.loads(folder.blend.read_text())
    folder.blend.write_text(json.dumps(record | values))


DROP = object()  # trees_with: leave the array out


def trees_with(folder: ModelFolder, **arrays) -> None:
    """trees.npz with some arrays replaced (or left out: DROP)."""
    with np.load(folder.trees) as saved:
        kept = {name: saved[name] for name in saved.files} | arrays
    save_arrays(folder.trees, **{name: a for name, a in kept.items() if a is not DROP})


# (case, file named in the refusal, damage done to fold0/, words of the refusal)
DAMAGED = [
    ("random bytes", TREES, lambda f: f.trees.write_bytes(bytes(range(256)) * 4), "not 04's"),
    ("random bytes", INPUTS, lambda f: f.tree_inputs.write_bytes(b"\x93NUMPY\x00" * 9), "not an"),
    ("random bytes", BLEND, lambda f: f.blend.write_bytes(b"\xff\xfe\x00{"), "cannot be read"),
    ("empty", TREES, lambda f: f.trees.write_bytes(b""), "not 04's"),
    ("a folder", INPUTS, lambda f: f.tree_inputs.unlink() or f.tree_inputs.mkdir(), "not an"),
    ("a folder", BLEND, lambda f: f.blend.unlink() or f.blend.mkdir(), "cannot be read"),
    ("truncated", BLEND, lambda f: f.blend.write_text(f.blend.read_text()[:40]), "not JSON"),
    ("a list", BLEND, lambda f: f.blend.write_text("[0.5]"), "holds a JSON list"),
    ("no weight", BLEND, lambda f: f.blend.write_text("{}"), "holds no weight"),
    ("weight text", BLEND, lambda f: edit_record(f, weight="0.5"), "weight '0.5' is not"),
    ("weight NaN", BLEND, lambda f: edit_record(f, weight=float("nan")), "weight nan is not"),
    ("weight above 1", BLEND, lambda f: edit_record(f, weight=1.5), "in [0, 1]"),
    ("weight below 0", BLEND, lambda f: edit_record(f, weight=-0.1), "in [0, 1]"),
    ("weight true", BLEND, lambda f: edit_record(f, weight=True), "weight True is not"),
    ("an array missing", TREES, lambda f: trees_with(f, baseline=DROP), "expected Trees'"),
    ("a float child", TREES, lambda f: trees_with(f, node_left=np.array([1.0, -1, -1])),
     "node_left: expected dtype kind"),
    ("a loop", TREES, lambda f: trees_with(f, node_right=np.array([0, -1, -1])), "node_right"),
    ("a leaf NaN", TREES, lambda f: trees_with(f, node_value=np.array([0, np.nan, 1])),
     "node_value"),
    ("a column out", TREES, lambda f: trees_with(f, node_feature=np.array([3, 0, 0])),
     "node_feature"),
    ("rates of text", INPUTS, lambda f: save_arrays(
        f.tree_inputs, rate=np.array(["a"]), count=np.ones(1), global_rate=np.float64(0.5),
        skill=np.zeros(2, np.int64)), "expected rate and count"),
    ("a rate NaN", INPUTS, lambda f: save_arrays(
        f.tree_inputs, rate=np.array([np.nan]), count=np.ones(1), global_rate=np.float64(0.5),
        skill=np.zeros(2, np.int64)), "rates outside [0, 1]"),
    ("skill missing", INPUTS, lambda f: save_arrays(
        f.tree_inputs, rate=np.ones(1), count=np.ones(1), global_rate=np.float64(0.5)),
        "expected ['count', 'global_rate', 'rate', 'skill']"),
    ("other trees", TREES, lambda f: tiny_bundle(leaf=0.9).trees.save(f.trees),
     "does not hold the arrays whose digest"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("file", "damage", "words"),
    [case[1:] for case in DAMAGED],
    ids=[f"{case[1]}: {case[0]}" for case in DAMAGED],
)
def test_a_damaged_blend_file_is_refused_naming_it_and_the_command(fold0, file, damage, words):
    damage(fold0)
    message = refusal(fold0)
    assert str(fold0.file(file)) in message and words in message, message
    assert message.endswith(f"04 writes them again: {RESTREAM}")


@pytest.mark.parametrize("gone", ModelFolder.BLEND_FILES)
def test_a_blend_file_missing_beside_the_others_is_refused(fold0, gone):
    """Some files gone is refused; all three gone is a fold streamed without trees."""
    fold0.file(gone).unlink()
    message = refusal(fold0)
    assert message.startswith(f"{fold0.file(gone)} is missing beside") and RESTREAM in message
    for name in ModelFolder.BLEND_FILES:
        fold0.file(name).unlink(missing_ok=True)
    assert BlendBundle.load(fold0, "-") is None


def test_any_damage_to_the_blend_files_reads_whole_or_is_refused(fold0):
    """Truncations and flipped bytes anywhere in each file are refused naming the file (a
    flip inside an array's bytes: the zip's CRC; in blend.json's digest: either file), or
    read as before (a flip in bytes no reader reads, or in JSON's spacing)."""
    rng = np.random.default_rng(0)
    whole = {name: fold0.file(name).read_bytes() for name in ModelFolder.BLEND_FILES}
    loaded = BlendBundle.load(fold0, "-")
    assert loaded.weight == 0.6 and loaded.rates.global_rate == 0.6
    for name, data in whole.items():
        for at in rng.choice(len(data), 12, replace=False):
            flipped = bytearray(data)
            flipped[at] ^= 1 + int(rng.integers(255))
            for damaged in (data[:at], bytes(flipped)):
                fold0.file(name).write_bytes(damaged)
                try:
                    again = BlendBundle.load(fold0, "-")
                except BlendFileError as error:  # a flipped digest: either file is named
                    assert str(fold0.file(name)) in str(error), str(error)
                else:
                    assert again.record["digests"] == loaded.record["digests"]
                    assert again.weight == loaded.weight
        fold0.file(name).write_bytes(data)


def test_readers_of_the_blend_files_refuse_damage(fold0, tmp_path, monkeypatch):
    """04's export, 04 --full's fold weights and the Kaggle notebook read through the checked
    reader, each naming what writes the files again."""
    fold0.blend.write_text('{"weight": 0.6, "cho')
    with pytest.raises(BlendFileError, match=f"{fold0.blend}.*{RESTREAM}"):
        copy_blend_bundle(fold0, ModelFolder(tmp_path / "export"))
    with pytest.raises(BlendFileError, match=f"{fold0.blend}.*{RESTREAM}"):
        fold_weights(run_of(tmp_path))
    full = run_of(tmp_path).full
    shutil.copytree(fold0.path, full.path)
    full.trees.write_bytes(b"PK\x03\x04")
    with pytest.raises(BlendFileError, match=f"04_infer.py --run {RUN} --full$"):
        copy_blend_bundle(full, ModelFolder(tmp_path / "export"))
    bundle = Bundle(tmp_path / "dataset")
    shutil.copytree(fold0.path, bundle.model("fold0").path)
    bundle.state.mkdir()
    np.save(bundle.parts, np.ones(4, np.int8))
    monkeypatch.setattr(kaggle_notebook.Snapshot, "load", lambda path: None)
    with pytest.raises(BlendFileError, match=r"export the bundle again \(04_infer.py --run NAME"):
        kaggle_notebook.bundle_state(bundle, "fold0", None, "cpu", 1, 1)


# ---------------------------------------------------------------------------------------
# 05 on a fold whose blend files changed after 04 streamed it; another demo's truth file


@pytest.fixture(scope="module")
def streamed(tmp_path_factory) -> Path:
    """40 demo students through 01 and 02, fold 0 streamed with a blend (a noisy copy of
    the truth stands for the model: tests/test_evaluate.py) of the tiny bundle's trees,
    fitted and chosen by no one (04's fit takes seconds, and these tests need none)."""
    tmp = tmp_path_factory.mktemp("damaged")
    output_dir = make_tiny_demo(tmp, users=40)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blending, "fold_blend_bundle", lambda *args: tiny_bundle())
        write_stream_predictions(output_dir, tmp / "input", 0, seed=0)
    return output_dir


def evaluate(output_dir: Path, input_dir: Path | str = "no-input"):
    return run_numbered_script(
        "05_evaluate.py", "--output-dir", output_dir, "--input-dir", input_dir,
        "--bootstrap", 0, "--no-progress",
    )  # fmt: skip


def refused_by_05(output_dir: Path, input_dir: Path | str = "no-input") -> str:
    done = evaluate(output_dir, input_dir)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


def test_05_names_a_weight_changed_after_04_streamed(streamed, tmp_path):
    output_dir = tmp_path / "output"
    shutil.copytree(streamed, output_dir)
    assert evaluate(output_dir, streamed.parent / "input").returncode == 0
    folder = run_of(output_dir).fold(0)
    weight = json.loads(folder.blend.read_text())["weight"]
    edit_record(folder, weight=1 - weight)
    line = refused_by_05(output_dir)
    assert f"{folder.blend}: weight" in line and "changed after 04 streamed" in line
    assert line.endswith(RESTREAM) and "features" not in line


def test_05_names_tree_inputs_written_after_04_streamed(streamed, tmp_path):
    """Whole files whose arrays are not the ones 04 streamed with (another fit's)."""
    output_dir = tmp_path / "output"
    shutil.copytree(streamed, output_dir)
    folder = run_of(output_dir).fold(0)
    bundle = BlendBundle.load(folder)
    bundle.rates.global_rate += 0.01
    BlendBundle(bundle.trees, bundle.rates, bundle.skill, bundle.weight, bundle.record).save(folder)
    line = refused_by_05(output_dir)
    assert line.startswith(f"error: {folder.tree_inputs} is not the file 04 streamed")
    assert line.endswith(RESTREAM)
    folder.trees.unlink()
    assert f"{folder.trees} is missing beside" in refused_by_05(output_dir)


def test_05_refuses_another_demos_truth_file(streamed, tmp_path):
    other = tmp_path / "other"
    make_demo(tiny_demo_config(users=40, seed=7), other)
    line = refused_by_05(streamed, other)
    assert f"{other / 'demo_truth.csv'} is not the truth of the demo 01 read" in line
    assert "--input-dir" in line


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("row_id,p\n1,0.5\n", "cannot be read as 00's demo_truth.csv"),
        ("row_id,p_true\n1,0.5\n1,0.5\n", "row_id 1 twice"),
        ("row_id,p_true\n1,high\n", "not a probability"),
        ("row_id,p_true\n1.5,0.5\n", "row_id of dtype"),
        ("row_id,p_true\n1,0.5\n\x00\xff,", "cannot be read"),
    ],
)
def test_a_damaged_truth_file_is_refused_naming_it(streamed, tmp_path, text, words):
    path = tmp_path / "demo_truth.csv"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(TruthFileError) as refused:
        add_oracle(None, path, Dataset.of(Workspace(streamed)))
    assert str(refused.value).startswith(str(path)) and words in str(refused.value)


# ---------------------------------------------------------------------------------------
# runs.csv with bytes appended; Kaggle credentials


@pytest.mark.parametrize(
    ("appended", "words"),
    [
        (b"\x8f\x00\xfe", "cannot be read (UnicodeDecodeError"),
        (b"garbage", "line 3: wall_s '12.5garbage' is not a number"),  # after the last line
        (b"\nx,y,z\n", "line 4: 3 fields, the header has 24"),
        (b"\n" + b"," * 23, "line 4: finished '' is not a clock time"),
        (  # a number outside its range: an AUC of 7.5 would be listed first
            b"\n2024-01-01T00:00:00+0000,c,evaluate,0" + b"," * 14 + b"7.5" + b"," * 6,
            "line 4: stream_auc 7.5 is outside [0, 1]",
        ),
    ],
)
def test_runs_table_with_bytes_appended_is_refused(tmp_path, appended, words):
    workspace = Workspace(tmp_path)
    for stage in ("train", "stream"):
        append_run_row(workspace, {"run": "a", "stage": stage, "folds": "0", "wall_s": 12.5})
    text = workspace.runs_table.read_bytes().rstrip(b"\r\n")
    workspace.runs_table.write_bytes(text + b"\n\n")  # blank lines are no damage
    assert len(read_runs(workspace)) == 2
    workspace.runs_table.write_bytes(text + appended)
    with pytest.raises(RunsTableError) as refused:
        read_runs(workspace)
    message = str(refused.value)
    assert message.startswith(f"{workspace.runs_table}") and words in message, message
    with pytest.raises(RunsTableError):  # and no stage appends past the damage
        append_run_row(workspace, {"run": "b", "stage": "train"})
    done = run_numbered_script("05_evaluate.py", "--output-dir", tmp_path, "--runs")
    assert done.returncode == 2 and done.stderr.startswith(f"error: {workspace.runs_table}")


@pytest.fixture
def credentials(tmp_path, monkeypatch) -> Path:
    """Where kaggle.json is looked for; no $KAGGLE_USERNAME."""
    monkeypatch.delenv("KAGGLE_USERNAME", raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path))
    return tmp_path / "kaggle.json"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('["someone"]', "holds a JSON list"),
        ('{"username": "someone", "key"', "cannot be read as Kaggle's credentials"),
        (None, "IsADirectoryError"),
        ('{"username": "bad user!", "key": "k"}', "kaggle.json's username 'bad user!' is not"),
        ('{"username": 7}', "kaggle.json's username 7 is not a Kaggle user name"),
    ],
)
def test_damaged_kaggle_json_is_refused_before_04_works(credentials, tmp_path, content, words):
    if content is None:
        credentials.mkdir()
    else:
        credentials.write_text(content)
    with pytest.raises(KaggleCredentialsError) as refused:
        KaggleConfig()
    assert str(refused.value).startswith(str(credentials)) and words in str(refused.value)
    # 04 refuses it with its flags (usage, exit 2), before it looks for the run
    done = run_numbered_script("04_infer.py", "--output-dir", tmp_path / "none", "--fold", 0)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f": error: {credentials}" in done.stderr.splitlines()[-1]
    KaggleConfig(export=False)  # no export: no owner needed
    KaggleConfig(kaggle_dataset_id="someone/riiid-saint")


def test_kaggle_username_takes_the_flags_check(credentials, monkeypatch):
    monkeypatch.setenv("KAGGLE_USERNAME", "bad user!")
    with pytest.raises(KaggleCredentialsError, match=r"^\$KAGGLE_USERNAME 'bad user!' is not"):
        KaggleConfig()
    monkeypatch.setenv("KAGGLE_USERNAME", "some_one-2")
    assert KaggleConfig().ids().dataset == "some_one-2/riiid-saint"
