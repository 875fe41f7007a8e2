"""Pure computations behind the reports: rates and means, correlations, per-class shares, a 2x2 exact test,
quantiles, percentile bootstrap intervals (seeded; whole clusters resampled).

No I/O and no third-party dependencies, so every figure of a report can be unit-tested on hand-made rows.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


def rate(k: float, n: float) -> float | None:
    """k / n, None when n is 0."""
    return k / n if n else None


def mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def median(xs: Iterable[float]) -> float | None:
    values = sorted(xs)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r; None when undefined (fewer than 2 pairs, or a constant variable)."""
    if len(xs) != len(ys):
        raise ValueError("pearson: sequences differ in length")
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def point_biserial(values: Sequence[float], flags: Sequence[bool]) -> float | None:
    """Correlation between a continuous variable and a binary one (Pearson's r with the flag as 0/1)."""
    return pearson(values, [1.0 if f else 0.0 for f in flags])


def ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks, ties get the average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    result = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            result[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return result


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    return pearson(ranks(xs), ranks(ys))


def auc(values: Sequence[float], flags: Sequence[bool]) -> float | None:
    """P(value of a flagged item > value of an unflagged one), ties counting one half (Mann-Whitney AUC).
    None when either group is empty."""
    pos = [v for v, f in zip(values, flags, strict=True) if f]
    neg = [v for v, f in zip(values, flags, strict=True) if not f]
    if not pos or not neg:
        return None
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def auc_interval(values: Sequence[float], flags: Sequence[bool],
                 confidence: float = 0.95) -> tuple[float, float] | None:
    """The interval of :func:`auc`: Newcombe's score interval (method 5 of Newcombe 2006, Stat Med 25:559-573).

    The Hanley-McNeil variance of the Mann-Whitney AUC theta, with both group sizes replaced by
    N* = (m + n) / 2 - 1, is V(theta) = theta (1 - theta) / (m n) * [1 + (N* - 1) ((1 - theta) / (2 - theta)
    + theta / (1 + theta))]; the interval is the set of theta with (theta - AUC)^2 <= z^2 V(theta). Unlike the
    Wald interval it stays inside [0, 1] and does not shrink to a point at AUC = 0 or 1 (where the tests of a
    study with a handful of clusters often are). None when either group is empty."""
    from statistics import NormalDist

    point = auc(values, flags)
    if point is None:
        return None
    m = sum(1 for f in flags if f)
    n = len(flags) - m
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    star = (m + n) / 2 - 1

    def outside(theta: float) -> float:  # > 0 when theta lies outside the interval
        var = theta * (1 - theta) / (m * n) * (1 + (star - 1) * ((1 - theta) / (2 - theta) + theta / (1 + theta)))
        return (theta - point) ** 2 - z * z * var

    def root(inside: float, out: float) -> float:
        if outside(out) <= 0:
            return out
        for _ in range(100):
            mid = (inside + out) / 2
            inside, out = (mid, out) if outside(mid) <= 0 else (inside, mid)
        return (inside + out) / 2

    return root(point, 0.0), root(point, 1.0)


def _hypergeom(k: int, row1: int, col1: int, n: int) -> float:
    return math.comb(col1, k) * math.comb(n - col1, row1 - k) / math.comb(n, row1)


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test for the table [[a, b], [c, d]] (sum of the probabilities of
    all tables with the same margins that are no more likely than the observed one)."""
    if min(a, b, c, d) < 0:
        raise ValueError("fisher_exact: negative count")
    n = a + b + c + d
    if n == 0:
        return 1.0
    row1, col1 = a + b, a + c
    lo, hi = max(0, row1 + col1 - n), min(row1, col1)
    observed = _hypergeom(a, row1, col1, n)
    total = sum(p for k in range(lo, hi + 1) if (p := _hypergeom(k, row1, col1, n)) <= observed * (1 + 1e-9))
    return min(1.0, total)


@dataclass(frozen=True)
class Share:
    hits: int
    total: int

    @property
    def rate(self) -> float | None:
        return self.hits / self.total if self.total else None

    def text(self) -> str:
        return f"{self.hits}/{self.total}" + (f" ({self.rate:.0%})" if self.total else "")


def shares_by(rows: Iterable[dict[str, Any]], group: Callable[[dict[str, Any]], str | None],
              hit: Callable[[dict[str, Any]], bool | None]) -> dict[str, Share]:
    """Per group: how many rows ``hit`` (rows whose group or hit is None are left out)."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        key, value = group(row), hit(row)
        if key is None or value is None:
            continue
        slot = counts.setdefault(key, [0, 0])
        slot[0] += int(bool(value))
        slot[1] += 1
    return {k: Share(*v) for k, v in sorted(counts.items())}


DECIDED_OR_BORDERLINE = ("Rigorous", "Borderline", "Lax")
"""The classes of a F->P test with a laxity (Borderline: its interval straddles tau)."""


@dataclass(frozen=True)
class Validity:
    """Lax vs Rigorous acceptance of real wrong fixes, and how laxity relates to acceptance."""

    per_class: dict[str, Share]
    n: int
    point_biserial: float | None
    spearman: float | None
    auc: float | None
    fisher_p: float | None
    auc_interval: tuple[float, float] | None = None
    """The AUC's 95 % interval (:func:`auc_interval`)."""

    def lax_minus_rigorous(self) -> float | None:
        lax, rig = self.per_class.get("Lax"), self.per_class.get("Rigorous")
        if not lax or not rig or lax.rate is None or rig.rate is None:
            return None
        return lax.rate - rig.rate


def validity(rows: Sequence[dict[str, Any]]) -> Validity:
    """``rows``: one per graded F->P test with ``test_class`` (Rigorous / Borderline / Lax), ``laxity`` and
    ``accepts`` (True: passes on a real wrong fix the golden test rejects; None: no such fix, or no admissible
    verdict). Borderline tests get their own share and join the laxity correlations and the AUC; the Fisher test
    compares the decided classes, Lax against Rigorous."""
    usable = [r for r in rows if r.get("test_class") in DECIDED_OR_BORDERLINE and r.get("accepts") is not None
              and r.get("laxity") is not None]
    per_class = shares_by(usable, lambda r: r["test_class"], lambda r: r["accepts"])
    lax = per_class.get("Lax", Share(0, 0))
    rig = per_class.get("Rigorous", Share(0, 0))
    xs = [float(r["laxity"]) for r in usable]
    flags = [bool(r["accepts"]) for r in usable]
    p = fisher_exact(lax.hits, lax.total - lax.hits, rig.hits, rig.total - rig.hits) if usable else None
    return Validity(per_class=per_class, n=len(usable), point_biserial=point_biserial(xs, flags),
                    spearman=spearman(xs, [1.0 if f else 0.0 for f in flags]) if usable else None,
                    auc=auc(xs, flags) if usable else None, fisher_p=p,
                    auc_interval=auc_interval(xs, flags) if usable else None)


def histogram(values: Iterable[float], edges: Sequence[float]) -> list[int]:
    """Counts per bin [edges[i], edges[i+1]); the last bin also holds values equal to the last edge."""
    counts = [0] * (len(edges) - 1)
    for v in values:
        for i in range(len(edges) - 1):
            last = i == len(edges) - 2
            if edges[i] <= v < edges[i + 1] or (last and v == edges[-1]):
                counts[i] += 1
                break
    return counts


def confusion(pairs: Iterable[tuple[bool, bool]]) -> dict[str, int]:
    """2x2 counts of (ours, theirs) booleans: both / ours_only / theirs_only / neither."""
    out = {"both": 0, "ours_only": 0, "theirs_only": 0, "neither": 0}
    for ours, theirs in pairs:
        key = "both" if ours and theirs else "ours_only" if ours else "theirs_only" if theirs else "neither"
        out[key] += 1
    return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, Hyndman & Fan type 7)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def bootstrap_interval(n: int, statistic: Callable[[list[int]], float | None], *, n_boot: int = 2000,
                       seed: int = 0, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile interval of ``statistic`` over ``n_boot`` draws of ``n`` indices with replacement.

    Draw ``b`` (for b in range(n_boot)) picks ``n`` indices with ``random.Random(seed).randrange(n)``, in
    order, from one generator shared by all draws; a draw whose statistic is None is skipped. The bounds are
    the ``(1 - level) / 2`` and ``(1 + level) / 2`` :func:`percentile` s of the draws' statistics. None with
    ``n`` = 0 or no draw with a statistic."""
    if n == 0:
        return None
    rng = random.Random(seed)
    values: list[float] = []
    for _ in range(n_boot):
        value = statistic([rng.randrange(n) for _ in range(n)])
        if value is not None:
            values.append(value)
    if not values:
        return None
    values.sort()
    return percentile(values, (1 - level) / 2), percentile(values, (1 + level) / 2)


def cluster_bootstrap(clusters: Sequence[Sequence[T]], statistic: Callable[[list[T]], float | None], *,
                      n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float] | None:
    """:func:`bootstrap_interval` of ``statistic`` over the items of whole clusters drawn with replacement (a
    cluster drawn twice brings its items twice): items of one cluster (the tests of one instance) are resampled
    together, never one by one."""
    return bootstrap_interval(len(clusters), lambda idx: statistic([x for i in idx for x in clusters[i]]),
                              n_boot=n_boot, seed=seed, level=level)
