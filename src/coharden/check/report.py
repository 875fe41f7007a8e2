"""The report of one check (:class:`CheckReport`): what every renderer reads and what the store keeps, with the
``--fail-on`` policies that turn its class into an exit status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from coharden.check.commit import CommitChange
from coharden.schema.estimate import Estimate
from coharden.schema.matrix import TestClass
from coharden.schema.verdict import Verdict

FailOn = Literal["lax", "borderline", "never"]
#: The classes each ``--fail-on`` policy fails a check on (exit status 1).
FAILING: dict[str, frozenset[TestClass]] = {
    "lax": frozenset({TestClass.LAX}),
    "borderline": frozenset({TestClass.LAX, TestClass.BORDERLINE}),
    "never": frozenset(),
}


@dataclass
class Survivor:
    """A plausible wrong fix the candidate lets through, with how many more mutants share its behaviour."""

    id: str
    operator: str
    description: str
    location: str
    change: str
    """Its change to the fixed code (a diff)."""
    same: int = 0

    @property
    def path(self) -> str:
        return self.location.rpartition(":")[0] or self.location

    @property
    def line(self) -> int:
        tail = self.location.rpartition(":")[2]
        return int(tail) if tail.isdigit() and int(tail) > 0 else 1


@dataclass
class CheckReport:
    """What one check found; every renderer (terminal, Markdown, SARIF, JUnit, JSON) reads only this."""

    change: CommitChange
    reference: str | None
    """None: the candidate is its own reference; else what ``--reference`` named."""
    test_ids: list[str]
    buggy: Verdict
    fixed: Verdict
    test_class: TestClass
    problem: str = ""
    """Why the commit's test is not checked further (not F->P, needs a service), in one plain line."""
    estimate: Estimate | None = None
    tau: float = 0.0
    survivors: list[Survivor] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    inadmissible: dict[str, str] = field(default_factory=dict)
    """Mutant id -> why it counts neither way (implausible, timeout, ...)."""
    matrix: dict[str, int] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=lambda: {"made": 0, "cached": 0, "implied": 0})
    warnings: list[str] = field(default_factory=list)
    counted: str = "mutants"
    """What the laxity counts: ``behaviours`` (mutants no test run tells apart count once) or ``mutants``."""
    seconds: float = 0.0
    stored_seconds: float | None = None
    """Set when the report is an earlier check's, from the store (:mod:`coharden.check.stored`): the seconds that
    check took; no test ran for this one."""

    @property
    def fail_to_pass(self) -> bool:
        return self.buggy.failed and self.fixed.passed

    @property
    def checked(self) -> bool:
        """F->P and MPE ran: a class from mutants (else ``problem`` says why not)."""
        return not self.problem

    @property
    def upper_bound(self) -> bool:
        """The laxity is the candidate's survival share (no reference): an upper bound."""
        return self.reference is None

    @property
    def from_store(self) -> bool:
        """The whole report is an earlier check's of the same commit, options and environment."""
        return self.stored_seconds is not None

    def fails(self, policy: str) -> bool:
        return self.test_class in FAILING[policy]

    def to_json(self) -> dict:
        est = self.estimate
        return {
            "repo": str(self.change.repo), "rev": self.change.rev, "commit": self.change.head,
            "base": self.change.base, "dirty": self.change.dirty, "fix_files": self.change.fix_files,
            "doc_files": self.change.doc_files,
            "test_files": self.change.test_files, "test_ids": self.test_ids, "reference": self.reference,
            "buggy": self.buggy.outcome.value, "fixed": self.fixed.outcome.value, "fail_to_pass": self.fail_to_pass,
            "class": self.test_class.value, "problem": self.problem or None, "tau": self.tau,
            "laxity": est.laxity if est else None, "interval": list(est.interval) if est and est.interval else None,
            "laxity_is_upper_bound": self.upper_bound, "matrix": self.matrix, "counted": self.counted,
            "survivors": [vars(s) for s in self.survivors], "killed": self.killed,
            "inadmissible": self.inadmissible, "runs": self.runs, "warnings": self.warnings,
            "seconds": round(self.seconds, 3), "from_store": self.from_store,
        }
