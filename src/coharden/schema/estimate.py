"""Laxity as a measurement: an exact binomial interval on the admissible mutants, and the class it decides.

A laxity is estimated from a sample of the mutant pool (N per operator, or the sequential rounds of
:mod:`coharden.mpe.sequential`), so it is reported as ``beta / admissible`` *with* an interval, and the class is
read off the interval instead of the point: Lax when the whole interval lies at or above tau, Rigorous when it
lies below, Borderline when it straddles tau (the sample cannot tell).

**Why Clopper-Pearson, not Wilson.** Both are standard binomial intervals; Wilson is shorter on average but its
coverage dips below the nominal level for some true proportions, most of all at the small sample sizes MPE
works with (3 to 50 admissible mutants) and near 0, where rigorous tests live. The Clopper-Pearson interval
inverts the exact binomial test, so its coverage is at least the nominal level for every proportion and every
n. That guarantee matters twice here: (1) a class is a claim ("this test lets through at most tau of the wrong
fixes"), and an interval that under-covers makes that claim more often than it should; (2) sequential MPE looks
at the interval after every round, and every look is one more chance of a wrong decision - the conservative
interval absorbs part of that inflation (not all of it: see docs/laxity_estimate.md). It needs no third-party
library: the bounds are found by bisection on the exact binomial tail.

**The pool is itself a sample.** The quantity a class claims is the share of the *plausible wrong fixes* of the
bug a test lets through, not the share of one generated pool. A mechanical pool is a small, operator-shaped
sample of those wrong fixes, so running every mutant of it (``census``: the pool was spent) measures the pool
exactly but the wrong fixes no better than any other sample of that size: the interval is always the binomial
one over what was run, and a pool too small to decide leaves the test Borderline (``pool_too_small``). Before this
rule a spent pool collapsed the interval to its point, so 1 of 5 was "Rigorous" with certainty; rows
stored under that rule carry no ``estimate:sample`` part in their key and are never served under this one
(docs/laxity_estimate.md, section 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, Field

DEFAULT_CONFIDENCE = 0.95
"""The interval's default confidence level (``--confidence``)."""


def check_confidence(confidence: float) -> float:
    """``confidence`` when it lies in the open interval (0.5, 1); a ValueError naming the range otherwise."""
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence {confidence} is out of range (allowed: between 0.5 and 1, both excluded)")
    return confidence


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (no overflow for any n MPE meets)."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def _bisect(increasing: bool, target: float, probe: Callable[[float], float], iterations: int = 60) -> float:
    """The p in [0, 1] where ``probe(p)`` crosses ``target`` (``probe`` monotone, increasing or not)."""
    lo, hi = 0.0, 1.0
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if (probe(mid) > target) == increasing:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial proportion, ``k`` successes in ``n``.

    lower: the p with P(X >= k | p) = alpha/2 (0 when k = 0); upper: the p with P(X <= k | p) = alpha/2 (1 when
    k = n)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson: need 0 <= k <= n and n > 0, got k={k}, n={n}")
    alpha = 1 - check_confidence(confidence)
    lower = 0.0 if k == 0 else _bisect(True, alpha / 2, lambda p: 1 - _binomial_cdf(k - 1, n, p))
    upper = 1.0 if k == n else _bisect(False, alpha / 2, lambda p: _binomial_cdf(k, n, p))
    return lower, upper


INTERVAL_METHOD = "clopper-pearson"
"""The interval every class is read off (:func:`clopper_pearson`), named in MPE's cache key
(``MPEConfig.cache_key``): a row stored under one method is never served under another."""

Side = str
"""``"lax"``, ``"rigorous"`` or ``"borderline"``: where an interval lies against tau."""


def side_of(interval: tuple[float, float], tau: float) -> Side:
    """The class rule, in one place: ``"lax"`` when ``interval`` lies at or above ``tau``, ``"rigorous"`` when it
    lies below, ``"borderline"`` when it straddles tau (read by :func:`coharden.schema.matrix.classify`,
    :meth:`Estimate.side` and the loop's decision)."""
    low, high = interval
    if low >= tau:
        return "lax"
    if high < tau:
        return "rigorous"
    return "borderline"


class Estimate(BaseModel):
    """A laxity with its interval: ``beta`` of ``admissible`` mutants let through, the pool fully drawn or not."""

    beta: int = Field(ge=0)
    admissible: int = Field(ge=0)
    confidence: float = DEFAULT_CONFIDENCE
    census: bool = Field(default=False, description="Every mutant of the pool was drawn. Said, never used to "
                         "narrow the interval: the pool is itself a sample of the plausible wrong fixes.")

    @property
    def laxity(self) -> float | None:
        return self.beta / self.admissible if self.admissible else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """(low, high) at ``confidence``; None without an admissible mutant."""
        if not self.admissible:
            return None
        return clopper_pearson(self.beta, self.admissible, self.confidence)

    def side(self, tau: float) -> str | None:
        """``"lax"`` when the interval lies at or above ``tau``, ``"rigorous"`` when below, ``"borderline"``
        when it straddles tau; None without an admissible mutant."""
        bounds = self.interval
        return None if bounds is None else side_of(bounds, tau)

    def to_json(self) -> dict[str, object]:
        bounds = self.interval
        return {"laxity": self.laxity, "interval": list(bounds) if bounds else None, "beta": self.beta,
                "admissible": self.admissible, "confidence": self.confidence, "census": self.census}

    def text(self) -> str:
        """``0.125 [0.016, 0.384]`` (``, whole pool`` when the pool was spent); ``-`` without an admissible
        mutant."""
        bounds = self.interval
        if bounds is None or self.laxity is None:
            return "-"
        return f"{self.laxity:.3f} [{bounds[0]:.3f}, {bounds[1]:.3f}{', whole pool' if self.census else ''}]"
