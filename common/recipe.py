"""Recipe files (configs/*.toml): one file holds a whole pipeline's settings, a table per
numbered script, as nanoGPT's config/train_*.py and minGPT's get_config() hold a run's.
Each script reads its own table through `--config FILE` (common.cli.parse_config), flags
given beside it override it, and a key that is neither one of the script's config fields
nor one of its own flags is refused with the file, the table and the key named.

    [train]                 # 03_train.py's table: TrainConfig's fields by name,
    epochs = 5              # the script's own flags by their dest (output_dir, run, ...)
    [train.model]           # a nested config is a sub-table
    d_model = 64

Paths in a recipe are read as the flags read them: relative to the folder the command runs
in (the repository root). This module reads the file format only; common.cli checks the
keys against the script's flags and fields.
"""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (pyproject allows it): tomllib's original, if any
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

RECIPE_SUFFIX = ".toml"
# the table of each numbered script, in pipeline order
STAGES = {
    "demo": "00_make_demo_input.py",
    "convert": "00_convert_kt_dataset.py",
    "preprocess": "01_preprocess.py",
    "folds": "02_make_folds.py",
    "train": "03_train.py",
    "infer": "04_infer.py",
    "evaluate": "05_evaluate.py",
}


def is_recipe(path: str | Path) -> bool:
    """A recipe is a .toml file; a .json or .yaml config file holds one script's fields."""
    return Path(path).suffix.lower() == RECIPE_SUFFIX


BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark: accepted, as 01 accepts it in train.csv


def read_text(path: str | Path) -> str:
    """A config file's text, decoded as 01 decodes its CSV files: UTF-8, a byte-order mark
    dropped; another encoding is refused (ValueError) naming the file, the line and the
    byte."""
    raw = Path(path).read_bytes().removeprefix(BOM)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{path}, line {line}: byte {raw[error.start]:#04x} is not UTF-8 (Latin-1 or "
            "Windows-1252?): save the file as UTF-8"
        ) from None


def read_tables(path: str | Path) -> dict[str, dict]:
    """Every table of the recipe at `path` (stage -> its mapping); a key outside a table
    and a table no script reads are refused (ValueError naming the file)."""
    if tomllib is None:
        raise ValueError(f"{path}: a recipe (.toml) needs Python 3.11, or `pip install tomli`")
    try:
        tables = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML ({error})") from None
    known = ", ".join(f"[{stage}]" for stage in STAGES)
    for key, value in tables.items():
        if not isinstance(value, dict):
            raise ValueError(f"{path}: key {key} outside a table (a recipe's tables: {known})")
        if key not in STAGES:
            raise ValueError(f"{path}: unknown table [{key}] (a recipe's tables: {known})")
    return tables


def read_table(path: str | Path, stage: str) -> dict:
    """The recipe's table for `stage` (a STAGES name); one it lacks is refused."""
    assert stage in STAGES, f"stage {stage!r}: expected one of {sorted(STAGES)}"
    tables = read_tables(path)
    if stage not in tables:
        present = ", ".join(f"[{name}]" for name in tables) or "none"
        raise ValueError(
            f"{path}: no [{stage}] table, the settings of {STAGES[stage]} (its tables: {present})"
        )
    return tables[stage]
