"""The verdict of a group of test ids in a pytest run (:func:`verdict_for`).

The rules follow the SWE-bench harness's guards against false passes: a wanted test that is skipped or missing
is not a pass; no parsed results, or a non-zero exit code with no failure parsed, is an inadmissible
HARNESS_ERROR and never PASS; a zero exit code with failures parsed is also a HARNESS_ERROR (something printed
or rewrote results).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

from coharden.execution.pytest_results import Case, PytestRun, case_matches, cut, matching_cases
from coharden.execution.testids import runnable_id
from coharden.execution.tracebacks import raised_in, raised_in_short
from coharden.schema import timelimit
from coharden.schema.verdict import Outcome, Raised, TestStatus, Verdict

# pytest exit codes
_EXIT_INTERNAL, _EXIT_USAGE, _EXIT_NO_TESTS = 3, 4, 5


_JUNIT_TYPE = re.compile(r"([A-Za-z_][\w.]*)(?::|$)")


def _raised_of(ran_id: str, matched: list[Case], run: PytestRun) -> list[Raised]:
    """The exceptions the failing cases of ``ran_id`` raised: from the stream where the run streamed (the first
    failing phase of each case), else the type name JUnit's failure message starts with (pytest writes the
    exception's ``Type: message`` there); nothing where neither says."""
    if run.stream is not None:
        base = runnable_id(ran_id)
        first: dict[str, Raised] = {}
        for raised in run.raised():
            if raised.case == ran_id or raised.case == base or raised.case.startswith(base + "["):
                first.setdefault(raised.case, raised)
        return list(first.values())
    found = []
    for case in matched:
        if case.status in (TestStatus.FAILED, TestStatus.ERROR) and (hit := _JUNIT_TYPE.match(case.message)):
            found.append(Raised(case=cut(f"{case.classname}::{case.name}"), type=cut(hit[1]), bases=[cut(hit[1])],
                                message=cut(case.message.partition(":")[2].strip())))
    return found


def _why(case: Case, raised: list[Raised]) -> str:
    """Why one case did not pass, in one line: the exception it raised as ``Type: message`` (from the exception
    object, where the run streamed), else JUnit's message, else its status."""
    found = next((r for r in raised if case_matches(r.case, case)), None)
    if found is not None and case.status in (TestStatus.FAILED, TestStatus.ERROR):
        message = (found.message.strip().splitlines() or [""])[0]
        text = f"{found.type.rpartition('.')[2]}: {message}" if message else found.type.rpartition(".")[2]
    else:
        text = case.message.splitlines()[0] if case.message else case.status.value
    return text


def _tail(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of ``text``, each bounded (a test's output may be one line of megabytes)."""
    return "\n".join(cut(line, 1000) for line in text.strip().splitlines()[-lines:])


# what pytest prints (exit code 4) when a node id on the command line matches nothing
_NOT_FOUND = ("ERROR: not found:", "ERROR: file or directory not found:", "ERROR: file not found:",
              "ERROR: found no collectors for")


def _last_words(output: str, lines: int = 3) -> str:
    """The last non-empty lines of an output nobody parsed, for a reason that must say what went wrong."""
    kept = [line.strip() for line in output.splitlines() if line.strip()][-lines:]
    return (": " + " | ".join(kept))[:400] if kept else ""


def _collection_detail(run: PytestRun) -> str:
    errors = run.collection_errors()
    if not errors:
        return ""
    return f"; collection error in {errors[0].name}: {errors[0].summary()}"


_CONFTEST = re.compile(r"ImportError while loading conftest '(?P<path>[^']+)'")


def _conftest_import_error(output: str) -> str:
    """The reason when pytest stopped because a conftest.py does not import (exit code 4): the code under
    test cannot be imported in this environment - a deterministic collection error, not a harness error."""
    match = _CONFTEST.search(output)
    if not match:
        return ""
    path = match["path"]
    rel = path.split("/repo/", 1)[1] if "/repo/" in path else Path(path).name  # workspace paths vary per run
    errors = [line[1:].strip() for line in output[match.end():].splitlines() if line.startswith("E ")]
    return f"conftest {rel} does not import" + (f": {errors[-1]}" if errors else "")


def verdict_for(ids: list[str], run: PytestRun, *, rename: dict[str, str] | None = None) -> Verdict:
    """The verdict of the group ``ids`` inside ``run``.

    ``rename`` maps an id as it ran (e.g. in a renamed copy of a test file) back to the id reported.
    """
    verdict = _verdict_for(ids, run, rename or {})
    if run.root:  # the checkout is a temporary directory: a reason reads the same in every run, paths relative
        verdict.reason = verdict.reason.replace(run.root.rstrip("/") + "/", "")
    if verdict.tests:
        verdict.expected_failures = _expected_failures(ids, run, rename or {})
        verdict.skipped_by = _skipped_by(ids, run, rename or {})
    verdict.isolation = run.isolation
    verdict.time_limit = run.time_limit
    verdict.cpu_time_limit = run.cpu_time_limit
    return verdict


def _expected_failures(ids: list[str], run: PytestRun, rename: dict[str, str]) -> list[str]:
    """The wanted ids with a case pytest reported as an expected failure (XFAIL or XPASS), from the stream."""
    streamed = run.expected_failures()
    found = []
    for ran_id in ids:
        base = runnable_id(ran_id)
        if any(node == ran_id or node == base or node.startswith(base + "[") for node in streamed):
            found.append(rename.get(ran_id, ran_id))
    return found


def _skipped_by(ids: list[str], run: PytestRun, rename: dict[str, str]) -> dict[str, list[str]]:
    """wanted id -> the files whose code skipped or xfailed one of its calls, from the stream."""
    found: dict[str, list[str]] = {}
    for node, files in run.skip_origins().items():
        for ran_id in ids:
            base = runnable_id(ran_id)
            if node == ran_id or node == base or node.startswith(base + "["):
                reported = rename.get(ran_id, ran_id)
                found[reported] = sorted({*found.get(reported, []), *files})
    return found


def _runner_under_test(run: PytestRun) -> bool:
    """The checkout is pytest's (or pluggy's) own repository: the report machinery is the code under test, and a
    mutant of it that gets reports wrong fails the tests that way (not a report rewritten around them)."""
    root = Path(run.root) if run.root else None
    # a package (its __init__.py is no test file, so a test patch cannot plant one; a fix's is never applied)
    return root is not None and any((root / d / "__init__.py").is_file()
                                    for d in ("src/_pytest", "_pytest", "src/pluggy", "pluggy"))


def _streamed_problem(run: PytestRun) -> tuple[str, list[str]] | None:
    """(reason, tampering notes) when the stream contradicts the exit code or the JUnit file, else None."""
    if run.stream is None or run.timed_out or run.lost or run.disk:
        return None
    started = any("start" in e for e in run.stream)
    if started and not run.session_finished:
        notes = []
        if run.junit_present:
            notes.append(f"{_JUNIT_WRITTEN} although the pytest session never finished (written by a test)")
        if run.returncode == 0:
            notes.append("the process exited with code 0 in the middle of the session (os._exit)")
        if run.returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
            return ("the test process was killed for writing a file over the disk limit (max_file_mb, "
                    f"RLIMIT_FSIZE; exit code {run.returncode})"), notes
        return (f"{_ENDED} (exit code {run.returncode}): a test called os._exit or crashed the interpreter"), notes
    foreign = run.checkout_plugins()
    if foreign:
        return "a pytest plugin of the checkout ran (package metadata with a pytest11 entry point)", foreign[:5]
    rewritten = [] if _runner_under_test(run) else run.rewritten_reports()
    if rewritten:
        return "pytest's reports contradict what the tests' calls did (results rewritten)", rewritten[:5]
    if run.junit_ok and run.stream:
        streamed = run.streamed_outcomes()
        for node, passed in streamed.items():
            matched = [c for c in run.cases if case_matches(node, c)]
            junit_passed = bool(matched) and all(c.status in (TestStatus.PASSED, TestStatus.XFAIL) for c in matched)
            if matched and junit_passed != passed:
                note = (f"the JUnit file says {node} {'passed' if junit_passed else 'did not pass'}, "
                        f"pytest reported it {'passed' if passed else 'not passed'} (results rewritten)")
                return "JUnit results contradict pytest's own reports", [note]
    return None


def _verdict_for(ids: list[str], run: PytestRun, rename: dict[str, str]) -> Verdict:
    base: dict[str, Any] = {"duration": run.duration, "output_tail": _tail(run.output)}
    inadmissible = _run_verdict(run, rename, base)
    if inadmissible is not None:
        return inadmissible
    tests: dict[str, list[TestStatus]] = {}
    raised: dict[str, list[Raised]] = {}
    messages: list[str] = []
    for ran_id in ids:
        reported = rename.get(ran_id, ran_id)
        matched = matching_cases(ran_id, run.cases)
        tests[reported] = [c.status for c in matched] or [TestStatus.MISSING]
        if any(c.status in (TestStatus.FAILED, TestStatus.ERROR) for c in matched):
            raised[reported] = _raised_of(ran_id, matched, run)
        messages += [f"{reported}: "
                     + (f"[the test reached for the network: {hint}] " if (hint := c.network_hint()) else "")
                     + _why(c, raised.get(reported, []))
                     for c in matched if c.status not in (TestStatus.PASSED, TestStatus.XFAIL)][:3]
    missing = [i for i, st in tests.items() if st == [TestStatus.MISSING]]
    bad = {TestStatus.FAILED, TestStatus.ERROR, TestStatus.SKIPPED}
    failed = any(c.status in (TestStatus.FAILED, TestStatus.ERROR) for c in run.cases)
    if missing and run.first_failure and failed and run.returncode == 1:
        # pytest -x stopped at a failure: the verdict is FAIL whatever the ids it did not run would have done
        reason = "; ".join(messages)[:400] + f" (stopped at the first failure; {len(missing)} ids not run)"
        return Verdict(outcome=Outcome.FAIL, reason=reason, tests=tests, raised=raised, **base)
    if missing:
        reason = f"test ids not run: {', '.join(missing)}{_collection_detail(run)}"
        return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=reason, tests=tests, **base)
    if any(s in bad for statuses in tests.values() for s in statuses):
        failing = [c for ran_id in ids for c in matching_cases(ran_id, run.cases)
                   if c.status in (TestStatus.FAILED, TestStatus.ERROR)]
        skipped = any(s in (TestStatus.SKIPPED, TestStatus.MISSING) for statuses in tests.values() for s in statuses)
        network = bool(failing) and not skipped and all(c.reached_network() for c in failing)
        return Verdict(outcome=Outcome.FAIL, reason="; ".join(messages)[:500], tests=tests, raised=raised,
                       network=network, **base)
    return Verdict(outcome=Outcome.PASS, tests=tests, **base)


def _run_verdict(run: PytestRun, rename: dict[str, str], base: dict[str, Any]) -> Verdict | None:
    """The verdict of the whole run when it has no per-test results to grade (killed, lost, tampered with, a
    usage error, unreadable or contradictory results), else None."""
    if run.disk:
        # coharden killed it (the disk limit): whatever it reported is not its result. A HARNESS_ERROR, never
        # stored: the verdict is inadmissible for MPE, like a TIMEOUT, and a later run is graded afresh
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=run.disk, **base)
    if run.lost:
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=run.lost,
                       tampering=[run.tampering] if run.tampering else [], **base)
    if run.replaced:
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason="a test replaced files the grader reads back (with a "
                       "link or a fifo): the run has no result", tampering=list(run.replaced), **base)
    if run.oversize:  # the run's own report is over the grader's limit: it has no result the grader read
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=run.oversize, **base)
    if run.timed_out:
        return Verdict(outcome=Outcome.TIMEOUT, reason=_timeout_reason(run, rename), **base)
    problem = _streamed_problem(run)
    if problem is not None:
        reason, notes = problem
        crashed = _raised_in_code(run) if reason.startswith(_ENDED) else None
        if crashed:  # the code under test ended the session (pytest-5692's mutants of pytest's own junitxml)
            notes = [n for n in notes if not n.startswith(_JUNIT_WRITTEN)]  # its JUnit plugin had finished first
            return Verdict(outcome=Outcome.COLLECTION_ERROR, reason="the code under test broke pytest's session "
                           f"(exit code {run.returncode}): {crashed}", tampering=notes, **base)
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, tampering=notes, **base)
    if run.returncode == _EXIT_USAGE:
        # a wanted id that does not exist, or whose module cannot be imported: pytest stops before running
        # anything (whether or not it still writes an empty JUnit file)
        missing = [line.strip() for line in run.output.splitlines() if line.strip().startswith(_NOT_FOUND)]
        if missing:
            reason = "; ".join(missing[:3]) + _collection_detail(run)
            return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=reason, **base)
        conftest = _conftest_import_error(run.output)
        if conftest:
            return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=conftest, **base)
        reason = "pytest usage error (exit code 4)" + _last_words(run.output)
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, **base)
    crashed = _internal_error_in_code(run)
    if crashed:
        return Verdict(outcome=Outcome.COLLECTION_ERROR, reason="the code under test broke pytest's session "
                       f"before any test ran (exit code {run.returncode}): {crashed}", **base)
    if not run.junit_ok:
        reason = f"pytest produced no results (exit code {run.returncode})"
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, **base)
    any_failure = any(c.status in (TestStatus.FAILED, TestStatus.ERROR) for c in run.cases)
    if run.returncode not in (0, 1, 2, _EXIT_NO_TESTS):
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=f"pytest exited with code {run.returncode}", **base)
    if run.returncode == 0 and any_failure:
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason="exit code 0 but failures were reported", **base)
    if run.returncode in (1, 2) and not any_failure:
        # 2: the session was interrupted (pytest.exit, KeyboardInterrupt) - results may be incomplete
        reason = f"exit code {run.returncode} but no failure was parsed"
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, **base)
    return None


_ENDED = "the pytest session ended before it finished"
_JUNIT_WRITTEN = "a JUnit file exists"


def _raised_in_code(run: PytestRun) -> str | None:
    """The error line of the traceback that ended the run (exit code 1, or 3 with INTERNALERROR) when it was
    raised in the checkout's code, else None."""
    if not run.root or run.returncode not in (1, _EXIT_INTERNAL):
        return None
    marker = "INTERNALERROR> "
    text = "\n".join(line[len(marker):] if line.startswith(marker) else line for line in run.output.splitlines())
    return raised_in(text, Path(run.root)) or raised_in_short(text, Path(run.root))


def _internal_error_in_code(run: PytestRun) -> str | None:
    """The error that ended pytest's session before any result, when it was raised in the checkout's code: a
    mutant of a plugin the repository's ``conftest.py`` loads (sphinx-11445: ``sphinx.testing.fixtures`` no
    longer imports; exit code 1 in a fresh process, 3 with INTERNALERROR in a fork), or of pytest itself on
    pytest's repository. No test ran, as when a test module does not import, and a rerun would not change that.
    None for any other run."""
    if not (run.returncode == _EXIT_INTERNAL or (run.returncode == 1 and not run.junit_ok)):
        return None
    return _raised_in_code(run)


def _timeout_reason(run: PytestRun, rename: dict[str, str]) -> str:
    """Which limit a timed-out run exceeded, and the test running at the limit."""
    hung = run.hung_test()
    hung = rename.get(hung, hung) if hung else None
    if run.cpu_limited:
        reason = f"test process exceeded the CPU time limit ({run.time_limit:g} s) and was killed"
    elif run.cpu_time_limit and run.time_limit:
        reason = (f"test process ran {timelimit.LOAD_MARGIN:g} x its time limit ({run.time_limit:g} s of CPU "
                  "time) on the wall clock and was killed")
    elif run.time_limit:
        reason = f"test process exceeded the time limit ({run.time_limit:g} s) and was killed"
    else:
        reason = "test process exceeded the time limit and was killed"
    if hung:
        reason += f"; running at the limit: {hung}"
    return reason
