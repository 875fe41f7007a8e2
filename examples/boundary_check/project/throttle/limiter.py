"""Sliding-window rate limiting: at most ``limit`` requests in any ``window`` seconds.

A request made at time ``t`` counts against the limit during ``[t, t + window)``: it stops
counting exactly ``window`` seconds later.
"""

import time


def recent_hits(history, now, window):
    """The timestamps in ``history`` that still count against the limit at time ``now``."""
    cutoff = now - window
    return [t for t in history if t >= cutoff]


def is_allowed(history, now, limit, window):
    """True if one more request at ``now`` keeps to ``limit`` requests per ``window`` seconds.

    ``history`` holds the times of the earlier requests that were allowed.
    """
    return len(recent_hits(history, now, window)) <= limit


def retry_after(history, now, limit, window):
    """Seconds to wait, from ``now``, until a request would be allowed (0: allowed now)."""
    recent = recent_hits(history, now, window)
    if len(recent) <= limit:
        return 0
    return recent[-limit - 1] + window - now


class RateLimiter:
    """``RateLimiter(limit=3, window=60).allow()`` -> True or False; allowed requests are recorded."""

    def __init__(self, limit, window, clock=time.monotonic):
        if limit < 1 or window <= 0:
            raise ValueError("limit must be >= 1 and window > 0")
        self.limit = limit
        self.window = window
        self._clock = clock
        self._history = []

    def allow(self, now=None):
        now = self._clock() if now is None else now
        self._history = recent_hits(self._history, now, self.window)
        if not is_allowed(self._history, now, self.limit, self.window):
            return False
        self._history.append(now)
        return True

    def retry_after(self, now=None):
        now = self._clock() if now is None else now
        return retry_after(self._history, now, self.limit, self.window)
