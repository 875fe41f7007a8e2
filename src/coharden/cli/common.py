"""What every command-line module shares: the app factory, consoles, the error decorator, settings and the
run option group (:class:`RunOptions`), instance / patch arguments. The options themselves, the other groups
(LLM, MPE, engine) and the LLM client built from the LLM group are in :mod:`coharden.cli.options`."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.errors import MarkupError
from rich.text import Text

from coharden.cli.command import App, Renamed
from coharden.cli.mpe_options import parse_operators as parse_operators
from coharden.cli.options import ConfigOpt as ConfigOpt
from coharden.cli.options import IdOpt as IdOpt
from coharden.cli.options import JsonOpt as JsonOpt
from coharden.cli.options import PythonOpt as PythonOpt
from coharden.cli.options import ReposOpt as ReposOpt
from coharden.cli.options import StoreOpt as StoreOpt
from coharden.cli.options import TimeoutOpt as TimeoutOpt
from coharden.cli.options import option_group, unwritable
from coharden.config import STORE_NAME, Settings, load_settings
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc

if TYPE_CHECKING:
    pass

#: The width of output that goes to no terminal (a pipe, a file, a log) when ``COLUMNS`` does not say: wide
#: enough that no table cell (an operator name, a verdict's reason) is folded mid-word at rich's default 80.
PIPED_WIDTH = 1000


class _Console(Console):
    """A rich console that, writing to no terminal, uses :data:`PIPED_WIDTH` (``COLUMNS`` still wins)."""

    @property
    def size(self) -> ConsoleDimensions:
        # COLUMNS read now, not when the console was made (rich keeps the value it saw then: a console made
        # while some caller had COLUMNS set stayed that narrow)
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit():
            return ConsoleDimensions(int(columns), size.height)
        if not self.is_terminal:
            return ConsoleDimensions(PIPED_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """The last guard of :func:`coharden.escaping.for_rich`, which every printed string from a test or a
        prediction goes through: a string whose markup is still malformed prints as plain text rather than
        stopping the command with a traceback and no verdict."""
        try:
            return super().render_str(text, **kwargs)
        except MarkupError:
            return super().render_str(text, **{**kwargs, "markup": False})


# soft_wrap: printed lines are never wrapped (piped output used to break at 80 columns, and with it the printed
# diffs); tables fit the terminal's width, or PIPED_WIDTH off a terminal
console = _Console(soft_wrap=True)
err_console = _Console(stderr=True, soft_wrap=True)

F = TypeVar("F", bound=Callable[..., Any])


def new_app(**kwargs: Any) -> typer.Typer:
    """A typer app (or command group) with the settings every group of coharden shares: plain click help and
    errors (one ``Error: ...`` line; typer's rich panels wrap the message and render flags as ``<bool>``),
    no typer traceback pages, help when called without arguments."""
    return App(**{"no_args_is_help": True, "pretty_exceptions_enable": False, "rich_markup_mode": None,
                          "context_settings": {"max_content_width": 120}, **kwargs})


@contextmanager
def progress_bar(label: str, *, quiet: bool = False, total: int | None = None) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr, yielding ``update(**fields)`` (rich's ``Progress.update`` of its one task:
    total, completed, advance, description). Silent under ``quiet`` (``--json``) and when stderr is not a
    terminal; gone from the screen when done."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}", markup=False), console=err_console, transient=True,
                  disable=quiet or not err_console.is_terminal) as bar:
        task = bar.add_task("", total=total)

        def update(**fields: Any) -> None:
            bar.update(task, **fields)

        yield update


def print_diff(text: str) -> None:
    """A patch on stdout exactly as it is (never wrapped, so it still applies), coloured on a terminal."""
    from rich.syntax import Syntax

    body = text.rstrip("\n")
    if console.is_terminal:
        console.print(Syntax(body, "diff", theme="ansi_dark").highlight(body), soft_wrap=True)
    else:
        console.out(body, highlight=False)


def print_counts(title: str, columns: tuple[str, str], counts: dict[str, int]) -> None:
    """A table of counts by name (decisions, classes) on stdout."""
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for name, n in counts.items():
        table.add_row(esc(name), str(n))
    console.print(table)


def settings_from(config: list[str] | None, **overrides: object) -> Settings:
    """Settings from the ``-c`` files and ``KEY=VALUE`` settings (or pyproject.toml) with the CLI flags that were
    given on top."""
    return load_settings(config).with_overrides(**overrides)


@dataclass(frozen=True)
class RunOptions:
    """The options of every command that runs instances: --repos, --config; the other fields are set by the
    commands that still give them as flags (``coharden check``), else they come from the config."""

    repos: Path | None = None
    config: list[str] | None = None
    timeout: float | None = None
    python: str | None = None
    store: Path | None = None
    allow_weak_sandbox: bool = False
    pass_env: list[str] | None = None

    def settings(self, **overrides: object) -> Settings:
        """Settings from --config with these options (and ``overrides``) on top; ``--pass-env`` names add to
        the config's. A ``--repos`` that is no directory is refused here, before any work (every instance would
        fail on it, one by one)."""
        if self.repos is not None and not self.repos.is_dir():
            raise CoHardenError(f"--repos: {self.repos} " + ("is not a directory" if self.repos.exists()
                                                             else "does not exist"))
        settings = settings_from(self.config, repos_dir=self.repos, timeout=self.timeout, python=self.python,
                                 store=self.store, **overrides)
        extra: dict[str, object] = {"allow_weak_sandbox": True} if self.allow_weak_sandbox else {}
        if self.pass_env:
            extra["pass_env"] = list(dict.fromkeys([*settings.sandbox.pass_env, *self.pass_env]))
        settings = settings.with_overrides(**extra) if extra else settings
        if settings.store != settings.cache_dir / STORE_NAME and (why := store_refused(str(settings.store))):
            raise CoHardenError(f"store: {why}")  # a store given; the cache's own is checked with the cache
        return settings


def store_refused(value: str) -> str | None:
    """Why a result store cannot be written there (a directory, a read-only place), checked before any work."""
    return unwritable(Path(value), directory=False)


#: The run group's flags that set a config key (read for one more release, as ``-c KEY=VALUE``).
RUN_RENAMED = (Renamed("--timeout", "timeout"), Renamed("--python", "python"),
               Renamed("--store", "store", check=store_refused),
               Renamed("--allow-weak-sandbox", "allow_weak_sandbox", switch="true"),
               Renamed("--pass-env", "pass_env", many=True))

#: ``command`` declares ``run: RunOptions = RunOptions()`` and gets --repos and --config in that place (the
#: time limit, interpreter, store and sandbox settings are ``-c`` keys); the body receives one
#: :class:`RunOptions`.
run_options = option_group(RunOptions, {"repos": ReposOpt, "config": ConfigOpt}, "run", RUN_RENAMED)


def fail(message: str, code: int = 2) -> None:
    """Print a user-facing error and exit (code 2: bad input or environment)."""
    err_console.print(f"[bold red]error:[/] {esc(message)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def cli_errors(command: F) -> F:
    """The one error boundary of a command: a :class:`CoHardenError` (bad input, an environment problem) is
    printed as one ``error:`` line with exit status 2, never a traceback; so is undecodable input."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except CoHardenError as exc:
            fail(str(exc))
        except UnicodeDecodeError as exc:
            fail(f"input is not UTF-8 text ({exc.reason} at byte {exc.start})")
        return None

    return wrapper  # type: ignore[return-value]


def pick_instance(source: Path, instance_id: str | None, settings: Settings):
    """The one instance of ``source`` (a directory or records file; ``instance_id`` picks among several)."""
    from coharden.instances import load_instances

    found = load_instances(source, settings.cache_dir, [instance_id] if instance_id else None)
    if not found:
        raise CoHardenError(f"{source}: holds no instance")
    if len(found) > 1:
        raise CoHardenError(f"{source}: holds {len(found)} instances; choose one with --id")
    return found[0]


def read_patch_arg(value: str, candidates: dict[str, str], golden: str, what: str,
                   instance: Path | None = None) -> tuple[str, str]:
    """A patch given as 'golden' (or 'gold'), a candidate name of a local instance, or a file path ->
    (name, text). A relative path that is no file in the current directory is looked up in the ``instance``
    directory (``--test candidates/lax.patch`` next to the example's manifest)."""
    if value in ("golden", "gold"):
        return "golden", golden
    if value in candidates:
        return value, candidates[value]
    path = Path(value)
    if not path.is_file() and not path.is_absolute() and instance is not None and instance.is_dir() \
            and (instance / path).is_file():
        path = instance / path
    if not path.is_file():
        known = ", ".join(["golden", *candidates])
        raise CoHardenError(f"{what}: {value!r} is neither a patch file nor a known name ({known})")
    return path.stem, read_patch_file(path, what)


def read_patch_file(path: Path, what: str) -> str:
    """A patch file given on the command line: UTF-8 text holding a unified diff (else a one-line error)."""
    from coharden.patches import touched_files

    text = read_text(path, what)
    if not text.strip():
        raise CoHardenError(f"{what}: {path} is empty")
    if not touched_files(text):
        raise CoHardenError(f"{what}: {path} is not a unified diff (no file changes in it)")
    return text


def fix_source(text: str, settings: Settings, what: str = "--fix") -> str:
    """The source part of a fix given on the command line; a fix that changes no source file is an error,
    and one that also changes tests is used without them (with a warning)."""
    from coharden.patches import split_patch

    source, tests = split_patch(text, settings.tests.test_patterns)
    if not source.strip():
        raise CoHardenError(f"{what}: the patch changes no source file" + (" (only tests: give it as --test)"
                                                                            if tests.strip() else ""))
    if tests.strip():
        err_console.print("[yellow]warning:[/] the fix touches test files; only its source part is used")
    return source


def read_text(path: Path, what: str) -> str:
    """The text of a file given on the command line; undecodable bytes are a one-line error naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CoHardenError(f"{what}: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
