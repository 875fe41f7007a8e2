"""``coharden check [REV]``: how rigorous is the regression test of a commit (or a branch) in the current git
repository? Mounted on the main app by :mod:`coharden.cli.main`; the domain is :mod:`coharden.check`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from coharden.cli.common import RunOptions, cli_errors, console, err_console
from coharden.cli.options import ConfigOpt, PythonOpt, StoreOpt, TimeoutOpt, WeakSandboxOpt, option_group
from coharden.errors import CoHardenError

#: The run options ``check`` takes: no --repos (the repository is the current one), no --pass-env.
check_run_options = option_group(RunOptions, {"config": ConfigOpt, "timeout": TimeoutOpt, "python": PythonOpt,
                                              "store": StoreOpt, "allow_weak_sandbox": WeakSandboxOpt}, "run")

FormatOpt = Annotated[Literal["text", "markdown", "sarif", "junit", "json"], typer.Option(
    "--format", "-f", help="text (the terminal summary), markdown (a pull-request comment), sarif (code "
    "scanning), junit, json.")]
FailOnOpt = Annotated[Literal["lax", "borderline", "never"], typer.Option(
    "--fail-on", help="Exit status 1 when the class is Lax (lax), Lax or Borderline (borderline), or never.")]


def interpreter(python: str | None) -> str | None:
    """``--python``, else the active virtual environment's interpreter (``$VIRTUAL_ENV``), else None (the
    settings' interpreter: the one coharden runs in)."""
    if python:
        return python
    venv = os.environ.get("VIRTUAL_ENV")
    if venv:
        candidate = Path(venv) / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
        if candidate.exists():
            return str(candidate)
    return None


@cli_errors
@check_run_options
def check(
    rev: Annotated[str, typer.Argument(help="The commit (default HEAD), or BASE..HEAD for a branch.")] = "HEAD",
    tests: Annotated[list[str] | None, typer.Option(
        "--tests", metavar="GLOB", help="Test files: a file-name glob (check_*.py) or a directory ending in / "
        "(spec/); repeatable; replaces tests/, testing/, test_*.py, *_test.py, conftest.py.")] = None,
    reference: Annotated[str | None, typer.Option(
        "--reference", "-r", metavar="REV|PATCH", help="A reference test: a commit or range whose test changes "
        "it is, or a patch file. Gives the full matrix and the laxity; without it the surviving wrong fixes and "
        "an upper bound.")] = None,
    fmt: FormatOpt = "text",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file (default: "
                                                "stdout).")] = None,
    fail_on: FailOnOpt = "lax",
    run: RunOptions = RunOptions(),
) -> None:
    """Check the regression test of a commit: its test-file changes are the test, its other changes the fix, its
    parent the buggy code. Lists the plausible wrong fixes the test lets through.

    Runs in throwaway clones: the checkout (uncommitted files included) is never changed nor read by the tests.
    Exit status 0, 1 by --fail-on, 2 when the commit cannot be checked (one error line says why)."""
    from dataclasses import replace

    from coharden import __version__
    from coharden.check.commit import detect_runner, read_change
    from coharden.check.render import render
    from coharden.check.run import run_check
    from coharden.config import TestSettings

    settings = replace(run, python=interpreter(run.python)).settings()
    if tests:
        settings = settings.with_overrides(test_patterns=list(tests))
    change = read_change(Path.cwd(), rev, settings.tests.test_patterns)
    if settings.tests.runner == TestSettings.model_fields["runner"].default:  # at its default: the layout says
        settings = settings.with_overrides(runner=detect_runner(change.repo, change.base))
    if change.dirty:
        err_console.print("note: the worktree has uncommitted changes: checking the commit; your files are left as "
                          "they are and no test sees them", highlight=False, markup=False)
    report = run_check(change, settings, reference)
    body = render(report, fmt, fail_on=fail_on, version=__version__)
    if output is not None:
        try:
            output.write_text(body, encoding="utf-8")
        except OSError as exc:
            raise CoHardenError(f"--output: cannot write {output} ({exc.strerror})") from exc
    else:
        console.out(body, highlight=False, end="")
    if report.problem:
        err_console.print(f"error: {report.problem}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2)
    if report.fails(fail_on):
        raise typer.Exit(1)
