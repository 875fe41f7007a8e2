"""throttle: a sliding-window rate limiter."""

from .limiter import RateLimiter, is_allowed, recent_hits, retry_after

__all__ = ["RateLimiter", "is_allowed", "recent_hits", "retry_after"]
