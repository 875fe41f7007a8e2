"""Plausibility of a mutant, measured: does it keep the repository's existing tests passing?

A wrong fix an agent submits passes the tests it can see: of mini-swe-agent's 129 unresolved fixes on SWE-bench
Verified, 105 pass every PASS_TO_PASS test (docs/laxity_estimate.md, section 1). A mutant that breaks one is not
such a fix, and counting it dilutes laxity with wrong fixes any test rejects. So every mutant's run of the
reference comes with a run of the instance's PASS_TO_PASS tests of the golden test's own files (one process,
per-test outcomes, stored and shared by every candidate of the instance, as the reference's runs are). A mutant
on which one of them fails, hangs or no longer collects is *implausible*: reported in the sampling frame by
operator, and left out of the laxity's denominator (``MPEConfig.plausibility``; ``--paper-classes`` keeps the
paper's admission exactly); :attr:`~coharden.mpe.result.MutantResult.plausible` reads a mutant's verdict.

The tests measured are those that pass on the fixed code here (a record's list can name tests that do not exist,
or fail in this environment): the rest are left out, and said, before any mutant runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from coharden.execution.executor import InstanceExecutor
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, TestStatus, Verdict


@dataclass
class PassToPass:
    """The PASS_TO_PASS tests a mutant's plausibility is measured with, or why none are."""

    test: TestPatch | None = None
    """The tests that pass on the fixed code (None: plausibility is not measured, ``reason`` says why)."""
    reason: str | None = None
    left_out: dict[str, int] = field(default_factory=dict)
    """Names of the record's list not measured, per reason (``other_file``, ``not_found``, ``not_passing_fixed``)."""
    fixed: Verdict | None = None
    """Their run on the fixed code (time limits on mutants scale with its duration)."""

    def to_json(self) -> dict[str, Any]:
        return {"measured": self.test is not None, "tests": len(self.test.ids) if self.test is not None else 0,
                "reason": self.reason, "left_out": dict(sorted(self.left_out.items()))}


_NOT_FOUND = re.compile(r"not found: (\S+)")


def _not_found(verdict: Verdict, ids: list[str]) -> list[str]:
    """The ids of a refused run that pytest said it could not find (``ERROR: not found: /abs/path::name``; the
    parameters left out): a record's list can name tests the files no longer have."""
    if verdict.outcome is not Outcome.COLLECTION_ERROR:
        return []
    gone = [g.split("[", 1)[0] for g in _NOT_FOUND.findall(f"{verdict.reason}\n{verdict.output_tail}")]
    return [i for i in ids if any(g == (base := i.split("[", 1)[0]) or g.endswith("/" + base) for g in gone)]


def pass_to_pass(executor: InstanceExecutor, fix: str) -> PassToPass:
    """The instance's PASS_TO_PASS tests of the golden test's files that pass on base + ``fix`` here."""
    if not executor.instance.PASS_TO_PASS:
        return PassToPass(reason="the instance lists no PASS_TO_PASS test")
    test, left_out = executor.pass_to_pass_test()
    if test is None:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(left_out.items())) or "no golden test patch"
        return PassToPass(reason=f"no PASS_TO_PASS test lives in the golden test's files ({why})", left_out=left_out)
    fixed = executor.verdicts(fix, [test])[0]
    gone = _not_found(fixed, test.ids)
    if gone:  # pytest refuses the whole run for one id it cannot select
        left_out["not_found"] = left_out.get("not_found", 0) + len(gone)
        if len(gone) == len(test.ids):
            return PassToPass(reason="none of the PASS_TO_PASS tests of the golden test's files exists here",
                              left_out=left_out, fixed=fixed)
        test = test.model_copy(update={"ids": [i for i in test.ids if i not in gone]})
        fixed = executor.verdicts(fix, [test])[0]
    if fixed.outcome in (Outcome.APPLY_ERROR, Outcome.HARNESS_ERROR, Outcome.TIMEOUT, Outcome.COLLECTION_ERROR):
        return PassToPass(reason=f"the PASS_TO_PASS tests do not run on the fixed code: {fixed.short()}",
                          left_out=left_out, fixed=fixed)
    passing = [i for i in test.ids if (statuses := fixed.tests.get(i)) and all(s is TestStatus.PASSED
                                                                                for s in statuses)]
    if len(passing) < len(test.ids):
        left_out["not_passing_fixed"] = len(test.ids) - len(passing)
    if not passing:
        return PassToPass(reason="none of the PASS_TO_PASS tests passes on the fixed code here", left_out=left_out,
                          fixed=fixed)
    return PassToPass(test=test.model_copy(update={"ids": passing}), left_out=left_out, fixed=fixed)
