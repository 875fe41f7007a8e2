import pytest

from throttle import RateLimiter, is_allowed, recent_hits, retry_after


def test_recent_hits_drops_old_requests():
    assert recent_hits([0, 10, 50, 95], now=100, window=60) == [50, 95]
    assert recent_hits([], now=100, window=60) == []


def test_first_requests_are_allowed():
    assert is_allowed([], now=0, limit=3, window=60)
    assert is_allowed([0], now=1, limit=3, window=60)


def test_old_requests_do_not_count():
    assert is_allowed([0, 1, 2, 3, 4], now=100, limit=3, window=60)


def test_no_wait_when_allowed():
    assert retry_after([], now=0, limit=3, window=60) == 0
    assert retry_after([0, 1], now=2, limit=5, window=60) == 0
    assert retry_after([0, 1, 2, 3], now=100, limit=3, window=60) == 0


def test_limiter_uses_clock():
    ticks = iter([0.0, 100.0])
    limiter = RateLimiter(limit=1, window=10, clock=lambda: next(ticks))
    assert limiter.allow()
    assert limiter.allow()


def test_limiter_rejects_bad_settings():
    with pytest.raises(ValueError):
        RateLimiter(limit=0, window=10)
    with pytest.raises(ValueError):
        RateLimiter(limit=1, window=0)
