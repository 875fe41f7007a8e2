"""Half-open date intervals [start, end): overlap, merge, gaps, splitting and formatting."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

DAY = timedelta(days=1)


@dataclass(frozen=True, order=True)
class Interval:
    """The days ``start <= d < end``; an interval with ``start == end`` is empty."""

    start: date
    end: date

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"interval ends before it starts: {self.start} > {self.end}")

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    def is_empty(self) -> bool:
        return self.start == self.end

    def contains(self, day: date) -> bool:
        return self.start <= day < self.end

    def overlaps(self, other: Interval) -> bool:
        return self.start < other.end and other.start < self.end

    def intersection(self, other: Interval) -> Interval | None:
        start, end = max(self.start, other.start), min(self.end, other.end)
        if start >= end:
            return None
        return Interval(start, end)


def merge(intervals: list[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering the same days; touching intervals are joined."""
    merged: list[Interval] = []
    for iv in sorted(intervals):
        if iv.is_empty():
            continue
        if merged and iv.start <= merged[-1].end:
            last = merged.pop()
            merged.append(Interval(last.start, max(last.end, iv.end)))
        else:
            merged.append(iv)
    return merged


def gaps(intervals: list[Interval], within: Interval) -> list[Interval]:
    """The parts of ``within`` that no interval covers, in order."""
    result: list[Interval] = []
    cursor = within.start
    for iv in merge(intervals):
        if iv.end <= cursor or iv.start >= within.end:
            continue
        if iv.start > cursor:
            result.append(Interval(cursor, iv.start))
        cursor = max(cursor, iv.end)
    if cursor < within.end:
        result.append(Interval(cursor, within.end))
    return result


def split_weeks(interval: Interval) -> list[Interval]:
    """Cut an interval at every Monday."""
    parts: list[Interval] = []
    start = interval.start
    while start < interval.end:
        next_monday = start + timedelta(days=7 - start.weekday())
        end = min(next_monday, interval.end)
        parts.append(Interval(start, end))
        start = end
    return parts


def total_days(intervals: list[Interval]) -> int:
    """Days covered by at least one interval."""
    return sum(iv.days for iv in merge(intervals))


def parse(text: str) -> Interval:
    """``"2024-01-01..2024-01-08"`` (end exclusive); a single date means that one day."""
    text = text.strip()
    if ".." in text:
        left, right = text.split("..", 1)
        return Interval(date.fromisoformat(left.strip()), date.fromisoformat(right.strip()))
    day = date.fromisoformat(text)
    return Interval(day, day + DAY)


def format_interval(interval: Interval) -> str:
    if interval.days == 1:
        return interval.start.isoformat()
    return f"{interval.start.isoformat()}..{interval.end.isoformat()}"
