"""Run pytest node ids in a sandboxed subprocess and turn JUnit XML into verdicts.

The verdict rules follow the SWE-bench harness's guards against false passes: a wanted test that is
skipped or missing is not a pass; no parsed results, or a non-zero exit code with no failure parsed, is an
inadmissible HARNESS_ERROR and never PASS; a zero exit code with failures parsed is also a HARNESS_ERROR
(something printed or rewrote results).
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from coharden.config import Settings
from coharden.execution.sandbox import run_limited
from coharden.schema.verdict import Outcome, TestStatus, Verdict

# pytest exit codes
_EXIT_INTERNAL, _EXIT_USAGE, _EXIT_NO_TESTS = 3, 4, 5


@dataclass
class Case:
    classname: str
    name: str
    status: TestStatus
    message: str = ""


@dataclass
class PytestRun:
    returncode: int | None
    timed_out: bool
    duration: float
    output: str
    cases: list[Case] = field(default_factory=list)
    junit_ok: bool = False
    isolation: str = "none"

    def collection_errors(self) -> list[Case]:
        # with --continue-on-collection-errors pytest reports a broken module as an <error> case whose
        # classname is empty and whose name is the module path (dotted)
        return [c for c in self.cases if c.status is TestStatus.ERROR and not c.classname]


def split_node_id(node_id: str) -> tuple[str, list[str], str]:
    """'a/b/test_x.py::C::test_m[p]' -> ('a/b/test_x.py', ['C'], 'test_m[p]')."""
    path, *rest = node_id.split("::")
    if not rest:
        return path, [], ""
    return path, rest[:-1], rest[-1]


def junit_classname(node_id: str) -> str:
    path, classes, _ = split_node_id(node_id)
    module = path[:-3] if path.endswith(".py") else path
    return ".".join([module.replace("/", "."), *classes])


def _matches(node_id: str, case: Case) -> bool:
    _, _, name = split_node_id(node_id)
    if case.classname != junit_classname(node_id):
        return False
    return case.name == name or ("[" not in name and case.name.startswith(name + "["))


def parse_junit(path: Path) -> list[Case] | None:
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return None
    cases: list[Case] = []
    for tc in root.iter("testcase"):
        status = TestStatus.PASSED
        message = ""
        for child in tc:
            if child.tag == "failure":
                status, message = TestStatus.FAILED, child.get("message", "") or (child.text or "")
            elif child.tag == "error":
                status, message = TestStatus.ERROR, child.get("message", "") or (child.text or "")
            elif child.tag == "skipped":
                kind = child.get("type", "")
                status = TestStatus.XFAIL if kind == "pytest.xfail" else TestStatus.SKIPPED
                message = child.get("message", "")
        # a failing teardown adds a second <testcase> with the same name; keep the worst one
        cases.append(Case(tc.get("classname", ""), tc.get("name", ""), status, message.strip()))
    return cases


def run_pytest(root: Path, ids: list[str], settings: Settings, python: str | None = None, *,
               extra_args: list[str] | None = None, extra_env: dict[str, str] | None = None) -> PytestRun:
    """Run ``ids`` with ``python -m pytest`` from ``root``; results come from a JUnit XML file outside it."""
    with tempfile.TemporaryDirectory(prefix="coharden-junit-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [
            python or settings.python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--rootdir={root}",
            "-o",
            "junit_family=xunit1",
            f"--junitxml={junit}",
            "--continue-on-collection-errors",
            "-q",
            "--no-header",
            "-rN",
            *settings.pytest_args,
            *(extra_args or []),
            *ids,
        ]
        env = dict(os.environ)
        env.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "NO_COLOR": "1"})
        env.update(extra_env or {})
        env.pop("PYTEST_ADDOPTS", None)
        env.pop("PYTEST_CURRENT_TEST", None)
        cpu = settings.cpu_seconds or int(settings.timeout * 2) + 1
        proc = run_limited(
            cmd,
            root,
            timeout=settings.timeout,
            env=env,
            memory_mb=settings.memory_mb,
            cpu_seconds=cpu,
            network=settings.network,
        )
        cases = parse_junit(junit) if junit.exists() else None
    return PytestRun(
        returncode=proc.returncode,
        timed_out=proc.timed_out,
        duration=proc.duration,
        output=proc.output,
        cases=cases or [],
        junit_ok=cases is not None,
        isolation=proc.isolation,
    )


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def verdict_for(ids: list[str], run: PytestRun, *, rename: dict[str, str] | None = None) -> Verdict:
    """The verdict of the group ``ids`` inside ``run``.

    ``rename`` maps an id as it ran (e.g. in a renamed copy of a test file) back to the id reported.
    """
    rename = rename or {}
    base = {"duration": run.duration, "output_tail": _tail(run.output)}
    if run.timed_out:
        return Verdict(outcome=Outcome.TIMEOUT, reason="test process exceeded the time limit and was killed", **base)
    if not run.junit_ok:
        if run.returncode == _EXIT_USAGE and "not found" in run.output:
            missing = [line.strip() for line in run.output.splitlines() if "not found" in line]
            return Verdict(outcome=Outcome.COLLECTION_ERROR, reason="; ".join(missing[:3]), **base)
        reason = f"pytest produced no results (exit code {run.returncode})"
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, **base)
    any_failure = any(c.status in (TestStatus.FAILED, TestStatus.ERROR) for c in run.cases)
    if run.returncode not in (0, 1, 2, _EXIT_NO_TESTS):
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=f"pytest exited with code {run.returncode}", **base)
    if run.returncode == 0 and any_failure:
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason="exit code 0 but failures were reported", **base)
    if run.returncode == 1 and not any_failure:
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason="exit code 1 but no failure was parsed", **base)

    tests: dict[str, list[TestStatus]] = {}
    messages: list[str] = []
    for ran_id in ids:
        reported = rename.get(ran_id, ran_id)
        matched = [c for c in run.cases if _matches(ran_id, c)]
        tests[reported] = [c.status for c in matched] or [TestStatus.MISSING]
        messages += [f"{reported}: {c.message.splitlines()[0] if c.message else c.status.value}"
                     for c in matched if c.status not in (TestStatus.PASSED, TestStatus.XFAIL)][:3]
    missing = [i for i, st in tests.items() if st == [TestStatus.MISSING]]
    if missing:
        errors = [c for c in run.collection_errors()]
        detail = f"; collection error: {errors[0].message.splitlines()[0] if errors[0].message else errors[0].name}" \
            if errors else ""
        return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=f"test ids not run: {', '.join(missing)}{detail}",
                       tests=tests, **base)
    bad = {TestStatus.FAILED, TestStatus.ERROR, TestStatus.SKIPPED}
    if any(s in bad for statuses in tests.values() for s in statuses):
        return Verdict(outcome=Outcome.FAIL, reason="; ".join(messages)[:500], tests=tests, **base)
    return Verdict(outcome=Outcome.PASS, tests=tests, **base)
