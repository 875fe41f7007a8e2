"""Fail-to-pass: the verdicts of a test on the buggy code and on the fixed code - the one place F->P is decided
(MPE, grading, the real-bugs study and the loop's gate all ask here)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from coharden.execution.executor import InstanceExecutor
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict


class FailToPass(BaseModel):
    test_ids: list[str]
    buggy: Verdict
    fixed: Verdict

    @property
    def admissible(self) -> bool:
        """Both verdicts are PASS or FAIL (the test applied and ran on both sides)."""
        return self.buggy.admissible and self.fixed.admissible

    @property
    def fail_to_pass(self) -> bool:
        return self.buggy.failed and self.fixed.passed

    @property
    def harness_error(self) -> bool:
        """A side failed in the runner, not in the code: a rerun may answer differently."""
        return Outcome.HARNESS_ERROR in (self.buggy.outcome, self.fixed.outcome)

    def problem(self) -> str:
        """'' when the test is F->P, else why not (the first side that is wrong)."""
        if not self.buggy.failed:
            return f"the test does not fail on the buggy code ({self.buggy.short()})"
        if not self.fixed.passed:
            return f"the test does not pass with the fix ({self.fixed.short()})"
        return ""

    def summary(self) -> str:
        return f"buggy: {self.buggy.short()}; fixed: {self.fixed.short()}"

    def to_json(self) -> dict:
        return {
            "test_ids": self.test_ids,
            "buggy": self.buggy.model_dump(mode="json", exclude={"output_tail"}),
            "fixed": self.fixed.model_dump(mode="json", exclude={"output_tail"}),
            "fail_to_pass": self.fail_to_pass,
        }


def fail_to_pass(executor: InstanceExecutor, test: TestPatch, fix: str) -> FailToPass:
    return fail_to_pass_all(executor, [test], fix)[0]


def fail_to_pass_all(executor: InstanceExecutor, tests: Sequence[TestPatch], fix: str, *,
                     combine: bool = False) -> list[FailToPass]:
    """F->P of several tests; each test runs in its own process unless ``combine`` (every test trusted)."""
    buggy = executor.verdicts("", list(tests), combine=combine)
    fixed = executor.verdicts(fix, list(tests), combine=combine)
    return [FailToPass(test_ids=t.ids, buggy=b, fixed=f) for t, b, f in zip(tests, buggy, fixed, strict=True)]
