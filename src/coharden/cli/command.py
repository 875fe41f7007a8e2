"""The class of every coharden command: old flags still read, and the help in two parts.

A flag that set a config key is no option any more: ``-c KEY=VALUE`` (or a config file) sets it. For one
release the old flag still reads: :meth:`Command.parse_args` rewrites ``--tau 0.3`` into ``-c mpe.tau=0.3``
before click parses (so the flag is no click parameter and the command's option count is what it shows),
placed after every other ``-c`` so that a flag still wins over the config as it did, and prints one line to
stderr: ``--tau is deprecated; use -c mpe.tau=0.3``. The flags a command reads this way are declared on its
function (:func:`renamed_flags`, which the option groups call for the flags they gave up).

The help lists the options a user sets often, then an ``Advanced options`` section (options declared with
``rich_help_panel=ADVANCED``: typer's panel name, rendered here in plain click help), then where the settings
are: ``coharden config keys`` lists every key with its default and description."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import typer
from typer.core import TyperCommand

F = TypeVar("F", bound=Callable[..., Any])

#: The help section of options set rarely (typer's ``rich_help_panel`` of an option).
ADVANCED = "Advanced"
#: The attribute of a command function that holds the old flags it still reads (:func:`renamed_flags`).
_ATTRIBUTE = "coharden_renamed_flags"


@dataclass(frozen=True)
class Renamed:
    """An old flag that now sets config keys: ``--flag V`` reads as ``-c key=V`` (and ``also``, more
    ``KEY=VALUE`` the flag implied). ``switch``: the flag takes no value and sets ``key`` to it (``"true"``);
    ``many``: repeatable, comma-separated values gathered into one JSON list."""

    flag: str
    key: str
    switch: str | None = None
    also: tuple[str, ...] = ()
    many: bool = False

    def specs(self, values: Sequence[str]) -> list[str]:
        """The ``-c`` settings of the flag given with ``values`` (one per occurrence)."""
        if self.switch is not None:
            value = self.switch
        elif self.many:
            value = json.dumps([v.strip() for text in values for v in text.split(",") if v.strip()])
        else:
            value = _as_text(values[-1])
        return [f"{self.key}={value}", *self.also]


def _as_text(value: str) -> str:
    """A flag's value as a ``-c`` value: as given, unless ``-c`` would read it as a JSON number, boolean or
    null where the flag meant a string (``--python 3``): then quoted. Numbers stay numbers for numeric keys
    (pydantic converts ``"60"`` for a float key too)."""
    try:
        json.loads(value)
    except json.JSONDecodeError:
        return value
    return json.dumps(value) if not value.lstrip("-").replace(".", "", 1).isdigit() else value


def renamed_flags(*flags: Renamed) -> Callable[[F], F]:
    """Declare on a command function the old flags it still reads (added to those already declared)."""

    def declare(command: F) -> F:
        setattr(command, _ATTRIBUTE, (*getattr(command, _ATTRIBUTE, ()), *flags))
        return command

    return declare


def translate(args: Sequence[str], renamed: Sequence[Renamed]) -> tuple[list[str], list[str]]:
    """(``args`` with each old flag of ``renamed`` replaced by its ``-c`` settings, the deprecation lines).
    ``--flag V`` and ``--flag=V`` both read; nothing after ``--`` is touched; the settings go after every
    other argument (before a ``--``), so that they win over the command's own ``-c`` as the flags did."""
    by_flag = {r.flag: r for r in renamed}
    end = list(args).index("--") if "--" in args else len(args)
    kept: list[str] = []
    given: dict[str, list[str]] = {}
    i = 0
    while i < end:
        arg = args[i]
        name, eq, inline = arg.partition("=")
        old = by_flag.get(name) if name.startswith("--") else None
        if old is None:
            kept.append(arg)
            i += 1
            continue
        if old.switch is not None:
            if eq:
                raise typer.BadParameter("takes no value", param_hint=f"'{old.flag}'")
            given.setdefault(old.flag, [])
            i += 1
            continue
        if eq:
            given.setdefault(old.flag, []).append(inline)
            i += 1
            continue
        if i + 1 >= end:
            raise typer.BadParameter("requires a value", param_hint=f"'{old.flag}'")
        given.setdefault(old.flag, []).append(args[i + 1])
        i += 2
    settings: list[str] = []
    notes: list[str] = []
    for flag, values in given.items():
        specs = by_flag[flag].specs(values)
        settings += [part for spec in specs for part in ("-c", spec)]
        notes.append(f"{flag} is deprecated; use {' '.join(f'-c {shlex.quote(s)}' for s in specs)}")
    return [*kept, *settings, *args[end:]], notes


class Command(TyperCommand):
    """A typer command that reads its old flags as ``-c`` settings and shows its rare options apart."""

    def renamed(self) -> tuple[Renamed, ...]:
        return tuple(getattr(self.callback, _ATTRIBUTE, ()))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        args, notes = translate(args, self.renamed())
        for note in notes:
            typer.echo(note, err=True)
        return super().parse_args(ctx, args)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": [], "Advanced options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                sections["Arguments"].append(record)
            else:
                advanced = getattr(param, "rich_help_panel", None) == ADVANCED
                sections["Advanced options" if advanced else "Options"].append(record)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        super().format_epilog(ctx, formatter)
        if not any(param.name == "config" for param in self.get_params(ctx)):
            return
        text = ("Settings: -c KEY=VALUE or a config file (YAML or TOML, [tool.coharden] of pyproject.toml); "
                "`coharden config keys` lists every key with its default.")
        if renamed := self.renamed():
            text += (" Old flags still read for this release (each says its -c form): "
                     + ", ".join(dict.fromkeys(r.flag for r in renamed)) + ".")
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(text)


class App(typer.Typer):
    """A typer app whose commands are :class:`Command`."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or Command, **kwargs)
