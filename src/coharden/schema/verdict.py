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


class Raised(BaseModel):
    """The exception one failing test case raised, read from the exception object by the stream plugin (or, for
    a run without the stream, from the type name JUnit's failure message starts with, and for a log-based
    runner's run from the traceback its log prints, :mod:`coharden.execution.log_failures`; ``bases`` then holds
    that name only)."""

    case: str
    """The case's node id as it ran (a parameter of a parametrized test has its own)."""
    when: str = "call"
    type: str
    """``module.Qualname`` (bare for builtins)."""
    bases: list[str] = Field(default_factory=list)
    """The qualified names of the type's classes, the type first (``object`` left out)."""
    message: str = ""
    where: str = ""
    """Where the test's own file was when it raised: the traceback's last frame in that file, ``path:line:
    source`` (``sympy/core/tests/test_x.py:12: assert f(x) == 1``); a bare ``assert`` raises AssertionError with no
    message, and this is what tells two of them apart. Read from a log-based runner's traceback and a failing
    reproduction script's; "" where the run does not say (pytest's runs)."""

    def is_a(self, expected: str) -> bool:
        """Is the raised exception an ``expected`` (a class name, or a dotted one: then it must end the
        qualified name at a dot), or a subclass of one?"""
        expected = expected.strip()
        for name in self.bases or [self.type]:
            if "." not in expected and name.rsplit(".", 1)[-1] == expected:
                return True
            if "." in expected and (name == expected or name.endswith("." + expected)):
                return True
        return False


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
    expected_failures: list[str] = Field(default_factory=list)
    """Wanted ids with a case pytest reported as an expected failure (XFAIL, or XPASS: an xfail-marked case that
    passed, a plain pass in the JUnit file), from the result stream. An XFAIL or XPASS is never a FAIL_TO_PASS
    test's success in ``coharden eval`` (see :mod:`coharden.evaluation.grading`)."""
    skipped_by: dict[str, list[str]] = Field(default_factory=dict)
    """Wanted id -> the files whose code called ``pytest.skip`` / ``pytest.xfail`` during one of its calls (paths
    relative to the checkout where inside it), from the result stream: ``coharden eval`` reports a fix whose own
    files skip or xfail the golden tests as tampering."""
    raised: dict[str, list[Raised]] = Field(default_factory=dict)
    """For every wanted id that failed or errored: the exceptions its cases raised (empty where the run does not
    say: a pytest run with neither stream nor JUnit message, a log whose failure section is cut off)."""
    network: bool = False
    """FAIL only because the test reached for the network: every failing wanted case's exception, message or
    captured output shows a network failure (:data:`coharden.execution.sandbox.NETWORK_FAILURE`). Test runs have
    no network unless ``network = true``, so such a FAIL says nothing about the code under test."""
    implied: str | None = None
    """Why no run was made for this verdict (``unreached``: the test never enters the code a mutant changes, so
    its outcome is the fixed code's, see :mod:`coharden.mpe.implied`; ``other_inadmissible``: the other test's
    verdict on the mutant is inadmissible, so this one could not make it admissible, and the outcome is that
    verdict's); None: the verdict comes from a run."""

    applied_with: dict[str, str] = Field(default_factory=dict)
    """How each patch of the run was applied, by role (``source``, ``test``): ``git apply``, the SWE-bench
    harness's fallbacks ``git apply --reject`` and ``patch --fuzz=5``, ``copy`` (a test written beside another's
    in a shared process), ``failed`` (none applied it: the APPLY_ERROR's patch). Empty: a verdict stored before
    coharden said so (or a run that applied no patch)."""
    apply_notes: list[str] = Field(default_factory=list)
    """Where ``patch --fuzz=5`` had to fuzz or shift a hunk (``role path: Hunk #1 succeeded at 4 with fuzz 1.``):
    a fuzzed test patch may test something a little other than what it says."""
    exec_mode: str = "unit_test"
    """How the test ran (SWT-bench's names): ``unit_test``, the runner's collected tests; ``reproduction_script``,
    a script the test patch adds, run with ``python`` and judged by its exit status (0: PASS), because the runner
    collects no test from it (see :attr:`coharden.schema.testpatch.TestPatch.exec_mode`)."""

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
