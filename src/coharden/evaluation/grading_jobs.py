"""Grading over many instances: what to grade on each (:class:`InstanceWork`, patches by content), the grades
of each (:class:`InstanceGrades`, read back per prediction by :func:`fix_row` / :func:`test_row`), and the run:
one executor (one workspace) per instance, instances in threads or as engine jobs. The grading rules are in
:mod:`coharden.evaluation.grading`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, TypeVar

from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.evaluation.grading import (
    RESOLVED_FULL,
    FixGrade,
    GradeOptions,
    fail_to_pass_only,
    golden_tests,
    grade_fix,
    grade_test,
    own_test,
)
from coharden.evaluation.inputs import patch_key
from coharden.execution.engine import Engine
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import resolve_repo
from coharden.schema.instance import Instance
from coharden.schema.matrix import NEEDS_NETWORK

_T = TypeVar("_T")


@dataclass
class InstanceWork:
    """What to grade on one instance (patches by content; identical patches are graded once)."""

    fixes: dict[str, str | None] = field(default_factory=dict)  # key -> fix
    tests: dict[str, str | None] = field(default_factory=dict)  # key -> test, full MPE
    fp_tests: dict[str, str | None] = field(default_factory=dict)  # key -> test, F->P only
    own: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # "fixkey:testkey" -> pair

    def add_fix(self, fix: str | None) -> None:
        self.fixes[patch_key(fix)] = fix

    def add_test(self, test: str | None) -> None:
        self.tests[patch_key(test)] = test

    def add_fp_test(self, test: str | None) -> None:
        self.fp_tests[patch_key(test)] = test

    def add_own(self, fix: str | None, test: str | None) -> None:
        self.own[own_key(fix, test)] = (fix, test)

    def size(self) -> int:
        return len(self.fixes) + len(self.tests) + len(self.fp_tests) + len(self.own)


@dataclass(frozen=True)
class Grading:
    """What every instance of one evaluation is graded with: the run's ``settings``, the result ``store`` the
    verdicts and MPE rows are cached in (None: nothing cached), and the grading ``options``."""

    settings: Settings
    store: Store | None
    options: GradeOptions


def own_key(fix: str | None, test: str | None) -> str:
    return f"{patch_key(fix)}:{patch_key(test)}"


@dataclass
class InstanceGrades:
    """Grades of one instance, keyed like :class:`InstanceWork`. ``error``: nothing could be graded."""

    fixes: dict[str, FixGrade] = field(default_factory=dict)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    fp_tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    own: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    fix_error: str | None = None
    """Why no fix of this instance was graded: the golden fix itself is not resolved (a broken environment)."""

    def fix(self, patch: str | None) -> FixGrade | None:
        return self.fixes.get(patch_key(patch))

    def test(self, patch: str | None) -> dict[str, Any] | None:
        return self.tests.get(patch_key(patch))

    def test_fp(self, patch: str | None) -> dict[str, Any] | None:
        """F->P of a test: from its MPE row when it has one, else from the F->P-only run."""
        row = self.tests.get(patch_key(patch))
        return row if row is not None else self.fp_tests.get(patch_key(patch))


def fix_row(grades: Mapping[str, InstanceGrades], iid: str, patch: str | None) -> tuple[FixGrade | None, str | None]:
    """(grade, why there is none)."""
    g = grades.get(iid)
    if g is None:
        return None, "instance not graded"
    if g.error:
        return None, g.error
    if g.fix_error:
        return None, g.fix_error
    grade = g.fix(patch)
    return (grade, None) if grade is not None else (None, "fix not graded")


def test_row(grades: Mapping[str, InstanceGrades], iid: str, patch: str | None) -> dict[str, Any]:
    """The MPE row of a test; ``{"error": ...}`` when it has none."""
    g = grades.get(iid)
    if g is None:
        return {"error": "instance not graded"}
    if g.error:
        return {"error": g.error}
    row = g.test(patch)
    return row if row is not None else {"error": "test not graded"}


def _guarded(run: Callable[..., _T], on_error: Callable[..., _T]) -> _T:
    try:
        return run()
    except CoHardenError as exc:
        return on_error(f"{type(exc).__name__}: {exc}")


def grade_instance(instance: Instance, work: InstanceWork, grading: Grading,
                   progress: Callable[[str], None] | None = None) -> InstanceGrades:
    """Everything ``work`` asks for on one instance, in one executor (one workspace)."""
    grades = InstanceGrades()
    store, options = grading.store, grading.options
    try:
        repo = resolve_repo(instance, grading.settings.repos_dir)
        from coharden.environment.derived import auto_spec_settings

        settings = auto_spec_settings(instance, repo, grading.settings)  # a SWE-bench record: its spec environment
        with InstanceExecutor(instance, repo, settings, store) as executor:
            golden = golden_tests(executor)
            if work.fixes or work.own:
                # the yardstick first: when the golden fix fails its own tests here, no fix grade means anything
                check = grade_fix(executor, golden, instance.patch)
                # the golden fix is trusted: what its run gave decides, not the tampering scan's signs (a helper of
                # the repository's own test support may well call pytest.skip)
                if check.resolution != RESOLVED_FULL or check.infra_failure:
                    failing = check.tests_status["FAIL_TO_PASS"]["failure"] + \
                        check.tests_status["PASS_TO_PASS"]["failure"]
                    network = f"{NEEDS_NETWORK}: " if check.network else ""  # MPE's rule for tests, for fixes
                    grades.fix_error = (f"{network}the golden fix is not resolved here ({check.outcome}: "
                                        f"{check.reason or ', '.join(failing)}): no fix is graded")
            # one broken item (a git or store failure) is recorded on that item; the others are still graded
            for key, fix in work.fixes.items():
                if grades.fix_error is None:
                    grades.fixes[key] = _guarded(lambda f=fix: grade_fix(executor, golden, f),
                                                 lambda why, f=fix: FixGrade(
                                                     patch_exists=bool((f or "").strip()), infra_failure=True,
                                                     infra_failure_reason=why, reason=why))
                if progress:
                    progress("fix")
            for key, test in work.tests.items():
                grades.tests[key] = _guarded(lambda t=test: grade_test(executor, golden, t, options, store),
                                             lambda why: {"error": why})
                if progress:
                    progress("test")
            for key, test in work.fp_tests.items():
                if key not in grades.tests:
                    grades.fp_tests[key] = _guarded(lambda t=test: fail_to_pass_only(executor, t),
                                                    lambda why: {"error": why})
                if progress:
                    progress("fail-to-pass")
            for key, (fix, test) in work.own.items():
                if grades.fix_error is None:
                    grades.own[key] = _guarded(lambda f=fix, t=test: own_test(executor, f, t),
                                               lambda why: {"usable": False, "reason": why})
                if progress:
                    progress("own test")
    except CoHardenError as exc:
        grades.error = f"{type(exc).__name__}: {exc}"
    return grades


def grade_instance_job(instance: Instance, work: InstanceWork, settings: Settings, options: GradeOptions
                       ) -> InstanceGrades:
    """One instance as an engine job (module level, picklable): opens the result store at ``settings.store``
    when it can, so the F->P verdicts and recordings of the golden test are shared by the instance's tests."""
    try:
        store: Store | None = Store(settings.store)
    except OSError:
        store = None
    try:
        return grade_instance(instance, work, Grading(settings, store, options))
    finally:
        if store is not None:
            store.close()


def grade_all(instances: Mapping[str, Instance], work: Mapping[str, InstanceWork], grading: Grading,
              progress: Callable[[str, str], None] | None = None,
              engine: Engine | None = None) -> dict[str, InstanceGrades]:
    """Grade every instance with work; instances run in parallel (``options.workers``), each in its own
    executor, so no two threads share a workspace. With ``engine`` (e.g. Ray) each instance is one job, which
    opens the store at ``settings.store`` itself."""
    settings, options = grading.settings, grading.options
    lock = threading.Lock()

    def task(iid: str) -> tuple[str, InstanceGrades]:
        def step(what: str) -> None:
            if progress:
                with lock:
                    progress(iid, what)

        return iid, grade_instance(instances[iid], work[iid], grading, step)

    todo = [iid for iid in work if iid in instances and work[iid].size()]
    results: dict[str, InstanceGrades] = {}
    if engine is not None:  # e.g. Ray: each job opens the store itself and reports when its instance is done

        def arrived(index: int, grades: InstanceGrades) -> None:
            results[todo[index]] = grades
            if progress:
                with lock:
                    for _ in range(work[todo[index]].size()):
                        progress(todo[index], "graded")

        engine.run([(grade_instance_job, (instances[iid], work[iid], settings, options)) for iid in todo], arrived)
    elif options.workers <= 1 or len(todo) < 2:
        for iid in todo:
            results[iid] = task(iid)[1]
    else:
        with ThreadPoolExecutor(max_workers=options.workers) as pool:
            for future in as_completed([pool.submit(task, iid) for iid in todo]):
                iid, grades = future.result()
                results[iid] = grades
    return {iid: results[iid] for iid in todo}
