"""One check of a commit: the instance read from the repository, the F->P verdict of its test, and MPE by
:func:`coharden.mpe.evaluate.evaluate` unchanged, against the candidate itself or a given reference.

With the candidate as its own reference the matrix has no beta cell (both tests agree on every mutant), so what
a reviewer needs is the alpha cell: the plausible wrong fixes the test lets through. Their share over the
admissible mutants is laxity against a reference that rejects every mutant: an upper bound of the test's laxity
(a mutant may be a correct fix too), classified with the same interval rule and tau, and said to be that bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from coharden.check.commit import CheckError, CommitChange, instance_of, test_part
from coharden.config import Settings
from coharden.schema.estimate import Estimate
from coharden.schema.matrix import NEEDS_NETWORK, TestClass, classify
from coharden.schema.mpe_config import MPEConfig
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

    def fails(self, policy: str) -> bool:
        return self.test_class in FAILING[policy]

    def to_json(self) -> dict:
        est = self.estimate
        return {
            "repo": str(self.change.repo), "rev": self.change.rev, "commit": self.change.head,
            "base": self.change.base, "dirty": self.change.dirty, "fix_files": self.change.fix_files,
            "test_files": self.change.test_files, "test_ids": self.test_ids, "reference": self.reference,
            "buggy": self.buggy.outcome.value, "fixed": self.fixed.outcome.value, "fail_to_pass": self.fail_to_pass,
            "class": self.test_class.value, "problem": self.problem or None, "tau": self.tau,
            "laxity": est.laxity if est else None, "interval": list(est.interval) if est and est.interval else None,
            "laxity_is_upper_bound": self.upper_bound, "matrix": self.matrix, "counted": self.counted,
            "survivors": [vars(s) for s in self.survivors], "killed": self.killed,
            "inadmissible": self.inadmissible, "runs": self.runs, "warnings": self.warnings,
            "seconds": round(self.seconds, 3),
        }


def reference_test(repo: Path, value: str, test_patterns: list[str]) -> tuple[str, str]:
    """(name, test patch) of ``--reference``: a patch file (its test-file part), else a revision or range whose
    test-file changes are the reference."""
    from coharden.patches import split_patch

    path = Path(value)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise CheckError(f"--reference: {path} is not UTF-8 text") from exc
        _, tests = split_patch(text, test_patterns)
        if not tests.strip():
            raise CheckError(f"--reference: {path} changes no test file")
        return path.stem, tests
    return value, test_part(repo, value, test_patterns)


def self_check_config(config: MPEConfig) -> MPEConfig:
    """The MPE settings of a check without a reference: a fixed budget (``per_operator`` mutants of each
    operator, all run). The sequential draw stops once the interval decides, which with no beta cell is after
    the first few rounds, before most wrong fixes the test lets through were tried."""
    return config.model_copy(update={"sequential": False})


def run_check(change: CommitChange, settings: Settings, reference: str | None = None) -> CheckReport:
    """Check ``change``: F->P of its test, then MPE against ``reference`` (see :func:`reference_test`) or the
    test itself. Every test runs in a throwaway clone of the repository; results are cached in the store."""
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.pool import ExecutorPool
    from coharden.execution.store import Store
    from coharden.execution.verify import fail_to_pass
    from coharden.mpe.evaluate import MPEError, evaluate

    started = time.monotonic()
    ref_name, ref_text = reference_test(change.repo, reference, settings.tests.test_patterns) if reference else ("", "")
    inst = instance_of(change)
    store = Store(settings.store)
    config = settings.mpe if reference else self_check_config(settings.mpe)
    config = config.model_copy(update={"workers": settings.workers})

    def factory() -> InstanceExecutor:
        return InstanceExecutor(inst, change.repo, settings, store)

    try:
        with factory() as executor, ExecutorPool(factory, settings.workers) as pool:
            candidate = executor.test_patch(change.test, name="the commit's test")
            ftp = fail_to_pass(executor, candidate, change.fix)
            report = CheckReport(change=change, reference=ref_name or None, test_ids=candidate.ids,
                                 buggy=ftp.buggy, fixed=ftp.fixed, tau=config.tau,
                                 test_class=classify(fails_on_buggy=ftp.buggy.failed, passes_on_fixed=ftp.fixed.passed,
                                                     laxity=None, tau=config.tau, admissible=ftp.admissible))
            if not ftp.fail_to_pass:
                report.problem = _not_checked(report)
            else:
                ref = executor.test_patch(ref_text, name=ref_name) if reference else candidate
                try:
                    result = evaluate(executor, change.fix, candidate, ref, config, pool=pool)
                except MPEError as exc:
                    raise CheckError(f"--reference {reference}: {exc}") from exc
                _fill(report, result)
    finally:
        store.close()
    report.seconds = time.monotonic() - started
    return report


def _not_checked(report: CheckReport) -> str:
    """The plain line for a test that is not F->P."""
    buggy, fixed = report.buggy, report.fixed
    if fixed.failed and fixed.network:
        report.test_class = TestClass.INCONCLUSIVE
        return (f"{NEEDS_NETWORK}: the test fails with the fix only where it reaches for a service or the network, "
                "which test runs do not have here (start the service inside the test, or run with -c network=true)")
    refused = _refused(fixed)
    if fixed.failed and refused:
        report.test_class = TestClass.INCONCLUSIVE
        return (f"needs a service: the test fails with the fix where a connection to a local service is refused "
                f"({refused}); the sandbox has its own loopback, so start the service inside the test (a fixture) "
                "or run the check where the test needs none")
    if report.test_class is TestClass.NOT_REPRODUCING:
        return (f"NotReproducing: the test does not fail on the parent commit {report.change.base[:12]} "
                f"({buggy.short()}), so it does not reproduce the bug the commit fixes")
    if report.test_class is TestClass.MISALIGNED:
        return f"Misaligned: the test does not pass with the commit's fix ({fixed.short()})"
    side = buggy if not buggy.admissible else fixed
    return f"Invalid: the test does not run ({'parent' if side is buggy else 'fix'}: {side.short()})"


#: Exceptions (by type or base) that say a test reached for a server that does not answer.
_REFUSED = ("ConnectionRefusedError", "ConnectionError")


def _refused(verdict: Verdict) -> str:
    """The tests (``id: type``) whose failure is a refused connection, by the verdict's recorded exceptions."""
    found = [f"{test}: {r.type}" for test, raised in verdict.raised.items() for r in raised
             if r.type.rpartition(".")[2] in _REFUSED or any(b.rpartition(".")[2] in _REFUSED for b in r.bases)]
    return "; ".join(found[:3])


def _fill(report: CheckReport, result) -> None:
    """The report's MPE part from an :class:`~coharden.mpe.result.MPEResult`."""
    from coharden.schema.matrix import Cell

    report.warnings = list(result.warnings) + [f"tampering: {note}" for note in result.tampering]
    cell = Cell.ALPHA if report.upper_bound else Cell.BETA
    groups: dict[str, list] = {}
    for mr in result.mutants:
        if mr.cell is cell:
            groups.setdefault(mr.behaviour or mr.mutant.id, []).append(mr)
        elif mr.cell is None:
            report.inadmissible[mr.mutant.id] = mr.inadmissible_reason or "inadmissible"
        elif not mr.candidate.passed:
            report.killed.append(mr.mutant.id)
    for members in groups.values():
        m = members[0].mutant
        report.survivors.append(Survivor(id=m.id, operator=m.operator.value, description=m.description,
                                         location=m.location, change=m.change or m.patch, same=len(members) - 1))
    matrix = result.counted_matrix
    report.counted = result.counted
    report.matrix = result.matrix.counts()
    if report.upper_bound:
        report.estimate = Estimate(beta=len(matrix.alpha), admissible=matrix.admissible, confidence=result.confidence)
        interval = report.estimate.interval
        report.test_class = (TestClass.INCONCLUSIVE if interval is None else
                             classify(fails_on_buggy=True, passes_on_fixed=True, laxity=report.estimate.laxity,
                                      tau=result.tau, interval=interval))
    else:
        report.estimate = result.estimate() if result.laxity is not None else None
        report.test_class = result.test_class
    for row in result.runs.values():
        for key in report.runs:
            report.runs[key] += int(row.get(key, 0))
