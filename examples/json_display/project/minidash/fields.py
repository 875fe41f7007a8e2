"""Field descriptions: what kind of value a column holds and how it is edited."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass
class Field:
    name: str = ""
    #: (value, label) pairs; when set, the label is displayed instead of the value
    choices: tuple = ()


@dataclass
class CharField(Field):
    pass


@dataclass
class BooleanField(Field):
    pass


@dataclass
class FloatField(Field):
    decimal_places: int = 2


@dataclass
class JSONField(Field):
    #: json.JSONEncoder subclass used to serialise values (None: the default encoder)
    encoder: type | None = None


class InvalidJSONInput(str):
    """Text a user typed into a JSON field that is not valid JSON.

    It is kept as the field's value when the form is shown again, so the user can correct it.
    """


def parse_json_input(text):
    """Parse form input of a JSON field: the decoded value, or InvalidJSONInput(text)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return InvalidJSONInput(text)
