"""The reward of a (fix, test) pair: how well a generated test reproduces the bug and exercises the fix.

    reward = 1/3 * [test FAILs on the old code] + 1/3 * [test PASSes on the new code] + 1/3 * coverage

where *old code* is the base commit, *new code* is base + fix, and *coverage* is the changed-line coverage of
the test over the fix (:mod:`coharden.overfit.coverage`; 0 in the sum when the fix changes no executable
line). The indicators follow coharden's verdict rules: only an admissible FAIL counts as failing and only a
PASS as passing; an inadmissible outcome (collection error, timeout, patch that does not apply) counts as
neither and is recorded. A harness error raises :class:`RewardError` (fail closed): the reward of a broken
run is never a number. A pair whose reward is 1 is F->P with every changed line covered.

Nothing here looks at the golden test or golden fix.
"""

from __future__ import annotations

import functools
import subprocess
from typing import Any

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.errors import ApplyError, CoHardenError, PatchError, TestIdError
from coharden.execution.executor import InstanceExecutor
from coharden.overfit.coverage import Backend, ChangedLineCoverage, CoverageError, changed_line_coverage
from coharden.patches import split_patch
from coharden.schema.verdict import Outcome, Verdict


class RewardError(CoHardenError):
    """The reward of a pair cannot be computed (a harness error, no coverage data)."""


class PairEvaluation(BaseModel):
    """The measured facts about one (fix, test) pair and its reward."""

    valid: bool = True
    """False when the test cannot run at all (empty, adds no test function, does not apply): reward 0."""
    reason: str = ""
    test_ids: list[str] = Field(default_factory=list)
    old: Verdict | None = None
    """The test's verdict on the old (base) code."""
    new: Verdict | None = None
    """The test's verdict on the new code (base + fix)."""
    coverage: ChangedLineCoverage | None = None

    @property
    def fails_old(self) -> bool:
        return self.old is not None and self.old.failed

    @property
    def passes_new(self) -> bool:
        return self.new is not None and self.new.passed

    @property
    def fail_to_pass(self) -> bool:
        return self.fails_old and self.passes_new

    @property
    def coverage_value(self) -> float | None:
        return self.coverage.value if self.coverage is not None else None

    @property
    def reward(self) -> float:
        if not self.valid:
            return 0.0
        return (int(self.fails_old) + int(self.passes_new) + (self.coverage_value or 0.0)) / 3

    def summary(self) -> dict[str, Any]:
        """A compact JSON-able view (what the iteration records and reports keep)."""
        cov = self.coverage
        return {
            "valid": self.valid, "reason": self.reason, "test_ids": self.test_ids,
            "old": self.old.outcome.value if self.old else None,
            "new": self.new.outcome.value if self.new else None,
            "fails_old": self.fails_old, "passes_new": self.passes_new, "fail_to_pass": self.fail_to_pass,
            "coverage": self.coverage_value,
            "covered_lines": cov.covered if cov else None, "changed_lines": cov.total if cov else None,
            "coverage_complete": cov.complete if cov else None,
            "reward": self.reward,
        }


def reward_of(fails_old: bool, passes_new: bool, coverage: float | None) -> float:
    """The reward formula on its own (for reports and checks)."""
    return (int(fails_old) + int(passes_new) + (coverage or 0.0)) / 3


@functools.cache
def _has_coverage(python: str) -> str | None:
    """None when ``python`` can import coverage.py (7.x), else why not."""
    try:
        out = subprocess.run([python, "-c", "import coverage, sys; sys.stdout.write(coverage.__version__)"],
                             capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        return f"cannot run {python}: {exc}"
    if out.returncode != 0:
        return f"coverage.py is not importable by the test interpreter {python}"
    if not out.stdout.startswith("7."):
        return f"the test interpreter {python} has coverage.py {out.stdout.strip()}, coharden needs 7.x"
    return None


def check_backend(settings: Settings, backend: Backend, python: str | None = None) -> None:
    """Fail early, with what to do, when the test interpreter (``python``, else the settings') cannot measure
    with ``backend``."""
    if settings.sandbox.test_host != "local":
        raise CoverageError(f"changed-line coverage needs local test processes (test_host is "
                            f"{settings.sandbox.test_host!r}): the "
                            "line-coverage plugin and its output live on this machine")
    if backend == "coverage":
        problem = _has_coverage(python or settings.environment.python)
        if problem:
            raise CoverageError(f"{problem}; install it there (pip install 'coverage>=7,<8') or pass "
                                "--coverage-backend settrace (a stdlib line tracer)")


def coverage_settings(settings: Settings, backend: Backend) -> Settings:
    """``settings`` with coverage.py preloaded by the fork server (importing it costs ~0.25 s per run)."""
    if backend != "coverage" or "coverage" in settings.server.preload:
        return settings
    return settings.with_overrides(preload=[*settings.server.preload, "coverage"])


def evaluate_pair(executor: InstanceExecutor, fix: str, test: str, *, backend: Backend = "coverage") -> PairEvaluation:
    """Run ``test`` on the old and on the new code (cached verdicts) and measure its changed-line coverage.

    ``fix`` must be a source-only patch and ``test`` a test-only patch (a part of either that belongs to the
    other side is dropped, as the SWE-bench / SWT-bench harnesses do). Verdicts and coverage runs are cached in
    the executor's store.
    """
    patterns = executor.settings.tests.test_patterns
    try:
        source, _ = split_patch(fix, patterns)
        _, test_part = split_patch(test, patterns)
        candidate = executor.test_patch(test_part, name="generated")
    except (TestIdError, ApplyError, PatchError) as exc:
        return PairEvaluation(valid=False, reason=f"test: {exc}")
    old, new = executor.verdicts("", [candidate])[0], executor.verdicts(source, [candidate])[0]
    for where, verdict in (("old", old), ("new", new)):
        if verdict.outcome is Outcome.HARNESS_ERROR:
            raise RewardError(f"harness error running the test on the {where} code: {verdict.reason}")
    if new.outcome is Outcome.APPLY_ERROR and new.reason.startswith("source patch"):
        return PairEvaluation(valid=False, reason=f"fix: {new.reason}", test_ids=candidate.ids, old=old, new=new)
    try:
        coverage = changed_line_coverage(executor, source, candidate, backend=backend)
    except ApplyError as exc:
        return PairEvaluation(valid=False, reason=f"coverage run: {exc}", test_ids=candidate.ids, old=old, new=new)
    except CoverageError as exc:
        raise RewardError(f"changed-line coverage: {exc}") from exc
    return PairEvaluation(test_ids=candidate.ids, old=old, new=new, coverage=coverage)
