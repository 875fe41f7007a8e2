"""Verified reproduction of a real bug: does a test fail on the buggy commit, pass on the patched one, import
the real code under test, and mock nothing but model-client or network boundaries?

The fix is the source part of ``git diff buggy patched`` (test files left out, as in SWE-bench), applied to
the buggy commit by :class:`~coharden.execution.executor.InstanceExecutor`, so both verdicts come from the
same machinery as every other verdict in coharden. Checks:

``fails_on_buggy``     FAIL on the buggy code (an inadmissible outcome such as a collection error is not a
                       reproduction), and, when the issue names one, with the expected exception / message.
``passes_on_patched``  PASS with the fix.
``test_only``          the test patch touches test files only.
``imports_real_code``  the test imports project code (static), and in the run on the patched code every module
                       the fix changes that was imported is a real module loaded from the checkout under test
                       (a probe plugin dumps ``sys.modules`` at session end): not a stub in ``sys.modules``, not
                       a copy installed elsewhere.
``no_mocked_code_under_test``  no mock / monkeypatch targets what the fix changes (:mod:`.mockdetect`).

With a model, :func:`coharden.environment.reproduce_generate.generate_reproduction` writes such a test from the
issue and the buggy code and refines it from these execution results, in bounded attempts, fail-closed on
truncated replies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.environment.mockdetect import (
    MockFinding,
    ProjectIndex,
    changed_symbols,
    find_mocks,
    imported_names,
    module_names,
)
from coharden.environment.mockenv import MockServices, loopback_only_settings, patched_environ
from coharden.errors import CoHardenError, TestIdError
from coharden.execution.docker import CONTAINER_ROOT
from coharden.execution.executor import InstanceExecutor
from coharden.execution.git import git, resolve_commit
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_runner import run_pytest
from coharden.execution.readback import read_text
from coharden.execution.store import Store
from coharden.patches import is_test_path, split_patch, touched_files
from coharden.schema.instance import Instance
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, TestStatus, Verdict

PROBE_MODULE = "coharden_import_probe"
PROBE_OUTPUT = ".coharden-import-probe.json"
_PROBE = '''\
"""coharden: record which modules a pytest session imported, and from where."""
import json, os, sys, types


def pytest_sessionfinish(session):
    out = os.path.join(str(session.config.rootpath), ".coharden-import-probe.json")
    data = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        data[name] = {"real": isinstance(module, types.ModuleType), "file": path if isinstance(path, str) else None}
    with open(out, "w") as handle:
        json.dump(data, handle)
'''


class Expectation(BaseModel):
    """The failure the issue describes (optional): an exception type and / or a message fragment."""

    exception: str | None = None
    message: str | None = None

    def describe(self) -> str:
        parts = [f"exception {self.exception}" if self.exception else "", f"message {self.message!r}"
                 if self.message else ""]
        return " and ".join(p for p in parts if p)

    def judge(self, verdict: Verdict) -> tuple[bool, str]:
        """(ok, detail): did every failing test of ``verdict`` fail with the expected exception (its type, or a
        subclass) and message? Decided from the exceptions the runner recorded per test (the exception objects'
        types, never a search of the output, where the test's own source - ``pytest.raises(ValueError)`` - and
        the traceback text show up too). The message must be part of the raised exception's own message."""
        failing = {test: verdict.raised.get(test, []) for test, statuses in verdict.tests.items()
                   if any(s in (TestStatus.FAILED, TestStatus.ERROR) for s in statuses)}
        if not failing:
            return False, "no failing test to judge"
        for test, raised in failing.items():
            if not raised:
                return False, f"{test}: the runner did not record the exception it raised"
            for exc in raised:
                got = f"{test}: raised {exc.type}" + (f": {exc.message[:200]}" if exc.message else "")
                if self.exception and not exc.is_a(self.exception):
                    return False, f"expected {self.describe()}; {got}"
                if self.message and self.message not in exc.message:
                    return False, f"expected {self.describe()}; {got}"
        first = next(iter(failing.items()))
        return True, f"{first[0]}: raised {first[1][0].type}" + (f" (and {len(failing) - 1} more test(s))"
                                                               if len(failing) > 1 else "")


class Check(BaseModel):
    name: str
    ok: bool
    detail: str = ""


class ReproductionReport(BaseModel):
    accepted: bool
    buggy_commit: str
    patched_commit: str | None = None
    test_ids: list[str] = Field(default_factory=list)
    buggy: Verdict | None = None
    patched: Verdict | None = None
    checks: list[Check] = Field(default_factory=list)
    mocks: list[MockFinding] = Field(default_factory=list)
    imported_project: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)

    def feedback(self) -> str:
        """What to tell a model whose test was rejected."""
        lines = [f"- {c.name}: {c.detail}" for c in self.checks if not c.ok]
        for label, verdict in (("buggy code", self.buggy), ("fixed code", self.patched)):
            if verdict is not None:
                lines.append(f"On the {label} the test gave {verdict.outcome.value}: {verdict.reason[:400]}")
                if verdict.output_tail and verdict.outcome is not Outcome.PASS:
                    lines.append(f"Output tail:\n{verdict.output_tail[-1500:]}")
        return "\n".join(lines)


def fix_between(repo: Path, buggy: str, patched: str, patterns: list[str]) -> tuple[str, str]:
    """(source part, test part) of ``git diff buggy patched``."""
    diff = git(["diff", "--no-color", "--no-ext-diff", "--binary", buggy, patched], repo).stdout
    if not diff.strip():
        raise CoHardenError(f"no difference between {buggy[:12]} and {patched[:12]}")
    return split_patch(diff, patterns)


def project_index(executor: InstanceExecutor, fix: str, patterns: list[str]) -> ProjectIndex:
    """The project's modules at the buggy commit and what ``fix`` changes in them."""
    index = ProjectIndex()
    files = git(["ls-tree", "-r", "--name-only", executor.base_commit], executor.workspace.source).stdout.split()
    for path in files:
        if path.endswith(".py") and not is_test_path(path, patterns) and PurePosixPath(path).name != "setup.py":
            index.modules.update(module_names(path))
    after = executor.post_images(fix) if fix.strip() else {}
    for path in touched_files(fix):
        names = module_names(path)
        if not names:
            continue
        index.changed_modules.update(names)
        symbols = changed_symbols(executor.base_file(path), after.get(path))
        for module in names:
            index.changed_symbols.update(f"{module}.{s}" for s in symbols)
    return index


@contextmanager
def _mock_context(enabled: bool, settings: Settings) -> Iterator[Settings]:
    """Serve the mock model services (env vars in ``os.environ``) around the block when ``enabled``."""
    if not enabled:
        yield settings
        return
    with MockServices() as services, patched_environ(services.env):
        mocked = loopback_only_settings(settings)  # the mock's variables are passed to the tests by name
        yield mocked.with_overrides(pass_env=[*mocked.sandbox.pass_env, *services.env])


def _probe(executor: InstanceExecutor, fix: str, test: TestPatch, index: ProjectIndex) -> tuple[bool, str]:
    """Run the test on the fixed code with the import probe; (ok, detail).

    The probe plugin is written into the checkout's root and loaded with ``-p`` (``python -m pytest`` puts the
    working directory on ``sys.path``), and writes its report there too, so it works unchanged in the Docker
    sandbox, where the checkout is mounted at ``/testbed``."""
    root = executor.workspace_root()
    executor.workspace.reset()
    executor.workspace.apply(fix)
    executor.workspace.apply(test.patch)
    executor.workspace.write(f"{PROBE_MODULE}.py", _PROBE)
    out = root / PROBE_OUTPUT
    out.unlink(missing_ok=True)
    executor.workspace.tainted = True
    # a fresh process, never a fork of a warm server (which would have imported its plugins already)
    run_pytest(root, list(test.ids), executor.settings, ProcessOptions(
        python=executor.python, extra_args=("-p", PROBE_MODULE), image=executor.image, confine=executor.confinement()))
    try:  # the test may have swapped it for a link to a host file or a fifo
        modules: dict[str, dict[str, Any]] = json.loads(read_text(out, anchor=root))
    except FileNotFoundError:
        return False, "the import probe wrote nothing (the test session did not finish)"
    except (OSError, ValueError) as exc:
        return False, f"the import probe's report could not be read safely: {getattr(exc, 'why', exc)}"
    seen_root = Path(CONTAINER_ROOT) if executor.image else root.resolve()
    changed = {m for m in index.changed_modules if m in modules}
    project = sorted(m for m in modules if index.is_project(m) and m in index.modules)
    if not project:
        return False, "the test run imported no project module"
    problems = []
    for name in sorted(changed):
        entry = modules[name]
        if not entry["real"]:
            problems.append(f"{name} is not a real module (replaced in sys.modules)")
        elif entry["file"] is None or not Path(entry["file"]).resolve().is_relative_to(seen_root):
            problems.append(f"{name} was imported from {entry['file']}, not from the checkout under test")
    if problems:
        return False, "; ".join(problems)
    if not changed:
        return True, f"imported project modules {', '.join(project[:5])}; none of the modules the fix changes"
    return True, f"imported the changed module(s) {', '.join(sorted(changed)[:5])} from the checkout"


@dataclass(frozen=True)
class ReproductionJob:
    """The bug a reproduction test is judged against, shared by checking a test and having a model write one:
    ``repo`` with its ``buggy`` commit, the fix as the ``patched`` commit (fix = the source part of the diff) or
    as ``fix`` (a patch against ``buggy``), the failure the issue describes (``expect``), whether the tests run
    against the mock model services (``mock_services``), and whether mocks of anything that is not a model-client
    or network boundary reject the test too (``strict_mocks``)."""

    repo: Path
    buggy: str
    patched: str | None = None
    fix: str | None = None
    expect: Expectation | None = None
    mock_services: bool = False
    strict_mocks: bool = False

    def resolved(self, patterns: list[str]) -> tuple[str, str | None, str]:
        """(buggy commit, patched commit, fix): ``buggy`` resolved, ``patched`` resolved when the fix is taken from
        it (else as given), the fix cut to its source part (``patterns`` say which files are tests)."""
        buggy = resolve_commit(self.repo, self.buggy)
        if self.fix is not None:
            return buggy, self.patched, split_patch(self.fix, patterns)[0]
        if self.patched is None:
            raise CoHardenError("give the patched commit or the fix patch")
        patched = resolve_commit(self.repo, self.patched)
        return buggy, patched, fix_between(self.repo, buggy, patched, patterns)[0]


def check_reproduction(job: ReproductionJob, test_patch: str, settings: Settings, *, store: Store | None = None,
                       test_ids: list[str] | None = None) -> ReproductionReport:
    """Check ``test_patch`` as a reproduction of the bug of ``job`` (the tests ``test_ids``; default: the ones
    the patch adds or changes). ``settings.environment.python`` is the environment's interpreter (see
    :meth:`coharden.environment.build.BuildResult.settings`)."""
    repo = job.repo
    patterns = list(settings.tests.test_patterns)
    buggy, patched, fix = job.resolved(patterns)
    if not fix.strip():
        raise CoHardenError("the fix changes no source file (only tests)")
    report = ReproductionReport(accepted=False, buggy_commit=buggy, patched_commit=patched)
    non_test = [p for p in touched_files(test_patch) if not is_test_path(p, patterns)]
    report.checks.append(Check(name="test_only", ok=not non_test,
                               detail=f"the test patch changes non-test files: {', '.join(non_test)}" if non_test
                               else "the test patch touches test files only"))
    instance = Instance(instance_id="reproduce", repo=str(repo), base_commit=buggy)
    with _mock_context(job.mock_services, settings) as run_settings, \
            InstanceExecutor(instance, repo, run_settings, store) as executor:
        try:
            test = executor.test_patch(test_patch, name="reproduction", ids=test_ids)
        except (TestIdError, CoHardenError) as exc:
            report.checks.append(Check(name="test_ids", ok=False, detail=str(exc)))
            report.reasons.append(str(exc))
            return report
        report.test_ids = test.ids
        index = project_index(executor, fix, patterns)
        report.buggy = executor.verdict("", test)
        report.patched = executor.verdict(fix, test)
        _verdict_checks(report, job.expect)
        _static_checks(report, test, index, job.strict_mocks)
        if report.patched.passed:
            ok, detail = _probe(executor, fix, test, index)
            report.checks.append(Check(name="imports_real_code_at_run_time", ok=ok, detail=detail))
    report.reasons = [f"{c.name}: {c.detail}" for c in report.checks if not c.ok]
    report.accepted = not report.reasons
    return report


def _verdict_checks(report: ReproductionReport, expect: Expectation | None) -> None:
    buggy, patched = report.buggy, report.patched
    assert buggy is not None
    assert patched is not None
    detail = buggy.short()[:400]
    report.checks.append(Check(name="fails_on_buggy", ok=buggy.failed, detail=detail))
    if expect is not None and (expect.exception or expect.message) and buggy.failed:
        ok, detail = expect.judge(buggy)
        report.checks.append(Check(name="expected_failure", ok=ok, detail=detail[:400]))
    report.checks.append(Check(name="passes_on_patched", ok=patched.passed, detail=patched.short()[:400]))


def _static_checks(report: ReproductionReport, test: TestPatch, index: ProjectIndex, strict: bool) -> None:
    imported: list[str] = []
    for path, content in sorted(test.files.items()):
        if content is None or not path.endswith(".py"):
            continue
        imported += [n for n in imported_names(content) if index.is_project(n) and index.module_of(n)]
        report.mocks += find_mocks(path, content, index)
    report.imported_project = list(dict.fromkeys(imported))
    report.checks.append(Check(name="imports_real_code", ok=bool(imported),
                               detail=f"imports {', '.join(report.imported_project[:6])}" if imported
                               else "the test imports no module of the project"))
    bad = [m for m in report.mocks if m.severity == "error" or (strict and m.severity == "warning")]
    report.checks.append(Check(name="no_mocked_code_under_test", ok=not bad, detail="; ".join(
        f"{m.path}:{m.line} {m.call}({m.target!r}): {m.reason}" for m in bad) or
        f"{len(report.mocks)} mock(s), none of the code under test"))
