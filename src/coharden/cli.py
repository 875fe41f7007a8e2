"""The ``coharden`` command line (typer + rich). Subcommands import their layers lazily."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from coharden.config import Settings, load_settings
from coharden.errors import CoHardenError

app = typer.Typer(
    name="coharden",
    help="Measure and harden the rigor of bug reproduction tests with mutant patches.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """coharden: verdicts, mutation patch evaluation (MPE) and hardening of reproduction tests."""

err_console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML settings file.")]
ReposOpt = Annotated[Path | None, typer.Option("--repos", help="Directory holding owner__name repositories.")]
IdOpt = Annotated[str | None, typer.Option("--id", help="Instance id, when the records file has several.")]
TimeoutOpt = Annotated[float | None, typer.Option("--timeout", help="Seconds per test process.")]
PythonOpt = Annotated[str | None, typer.Option("--python", help="Interpreter that runs the tests.")]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="SQLite result store.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _settings(config: Path | None, **overrides: object) -> Settings:
    return load_settings(config).with_overrides(**overrides)


def _fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _read_patch_arg(value: str, candidates: dict[str, str], golden: str, what: str) -> tuple[str, str]:
    """A patch given as 'golden', a candidate name of a local instance, or a file path -> (name, text)."""
    if value == "golden":
        return "golden", golden
    if value in candidates:
        return value, candidates[value]
    path = Path(value)
    if not path.is_file():
        known = ", ".join(["golden", *candidates]) or "golden"
        raise CoHardenError(f"{what}: {value!r} is neither a patch file nor a known name ({known})")
    return path.stem, path.read_text()


@app.command()
def verify(
    instance: Annotated[Path, typer.Argument(help="Instance directory, or SWE-bench records (.json/.jsonl).")],
    test: Annotated[str, typer.Option("--test", "-t", help="Test patch file, candidate name, or 'golden'.")] = "golden",
    fix: Annotated[str, typer.Option("--fix", "-f", help="Fix patch file (default: the golden fix).")] = "golden",
    instance_id: IdOpt = None,
    repos: ReposOpt = None,
    config: ConfigOpt = None,
    timeout: TimeoutOpt = None,
    python: PythonOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Verdicts of a test on the buggy and the fixed code, and whether it is fail-to-pass."""
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.store import Store
    from coharden.execution.verify import fail_to_pass
    from coharden.instances import resolve_repo
    from coharden.patches import split_patch

    try:
        settings = _settings(config, repos_dir=repos, timeout=timeout, python=python, store=store)
        local = _pick_instance(instance, instance_id, settings)
        inst = local.instance
        candidates = {c.name: c.patch for c in local.candidates}
        test_name, test_text = _read_patch_arg(test, candidates, inst.test_patch, "--test")
        _, fix_text = _read_patch_arg(fix, {}, inst.patch, "--fix")
        fix_source, fix_tests = split_patch(fix_text, settings.test_patterns)
        if fix_tests.strip():
            err_console.print("[yellow]warning:[/] the fix touches test files; only its source part is used")
        repo = resolve_repo(inst, settings.repos_dir)
        with InstanceExecutor(inst, repo, settings, Store(settings.store)) as executor:
            spec = executor.golden_test() if test_name == "golden" else executor.test_patch(test_text, name=test_name)
            result = fail_to_pass(executor, spec, fix_source)
    except CoHardenError as exc:
        _fail(str(exc))
        return
    if as_json:
        print(json.dumps({"instance_id": inst.instance_id, "test": test_name, **result.to_json()}, indent=2))
    else:
        table = Table(title=f"{inst.instance_id}: test {test_name!r}")
        table.add_column("code")
        table.add_column("verdict")
        table.add_column("detail", overflow="fold")
        for label, verdict in (("buggy", result.buggy), ("fixed", result.fixed)):
            table.add_row(label, verdict.outcome.value, verdict.reason[:300])
        console.print(table)
        console.print(f"test ids: {', '.join(result.test_ids)}")
        mark = "[green]yes[/]" if result.fail_to_pass else "[red]no[/]"
        console.print(f"fail-to-pass: {mark}")
    raise typer.Exit(0 if result.admissible else 1)


def _pick_instance(source: Path, instance_id: str | None, settings: Settings):  # type: ignore[no-untyped-def]
    from coharden.instances import load_instances

    found = load_instances(source, settings.cache_dir, [instance_id] if instance_id else None)
    if len(found) > 1:
        raise CoHardenError(f"{source}: holds {len(found)} instances; choose one with --id")
    return found[0]


def main() -> None:  # pragma: no cover - console entry
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
