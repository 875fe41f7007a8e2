"""What every command-line module shares: option types, consoles, errors, settings, and the LLM client
built from the usual flags. Sub-command modules (suite, env, overfit, ...) import these instead of
redefining them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from coharden.config import Settings, load_settings
from coharden.errors import CoHardenError

if TYPE_CHECKING:
    from coharden.llm import Ledger, LLMClient

console = Console()
err_console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML settings file.")]
ReposOpt = Annotated[Path | None, typer.Option("--repos", help="Directory holding owner__name repositories.")]
IdOpt = Annotated[str | None, typer.Option("--id", help="Instance id, when the records file has several.")]
TimeoutOpt = Annotated[float | None, typer.Option("--timeout", help="Seconds per test process.")]
PythonOpt = Annotated[str | None, typer.Option("--python", help="Interpreter that runs the tests.")]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="SQLite result store.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def settings_from(config: Path | None, **overrides: object) -> Settings:
    """Settings from the config file (or pyproject.toml) with the CLI flags that were given on top."""
    return load_settings(config).with_overrides(**overrides)


def fail(message: str, code: int = 2) -> None:
    """Print a user-facing error and exit (code 2: bad input or environment)."""
    err_console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def llm_client(*, model: str | None, api_base: str | None, llm_store: Path | None, llm_mode: str,
               default_store: Path, budget_usd: float | None = None, instance_budget_usd: float | None = None,
               ledger: Ledger | None = None, what: str = "this command", **config: object) -> LLMClient:
    """An LLM client from the flags and ``$COHARDEN_LLM_*``: record/replay store (default next to the result
    store), mode, and cost caps; ``config`` sets more :class:`LLMConfig` fields (temperature, max_tokens, ...).
    A missing model or a bad mode is a clear error."""
    from pydantic import ValidationError

    from coharden.llm import Budget, CacheMode, CallStore, LLMClient, LLMConfig

    try:
        mode = CacheMode(llm_mode)
    except ValueError as exc:
        raise CoHardenError(f"--llm-mode: {llm_mode!r} (known: auto, record, replay)") from exc
    try:
        llm_config = LLMConfig.from_env(model=model, api_base=api_base,
                                        **{k: v for k, v in config.items() if v is not None})
    except ValidationError as exc:
        if any(e["loc"] == ("model",) for e in exc.errors()):
            raise CoHardenError(f"{what} needs --model (or $COHARDEN_LLM_MODEL)") from exc
        raise CoHardenError(f"LLM configuration: {exc}") from exc
    budget = None
    if budget_usd is not None or instance_budget_usd is not None:
        budget = Budget(per_run_usd=budget_usd, per_instance_usd=instance_budget_usd)
    return LLMClient(llm_config, store=CallStore(llm_store or default_store.with_name("llm-calls.sqlite")), mode=mode,
                     budget=budget, ledger=ledger)


def parse_operators(value: str | None) -> list:  # type: ignore[type-arg]
    """Operators from a comma-separated --operators value (default: the mechanical ones)."""
    from coharden.mutation.pool import MECHANICAL_OPERATORS
    from coharden.schema.mutant import Operator

    if not value:
        return list(MECHANICAL_OPERATORS)
    try:
        return [Operator(v.strip()) for v in value.split(",") if v.strip()]
    except ValueError as exc:
        known = ", ".join(op.value for op in MECHANICAL_OPERATORS)
        raise CoHardenError(f"--operators: {exc} (known: {known})") from exc


def pick_instance(source: Path, instance_id: str | None, settings: Settings):  # type: ignore[no-untyped-def]
    """The one instance of ``source`` (a directory or records file; ``instance_id`` picks among several)."""
    from coharden.instances import load_instances

    found = load_instances(source, settings.cache_dir, [instance_id] if instance_id else None)
    if not found:
        raise CoHardenError(f"{source}: holds no instance")
    if len(found) > 1:
        raise CoHardenError(f"{source}: holds {len(found)} instances; choose one with --id")
    return found[0]


def read_patch_arg(value: str, candidates: dict[str, str], golden: str, what: str) -> tuple[str, str]:
    """A patch given as 'golden' (or 'gold'), a candidate name of a local instance, or a file path ->
    (name, text)."""
    if value in ("golden", "gold"):
        return "golden", golden
    if value in candidates:
        return value, candidates[value]
    path = Path(value)
    if not path.is_file():
        known = ", ".join(["golden", *candidates])
        raise CoHardenError(f"{what}: {value!r} is neither a patch file nor a known name ({known})")
    return path.stem, path.read_text()
