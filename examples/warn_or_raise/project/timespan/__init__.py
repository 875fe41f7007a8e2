"""timespan: parse and format human-friendly durations such as "1h30m"."""

from .parse import UNITS, format_duration, parse_duration

__all__ = ["UNITS", "format_duration", "parse_duration"]
