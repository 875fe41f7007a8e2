"""How values are shown in read-only cells of a list page."""

from .fields import BooleanField, FloatField

EMPTY_VALUE_DISPLAY = "-"


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
