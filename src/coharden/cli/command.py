"""The class of every coharden command: old flags still read, and the help in two parts.

A flag that set a config key is no option any more: ``-c KEY=VALUE`` (or a config file) sets it. For one
release the old flag still reads: :meth:`Command.parse_args` rewrites ``--tau 0.3`` into ``-c mpe.tau=0.3``
before click parses (so the flag is no click parameter and the command's option count is what it shows),
placed after every other ``-c`` so that a flag still wins over the config as it did, and prints one line to
stderr: ``--tau is deprecated; use -c mpe.tau=0.3``. A bad value is refused as the flag refused it, naming the
flag, in words drawn from the key's own bounds (:func:`refused`: ``Invalid value for '--tau': 1.5 is out of
range (allowed: 0 to 1)``). The flags a command reads this way are declared on its function
(:func:`renamed_flags`, which the option groups call for the flags they gave up).

The help lists the options a user sets often, then an ``Advanced options`` section (options declared with
``rich_help_panel=ADVANCED``: typer's panel name, rendered here in plain click help), then where the settings
are: ``coharden config keys`` lists every key with its default and description."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar, get_args, get_origin

import typer
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from typer.core import TyperCommand

from coharden.config import SECTIONS, Settings, key_value, sectioned

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
    #: Why a value of the flag is refused beyond its key's own bounds (a store that cannot be written), or None.
    check: Callable[[str], str | None] | None = None

    def specs(self, values: Sequence[str]) -> list[str]:
        """The ``-c`` settings of the flag given with ``values`` (one per occurrence)."""
        if self.switch is not None:
            value = self.switch
        elif self.many:
            value = json.dumps([v.strip() for text in values for v in text.split(",") if v.strip()])
        else:
            value = _as_text(values[-1])
        return [f"{self.key}={value}", *self.also]

    def refused(self, values: Sequence[str]) -> str | None:
        """Why the flag given with ``values`` is refused (its key's bounds, then :attr:`check`), or None."""
        if self.switch is not None:
            return None
        if why := refused(self.specs(values)[0]):
            return why
        return next((why for v in values if self.check is not None and (why := self.check(v))), None)


def _as_text(value: str) -> str:
    """A flag's value as a ``-c`` value: as given, unless ``-c`` would read it as a JSON number, boolean or
    null where the flag meant a string (``--python 3``): then quoted. Numbers stay numbers for numeric keys
    (pydantic converts ``"60"`` for a float key too)."""
    try:
        json.loads(value)
    except json.JSONDecodeError:
        return value
    return json.dumps(value) if not value.lstrip("-").replace(".", "", 1).isdigit() else value


def allowed_range(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool = False) -> str:
    """The values a bound admits, in words: ``0 to 1``, ``>= 1``, ``more than 0, at most 604800``."""
    if lo is not None and hi is not None:
        if not (lo_open or hi_open):
            return f"{lo} to {hi}"
        return f"{'more than' if lo_open else 'at least'} {lo}, {'less than' if hi_open else 'at most'} {hi}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    return f"{'<' if hi_open else '<='} {hi}"


def _bounds(field: FieldInfo) -> tuple[float | None, float | None, bool, bool] | None:
    lo: float | None = None
    hi: float | None = None
    lo_open = hi_open = False
    for bound in field.metadata:
        if isinstance(bound, Ge | Gt):
            lo_open = isinstance(bound, Gt)
            lo = bound.gt if isinstance(bound, Gt) else bound.ge  # type: ignore[assignment]
        elif isinstance(bound, Le | Lt):
            hi_open = isinstance(bound, Lt)
            hi = bound.lt if isinstance(bound, Lt) else bound.le  # type: ignore[assignment]
    return None if lo is None and hi is None else (lo, hi, lo_open, hi_open)


def _literals(annotation: Any) -> list[str]:
    if get_origin(annotation) is Literal:
        return [str(a) for a in get_args(annotation)]
    return [text for arg in get_args(annotation) for text in _literals(arg)]


_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"})


def refused(spec: str) -> str | None:
    """Why the setting of one ``KEY=VALUE`` refuses its value on its own, in the words a range-checked flag used
    (``1.5 is out of range (allowed: 0 to 1)``, ``'foo' (known: local, ray)``), or None: also for an unknown key
    and a value refused only with other settings, which loading the settings as a whole reports."""
    key, value = next(iter(sectioned(key_value(spec)).items()))  # a flat key (timeout) in its section
    model: type[BaseModel] = Settings
    if key in SECTIONS and isinstance(value, dict):
        model, (key, value) = SECTIONS[key], next(iter(value.items()))
    field = model.model_fields.get(key)
    if field is None or isinstance(value, dict):
        return None
    try:
        model.model_validate({key: value})
    except ValidationError as exc:
        error = next((e for e in exc.errors() if e["loc"][:1] == (key,)), None)
        if error is None:
            return None
        text = spec.partition("=")[2]
        bounds = _bounds(field)
        if bounds is not None and error["type"] in _RANGE_ERRORS:
            what = "is out of range" if _finite(text) and error["type"] != "finite_number" else \
                "is not a finite number"
            return f"{text} {what} (allowed: {allowed_range(*bounds)})"
        if known := _literals(field.annotation):
            return f"{text!r} (known: {', '.join(known)})"
        return str(error["msg"]).removeprefix("Value error, ")
    return None


def _finite(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return True


def renamed_flags(*flags: Renamed) -> Callable[[F], F]:
    """Declare on a command function the old flags it still reads (added to those already declared)."""

    def declare(command: F) -> F:
        setattr(command, _ATTRIBUTE, (*getattr(command, _ATTRIBUTE, ()), *flags))
        return command

    return declare


class Translated(NamedTuple):
    """The arguments of a command line with its old flags as ``-c`` settings."""

    args: list[str]
    #: One deprecation line per old flag given.
    notes: list[str]
    #: The values each old flag was given with (one per occurrence).
    given: dict[Renamed, list[str]]


def translate(args: Sequence[str], renamed: Sequence[Renamed]) -> Translated:
    """``args`` with each old flag of ``renamed`` replaced by its ``-c`` settings, and the deprecation lines.
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
    return Translated([*kept, *settings, *args[end:]], notes, {by_flag[flag]: values for flag, values in given.items()})


class Command(TyperCommand):
    """A typer command that reads its old flags as ``-c`` settings and shows its rare options apart."""

    def renamed(self) -> tuple[Renamed, ...]:
        return tuple(getattr(self.callback, _ATTRIBUTE, ()))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """The old flags read as ``-c`` settings, each said once; a bad value of one is an error naming the flag
        (``Invalid value for '--tau': 1.5 is out of range (allowed: 0 to 1)``), as it was."""
        translated = translate(args, self.renamed())
        for note in translated.notes:
            typer.echo(note, err=True)
        for old, values in translated.given.items():
            if why := old.refused(values):
                raise typer.BadParameter(why, ctx=ctx, param_hint=f"'{old.flag}'")
        return super().parse_args(ctx, translated.args)

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
