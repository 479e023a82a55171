"""Stage 5: score every fold's streamed predictions against three baselines (question
rate, student + question, and the trees 04 streamed) and, on demo data, the true
probabilities; score the blend 04 streamed (04 fits the trees and chooses the weight on the
inner split; 05 only reads them, and has none where 04 ran with --no-trees);
and write the run's report.md (output/runs/NAME/report.md) with tables and figures (see
common/report/evaluate.py).

python 05_evaluate.py --run base       (the folds of run base streamed so far)
python 05_evaluate.py --runs           (the table of runs, output/runs.csv, best first)
"""

from __future__ import annotations

import sys

from common import cli
from common.errors import UserError
from common.files import check_writable
from common.report.evaluate import EvaluateConfig, Evaluation, evaluate
from common.report.render import blend_weights
from common.runs.folders import choose_run
from common.runs.table import latest_run, runs_text
from common.workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    cli.path_flags(parser, input_help="where demo_truth.csv is read, if any")
    cli.run_flag(
        parser, "the run under <output-dir>/runs/ (default: the only run, or the latest streamed)"
    )
    parser.add_argument(
        "--runs",
        action="store_true",
        help="print the table of runs (<output-dir>/runs.csv), best streamed AUC first, and "
        "stop (default: off)",
    )
    cli.add_config_flags(parser, EvaluateConfig)
    config, args = cli.parse_config(parser, EvaluateConfig, argv, stage="evaluate")

    def body() -> None:
        workspace = Workspace(args.output_dir)
        if not workspace.path.is_dir():
            raise UserError(
                f"--output-dir {workspace.path}: no such folder (the pipeline's output)"
            )
        if args.runs:
            print(runs_text(workspace))
            return
        run = choose_run(workspace, args.run, latest_run(workspace, "stream"))
        check_writable(run.path)  # before the folds are scored
        report(evaluate(run, args.input_dir, config))

    return cli.guarded(
        body,
        "the run's report (report.md, report/) is as it was: run the command again",
        args.output_dir,
    )


def report(head: Evaluation) -> None:
    interval = ""
    if head.auc_ci_low == head.auc_ci_low:  # not NaN: a bootstrap ran
        interval = f" (95% CI {head.auc_ci_low:.4f}-{head.auc_ci_high:.4f})"
    rows = f"{head.rows:,} rows, folds {head.folds}"
    print(f"run {head.run}: model AUC {head.auc:.4f}{interval} on {rows}")
    if head.auc_fold_std is not None:
        print(
            f"fold mean {head.auc_fold_mean:.4f} ± {head.auc_fold_std:.4f} "
            f"(std over {len(head.fold_aucs)} folds)"
        )
    for name, auc in head.baselines.items():
        print(f"{name} baseline AUC {auc:.4f} (lift {head.lift[name]:+.4f})")
    for name, auc in head.members.items():
        print(f"{name} AUC {auc:.4f} (another architecture of the run)")
    if head.blend_auc is not None:
        weights = blend_weights(head)
        print(f"blend AUC {head.blend_auc:.4f} (weights, from the inner split: {weights})")
    for reason in head.no_blend:
        print(f"no blend for {reason}")
    if head.oracle_auc is not None:
        print(f"oracle AUC {head.oracle_auc:.4f} on the same rows")
    print(head.selection)
    print(f"report: {head.report}")


if __name__ == "__main__":
    sys.exit(main())
