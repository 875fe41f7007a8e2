"""Fail-to-pass: the verdicts of a test on the buggy code and on the fixed code."""

from __future__ import annotations

from pydantic import BaseModel

from coharden.execution.executor import InstanceExecutor
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Verdict


class FailToPass(BaseModel):
    test_ids: list[str]
    buggy: Verdict
    fixed: Verdict

    @property
    def admissible(self) -> bool:
        return self.buggy.admissible and self.fixed.admissible

    @property
    def fail_to_pass(self) -> bool:
        return self.buggy.failed and self.fixed.passed

    def to_json(self) -> dict:
        return {
            "test_ids": self.test_ids,
            "buggy": self.buggy.model_dump(mode="json", exclude={"output_tail"}),
            "fixed": self.fixed.model_dump(mode="json", exclude={"output_tail"}),
            "fail_to_pass": self.fail_to_pass,
        }


def fail_to_pass(executor: InstanceExecutor, test: TestPatch, fix: str) -> FailToPass:
    buggy = executor.verdict("", test)
    fixed = executor.verdict(fix, test)
    return FailToPass(test_ids=test.ids, buggy=buggy, fixed=fixed)
