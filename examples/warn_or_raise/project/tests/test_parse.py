import pytest

from timespan import format_duration, parse_duration


def test_parse_simple():
    assert parse_duration("90s") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2d 4h") == 2 * 86400 + 4 * 3600


def test_parse_is_case_and_space_insensitive():
    assert parse_duration(" 1H 30M ") == 5400
    assert parse_duration("1 w") == 7 * 86400


def test_format():
    assert format_duration(0) == "0s"
    assert format_duration(5400) == "1h30m"
    assert format_duration(90061) == "1d1h1m1s"
    with pytest.raises(ValueError, match="negative"):
        format_duration(-1)


def test_round_trip():
    for seconds in (1, 59, 60, 3599, 86400, 694861):
        assert parse_duration(format_duration(seconds)) == seconds
