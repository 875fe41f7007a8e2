"""One check of a commit: the instance read from the repository, the F->P verdict of its test, and MPE by
:func:`coharden.mpe.evaluate.evaluate` unchanged, against the candidate itself or a given reference.

With the candidate as its own reference the matrix has no beta cell (both tests agree on every mutant), so what
a reviewer needs is the alpha cell: the plausible wrong fixes the test lets through. Their share over the
admissible mutants is laxity against a reference that rejects every mutant: an upper bound of the test's laxity
(a mutant may be a correct fix too), classified with the same interval rule and tau, and said to be that bound.
"""

from __future__ import annotations

import os
import time
from pathlib import Path, PurePosixPath

from coharden.check import stored
from coharden.check.commit import CheckError, CommitChange, Reference, instance_of, test_part
from coharden.check.generated import overlay
from coharden.check.interpreter import import_roots, probe
from coharden.check.report import CheckReport, Survivor
from coharden.config import Settings
from coharden.schema.estimate import Estimate
from coharden.schema.matrix import FAIL_TO_PASS, NEEDS_NETWORK, Reproduction, TestClass, classify
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.verdict import Verdict


def reference_test(repo: Path, value: str, test_patterns: list[str]) -> Reference:
    """The test of ``--reference``: a patch file (its test-file part), else a revision or range whose test-file
    changes are the reference."""
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
        return Reference(value, path.stem, tests)
    return Reference(value, value, test_part(repo, value, test_patterns))


def checked_settings(change: CommitChange, settings: Settings) -> Settings:
    """``settings`` for the test runs of ``change``: the interpreter's digest names the environment in every
    verdict's key (after an upgrade no verdict of the old environment answers), and the clone's own directories
    holding the checked code come first on ``PYTHONPATH`` (an editable install of the project imports the user's
    checkout otherwise: the parent, the fix and every mutant would all run the checkout's code), with the modules
    the install generated there laid over every clone (:mod:`coharden.check.generated`)."""
    from coharden.execution.git import git

    interpreter = probe(settings.environment.python)
    tracked = set(git(["ls-tree", "-r", "--name-only", "-z", change.head], change.repo).stdout.split("\0"))
    roots = import_roots(change.repo, interpreter, change.fix_files, tracked)
    env = dict(settings.environment.test_env)
    paths = [f"{{workspace}}/{root}" for root in roots if root != "."]  # the clone's root: on sys.path already
    if paths:
        env["PYTHONPATH"] = os.pathsep.join([*paths, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    update: dict = {"env_fingerprint": interpreter.digest, "test_env": env}
    if settings.environment.env_overlay is None:  # what the install generated there (a version module): in no commit
        # the repository's root is no place to look: only the top-level packages of the fix there
        packages = {PurePosixPath(f).parts[0] for f in change.fix_files
                    if f.endswith(".py") and len(PurePosixPath(f).parts) > 1
                    and f"{PurePosixPath(f).parts[0]}/__init__.py" in tracked}
        scopes = [root for root in roots if root != "."] + sorted(packages)
        update["env_overlay"] = overlay(change.repo, scopes, tracked, settings.cache_dir)
    return settings.with_overrides(environment=update)


def self_check_config(config: MPEConfig) -> MPEConfig:
    """The MPE settings of a check without a reference: a fixed budget (``per_operator`` mutants of each
    operator, all run). The sequential draw stops once the interval decides, which with no beta cell is after
    the first few rounds, before most wrong fixes the test lets through were tried."""
    return config.model_copy(update={"sequential": False})


def run_check(change: CommitChange, settings: Settings, reference: str | None = None) -> CheckReport:
    """Check ``change``: F->P of its test, then MPE against ``reference`` (see :func:`reference_test`) or the
    test itself. Every test runs in a throwaway clone of the repository. The store answers at once with the
    whole report of an earlier check of the same commit in the same environment and settings
    (:mod:`coharden.check.stored`), else keeps the new report (and each verdict) for the next check."""
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.pool import ExecutorPool
    from coharden.execution.store import Store

    started = time.monotonic()
    ref = reference_test(change.repo, reference, settings.tests.test_patterns) if reference else None
    inst = instance_of(change)
    settings = checked_settings(change, settings)
    store = Store(settings.store)
    config = settings.mpe if reference else self_check_config(settings.mpe)
    config = config.model_copy(update={"workers": settings.workers})

    def factory() -> InstanceExecutor:
        return InstanceExecutor(inst, change.repo, settings, store)

    key = stored.report_key(change, inst, settings, config, reference=ref)
    try:
        report = stored.load(store, key, change)
        if report is None:
            with factory() as executor, ExecutorPool(factory, settings.workers) as pool:
                report = _check(executor, pool, change, config, ref)
            report.seconds = time.monotonic() - started
            if stored.storable(report):
                stored.save(store, key, report)
    finally:
        store.close()
    report.seconds = time.monotonic() - started
    return report


def _check(executor, pool, change: CommitChange, config: MPEConfig, reference: Reference | None) -> CheckReport:
    """The report of running the check: F->P of the commit's test, then (when it is F->P) MPE."""
    from coharden.execution.verify import fail_to_pass
    from coharden.mpe.evaluate import MPEError, MPERequest, evaluate

    candidate = executor.test_patch(change.test, name="the commit's test")
    ftp = fail_to_pass(executor, candidate, change.fix)
    report = CheckReport(change=change, reference=reference.name if reference else None, test_ids=candidate.ids,
                         buggy=ftp.buggy, fixed=ftp.fixed, tau=config.tau,
                         test_class=classify(Reproduction(ftp.buggy.failed, ftp.fixed.passed, ftp.admissible),
                                             laxity=None, tau=config.tau))
    if not ftp.fail_to_pass:
        report.problem = _not_checked(report)
        return report
    ref = executor.test_patch(reference.text, name=reference.name) if reference else candidate
    try:
        result = evaluate(executor, MPERequest(change.fix, candidate, ref, config), pool=pool)
    except MPEError as exc:
        raise CheckError(f"--reference {reference.given}: {exc}" if reference else str(exc)) from exc
    _fill(report, result)
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
        report.survivors.append(Survivor(id=m.id, operator=str(m.operator), description=m.description,
                                         location=m.location, change=m.change or m.patch, same=len(members) - 1))
    matrix = result.counted_matrix
    report.counted = result.counted
    report.matrix = result.matrix.counts()
    if report.upper_bound:
        report.estimate = Estimate(beta=len(matrix.alpha), admissible=matrix.admissible, confidence=result.confidence)
        interval = report.estimate.interval
        report.test_class = (TestClass.INCONCLUSIVE if interval is None else
                             classify(FAIL_TO_PASS, laxity=report.estimate.laxity, tau=result.tau,
                                      interval=interval))
    else:
        report.estimate = result.estimate() if result.laxity is not None else None
        report.test_class = result.test_class
    for row in result.runs.values():
        for key in report.runs:
            report.runs[key] += int(row.get(key, 0))
