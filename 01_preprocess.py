"""Stage 1: train/questions/lectures CSV -> parquet and flat arrays under <output-dir>/data/."""

from __future__ import annotations

import sys

from common import cli
from common.data.preprocess import PreprocessConfig, preprocess
from common.files import check_writable
from common.workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    cli.add_config_flags(parser, PreprocessConfig)
    config, _ = cli.parse_config(parser, PreprocessConfig, argv, stage="preprocess")

    def run() -> None:
        workspace = Workspace(config.output_dir)
        check_writable(workspace.path)  # before train.csv is read
        print(preprocess(config, workspace).report())
        print(f"wrote {workspace.data.path}")

    return cli.guarded(
        run,
        "nothing was written (data/ appears whole or not at all); run it again",
        config.output_dir,
    )


if __name__ == "__main__":
    sys.exit(main())
