"""The ``coharden`` command line (typer + rich). Subcommands import their layers lazily."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from coharden.cli.common import (
    RunOptions,
    cli_errors,
    console,
    err_console,
    fix_source,
    new_app,
    pick_instance,
    read_patch_arg,
    run_options,
)
from coharden.cli.examples import examples_app
from coharden.cli.mpe import mpe
from coharden.cli.options import IdOpt, JsonOpt
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc

app = new_app(name="coharden", help="Measure and harden the rigor of bug reproduction tests with mutant patches.")


def _print_version(value: bool) -> None:
    if value:
        from coharden import __version__

        print(f"coharden {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    """coharden: verdicts, mutation patch evaluation (MPE) and hardening of reproduction tests."""
    _stacks_on_sigusr1()


def _stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` prints every thread's stack to stderr and the command goes on: what a run that does
    not end (or does not stop on Ctrl-C) is waiting for, without a debugger."""
    import faulthandler
    import signal

    stream = sys.__stderr__  # the process's own stderr, also where a caller replaced sys.stderr (CliRunner)
    if hasattr(signal, "SIGUSR1") and stream is not None:
        with contextlib.suppress(OSError, ValueError):  # no descriptor behind it: no dump, the command still runs
            faulthandler.register(signal.SIGUSR1, file=stream, all_threads=True)


@app.command()
@cli_errors
@run_options
def verify(
    instance: Annotated[Path, typer.Argument(help="Instance directory, or SWE-bench records (.json/.jsonl).")],
    test: Annotated[str, typer.Option("--test", "-t", help="Test patch file, candidate name, or 'golden'.")] = "golden",
    fix: Annotated[str, typer.Option("--fix", "-f", help="Fix patch file (default: the golden fix).")] = "golden",
    instance_id: IdOpt = None,
    run: RunOptions = RunOptions(),
    as_json: JsonOpt = False,
) -> None:
    """Verdicts of a test on the buggy and the fixed code, and whether it is fail-to-pass."""
    from coharden.environment.derived import auto_spec_settings
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.store import Store
    from coharden.execution.verify import fail_to_pass
    from coharden.instances import resolve_repo

    settings = run.settings()
    local = pick_instance(instance, instance_id, settings)
    inst = local.instance
    candidates = {c.name: c.patch for c in local.candidates}
    test_name, test_text = read_patch_arg(test, candidates, inst.test_patch, "--test", instance)
    fix_name, fix_text = read_patch_arg(fix, {}, inst.patch, "--fix", instance)
    repo = resolve_repo(inst, settings.repos_dir)
    if not fix_text.strip():
        raise CoHardenError(f"--fix: {inst.instance_id} has no golden fix; give a fix patch file")
    source = fix_source(fix_text, settings)
    settings = auto_spec_settings(inst, repo, settings)  # a SWE-bench record runs in its spec environment
    with InstanceExecutor(inst, repo, settings, Store(settings.store)) as executor:
        spec = executor.golden_test() if test == "golden" else executor.test_patch(test_text, name=test_name)
        result = fail_to_pass(executor, spec, source)
    if as_json:
        print(json.dumps({"instance_id": inst.instance_id, "test": test_name, "fix": fix_name, **result.to_json()},
                         indent=2))
    else:
        table = Table(title=f"{esc(inst.instance_id)}: test {esc(repr(test_name))}, fix {esc(repr(fix_name))}")
        table.add_column("code")
        table.add_column("verdict")
        table.add_column("detail", overflow="fold")
        for label, verdict in (("buggy", result.buggy), ("fixed", result.fixed)):
            table.add_row(label, verdict.outcome.value, esc(verdict.reason[:300]))
        console.print(table)
        console.print(f"test ids: {esc(', '.join(result.test_ids))}", highlight=False)
        mark = "[green]yes[/]" if result.fail_to_pass else "[red]no[/]"
        console.print(f"fail-to-pass: {mark}")
    raise typer.Exit(0 if result.admissible else 1)



app.command()(mpe)
app.add_typer(examples_app, name="examples")



def _register() -> None:
    """Mount the command modules of this package; each imports its layer only inside its commands, so
    ``coharden --help`` stays fast."""
    from coharden.cli import llm as llm_cli
    from coharden.cli.check import check
    from coharden.cli.config_keys import config_app
    from coharden.cli.env import env_app
    from coharden.cli.evaluation import eval_command
    from coharden.cli.loop import agent_cmd, run_loop
    from coharden.cli.mutants import mutants_app
    from coharden.cli.overfit import overfit_app
    from coharden.cli.reproduce import reproduce_app
    from coharden.cli.study import study_app
    from coharden.cli.suite import suite_app
    from coharden.cli.suite_compare import compare_cmd
    from coharden.cli.table import study_table
    from coharden.cli.validity import study_validity

    study_app.command("table")(study_table)
    study_app.command("validity")(study_validity)
    suite_app.command("compare")(compare_cmd)
    app.command("mock-llm", help="Serve an OpenAI-compatible mock LLM with scripted replies.")(llm_cli.mock_llm)
    for name, group in (("study", study_app), ("suite", suite_app), ("env", env_app), ("reproduce", reproduce_app),
                        ("overfit", overfit_app), ("mutants", mutants_app), ("config", config_app)):
        app.add_typer(group, name=name)
    app.command("eval")(eval_command)
    app.command("check")(check)
    app.command("agent")(agent_cmd)
    app.command("run")(run_loop)
    from coharden.cli.demo import demo_app

    app.add_typer(demo_app, name="demo")


_register()


def main() -> None:  # pragma: no cover - console entry
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()