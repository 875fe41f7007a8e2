"""minidash: field descriptions and the read-only display of values in an admin-style list page."""

from .display import EMPTY_VALUE_DISPLAY, display_for_field, display_for_value, format_for_input
from .fields import BooleanField, CharField, Field, FloatField, InvalidJSONInput, JSONField, parse_json_input

__all__ = [
    "EMPTY_VALUE_DISPLAY",
    "BooleanField",
    "CharField",
    "Field",
    "FloatField",
    "InvalidJSONInput",
    "JSONField",
    "display_for_field",
    "display_for_value",
    "format_for_input",
    "parse_json_input",
]
