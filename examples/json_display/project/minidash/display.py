"""How values are shown: in read-only cells of a list page, and in the boxes of an edit form."""

import json

from .fields import BooleanField, FloatField, InvalidJSONInput, JSONField

EMPTY_VALUE_DISPLAY = "-"


def format_for_input(value, field):
    """The text that the edit box of ``field`` starts with."""
    if value is None:
        return ""
    if isinstance(field, JSONField):
        if isinstance(value, InvalidJSONInput):
            # what the user typed, so that they can correct it
            return str(value)
        return json.dumps(value, indent=2, ensure_ascii=False, cls=field.encoder)
    return str(value)


def display_for_value(value, empty_value_display=EMPTY_VALUE_DISPLAY):
    """Display a value whose field is not known."""
    if value is None:
        return empty_value_display
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(display_for_value(item, empty_value_display) for item in value)
    return str(value)


def display_for_field(value, field, empty_value_display=EMPTY_VALUE_DISPLAY):
    """Display ``value``, the content of ``field``, in a read-only cell."""
    if field.choices:
        return dict(field.choices).get(value, empty_value_display)
    if isinstance(field, BooleanField):
        return "yes" if value else "no"
    if value is None:
        return empty_value_display
    if isinstance(field, FloatField):
        return f"{value:.{field.decimal_places}f}"
    return display_for_value(value, empty_value_display)
