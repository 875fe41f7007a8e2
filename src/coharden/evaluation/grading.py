"""Mechanical grades of fixes and tests on one instance, with SWE-bench / SWT-bench semantics.

* **Resolved** (a fix): the golden test patch is applied on base + the fix's source part and the golden
  FAIL_TO_PASS and PASS_TO_PASS ids run in one pytest process. Per test id (SWE-bench ``grading.py``): a
  FAIL_TO_PASS id succeeds when all its cases are PASSED (a skipped or missing F2P test is a failure),
  a PASS_TO_PASS id when all are PASSED, XFAIL or SKIPPED. RESOLVED_FULL: every F2P and every P2P id succeeds
  (an empty list counts as all succeeded); RESOLVED_PARTIAL: some but not all F2P, every P2P; else
  RESOLVED_NO. ``resolved`` == RESOLVED_FULL and no tampering. The fix's changes to test files (by the configured
  test patterns) are dropped before applying, so a fix cannot change the tests that grade it (the SWE-bench
  harness likewise checks out the golden test files before applying the test patch). A fix that does not apply
  is graded, not resolved, ``patch_successfully_applied: false``. An empty fix is not run (``patch_exists:
  false``). A harness error (a verdict that is neither PASS/FAIL nor a reason the fix caused) is
  ``infra_failure`` - not resolved, and left out of every rate that conditions on correctness (coupling,
  overfitting, injection).

  **Deviation from SWE-bench**: an expected failure is never a FAIL_TO_PASS success. SWE-bench counts XFAIL as
  one; coharden does not (nor XPASS, an xfail-marked case that passed, which pytest's JUnit file shows as a plain
  pass: the result stream tells it, :attr:`Verdict.expected_failures`). A FAIL_TO_PASS test must pass; one that
  the code under test turns into an expected failure (``pytest.xfail()`` in unfixed code) has not been fixed. The
  grade's ``reason`` says so where this rule decided.

  **Tampering** (coharden's promise: Resolved only for fixes that fix): the fix is screened before it is applied
  (:mod:`coharden.evaluation.fix_tampering`: its pytest / interpreter configuration is not applied, its source is
  scanned for code reaching into the runner), the run loads only the environment's own pytest plugins
  (:mod:`coharden.execution.env_plugins`), and the run reports results the code under test rewrote
  (:mod:`coharden.execution.pytest_verdicts`). Every such note goes to ``tampering`` and the fix is not resolved,
  with ``reason`` "tampering: ..."; SWE-bench's fields (``tests_status``, ``resolution``) still say what the run
  gave. A run the code under test tampered with is no harness error (``infra_failure`` stays false): it counts
  against the fix. The golden fix, trusted, is checked by what its run gave (``grading_jobs``).
* **F->P, class and laxity** (a test): :func:`coharden.mpe.evaluate.evaluate` against the golden test, with the
  golden fix, over the mechanical pool (``operators`` / ``per_operator`` narrow it). The test prediction's
  source-file changes are dropped (only its test part is the test). A test that is empty, does not apply, or
  adds no test function is ``Invalid`` (not F->P). When the golden test itself is not F->P nothing can be
  classified: the row carries ``error`` and is left out of class-based rates.
* **Own test**: the verdict of a system's test (the ids it contributes) on base + that system's fix.

Verdicts are cached in the SQLite store; MPE rows are cached there too (kind ``eval-test``), so a rerun of
``coharden eval`` costs nothing but reading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, Field

from coharden.errors import ApplyError, PatchError, TestIdError
from coharden.evaluation.fix_tampering import screen_fix
from coharden.execution.env_plugins import environment_plugins
from coharden.execution.executor import InstanceExecutor
from coharden.execution.runners import runner_of
from coharden.execution.store import EVAL_TEST, Store, eval_test_key
from coharden.execution.tampering import scan
from coharden.execution.testids import harness_ids, resolve_names
from coharden.execution.verify import fail_to_pass
from coharden.mpe.evaluate import MPEError, MPERequest, evaluate
from coharden.patches import drop_binary_stubs, prediction_tests, split_patch, touched_files
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mpe_row import MPERow
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, TestStatus, Verdict

F2P_SUCCESS = frozenset({TestStatus.PASSED})  # not XFAIL (SWE-bench's rule): see the module docstring
P2P_SUCCESS = frozenset({TestStatus.PASSED, TestStatus.XFAIL, TestStatus.SKIPPED})
RESOLVED_FULL = "RESOLVED_FULL"
RESOLVED_PARTIAL = "RESOLVED_PARTIAL"
RESOLVED_NO = "RESOLVED_NO"
CACHE_KIND = EVAL_TEST


class GradeOptions(BaseModel):
    """How tests are classified (``mpe``: the MPE config, mechanical pool) and how many instances are graded
    at once (``workers``)."""

    mpe: MPEConfig = Field(default_factory=MPEConfig)
    workers: int = 1


def _bucket() -> dict[str, list[str]]:
    return {"success": [], "failure": []}


class FixGrade(BaseModel):
    """One fix on one instance: the fields of SWE-bench's per-instance ``report.json`` plus the verdict."""

    patch_is_None: bool = False  # noqa: N815 - SWE-bench's field name
    patch_exists: bool = True
    patch_successfully_applied: bool = False
    resolved: bool = False
    resolution: str = RESOLVED_NO
    infra_failure: bool = False
    infra_failure_reason: str | None = None
    outcome: str | None = None
    """Verdict outcome of the golden F2P+P2P ids on base + fix (None: not run)."""
    reason: str = ""
    tests_status: dict[str, dict[str, list[str]]] = Field(
        default_factory=lambda: {k: _bucket() for k in ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL",
                                                         "PASS_TO_FAIL")})
    dropped_test_files: list[str] = Field(default_factory=list)
    dropped_config_files: list[str] = Field(default_factory=list)
    """Files of the fix not applied because they configure pytest or the interpreter (see ``fix_tampering``)."""
    tampering: list[str] = Field(default_factory=list)
    """What the fix did that could forge its grade (not resolved when any)."""
    notes: list[str] = Field(default_factory=list)
    """What the grade should say besides (a fix to the test runner's own repository)."""
    network: bool = False
    """The failing tests failed only where they reached for the network, which test runs do not have."""

    @property
    def fails_golden(self) -> bool:
        return bool(self.tests_status["FAIL_TO_PASS"]["failure"])

    @property
    def fails_regression(self) -> bool:
        return bool(self.tests_status["PASS_TO_PASS"]["failure"])


@dataclass
class GoldenTests:
    """The golden test patch with the FAIL_TO_PASS and PASS_TO_PASS ids it is graded by."""

    f2p: list[str]
    p2p: list[str]
    patch: TestPatch  # ids: F2P then P2P, deduplicated
    reference: TestPatch  # ids: F2P only (the MPE reference)
    absent: list[str] = field(default_factory=list)  # PASS_TO_PASS ids naming no file of the checkout


def golden_tests(executor: InstanceExecutor) -> GoldenTests:
    """FAIL_TO_PASS ids (or, without them, the ids the golden test patch contributes) and PASS_TO_PASS ids.

    Bare PASS_TO_PASS names (sympy style) are resolved in the files the golden test patch touches; node ids
    are kept as they are, wherever they live.
    """
    reference = executor.golden_test()
    p2p_names = harness_ids(executor.instance.PASS_TO_PASS)
    absent = executor.absent_files(p2p_names, executor.instance.test_patch)
    p2p_names = [i for i in p2p_names if i not in absent]
    files = {p: c for p, c in reference.files.items() if c is not None}
    if runner_of(executor.settings.tests.runner).ids_are_descriptions:  # unittest descriptions, not names in the files
        p2p = p2p_names
    else:
        p2p = resolve_names(p2p_names, files) if p2p_names else []
    ids = list(dict.fromkeys([*reference.ids, *p2p]))
    # a fix is graded as the harness grades it: the golden test patch's files run whole, F2P / P2P read from it
    combined = TestPatch(patch=reference.patch, ids=ids, name="golden F2P+P2P", files=reference.files,
                         whole_files=True)
    return GoldenTests(f2p=list(reference.ids), p2p=p2p, patch=combined, reference=reference, absent=absent)


def grade_statuses(verdict: Verdict, f2p: Sequence[str], p2p: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """SWE-bench ``tests_status`` from a verdict's per-id statuses (an id without statuses is a failure; a
    FAIL_TO_PASS id with an expected failure, XFAIL or XPASS, is one too: coharden's rule, see the module
    docstring)."""
    status = {k: _bucket() for k in ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")}
    expected = set(verdict.expected_failures)
    for ids, key, good in ((f2p, "FAIL_TO_PASS", F2P_SUCCESS), (p2p, "PASS_TO_PASS", P2P_SUCCESS)):
        for test_id in ids:
            cases = verdict.tests.get(test_id) or []
            ok = bool(cases) and all(c in good for c in cases) and (key != "FAIL_TO_PASS" or test_id not in expected)
            status[key]["success" if ok else "failure"].append(test_id)
    return status


def resolution(status: Mapping[str, Mapping[str, list[str]]]) -> str:
    """SWE-bench ``ResolvedStatus`` (an empty list counts as a success rate of 1)."""

    def share(key: str) -> float:
        ok, bad = len(status[key]["success"]), len(status[key]["failure"])
        return 1.0 if ok + bad == 0 else ok / (ok + bad)

    f2p, p2p = share("FAIL_TO_PASS"), share("PASS_TO_PASS")
    if f2p == 1 and p2p == 1:
        return RESOLVED_FULL
    if 0 < f2p < 1 and p2p == 1:
        return RESOLVED_PARTIAL
    return RESOLVED_NO


def grade_fix(executor: InstanceExecutor, golden: GoldenTests, fix: str | None) -> FixGrade:
    """Resolved or not, with SWE-bench's per-test report and coharden's tampering notes (see the module
    docstring)."""
    if fix is None:
        return FixGrade(patch_is_None=True, patch_exists=False, reason="no patch (None)")
    if not fix.strip():
        return FixGrade(patch_exists=False, reason="empty patch")
    try:
        source, tests = split_patch(fix, executor.settings.tests.test_patterns)
        dropped = touched_files(tests)
        source, stubs = drop_binary_stubs(source)  # as the harness's patch fallback does
        dropped += stubs
        screen = screen_fix(source, executor.base_file, executor.post_images, _plugin_modules(executor))
    except PatchError as exc:
        return FixGrade(reason=f"the fix is not a valid patch: {exc}")
    # a conftest.py is a test file by the default patterns (dropped with them), and configures pytest all the same
    config = [f"{p}: the fix adds or changes a conftest.py (runs before and around every test): not applied"
              for p in dropped if PurePosixPath(p).name == "conftest.py"]
    verdict = executor.verdict(screen.source, golden.patch)
    grade = FixGrade(outcome=verdict.outcome.value, dropped_test_files=dropped, reason=verdict.reason,
                     dropped_config_files=screen.dropped, notes=screen.notes)
    if verdict.outcome is Outcome.APPLY_ERROR and verdict.reason.startswith("source patch"):
        grade.reason = f"the fix does not apply: {verdict.reason}"
        return grade
    grade.patch_successfully_applied = True
    # what the run found rewritten (the golden test patch's own static notes are not the fix's doing)
    golden_notes = set(scan(golden.patch.patch))
    ran = [note for note in verdict.tampering if note not in golden_notes]
    # a golden test skipped or xfailed by code of a file the fix changed: the fix decides the test's outcome
    changed = set(touched_files(screen.source))
    ran += [f"{test_id}: skipped or xfailed by code in {path}, a file the fix changes (pytest.skip / pytest.xfail "
            "from library code)" for test_id, files in verdict.skipped_by.items() for path in files if path in changed]
    grade.tampering = list(dict.fromkeys([*config, *screen.tampering, *ran]))
    grade.network = verdict.network
    if verdict.outcome is Outcome.HARNESS_ERROR and not ran:
        grade.infra_failure = True
        grade.infra_failure_reason = verdict.reason or "harness error"
    grade.tests_status = grade_statuses(verdict, golden.f2p, golden.p2p)
    grade.resolution = resolution(grade.tests_status)
    grade.resolved = grade.resolution == RESOLVED_FULL and not grade.infra_failure and not grade.tampering
    expected = [i for i in golden.f2p if i in verdict.expected_failures
                or (verdict.tests.get(i) and TestStatus.XFAIL in verdict.tests[i])]
    if expected:
        grade.reason = (f"FAIL_TO_PASS {', '.join(expected[:3])}: an expected failure (XFAIL/XPASS), not a pass "
                        "(coharden's rule; SWE-bench counts XFAIL as a success)") + (f"; {grade.reason}"
                                                                                    if grade.reason else "")
    if grade.tampering:
        grade.reason = "tampering: " + "; ".join(grade.tampering[:3]) + (f"; {grade.reason}" if grade.reason else "")
    if not screen.source.strip():
        grade.reason = "the fix changes only test or configuration files (dropped); " + grade.reason
    return grade


def _plugin_modules(executor: InstanceExecutor) -> list[str]:
    """The modules of the environment's pytest plugins (a fix must not shadow them), none for Docker runs."""
    if executor.image is not None:
        return []
    return [ep.module for ep in environment_plugins(executor.python)]


def grade_test(executor: InstanceExecutor, golden: GoldenTests, test: str | None, options: GradeOptions,
               store: Store | None) -> dict[str, Any]:
    """F->P, MPE class and laxity of one test prediction (an :class:`MPERow` as JSON; ``error`` when not
    classifiable)."""
    instance = executor.instance
    key = eval_test_key(instance_id=instance.instance_id, base_commit=executor.base_commit, fix=instance.patch,
                        reference=golden.reference.patch, reference_ids=golden.reference.ids, candidate=test,
                        environment=executor.env_id, mpe=options.mpe.cache_key())
    cached = store.get_record(CACHE_KIND, key) if store is not None else None
    if cached is not None and not _stale_invalid(cached):
        return cached
    try:
        test_text, dropped = prediction_tests(test, executor.settings.tests.test_patterns)
        candidate = executor.test_patch(test_text, name="candidate")
    except (TestIdError, ApplyError, PatchError) as exc:
        data = MPERow.invalid(str(exc)).to_json()
    else:
        try:
            result = evaluate(executor, MPERequest(instance.patch, candidate, golden.reference, options.mpe))
        except MPEError as exc:  # the golden side is broken: nothing about this test can be concluded
            return {"error": str(exc)}
        row = result.row().model_copy(update={"dropped_source_files": dropped})
        if Outcome.HARNESS_ERROR.value in (row.buggy, row.fixed):
            return {"error": f"harness error: {row.reason}"}  # not cached: a rerun may succeed
        data = row.to_json()
        # the per-mutant rows of ``mpe --json`` (mutant, both verdicts, cell): which wrong fixes the test let
        # through, comparable with ``mpe`` mutant by mutant
        data["mutants"] = result.to_json(timings=False)["mutants"]
    if store is not None:
        store.put_record(CACHE_KIND, key, data)
    return data


def _stale_invalid(row: dict[str, Any]) -> bool:
    """An Invalid row stored before patches fell back to ``patch --fuzz=5`` and reproduction scripts ran (it has
    no ``exec_mode`` key): the test may be gradable now. Grading it again costs little (an Invalid test ran no
    mutant; its verdicts are cached, and an old APPLY_ERROR is tried again)."""
    return row.get("test_class") == "Invalid" and "exec_mode" not in row


def fail_to_pass_only(executor: InstanceExecutor, test: str | None) -> dict[str, Any]:
    """F->P only (no mutants): FAIL on the base, PASS on the golden fix."""
    try:
        test_text, _ = prediction_tests(test, executor.settings.tests.test_patterns)
        candidate = executor.test_patch(test_text, name="candidate")
    except (TestIdError, ApplyError, PatchError) as exc:
        return {"fail_to_pass": False, "buggy": None, "fixed": None, "reason": str(exc)}
    f2p = fail_to_pass(executor, candidate, executor.instance.patch)
    if f2p.harness_error:
        return {"error": f"harness error: {f2p.summary()}"}
    return {"fail_to_pass": f2p.fail_to_pass, "buggy": f2p.buggy.outcome.value, "fixed": f2p.fixed.outcome.value,
            "reason": f2p.summary()}


def own_test(executor: InstanceExecutor, fix: str | None, test: str | None) -> dict[str, Any]:
    """Does a system's fix pass the system's own test? ``usable`` is False when the question has no answer
    (no fix, no usable test, a harness error)."""
    if not (fix or "").strip():
        return {"usable": False, "reason": "no fix"}
    try:
        test_text, _ = prediction_tests(test, executor.settings.tests.test_patterns)
        candidate = executor.test_patch(test_text, name="own")
        source, _ = split_patch(fix or "", executor.settings.tests.test_patterns)
        source = screen_fix(source, executor.base_file, executor.post_images, _plugin_modules(executor)).source
    except (TestIdError, ApplyError, PatchError) as exc:
        return {"usable": False, "reason": f"own test unusable: {exc}"}
    verdict = executor.verdict(source, candidate)
    if verdict.outcome is Outcome.HARNESS_ERROR:
        return {"usable": False, "reason": f"harness error: {verdict.reason}"}
    return {"usable": True, "outcome": verdict.outcome.value, "passed": verdict.passed, "reason": verdict.reason}
