"""Every option that two or more commands share, defined once, with its validation.

Groups (each a dataclass a command declares as one parameter, spelled out by :func:`option_group`): the run
options (repos, config, timeout, python, store; in :mod:`coharden.cli.common`), the LLM group (model, endpoint,
record/replay store and mode, cost caps, sampling: :class:`LLMOptions`, and :func:`llm_client` built from it;
in :mod:`coharden.cli.llm_options`), the MPE group (operators, mutants per operator, seed, tau, the estimate,
mutator, LLM samples: :class:`MPEOptions`; in :mod:`coharden.cli.mpe_options`) and the engine group (executor,
address: :class:`EngineOptions`; in :mod:`coharden.cli.engine_options`). This module holds what they build on:
the range checks, output paths, the common aliases and :func:`option_group`. What a user sets rarely is a
setting of the config file instead (``-c KEY=VALUE``, ``[tool.coharden]``). A command takes the aliases it
needs; where a flag means something narrower in one command (``--workers`` in ``run`` counts instances), the
command passes its own help to the same factory, so the validation stays the one defined here. Numeric flags
are range-checked at the command line: a bad value is one line (``Error: Invalid value for '--tau': 1.5 is out
of range (allowed: 0 to 1)``) before anything runs.

:meth:`MPEOptions.config` is the one place where the MPE group becomes an :class:`MPEConfig`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from coharden.cli.command import Renamed, allowed_range, renamed_flags

F = TypeVar("F", bound=Callable[..., Any])


# --- range checks ---------------------------------------------------------------------------------------------

def in_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
             hi_open: bool = False) -> Callable[[Any], Any]:
    """A typer callback refusing a number outside [lo, hi] (``lo_open`` / ``hi_open``: lo / hi itself is refused
    too), and any float that is not finite (``nan`` compares false with every bound, so it would pass them all)."""

    def check(value: Any) -> Any:
        if value is None:
            return value
        allowed = allowed_range(lo, hi, lo_open, hi_open)
        for v in value if isinstance(value, list | tuple) else [value]:
            if isinstance(v, float) and not math.isfinite(v):
                raise typer.BadParameter(f"{v} is not a finite number (allowed: {allowed})")
            low = lo is not None and (v <= lo if lo_open else v < lo)
            high = hi is not None and (v >= hi if hi_open else v > hi)
            if low or high:
                raise typer.BadParameter(f"{v} is out of range (allowed: {allowed})")
        return value

    return check


def ranged(*decls: str, help: str, lo: float | None = None, hi: float | None = None,  # noqa: A002
           lo_open: bool = False, hi_open: bool = False, **kwargs: Any) -> Any:
    """``typer.Option(*decls)`` whose value must lie in [lo, hi]; the allowed range is appended to the help.
    ``default=`` is for the non-Annotated style (``x: int = ranged(...)``)."""
    head = (kwargs.pop("default"),) if "default" in kwargs else ()
    return typer.Option(*head, *decls, help=f"{help} [{allowed_range(lo, hi, lo_open, hi_open)}]",
                        callback=in_range(lo, hi, lo_open=lo_open, hi_open=hi_open), **kwargs)


# --- output paths -----------------------------------------------------------------------------------------------

def unwritable(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` (a directory to fill, or a file to write) cannot be written, or None. Checked by creating
    (and removing) a file in the directory, or in its nearest existing ancestor when it does not exist yet
    (a file's directory too: SQLite writes its journal beside it): permissions, a read-only file system and a
    file in the way all show, for root too; nothing is left behind."""
    if not directory and path.is_dir():
        return f"{path} is a directory"
    if not directory and path.exists():
        try:
            with path.open("a"):
                pass
        except OSError as exc:
            return f"{path} is not writable ({exc.strerror or exc})"
    existing = path if directory else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".coharden-write-check-", dir=existing)
    except OSError as exc:
        return f"cannot write in {existing} ({exc.strerror or exc})"
    os.close(fd)
    Path(probe).unlink()
    return None


def writable(flag: str, *, directory: bool = True) -> Callable[[Any], Any]:
    """A typer callback: the output path of ``flag`` must be writable, checked before any work starts (an
    ``eval`` that graded everything and then could not write its report lost the work)."""

    def check(value: Any) -> Any:
        if value is not None and (why := unwritable(Path(value), directory=directory)):
            raise typer.BadParameter(why, param_hint=f"'{flag}'")
        return value

    return check


def output_option(*, help: str, directory: bool = True, flag: str = "--output", short: str | None = "-o"  # noqa: A002
                  ) -> Any:
    """``--output/-o``: a directory (or ``directory=False``: a file) checked for writability when parsed."""
    return typer.Option(flag, *([short] if short else []), help=help,
                        callback=writable(flag, directory=directory))


# --- common ---------------------------------------------------------------------------------------------------

ConfigOpt = Annotated[list[str] | None, typer.Option(
    "--config", "-c", metavar="FILE|KEY=VALUE", help="A YAML or TOML settings file, or KEY=VALUE setting one "
    "setting (timeout=60, python=/usr/bin/python3, mpe.tau=0.3, mpe.seed=1, llm.mode=replay); repeatable, "
    "applied in order over [tool.coharden] of pyproject.toml (which a FILE replaces). Every key, its default "
    "and meaning: coharden config keys.")]
ReposOpt = Annotated[Path | None, typer.Option("--repos", help="Directory holding owner__name repositories.")]
IdOpt = Annotated[str | None, typer.Option("--id", help="Instance id, when the records file has several.")]
IdsOpt = Annotated[list[str] | None, typer.Option("--id", help="Only these instance ids (repeatable).")]
PythonOpt = Annotated[str | None, typer.Option("--python", help="Interpreter that runs the tests.")]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="SQLite result store (caches runs; default: "
                                               "store.sqlite in $COHARDEN_CACHE, else ~/.cache/coharden).",
                                               callback=writable("--store", directory=False))]
WeakSandboxOpt = Annotated[bool, typer.Option(
    "--allow-weak-sandbox", help="Grade untrusted tests even where the full sandbox cannot be made here (no bwrap "
    "or namespaces, no pids cgroup); the weaker confinement is recorded on every verdict. Without it such a run "
    "is refused.")]
AgentReadableOpt = Annotated[list[Path] | None, typer.Option(
    "--agent-readable", metavar="PATH", help="A host path the external agent's command may read in its sandbox "
    "(its installation, its settings); repeatable. It sees the workspace and the system directories otherwise.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


#: The longest ``--timeout``: a week (a limit must fit the CPU-time rlimit and the clock's arithmetic).
MAX_TIMEOUT = 7 * 24 * 3600


def timeout_option(help: str = "Seconds per test process.") -> Any:  # noqa: A002
    return ranged("--timeout", help=help, lo=0, lo_open=True, hi=MAX_TIMEOUT)


TimeoutOpt = Annotated[float | None, timeout_option()]


def workers_option(help: str = "Parallel workers (default: the CPU count).",  # noqa: A002
                   aliases: tuple[str, ...] = ()) -> Any:
    """``--workers/-w`` (and ``aliases``: ``--max_workers`` where a command reads the SWE-bench harness's
    flags), at least 1."""
    return ranged("--workers", "-w", *aliases, help=help, lo=1)


WorkersOpt = Annotated[int | None, workers_option()]

# --- option groups ----------------------------------------------------------------------------------------------

def option_group(cls: type, aliases: dict[str, Any], param: str, renamed: Sequence[Renamed] = ()
                 ) -> Callable[[F], F]:
    """A decorator that spells a group of options once: the command declares ``<param>: cls = cls()`` and its
    command line gets one option per entry of ``aliases`` (field name -> ``Annotated`` alias) in that place,
    with the dataclass field's default (typer reads ``__signature__``); the body receives one ``cls``. Fields
    not in ``aliases`` keep their defaults (a command takes the part of a group it needs); a field without a
    default is a required option. ``renamed``: the group's old flags the command still reads as ``-c``
    settings (:mod:`coharden.cli.command`)."""
    defaults = {f.name: inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
                for f in dataclasses.fields(cls)}

    def decorate(command: F) -> F:
        sig = inspect.signature(command, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name != param:
                params.append(p)
                continue
            params += [p.replace(name=name, annotation=alias, default=defaults[name])
                       for name, alias in aliases.items()]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            group = cls(**{name: kwargs.pop(name, defaults[name]) for name in aliases})
            return command(*args, **{param: group}, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return renamed_flags(*renamed)(wrapper)  # type: ignore[return-value]

    return decorate
