"""Seed tests for intervals.py: deliberately thin, so most mutants survive them."""

from datetime import date

from intervals import Interval, merge, parse


def test_parse_range():
    assert parse("2024-01-01..2024-01-08") == Interval(date(2024, 1, 1), date(2024, 1, 8))


def test_merge_overlapping():
    a = Interval(date(2024, 1, 1), date(2024, 1, 5))
    b = Interval(date(2024, 1, 3), date(2024, 1, 9))
    assert merge([b, a]) == [Interval(date(2024, 1, 1), date(2024, 1, 9))]
