"""Durations written as a sequence of <number><unit> parts: "1h30m", "2d 4h", "90s".

Units: w (weeks), d (days), h (hours), m (minutes), s (seconds). Case and spaces between
parts do not matter.
"""

import re

UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}

#: one <number><unit> part, optionally preceded by spaces
_PART = re.compile(r"\s*(\d+)\s*([a-z])")


def parse_duration(text):
    """The number of seconds in ``text``: ``parse_duration("1h30m")`` -> 5400."""
    s = text.strip().lower()
    total = 0
    for number, unit in _PART.findall(s):
        total += int(number) * UNITS[unit]
    return total


def format_duration(seconds):
    """The inverse of parse_duration: ``format_duration(5400)`` -> ``"1h30m"``."""
    if seconds < 0:
        raise ValueError(f"negative duration: {seconds}")
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in UNITS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
