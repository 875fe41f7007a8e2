"""Verdicts of a test on a piece of code: PASS / FAIL or an inadmissible outcome with a reason."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class Outcome(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    APPLY_ERROR = "APPLY_ERROR"
    COLLECTION_ERROR = "COLLECTION_ERROR"
    TIMEOUT = "TIMEOUT"
    HARNESS_ERROR = "HARNESS_ERROR"

    @property
    def admissible(self) -> bool:
        return self in (Outcome.PASS, Outcome.FAIL)


class TestStatus(StrEnum):
    """Per-test status, with SWE-bench's names."""

    __test__ = False  # not a pytest class

    PASSED = "PASSED"
    FAILED = "FAILED"
    ERROR = "ERROR"
    SKIPPED = "SKIPPED"
    XFAIL = "XFAIL"
    MISSING = "MISSING"


class Verdict(BaseModel):
    """The verdict of one test patch's ids on one code state.

    ``tests`` maps every wanted node id to the statuses of the cases it expanded to (a parametrized test
    expands to several). ``reason`` is human-readable and always set for FAIL and inadmissible outcomes.
    """

    outcome: Outcome
    reason: str = ""
    tests: dict[str, list[TestStatus]] = Field(default_factory=dict)
    duration: float = 0.0
    cached: bool = False
    output_tail: str = ""
    isolation: str = ""
    """How the test process was confined: ``bwrap``, ``netns``, ``guard`` (see coharden.execution.sandbox)."""
    time_limit: float | None = None
    """The limit the process ran under (a TIMEOUT is only reused for a limit no larger)."""
    cpu_time_limit: bool = False
    """``time_limit`` bounded the process's CPU time (a limit scaled from the test's own run: mutants), the wall
    clock allowing ``LOAD_MARGIN`` times it; else it was a wall-clock limit."""
    tampering: list[str] = Field(default_factory=list)
    """What the test did that could forge results (conftest.py, pytest hooks, JUnit writes, os._exit)."""

    @property
    def admissible(self) -> bool:
        return self.outcome.admissible

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.FAIL

    def short(self) -> str:
        return self.outcome.value if not self.reason else f"{self.outcome.value} ({self.reason})"
