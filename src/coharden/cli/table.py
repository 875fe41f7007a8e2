"""``coharden study table``: the laxity table of public test generators, as a dataset and a report.

Mounted on the ``study`` group by :mod:`coharden.cli.study`; the layers below are imported inside the command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coharden.cli.command import ADVANCED, renamed_flags
from coharden.cli.common import RUN_RENAMED, cli_errors, console, err_console
from coharden.cli.common import settings_from as _settings
from coharden.cli.engine_options import EngineOptions, engine_options
from coharden.cli.llm_options import LLMOptions, ModelOpt, llm_options
from coharden.cli.mpe_options import MPEOptions, mpe_options
from coharden.cli.options import ConfigOpt, IdsOpt, JsonOpt, option_group, output_option, workers_option
from coharden.cli.study import BYTECODE_RENAMED, LimitOpt, ReportOnlyOpt, check_python, study_llm, system_files
from coharden.errors import CoHardenError

if TYPE_CHECKING:
    from coharden.config import Settings
    from coharden.mutation.llm_operators import LLMMutator
    from coharden.study.real_bugs import StudyConfig
    from coharden.study.table import Dataset


@dataclass(frozen=True)
class TableInputs:
    """What the table is made of: the data directory, the clones, the environment check and the narrowing."""

    data: Path | None = None
    repos: Path | None = None
    envcheck: Path | None = None
    only_repo: list[str] | None = None
    only: list[str] | None = None
    limit: int | None = None
    systems: str | None = None
    system_file: list[str] | None = None


table_inputs = option_group(TableInputs, {
    "data": Annotated[Path | None, typer.Option("--data", help="The shared data directory (swebench_verified.jsonl, "
                                                "swtbench_lite_instances.jsonl, swtbench_verified_ids.txt, "
                                                "brt_predictions/).")],
    "repos": Annotated[Path | None, typer.Option("--repos", help="Directory of owner__name repository clones; an "
                                                 "instance without one is a row 'unreachable'.")],
    "envcheck": Annotated[Path | None, typer.Option("--envcheck", help="Output of `coharden study envcheck` over "
                                                    "the instances (directory or envcheck.jsonl): its verified "
                                                    "instances run, each in its spec environment (unless -c "
                                                    "python=...); without it, the data directory's sympy check on "
                                                    "the settings' python.")],
    "only_repo": Annotated[list[str] | None, typer.Option("--repo", help="Run only these repositories "
                                                          "(owner/name; repeatable).")],
    "only": IdsOpt,
    "limit": LimitOpt,
    "systems": Annotated[str | None, typer.Option("--systems", help="Comma-separated, of Otter, Otter++, "
                                                  "AssertFlip, AssertFlip-Lite, Devstral-testgen (default: all).")],
    "system_file": Annotated[list[str] | None, typer.Option(
        "--system", rich_help_panel=ADVANCED, help="NAME=FILE: another system's test predictions on SWT-bench "
        "Verified (JSONL with instance_id, model_patch); repeatable.")],
}, "inputs")


@cli_errors
@mpe_options("per_operator", "seed", "tau", "paper_classes", "no_implied", "confidence", "max_mutants", "mutator",
             mutator=Annotated[str, typer.Option("--mutator", help="Every graded test's pool: mechanical, or "
                                                 "mechanical,llm (the LLM operators' mutants join it; needs a "
                                                 "model: --model).")])
@engine_options()
@renamed_flags(*RUN_RENAMED[:3], *BYTECODE_RENAMED)
@table_inputs
@llm_options(ModelOpt, "llm_opts")
def study_table(
    inputs: TableInputs = TableInputs(),
    output: Annotated[Path, output_option(help="Results directory: the dataset table.jsonl (appended, resumable) "
                                          "and table_report.md.")] = Path("results"),
    mpe_opts: MPEOptions = MPEOptions(),
    workers: Annotated[int, workers_option("MPE workers of one instance (one checkout each).")] = 2,
    report_only: ReportOnlyOpt = False,
    llm_opts: LLMOptions = LLMOptions(),
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The laxity table: every reachable SWT-bench instance x every system with predictions (Otter, Otter++,
    AssertFlip on SWT-bench Verified; AssertFlip-Lite, Devstral-testgen on SWT-bench Lite), one dataset row per
    pair, appended instance by instance; resumable from the dataset and the store; a report from the dataset."""
    from coharden.study.table import DATASET, Dataset
    from coharden.study.table_report import REPORT, write_table_report

    dataset = Dataset(output / DATASET)
    if not report_only:
        if inputs.data is None or inputs.repos is None:
            raise CoHardenError("--data and --repos are needed to make the table (--report-only needs neither)")
        settings = _settings(config, repos_dir=inputs.repos, workers=workers)
        study, llm_mutator = _study_config(settings, mpe_opts, llm_opts, workers)
        _make(dataset, inputs, settings, study, llm_mutator)
    elif not dataset.path.is_file():
        raise CoHardenError(f"{dataset.path}: no dataset to report on (make the table first, without --report-only)")
    summary = write_table_report(dataset.path, output)
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True, default=str))
        return
    cov = summary["coverage"]["all"]
    console.print(f"report: {output / REPORT} (dataset {dataset.path}: {summary['rows']} rows; "
                  f"{cov['done']} of {cov['reachable']} reachable instances done)", markup=False, highlight=False)


def _study_config(settings: Settings, mpe_opts: MPEOptions, llm_opts: LLMOptions, workers: int
                  ) -> tuple[StudyConfig, LLMMutator | None]:
    """The study's choices for the table, and the LLM mutator that joins every graded pool (``--mutator
    mechanical,llm``: refused without a model)."""
    from coharden.study.real_bugs import StudyConfig

    llm_mutator, skipped = study_llm(settings, mpe_opts, llm_opts)
    if "llm" in mpe_opts.sources and llm_mutator is None:
        raise CoHardenError(f"--mutator {mpe_opts.mutator}: {skipped}")
    mpe = (mpe_opts.config(settings) if llm_mutator is None else
           mpe_opts.config(settings, mechanical="mechanical" in mpe_opts.sources,
                           llm_model=llm_mutator.client.config.model, llm_operators=llm_mutator.settings.operators))
    study = StudyConfig(mpe=mpe, workers=workers, verify_all=False,
                        bytecode=["sympy"] if settings.study.bytecode else [],
                        warm_defaults=not settings.server.preload and not settings.server.warm_imports)
    return study, llm_mutator


def _make(dataset: Dataset, inputs: TableInputs, settings: Settings, study: StudyConfig,
          llm_mutator: LLMMutator | None) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from coharden.study.data import StudySource
    from coharden.study.table import RunContext, TableConfig, run_table
    from coharden.study.table_data import load_table_data

    assert inputs.data is not None
    assert inputs.repos is not None
    systems, envcheck = inputs.systems, inputs.envcheck
    chosen = [s.strip() for s in systems.split(",") if s.strip()] if systems else None
    table_data = load_table_data(StudySource(inputs.data, python_version=check_python(settings, envcheck),
                                             envcheck=envcheck, repos_dir=inputs.repos, systems=chosen,
                                             system_files=system_files(inputs.system_file or [])))
    table_config = TableConfig(study=study, repos=inputs.only_repo or [], ids=inputs.only or [], limit=inputs.limit)
    engine_opts = EngineOptions.of(settings)
    engine = None
    if not engine_opts.local:
        engine = engine_opts.engine(study.workers)
    try:
        with Progress(TextColumn("table"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}", markup=False), console=err_console) as bar:
            task = bar.add_task("", total=None)
            context = RunContext(settings, progress=lambda text, n: bar.update(task, advance=n,
                                                                                description=text[:100]),
                                 on_plan=lambda n: bar.update(task, total=n), llm_mutator=llm_mutator)
            result = run_table(table_data, table_config, dataset, context, engine=engine)
    finally:
        if engine is not None:
            engine.close()
    err_console.print(f"{len(result.ran)} instances run, {result.skipped} already done, {result.left} left for "
                      f"a later run; {result.written} rows written", markup=False, highlight=False)
    for note in table_data.notes:
        err_console.print(f"note: {note}", markup=False, highlight=False)
