"""Behaviours of runs read from a log runner's output (real ``bin/test`` runs, ``tests/fixtures/logs/``): two
wrong fixes failing one test at different bare asserts are two behaviours, at the same assert one, whatever the
sympy version or the checkout's directory."""

from __future__ import annotations

from pathlib import Path

from coharden.execution.log_failures import sympy_failures
from coharden.execution.log_parsers import parse_sympy_log
from coharden.execution.log_runs import verdict_from_log
from coharden.mpe.behaviours import behaviour_of
from coharden.mpe.result import MutantResult
from coharden.schema.matrix import Cell
from coharden.schema.mutant import Mutant, Operator
from coharden.schema.verdict import Outcome, TestStatus, Verdict

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
TEST = "sympy/core/tests/test_zz_two.py::test_two_asserts"


def _run(log_name: str, *, with_failures: bool = True) -> MutantResult:
    """A mutant whose candidate run printed the log ``log_name`` (the reference passed)."""
    log = (LOGS / log_name).read_text(encoding="utf-8")
    ids = ["test_two_asserts"]
    candidate = verdict_from_log(ids, parse_sympy_log(log), output=log, returncode=1, timed_out=False,
                                 duration=1.0, runner="sympy", failures=sympy_failures(log) if with_failures else None)
    mutant = Mutant(id=log_name, operator=Operator.BEHAVIOR_SUBSTITUTION, description="", location="a.py:1",
                    patch="")
    reference = Verdict(outcome=Outcome.PASS, tests={TEST: [TestStatus.PASSED]})
    return MutantResult(mutant=mutant, candidate=candidate, reference=reference, cell=Cell.DELTA)


def test_failing_a_test_at_another_bare_assert_is_another_behaviour() -> None:
    first, second = _run("sympy_1_15_first_assert.txt"), _run("sympy_1_15_second_assert.txt")
    assert first.candidate.failed
    assert first.candidate.raised["test_two_asserts"][0].message == ""  # bare asserts: no message to tell them apart
    assert behaviour_of(first) != behaviour_of(second)


def test_failing_it_at_the_same_assert_is_one_behaviour_wherever_the_checkout_is() -> None:
    """The same assert failing under sympy 1.15 in /tmp/sympy-demo and sympy 1.9 in /tmp/sympy19 (another header
    form, another directory, another random seed line)."""
    assert behaviour_of(_run("sympy_1_15_first_assert.txt")) == behaviour_of(_run("sympy_1_9_first_assert.txt"))


def test_without_the_failure_sections_the_two_asserts_looked_alike() -> None:
    """What the behaviours were before the log's failure sections were read: by outcome and status only."""
    first = _run("sympy_1_15_first_assert.txt", with_failures=False)
    second = _run("sympy_1_15_second_assert.txt", with_failures=False)
    assert first.candidate.raised == {}
    assert behaviour_of(first) == behaviour_of(second)
