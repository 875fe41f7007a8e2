from minidash import (
    BooleanField,
    CharField,
    FloatField,
    InvalidJSONInput,
    JSONField,
    display_for_field,
    display_for_value,
    format_for_input,
    parse_json_input,
)


def test_display_for_value():
    assert display_for_value(None) == "-"
    assert display_for_value(True) == "yes"
    assert display_for_value(1.5) == "1.50"
    assert display_for_value(["a", 2]) == "a, 2"
    assert display_for_value("text") == "text"


def test_char_and_choices():
    assert display_for_field("hello", CharField()) == "hello"
    assert display_for_field(None, CharField()) == "-"
    assert display_for_field(None, CharField(), empty_value_display="(none)") == "(none)"
    colour = CharField(choices=(("r", "Red"), ("g", "Green")))
    assert display_for_field("g", colour) == "Green"


def test_boolean_and_float():
    assert display_for_field(False, BooleanField()) == "no"
    assert display_for_field(2.0, FloatField(decimal_places=1)) == "2.0"


def test_parse_json_input():
    assert parse_json_input('{"a": [1, 2]}') == {"a": [1, 2]}
    bad = parse_json_input('{"a": 1,')
    assert isinstance(bad, InvalidJSONInput)
    assert bad == '{"a": 1,'


def test_format_for_input():
    assert format_for_input(None, JSONField()) == ""
    assert format_for_input({"a": [1, 2]}, JSONField()) == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert format_for_input(InvalidJSONInput('{"a": 1,'), JSONField()) == '{"a": 1,'
    assert format_for_input(3, CharField()) == "3"
