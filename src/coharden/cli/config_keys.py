"""``coharden config keys``: every setting ``-c KEY=VALUE`` and a config file accept, with its type, default
and description, read from the settings models themselves (:func:`setting_keys`), so that no
key is described twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from coharden.cli.common import console, new_app
from coharden.cli.options import JsonOpt

config_app = new_app(help="The settings: every key of -c KEY=VALUE and of a config file.")


def _shown(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return getattr(value, "value", value)


@config_app.command("keys")
def config_keys(
    prefix: Annotated[str | None, typer.Argument(help="Only keys starting with this (mpe, llm, engine, ...).")]
    = None,
    as_json: JsonOpt = False,
) -> None:
    """Every setting: its dotted key (-c mpe.tau=0.3; mpe: in YAML, [tool.coharden.mpe] in TOML), type, default
    (here, now: some depend on the machine and $COHARDEN_CACHE) and meaning."""
    from rich.table import Table

    from coharden.escaping import for_rich as esc

    rows = [row for row in setting_keys() if prefix is None or row[0].startswith(prefix)]
    if as_json:
        print(json.dumps([{"key": k, "type": t, "default": _shown(d), "description": text}
                          for k, t, d, text in rows], indent=2))
        return
    table = Table(title="coharden settings (-c KEY=VALUE, or a YAML / TOML config file)")
    for column in ("key", "type", "default", "description"):
        table.add_column(column, overflow="fold")
    for key, kind, default, text in rows:
        table.add_row(esc(key), esc(kind), esc(json.dumps(_shown(default))), esc(text))
    console.print(table)


def setting_keys() -> list[tuple[str, str, Any, str]]:
    """Every ``-c`` key: (dotted key, type, default, description), from the models themselves."""
    from coharden.config import SECTIONS, Settings

    rows: list[tuple[str, str, Any, str]] = []
    for name, field in Settings.model_fields.items():
        section = SECTIONS.get(name)
        if section is None:
            rows.append((name, _type_name(field.annotation), field.get_default(call_default_factory=True),
                         field.description or ""))
            continue
        for sub, subfield in section.model_fields.items():
            rows.append((f"{name}.{sub}", _type_name(subfield.annotation),
                         subfield.get_default(call_default_factory=True), subfield.description or ""))
    return rows


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "").replace("pathlib.", "").replace(
        "coharden.schema.mutant.", "")
