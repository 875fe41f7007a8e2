"""The draw of sequential MPE: the pool in seeded, stratified rounds, and why a run stopped.

A round holds one mutant of every operator that has mutants left, operators in a fixed order drawn from the
seed; each operator's mutants come in the seeded order of :func:`coharden.mutation.pool.admit` (``ordered``),
so the first k mutants of an operator are exactly its seeded sample of k. Rounds make the estimate balanced
across operators at every stopping point (no operator dominates an early stop by being first), and because the
stopping rule is only applied between rounds, the mutants run do not depend on how many workers ran them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from enum import StrEnum

from coharden.schema.mutant import Mutant


class Stop(StrEnum):
    DECIDED = "decided"  # the interval lies on one side of tau
    CAP = "cap"  # max_mutants reached, the interval still straddles tau
    POOL = "pool"  # every mutant of the pool was run (a census)
    FIXED = "fixed budget"  # N per operator, no early stop (fixed budget, the paper's protocol)


def operator_order(operators: Sequence[str], seed: int) -> list[str]:
    """The operators' turn within every round: a seeded permutation (the same seed, the same order)."""
    names = sorted(set(operators))
    return random.Random(f"{seed}:rounds").sample(names, len(names))


def rounds(mutants: Sequence[Mutant], seed: int) -> list[list[Mutant]]:
    """``mutants`` (each operator's in draw order) as rounds: round r holds the r-th mutant of every operator
    that has one, in :func:`operator_order`."""
    groups: dict[str, list[Mutant]] = {}
    for mutant in mutants:
        groups.setdefault(str(mutant.operator), []).append(mutant)
    order = operator_order(list(groups), seed)
    depth = max((len(g) for g in groups.values()), default=0)
    return [[groups[op][r] for op in order if r < len(groups[op])] for r in range(depth)]


def capped(planned: Sequence[Sequence[Mutant]], cap: int | None) -> list[list[Mutant]]:
    """The rounds cut after ``cap`` mutants in all (the last round may be cut short); None: no cap."""
    if cap is None:
        return [list(batch) for batch in planned]
    out: list[list[Mutant]] = []
    left = cap
    for batch in planned:
        if left <= 0:
            break
        out.append(list(batch[:left]))
        left -= len(out[-1])
    return out


def stop_reason(*, drawn: int, pool: int, decided: bool) -> Stop:
    """Why a sequential run ended: the whole pool ran (a census), the interval decided, or the cap."""
    if drawn >= pool:
        return Stop.POOL
    return Stop.DECIDED if decided else Stop.CAP
