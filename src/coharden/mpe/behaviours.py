"""Distinct behaviours: mutants no test run can tell apart count once.

Two mutants are one *behaviour* when every test run on them agrees: the same outcome and per-test statuses of
the candidate, the reference and the PASS_TO_PASS tests, and, for each failing test, the same exceptions: type,
message (memory addresses blanked) and, where the run says, the place in the test's own file that raised
(:attr:`~coharden.schema.verdict.Raised.where`). Three edits that all restore one wrong result are one wrong
behaviour, so a test that lets it through is not three times as lax (pytest-10356's Otter test was Lax only
because one wrong behaviour was counted three times). Laxity is then ``beta behaviours / admissible
behaviours`` (``MPEConfig.behaviours``), the per-mutant figure beside it.

Why the failure is part of the behaviour: most golden and candidate tests are one or two test functions, so
outcomes alone give at most a handful of behaviours however many wrong fixes there are; a wrong fix that makes
an assertion see 3 where another makes it see an exception behaves differently to anyone reading the test's
output. Every runner reports them: pytest's runs from the exception objects (its result stream) or JUnit,
sympy's ``bin/test`` and Django's ``runtests.py`` from the tracebacks their logs print
(:mod:`coharden.execution.log_failures`). Their bare asserts raise AssertionError with no message, so for them
the place of the failing assert is what separates two wrong fixes failing one test: failing it at another
assert is another behaviour. A failure whose exception the output does not show counts by its status alone,
which is coarser, never finer. The rule is named in the MPE cache key
(:data:`~coharden.schema.mpe_config.BEHAVIOUR_RULE`).

A behaviour's id is a short digest of what identifies it; its cell is every member's (the cell is read off
the candidate's and the reference's outcomes, which are part of the identity).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from coharden.mpe.result import MutantResult
from coharden.schema.matrix import Matrix
from coharden.schema.verdict import Verdict

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_SPACE = re.compile(r"\s+")
MESSAGE_CHARS = 300
"""How much of an exception's message identifies a behaviour (long reprs differ in their tails only rarely)."""


def _message(text: str) -> str:
    return _SPACE.sub(" ", _ADDRESS.sub("0x?", text)).strip()[:MESSAGE_CHARS]


def _observed(verdict: Verdict | None) -> Any:
    """What a test run showed: outcome, per-test statuses, and the exceptions of failing tests."""
    if verdict is None:
        return None
    return [verdict.outcome.value,
            sorted((test, [s.value for s in statuses]) for test, statuses in verdict.tests.items()),
            sorted((test, sorted((r.type, _message(r.message), _message(r.where)) for r in raised))
                   for test, raised in verdict.raised.items())]


def behaviour_of(result: MutantResult) -> str:
    """The behaviour id of a run mutant: a digest of what every test run on it showed."""
    seen = [_observed(result.candidate), _observed(result.reference), _observed(result.plausibility)]
    return hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:10]


def assign(results: Sequence[MutantResult]) -> None:
    """Set the behaviour of every counted mutant (one with a cell); the others have none."""
    for result in results:
        result.behaviour = behaviour_of(result) if result.cell is not None else None


def groups(results: Sequence[MutantResult]) -> dict[str, list[MutantResult]]:
    """Counted mutants by behaviour, in the order each behaviour was first seen."""
    out: dict[str, list[MutantResult]] = {}
    for result in results:
        if result.cell is not None and result.behaviour is not None:
            out.setdefault(result.behaviour, []).append(result)
    return out


def behaviour_matrix(results: Sequence[MutantResult]) -> Matrix:
    """The matrix over behaviours: each behaviour once, named by its first mutant, in its cell."""
    matrix = Matrix()
    for members in groups(results).values():
        first = members[0]
        assert first.cell is not None  # noqa: S101 - groups() holds counted mutants only
        matrix.add(first.mutant.id, first.cell)
    return matrix
