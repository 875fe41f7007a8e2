"""How a pool's admitted mutants are drawn: the per-operator budget, the seed, the tiers and the source tests.

:func:`coharden.mutation.pool.admit` admits the candidates, then draws each operator's sample here: a seeded
draw per operator (independent of the others'), the preferred mutants first, and the mutants built from
recorded inputs in turn from each test that recorded them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from coharden.schema.mutant import Operator


@dataclass(frozen=True)
class Draw:
    """How :func:`~coharden.mutation.pool.admit` samples each operator's admitted mutants.

    ``budget``: at most this many per operator (None, or an operator not named: all of them). ``prefer``: an
    operator's over-budget sample is drawn first from the mutants it accepts (files -> bool), filled up from
    the rest. ``ordered`` (sequential MPE): every admitted mutant is kept, each operator's in the seeded order
    of the draw, so the first k of an operator are its sample of k."""

    budget: dict[Operator, int | None]
    seed: int = 0
    prefer: Callable[[dict[str, str]], bool] | None = None
    ordered: bool = False


def uniform(rng: random.Random, tiers: list[list[int]], limit: int) -> list[int]:
    """``limit`` indices drawn uniformly, the first tier first."""
    chosen: list[int] = []
    for tier in tiers:
        chosen += rng.sample(tier, min(limit - len(chosen), len(tier)))
    return chosen


def stratified(rng: random.Random, tiers: list[list[int]], sources: list[str], limit: int) -> list[int]:
    """``limit`` indices drawn in turn from each source test's mutants (each source's order shuffled), the
    first tier first. Mutants built from recorded inputs carry the test that recorded them; a uniform draw
    over-represents whichever test ran the most inputs (sympy-23950: four golden-test inputs and the lax
    test's one, three places), so the pool would favour that test, where MPE compares both."""
    chosen: list[int] = []
    for tier in tiers:
        # the tests in the order their mutants come (the order the tests were recorded in: candidate, then
        # reference), never sorted by name: the sample must not depend on what a user called a test (``mpe
        # --test lax`` and ``eval``'s "candidate" drew different mutants from one pool)
        names = list(dict.fromkeys(sources[i] for i in tier))
        turns = rng.sample(names, len(names))  # who goes first, so a leftover place favours no test
        groups = {src: rng.sample(members, len(members)) for src in turns
                  if (members := [i for i in tier if sources[i] == src])}
        while len(chosen) < limit and any(groups.values()):
            for members in groups.values():
                if members and len(chosen) < limit:
                    chosen.append(members.pop(0))
    return chosen
