"""The recipes of configs/ (common/recipe.py), read by each numbered script's --config:
every table is read by its script, every key reaches the settings, a key that is neither a
field nor a flag of the script is refused with the file, the table and the key named,
flags given beside a recipe override it, and the public data sets' recipes train what the
benchmark of peers trains."""

from __future__ import annotations

import argparse
from dataclasses import is_dataclass, replace
from pathlib import Path

import pytest

from bench.kt import peers
from bench.kt.plans import MODEL_FLAGS
from common import cli, recipe
from common.train.config import TrainConfig, add_train_flags
from tests.helpers import REPO, run_numbered_script

RECIPES = sorted((REPO / "configs").iterdir())
DEMO = REPO / "configs" / "demo.toml"


@pytest.fixture
def parsed(monkeypatch) -> list:
    """Scripts stop after parsing (cli.guarded's body is not run); the (config, args) of
    each parse_config call, in order."""
    found = []
    parse_config = cli.parse_config

    def keep(*args, **options):
        found.append(parse_config(*args, **options))
        return found[-1]

    monkeypatch.setattr(cli, "parse_config", keep)
    monkeypatch.setattr(cli, "guarded", lambda body, interrupted="", output_dir=None: 0)
    return found


def plain(value: object) -> object:
    """A setting as a recipe writes it: tuples as lists, paths as text."""
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def assert_table_reached(table: dict, config: object, args: argparse.Namespace, where: str):
    """Every key of a recipe's table holds its value in the parsed config (a field) or
    the parsed flags (the script's own: output_dir, run, ...)."""
    for key, value in table.items():
        found = getattr(config, key) if hasattr(config, key) else getattr(args, key)
        if isinstance(value, dict):
            assert is_dataclass(found), f"{where}: {key}"
            assert_table_reached(value, found, argparse.Namespace(), f"{where}.{key}")
            continue
        if key == "fold":  # --fold reads a fold spec: 0 -> (0,)
            found = found if isinstance(found, str) else list(found)
            value = value if isinstance(value, str) else [value]
        assert plain(found) == plain(value), f"{where}: {key}"


def test_configs_holds_the_recipes():
    assert {path.suffix for path in RECIPES} == {recipe.RECIPE_SUFFIX}
    assert {path.stem for path in RECIPES} >= {"demo", "assist2009_pid", "assist2015", "riiid"}
    demo = (REPO / "run_demo.sh").read_text()
    for stage in recipe.read_tables(DEMO):
        assert f'{recipe.STAGES[stage]} --config "$recipe"' in demo, stage


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.name)
def test_every_table_is_read_by_its_script_and_every_key_reaches_it(path, parsed):
    for stage, table in recipe.read_tables(path).items():
        done = run_numbered_script(recipe.STAGES[stage], "--config", path)
        assert done.returncode == 0, (stage, done.stderr)
        if stage != "convert":  # 00_convert_kt_dataset.py has no config dataclass
            config, args = parsed.pop()
            assert_table_reached(table, config, args, f"{path.name} [{stage}]")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[train]\nepoch = 2\n", "[train]: unknown key epoch (keys here: "),
        ("[train]\n[train.model]\nd_modle = 64\n", "[train]: unknown key model.d_modle"),
        ("[train.model]\nn_questions = 5\n", "model.n_questions is filled from the data"),
        ("[trian]\nepochs = 2\n", "unknown table [trian]"),
        ("epochs = 2\n", "key epochs outside a table"),
        ("[folds]\nn_folds = 2\n", "no [train] table, the settings of 03_train.py"),
        ('[train]\nepochs = "five"\n', "[train]: epochs: 'five', but the field takes a int"),
        ("[train]\nlr = 0\n", "[train]: lr 0: must be > 0"),
        ('[train]\noverwrite = "yes"\n', "overwrite: 'yes', but the flag is a switch"),
        ('[train]\nfold = "first"\n', "fold 'first': a fold (3)"),
        ("[train]\nrun = [1]\n", "run: [1], but the flag takes one value"),
        ("[train\n", "not valid TOML"),
        (b"[train]\n# caf\xe9\nepochs = 2\n", ", line 2: byte 0xe9 is not UTF-8 (Latin-1"),
        (  # what `model` is in a recipe, and where a preset's name goes
            '[train]\nmodel = "saint"\n',
            "[train]: model = 'saint': model is not one value but the nested config "
            "ModelConfig, a table of its fields ([train.model] in a recipe, a mapping in JSON "
            "or YAML); a preset's name goes to 03's --model (saint, saint+)",
        ),
    ],
)
def test_a_bad_recipe_is_refused_naming_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    done = run_numbered_script("03_train.py", "--config", path, "--output-dir", tmp_path)
    assert done.returncode == 2
    assert str(path) in done.stderr and message in done.stderr, done.stderr


def test_a_script_without_a_config_dataclass_refuses_a_bad_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[convert]\ndataset = "assist2015"\nmulti_skill = "keep"\n')
    done = run_numbered_script("00_convert_kt_dataset.py", "--config", path)
    assert done.returncode == 2 and f"{path} [convert]: unknown key multi_skill" in done.stderr
    path.write_text('[convert]\ndataset = "assist2016"\n')
    done = run_numbered_script("00_convert_kt_dataset.py", "--config", path)
    assert done.returncode == 2 and "dataset: 'assist2016' is not one of" in done.stderr


def test_a_config_file_is_decoded_as_01_decodes_its_files(tmp_path, parsed):
    for path, text in (
        (tmp_path / "a.toml", "[train]\nepochs = 2\n"),
        (tmp_path / "a.json", '{"epochs": 2}'),
    ):
        path.write_bytes(recipe.BOM + text.encode())  # a byte-order mark: read as 01 reads it
        assert run_numbered_script("03_train.py", "--config", path).returncode == 0
        assert parsed.pop()[0].epochs == 2
    path.write_bytes(b'{"epochs": 2,\n "run": "caf\xe9"}')
    done = run_numbered_script("03_train.py", "--config", path)
    assert done.returncode == 2 and f"{path}, line 2: byte 0xe9 is not UTF-8" in done.stderr


def test_config_is_given_once_and_its_kind_named(tmp_path, parsed):
    done = run_numbered_script("03_train.py", "--config", DEMO, "--config", tmp_path / "b.toml")
    assert done.returncode == 2
    assert f"--config given 2 times ({DEMO}, {tmp_path / 'b.toml'}): give one file" in done.stderr
    (tmp_path / "c.txt").write_text("epochs = 2\n")
    done = run_numbered_script("03_train.py", "--config", tmp_path / "c.txt")
    assert done.returncode == 2
    assert "c.txt: a config file is a recipe (.toml), or .json, .yaml or .yml" in done.stderr


def test_a_recipes_fold_gives_way_to_full_data_and_a_flags_fold_is_refused(parsed):
    riiid = REPO / "configs" / "riiid.toml"  # [train] fold = "all", as README's command
    assert run_numbered_script("03_train.py", "--config", riiid, "--full-data").returncode == 0
    assert parsed.pop()[0].full_data
    done = run_numbered_script("03_train.py", "--fold", "2", "--full-data")
    assert done.returncode == 2
    assert "--full-data trains every student into the run's full/ (no fold): drop --fold" in (
        done.stderr
    )


def test_flags_override_a_recipe(parsed):
    run_numbered_script("03_train.py", "--config", DEMO, "--epochs", "2", "--d-model", "32")
    config, args = parsed.pop()
    assert (config.epochs, config.model.d_model, config.lr) == (2, 32, 2e-3)
    assert (args.run, args.output_dir) == ("demo", Path("output/demo"))
    run_numbered_script("04_infer.py", "--config", DEMO, "--progress", "--run", "other")
    config, args = parsed.pop()
    assert config.progress and args.run == "other"


def test_a_file_of_one_scripts_fields_is_still_read(tmp_path, parsed):
    """A run's fold{k}/config.json (TrainConfig's fields) trains that configuration
    again; a .json recipe is no recipe: its tables are unknown keys."""
    path = tmp_path / "config.json"
    path.write_text('{"epochs": 3, "model": {"d_model": 32}, "recorded": {"any": 1}}')
    assert run_numbered_script("03_train.py", "--config", path).returncode == 0
    config, _ = parsed.pop()
    assert (config.epochs, config.model.d_model) == (3, 32)
    path.write_text('{"train": {"epochs": 3}}')
    done = run_numbered_script("03_train.py", "--config", path)
    assert done.returncode == 2 and "unknown key train" in done.stderr


@pytest.mark.parametrize("name", ["assist2009_pid", "assist2015"])
def test_the_public_recipes_train_what_the_benchmark_of_peers_trains(name, parsed):
    """bench.kt.peers' "ours": the model's flags (MODEL_FLAGS) and the benchmark's
    settings parse to the recipe's 03 table, on the recipe's rows."""
    args, _ = peers.parse_args([])
    context = peers.our_context(args)
    parser = argparse.ArgumentParser()
    add_train_flags(parser)
    flags = [*MODEL_FLAGS[peers.OUR_MODEL], *context.settings.train_flags()]
    benchmark = cli.config_from_args(TrainConfig, parser.parse_args(flags))
    path = REPO / "configs" / f"{name}.toml"
    assert run_numbered_script("03_train.py", "--config", path).returncode == 0
    config, _ = parsed.pop()
    assert replace(config, fold=0) == benchmark
    assert context.args.multi_skill_rows == peers.OUR_ROWS == "bundle"
