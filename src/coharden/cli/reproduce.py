"""``coharden reproduce ...``: verified reproduction of real bugs: check or generate fail-to-pass tests that do
not mock the code under test; mine issue / pull-request exports.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from coharden.cli.command import renamed_flags
from coharden.cli.common import RUN_RENAMED, cli_errors, console, err_console, new_app, read_patch_file, read_text
from coharden.cli.common import settings_from as _settings
from coharden.cli.env import BUILD_RENAMED, RepoArg, infer_plan, with_llm_options
from coharden.cli.llm_options import LLMOptions
from coharden.cli.options import ConfigOpt, JsonOpt, output_option, ranged
from coharden.config import Settings
from coharden.errors import CoHardenError

reproduce_app = new_app(help="Verified reproduction of real bugs: check or generate fail-to-pass tests that "
                        "do not mock the code under test; mine issue / pull-request exports.")

BuggyOpt = Annotated[str, typer.Option("--buggy", help="The buggy commit (e.g. the fix's base).")]
PatchedOpt = Annotated[str | None, typer.Option("--patched", help="The patched commit (fix = source part of the "
                                                "diff buggy..patched).")]
FixOpt = Annotated[Path | None, typer.Option("--fix", help="Instead of --patched: a fix patch against --buggy.")]
ExpectExcOpt = Annotated[str | None, typer.Option("--expect-exception", help="Exception type the test must fail "
                                                  "with on the buggy code (as the issue describes).")]
ExpectMsgOpt = Annotated[str | None, typer.Option("--expect-message", help="Text the buggy failure must show.")]
EnvOpt = Annotated[bool, typer.Option("--env", help="Build (or reuse) the inferred environment of the buggy "
                                      "commit and run the tests with it.")]
MockOpt = Annotated[bool, typer.Option("--mock-services", help="Serve the model-provider variables from a local "
                                       "mock server while the tests run.")]


def _run_settings(settings: Settings, repo: Path, buggy: str, use_env: bool) -> Settings:
    """``settings``, or with ``use_env`` those of the buggy commit's inferred environment, built (or reused) as
    the ``build`` section says."""
    if not use_env:
        return settings
    from coharden.environment.build import make_builder

    plan = infer_plan(repo, buggy)
    result = make_builder(settings, log=lambda msg: err_console.print(f"[dim]{msg}[/]")).build(repo, buggy, plan)
    if not result.ok:
        raise CoHardenError(f"the environment did not build: {result.error}")
    return result.settings(settings)


def _read_fix(fix: Path | None) -> str | None:
    if fix is None:
        return None
    if not fix.is_file():
        raise CoHardenError(f"--fix: {fix} not found")
    return read_patch_file(fix, "--fix")


@reproduce_app.command("check")
@cli_errors
@renamed_flags(*RUN_RENAMED[:2], *BUILD_RENAMED[:2])
def reproduce_check(
    repo: RepoArg,
    test: Annotated[Path, typer.Option("--test", "-t", help="The test patch (a diff adding the test).")],
    buggy: BuggyOpt,
    patched: PatchedOpt = None,
    fix: FixOpt = None,
    expect_exception: ExpectExcOpt = None,
    expect_message: ExpectMsgOpt = None,
    ids: Annotated[list[str] | None, typer.Option("--id", help="Test ids to judge (default: the ones the patch "
                                                  "adds or changes).")] = None,
    strict_mocks: Annotated[bool, typer.Option("--strict-mocks", help="Also reject mocks of anything that is not a "
                                               "model-client or network boundary.")] = False,
    mock_services: MockOpt = False,
    use_env: EnvOpt = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Is TEST a verified reproduction? It must fail on --buggy (optionally as expected), pass on --patched,
    import the real code, and mock nothing the fix changes. Exit status 1 when rejected."""
    from coharden.environment.reproduce import Expectation, ReproductionJob, check_reproduction

    if not test.is_file():
        raise CoHardenError(f"--test: {test} not found")
    if (patched is None) == (fix is None):
        raise CoHardenError("give exactly one of --patched and --fix")
    settings = _run_settings(_settings(config), repo, buggy, use_env)
    test_patch = read_patch_file(test, "--test")
    job = ReproductionJob(repo, buggy, patched=patched, fix=_read_fix(fix),
                          expect=Expectation(exception=expect_exception, message=expect_message),
                          mock_services=mock_services, strict_mocks=strict_mocks)
    report = check_reproduction(job, test_patch, settings, test_ids=ids or None)
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        _render_report(report)
    raise typer.Exit(0 if report.accepted else 1)


def _render_report(report: Any) -> None:
    table = Table(title=f"reproduction check: {', '.join(report.test_ids) or '(no test ids)'}")
    table.add_column("check")
    table.add_column("")
    table.add_column("detail", overflow="fold")
    for check in report.checks:
        table.add_row(check.name, "[green]ok[/]" if check.ok else "[red]no[/]", check.detail[:400])
    console.print(table)
    for finding in report.mocks:
        color = {"error": "red", "warning": "yellow", "ok": "green"}[finding.severity]
        console.print(f"[{color}]{finding.severity}[/] {finding.path}:{finding.line} {finding.call}"
                      f"({finding.target!r}): {finding.reason}")
    console.print("verdict: " + ("[green]accepted[/]" if report.accepted else "[red]rejected[/]"))


@reproduce_app.command("generate")
@cli_errors
@renamed_flags(*RUN_RENAMED[:2], *BUILD_RENAMED[:2])
@with_llm_options
def reproduce_generate(
    repo: RepoArg,
    issue: Annotated[Path, typer.Option("--issue", help="The issue text (a file).")],
    buggy: BuggyOpt,
    patched: PatchedOpt = None,
    fix: FixOpt = None,
    expect_exception: ExpectExcOpt = None,
    expect_message: ExpectMsgOpt = None,
    test_path: Annotated[str, typer.Option("--test-path", help="Where the generated test module goes.")]
    = "tests/test_coharden_reproduction.py",
    attempts: Annotated[int, ranged("--max-attempts", help="Tests the model may write.", lo=1)] = 3,
    output: Annotated[Path | None, output_option(directory=False, help="Write the accepted test patch here.")]
    = None,
    log: Annotated[Path | None, output_option(flag="--log", short=None, directory=False,
                                              help="Attempt log, JSONL.")] = None,
    mock_services: MockOpt = False,
    use_env: EnvOpt = False,
    llm_opts: LLMOptions = LLMOptions(),
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Have a model write a reproduction test for ISSUE and refine it from execution results (bounded).
    Exit status 1 when no test was accepted."""
    from coharden.environment.attempt_log import AttemptLog
    from coharden.environment.reproduce import Expectation, ReproductionJob
    from coharden.environment.reproduce_generate import GenerationRequest, generate_reproduction

    if not issue.is_file():
        raise CoHardenError(f"--issue: {issue} not found")
    if (patched is None) == (fix is None):
        raise CoHardenError("give exactly one of --patched and --fix")
    base = _settings(config)
    llm = llm_opts.client(base, required=True)
    settings = _run_settings(base, repo, buggy, use_env)
    request = GenerationRequest(read_text(issue, "--issue"), test_path=test_path, max_attempts=attempts)
    job = ReproductionJob(repo, buggy, patched=patched, fix=_read_fix(fix),
                          expect=Expectation(exception=expect_exception, message=expect_message),
                          mock_services=mock_services)
    result = generate_reproduction(job, request, settings, llm,
                                   log=AttemptLog(log, progress=lambda msg: err_console.print(msg)))
    if output is not None and result.accepted:
        output.write_text(result.test_patch)
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        if result.report is not None:
            _render_report(result.report)
        console.print(f"{len(result.attempts)} attempt(s): {result.stop_reason}")
    raise typer.Exit(0 if result.accepted else 1)


@reproduce_app.command("mine")
@cli_errors
@with_llm_options
def reproduce_mine(
    exports: Annotated[list[Path], typer.Argument(help="Exported GitHub issues / pull requests (JSON).")],
    output: Annotated[Path, output_option(directory=False, help="SWE-bench-style records (JSONL).")]
    = Path("mined.jsonl"),
    repo: Annotated[str | None, typer.Option("--repo", help="owner/name (default: from the export).")] = None,
    llm_opts: LLMOptions = LLMOptions(),
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Issue-PR pairs (merged, code-changing, one-to-one) as SWE-bench records; with a model, each is labelled
    with the agent-harness components its fix touches."""
    from coharden.environment.mining import load_export, mine, write_records

    settings = _settings(config)
    llm = llm_opts.client(settings)
    export = load_export(exports)
    export = dataclasses.replace(export, repo=repo or export.repo)
    result = mine(export, patterns=settings.tests.test_patterns, llm=llm,
                  progress=lambda msg: err_console.print(f"[dim]{msg}[/]"))
    write_records(result.records, output)
    summary = {"output": str(output), **result.counts, "dropped": result.dropped}
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        console.print(f"{result.counts['records']} records from {result.counts['issues']} issues and "
                      f"{result.counts['pulls']} pull requests -> {output}")
        for reason, n in sorted(result.dropped.items()):
            console.print(f"  dropped {n}: {reason}")
        if result.counts["label_errors"]:
            err_console.print(f"[yellow]{result.counts['label_errors']} records have no label (model reply "
                              "unusable; see label_error)[/]")
