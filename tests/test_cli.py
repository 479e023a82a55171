"""The one configuration surface (common/cli.py): every config field has a flag whose help
shows its default, a boolean's help says what True means (the command line writes the
--no- wording), flags and configs convert both ways, the shorthands set what they say,
and a config dict with an unknown key is refused."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import typing

import pytest

from common import cli
from common.data.folds import FoldConfig
from common.data.preprocess import PreprocessConfig
from common.errors import UserError
from common.inputs.demo import DemoConfig
from common.model.saint import MODEL_PRESETS, ModelConfig
from common.report.evaluate import EvaluateConfig
from common.stream.fold_stream import InferConfig
from common.train.config import TrainConfig, add_train_flags
from tests.helpers import REPO, run_numbered_script

# the numbered scripts' configs (nested ones are walked from them)
SCRIPT_CONFIGS = (
    DemoConfig,
    PreprocessConfig,
    FoldConfig,
    TrainConfig,
    InferConfig,
    EvaluateConfig,
)
# a boolean's help says what True means: the command line writes --no-NAME itself
NEGATIONS = ("skip", "do not", "don't", "disable", "no ", "not ", "hide", "without", "never")


def train_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_train_flags(parser)
    return parser


def parse(argv: list[str]) -> TrainConfig:
    return cli.config_from_args(TrainConfig, train_parser().parse_args(argv))


@pytest.mark.parametrize(
    "cls", [TrainConfig, InferConfig, FoldConfig, EvaluateConfig, PreprocessConfig]
)
def test_every_field_has_a_flag_whose_help_shows_the_default(cls):
    parser = argparse.ArgumentParser()
    cli.add_config_flags(parser, cls)
    actions = {a.dest: a for a in parser._actions}
    for path, _, _, _ in cli._flag_fields(cls):
        action = actions[path]
        assert "(default: " in action.help, (path, action.help)
    # the data decide these: no flag
    assert "model.n_questions" not in actions and "model.n_tags" not in actions


def config_classes(cls: type) -> set[type]:
    """`cls` and every config dataclass nested in it."""
    nested = [t for t in typing.get_type_hints(cls).values() if dataclasses.is_dataclass(t)]
    return {cls}.union(*(config_classes(t) for t in nested))


def test_every_config_with_a_boolean_option_is_a_scripts():
    """Every class of common/ with a `name: bool = option(...)` field is one of the
    scripts' configs or nested in one, so the test below reads its help."""
    walked = {c.__name__ for c in set().union(*map(config_classes, SCRIPT_CONFIGS))}
    declaring = set()
    for path in (REPO / "common").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(item, ast.AnnAssign)
                and ast.unparse(item.annotation) == "bool"
                and isinstance(item.value, ast.Call)
                and ast.unparse(item.value.func) in ("option", "progress_option")
                for item in node.body
            ):
                declaring.add(node.name)
    assert {"KaggleConfig", "TrainConfig", "InferConfig"} <= declaring
    assert declaring <= walked, declaring - walked


@pytest.mark.parametrize("cls", SCRIPT_CONFIGS)
def test_a_boolean_options_help_says_what_true_means(cls):
    parser = argparse.ArgumentParser()
    cli.add_config_flags(parser, cls)
    actions = {a.dest: a for a in parser._actions}
    for path, name, f, annotation in cli._flag_fields(cls):
        if annotation is not bool:
            continue
        text = f.metadata.get("help", "")
        assert text and not text.lower().startswith(NEGATIONS), f"{path}: {text!r}"
        action = actions[path]
        assert action.option_strings == [f"--{name}", f"--no-{name}"], path
        state = "on" if cli._default(f) else "off"
        assert action.help == f"{text} (default: {state})".replace("%", "%%"), path
    help_text = " ".join(parser.format_help().split())
    if cls is InferConfig:
        assert "--export, --no-export export the Kaggle dataset" in help_text
        assert "--progress, --no-progress show progress bars (default: on)" in help_text


def test_defaults_parse_to_the_default_config():
    assert parse([]) == TrainConfig()


def test_flags_and_configs_convert_both_ways():
    model = ModelConfig(d_model=48, n_heads=4, encoder_layers=3, decoder_layers=1, window=30)
    model = dataclasses.replace(model, decoder_features=(), rope_fraction=0.5)
    config = TrainConfig(model=model, epochs=7, tags=True, progress=False, teacher="t.pt")
    argv = cli.to_argv(config)
    assert "--tags" in argv and "--no-progress" in argv
    assert parse(argv) == config
    # only the fields asked for
    assert cli.to_argv(config, only=("epochs", "model.window")) == [
        "--epochs",
        "7",
        "--window",
        "30",
    ]


def test_shorthands_set_what_they_say():
    config = parse(["--layers", "3", "--model", "saint", "--heads", "4", "--d-model", "32"])
    assert (config.model.encoder_layers, config.model.decoder_layers) == (3, 3)
    assert config.model.decoder_features == MODEL_PRESETS["saint"] == ()
    assert config.model.n_heads == 4 and config.model.d_ff == 4 * 32
    # a later flag wins, as with any flag
    later = parse(["--model", "saint", "--decoder-features", "lag,question"])
    assert later.model.decoder_features == ("lag", "question")
    assert parse(["--layers", "3", "--decoder-layers", "1"]).model.decoder_layers == 1


def test_a_config_dict_round_trips_and_unknown_keys_are_refused():
    config = parse(["--d-model", "32", "--heads", "4", "--epochs", "3"])
    assert TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown TrainConfig keys"):
        TrainConfig.from_dict(config.to_dict() | {"epoch": 3})
    nested = config.to_dict()
    nested["model"] = nested["model"] | {"layers": 2}
    with pytest.raises(ValueError, match="unknown ModelConfig keys"):
        TrainConfig.from_dict(nested)


def test_a_refused_config_ends_like_a_bad_flag(capsys):
    parser = train_parser()
    with pytest.raises(SystemExit) as exit_:
        cli.parse_config(parser, TrainConfig, ["--question-embedding", "rasch"])
    assert exit_.value.code == 2
    assert "needs the questions' tags" in capsys.readouterr().err


def test_a_user_error_prints_one_line_and_returns_2(capsys):
    class Refused(UserError):
        pass

    def body():
        raise Refused("input/train.csv, row 3, column user_id: expected an integer")

    assert cli.guarded(body) == 2
    assert capsys.readouterr().err == (
        "error: input/train.csv, row 3, column user_id: expected an integer\n"
    )
    assert cli.guarded(lambda: None) == 0


def test_the_tests_script_runner_reports_as_a_shell_would(tmp_path):
    """tests/helpers.run_numbered_script runs main(argv) in this process: a crash must
    read as exit 1 with its traceback (never as success), a usage error as 2."""
    script = tmp_path / "99_probe.py"
    script.write_text(
        "import argparse\n"
        "def main(argv=None):\n"
        "    parser = argparse.ArgumentParser()\n"
        "    parser.add_argument('--mode', choices=('ok', 'refuse', 'crash'))\n"
        "    mode = parser.parse_args(argv).mode\n"
        "    if mode == 'crash':\n"
        "        raise RuntimeError('boom')\n"
        "    print(mode)\n"
        "    return 2 if mode == 'refuse' else 0\n"
        "if __name__ == '__main__':\n"
        "    raise SystemExit(main())\n"
    )
    for process in (False, True):
        ok = run_numbered_script(str(script), "--mode", "ok", process=process)
        assert (ok.returncode, ok.stdout) == (0, "ok\n")
        assert run_numbered_script(str(script), "--mode", "refuse", process=process).returncode == 2
        assert run_numbered_script(str(script), "--mode", "nope", process=process).returncode == 2
    crashed = run_numbered_script(str(script), "--mode", "crash")
    assert crashed.returncode == 1
    assert "Traceback" in crashed.stderr and "RuntimeError: boom" in crashed.stderr
