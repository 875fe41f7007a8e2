"""``coharden eval``: grade prediction sets and CoHarden round records, write Markdown and HTML reports.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from coharden.cli.command import renamed_flags
from coharden.cli.common import RunOptions, cli_errors, console, err_console, progress_bar, run_options
from coharden.cli.engine_options import EngineOptions, engine_options
from coharden.cli.mpe_options import CUTOFFS_RENAMED, MPEOptions, mpe_options
from coharden.cli.options import JsonOpt, output_option, workers_option
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc


@cli_errors
@renamed_flags(CUTOFFS_RENAMED)
@run_options
@mpe_options("operators", "per_operator", "seed", "tau", "paper_classes", "no_implied", "confidence", "max_mutants")
@engine_options()
def eval_command(
    instances: Annotated[Path, typer.Option("--instances", "--dataset_name", help="SWE-bench records file (or a "
                                            "dataset name with a local copy), an instance directory, or a "
                                            "directory of instance directories (like examples/).")],
    fixes: Annotated[list[str] | None, typer.Option("--fixes", help="Fix predictions (SWE-bench: .jsonl, .json "
                                                    "list or dict by id), as PATH, NAME=PATH or 'gold'. Repeat "
                                                    "for a comparison table.")] = None,
    tests: Annotated[list[str] | None, typer.Option("--tests", help="Test predictions (SWT-bench), as PATH, "
                                                    "NAME=PATH or 'gold'. A system's fixes and tests pair up by "
                                                    "name (model_name_or_path).")] = None,
    runs: Annotated[Path | None, typer.Option("--runs", help="Directory of CoHarden loop round records (*.jsonl).")]
    = None,
    overfit: Annotated[list[Path] | None, typer.Option("--overfit", help="Output directory of coharden overfit "
                                                       "refine: overfitting before/after refinement, net Resolved "
                                                       "gain, coverage of overfitted vs other fixes.")] = None,
    injection: Annotated[list[str] | None, typer.Option("--injection", help="Test injection study: "
                                                        "[NAME=]BASELINE_FIXES,INJECTED_FIXES,TESTS. Repeat per "
                                                        "test source.")] = None,
    output: Annotated[Path, output_option(help="Report directory (report.json, report.md, "
                                         "report.html).")] = Path("eval-results"),
    mpe_opts: MPEOptions = MPEOptions(),
    no_html: Annotated[bool, typer.Option("--no-html", help="Skip the HTML page (no matplotlib needed).")] = False,
    workers: Annotated[int | None, workers_option("Instances graded in parallel.", aliases=("--max_workers",))]
    = None,
    run: RunOptions = RunOptions(),
    as_json: JsonOpt = False,
) -> None:
    """Grade fixes (Resolved, SWE-bench semantics) and tests (F->P, MPE class, laxity) of any system, side by
    side: coupling of test and fix errors, test overfitting, test injection, cutoff sensitivity, loop runs.
    Writes report.json, report.md and a self-contained report.html; --json prints the JSON."""
    from coharden.evaluation.grading import GradeOptions
    from coharden.evaluation.grading_jobs import Grading
    from coharden.evaluation.runner import EvalInputs, EvalSources, run_evaluation, write_outputs
    from coharden.execution.store import Store

    if not no_html:
        _check_html()
    settings = run.settings(workers=workers)
    options = GradeOptions(mpe=mpe_opts.config(settings), workers=settings.workers)
    inputs = EvalInputs.load(EvalSources(instances, fixes=fixes or [], tests=tests or [], injections=injection or [],
                                         runs=runs, overfit=overfit or []), settings.cache_dir)
    with progress_bar("eval", quiet=as_json) as update:
        def planned(total: int) -> None:
            update(total=total)

        def advance(instance_id: str, what: str) -> None:
            update(advance=1, description=f"{instance_id}: {what}")

        engine = EngineOptions.of(settings)
        jobs = None if engine.local else engine.engine(settings.workers)
        try:
            report = run_evaluation(inputs, Grading(settings, Store(settings.store), options), progress=advance,
                                    on_plan=planned, engine=jobs)
        finally:
            if jobs is not None:
                jobs.close()
    written = write_outputs(report, output, html=not no_html)
    if as_json:
        print(json.dumps(report, indent=2))  # not sorted: instance and class order carry meaning
    else:
        _render_eval(report, written)
    for where in ("errors", "fix_errors"):
        for iid, error in report["instances"][where].items():
            err_console.print(f"[yellow]{esc(iid)}[/]: {esc(error)}", highlight=False)
    from coharden.schema.prediction import unknown_ids_message

    for kind in ("fixes", "tests"):
        for name, section in (report.get(kind) or {}).items():
            if unknown := section["summary"].get("unknown_ids"):
                what = "fix predictions" if kind == "fixes" else "test predictions"
                err_console.print(f"warning: {name}: " + unknown_ids_message(unknown, what), highlight=False,
                                  markup=False)


def _check_html() -> None:
    """report.html draws its figures with matplotlib: missing, it is said before any grading (an eval that
    graded for minutes and then stopped on the import lost the work)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise CoHardenError("report.html needs matplotlib, which is not installed: pip install "
                            "'coharden[report]', or pass --no-html (report.json and report.md need nothing more)")


def _render_eval(report: dict, written: dict) -> None:
    from coharden.evaluation.report_blocks import fmt

    total = report["instances"]["total"]
    table = Table(title=f"coharden eval over {total} instances")
    for title in ("system", "resolved", "F->P", "Rig/Lax/Mis", "mean laxity", "coupling", "overfit"):
        table.add_column(title, no_wrap=True)
    for row in report["comparison"]:
        resolved = "-" if row["resolved"] is None else f"{row['resolved']}/{total}"
        fail_to_pass = "-" if row["fail_to_pass"] is None else f"{row['fail_to_pass']}/{total}"
        classes = "-" if row["tests_submitted"] is None else \
            f"{row['Rigorous']}/{row['Lax']}/{row['Misaligned']}"
        table.add_row(esc(row["system"]), resolved, fail_to_pass, classes, fmt(row["mean_laxity"]),
                      fmt(row["coupling_factor"]), fmt(row["overfit_rate"]))
    if report["comparison"]:
        console.print(table)
    if report.get("injection"):
        overall = report["injection"]["overall"]["overall"]
        console.print(f"test injection: delta Resolved {fmt(overall['delta'])} over {overall['n']} pairs")
    for name, sec in (report.get("refinement") or {}).items():
        change = sec["resolved_change"]
        console.print(f"overfit run {esc(name)}: overfit rate {fmt(sec['overfit_rate']['before'])} -> "
                      f"{fmt(sec['overfit_rate']['after'])}, net Resolved gain {change['net_gain']} "
                      f"(+{change['gained']} / -{change['lost']} over {change['n']})")
    for name, run in report["runs"].items():
        totals = run["totals"]
        console.print(f"run {esc(name)}: final Resolved {fmt(totals['resolved_rate'])}, F->P "
                      f"{fmt(totals['fail_to_pass_rate'])}, {fmt(totals['usd'])} USD, mutant share "
                      f"{fmt(totals['mutant_share'])}")
    for kind, path in written.items():
        console.print(f"{kind}: {esc(path)}", highlight=False)
