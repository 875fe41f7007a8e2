"""Verdicts through InstanceExecutor: real git, real pytest subprocesses, each outcome and each false-pass guard."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.conftest import GOOD_TEST, calc_test_file, make_patch, processes_with

from coharden.execution.executor import InstanceExecutor
from coharden.execution.verify import fail_to_pass
from coharden.schema.instance import Instance
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, TestStatus

# runs as fresh `python -m pytest` processes (when a warm fork server is the default)
FRESH = {"fork_server": False}


@pytest.fixture
def executor(calc_repo, settings):  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    instance = Instance(instance_id="calc", repo=str(repo), base_commit=base)
    with InstanceExecutor(instance, repo, settings) as ex:
        yield ex


def _test(executor: InstanceExecutor, *bodies: str, name: str = "", extra: dict | None = None,
          ids: list[str] | None = None) -> TestPatch:
    repo = executor.workspace.source
    patch = make_patch(repo, {**calc_test_file(*bodies), **(extra or {})})
    return executor.test_patch(patch, name=name, ids=ids)


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_dead(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_fail_to_pass_of_a_good_test(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    test = _test(executor, GOOD_TEST)
    assert test.ids == ["tests/test_calc.py::test_add"]
    result = fail_to_pass(executor, test, calc_fix)
    assert result.buggy.outcome is Outcome.FAIL
    assert result.buggy.tests == {"tests/test_calc.py::test_add": [TestStatus.FAILED]}
    assert "assert -1 == 5" in result.buggy.reason
    assert result.fixed.outcome is Outcome.PASS
    assert result.fixed.tests == {"tests/test_calc.py::test_add": [TestStatus.PASSED]}
    assert result.fail_to_pass
    assert result.admissible
    assert executor.runs == 2
    assert result.to_json()["fail_to_pass"] is True


def test_failing_test_is_fail(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    test = _test(executor, "def test_wrong():\n    assert mul(2, 2) == 5")
    verdict = executor.verdict(calc_fix, test)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.admissible
    assert verdict.tests == {"tests/test_calc.py::test_wrong": [TestStatus.FAILED]}
    assert "tests/test_calc.py::test_wrong" in verdict.reason
    assert "assert 4 == 5" in verdict.reason


def test_parametrized_test_expands_and_any_failing_case_fails(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    body = """\
        import pytest


        @pytest.mark.parametrize("a, b, want", [(1, 1, 2), (0, 0, 0)])
        def test_add_cases(a, b, want):
            assert add(a, b) == want
        """
    test = _test(executor, body)
    buggy = executor.verdict("", test)
    assert buggy.outcome is Outcome.FAIL
    assert sorted(buggy.tests["tests/test_calc.py::test_add_cases"]) == [TestStatus.FAILED, TestStatus.PASSED]
    assert "test_add_cases" in buggy.reason


def test_first_failure_stops_a_lone_test_and_still_fails(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    """For a mutant's cell only pass / fail counts: with ``first_failure`` a test's process stops at its first
    failure (the ids after it are listed as not run) and the verdict is still FAIL; a passing run runs every id;
    the verdicts are stored apart from full ones; a process shared by two tests never stops early."""
    test = _test(executor, "def test_wrong():\n    assert mul(2, 2) == 5", "def test_later():\n    assert True",
                 ids=["tests/test_calc.py::test_wrong", "tests/test_calc.py::test_later"])
    full = executor.verdicts(calc_fix, [test])[0]
    assert full.outcome is Outcome.FAIL
    assert full.tests["tests/test_calc.py::test_later"] == [TestStatus.PASSED]
    early = executor.verdicts(calc_fix, [test], first_failure=True)[0]
    assert early.outcome is Outcome.FAIL
    assert early.admissible
    assert early.tests["tests/test_calc.py::test_later"] == [TestStatus.MISSING]
    assert "stopped at the first failure" in early.reason
    assert executor.key(calc_fix, test) != executor.key(calc_fix, test, first_failure=True)
    assert executor.verdicts(calc_fix, [test])[0].tests == full.tests  # the full verdict, from the store
    passing = _test(executor, GOOD_TEST, "def test_later():\n    assert True",
                    ids=["tests/test_calc.py::test_add", "tests/test_calc.py::test_later"])
    ok = executor.verdicts(calc_fix, [passing], first_failure=True)[0]
    assert ok.outcome is Outcome.PASS
    assert set(ok.tests) == {"tests/test_calc.py::test_add", "tests/test_calc.py::test_later"}
    # trusted tests sharing one process: the first one's failure must not stop the other's tests
    other = test.model_copy(update={"name": "copy", "patch": test.patch + "\n"})
    both = executor.verdicts(calc_fix, [test, other], combine=True, first_failure=True)
    assert [v.tests["tests/test_calc.py::test_later"] for v in both] == [[TestStatus.PASSED]] * 2


def test_nonexistent_test_id_is_collection_error(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    # one id that does not exist among ids that do
    test = _test(executor, GOOD_TEST, ids=["tests/test_calc.py::test_add", "tests/test_calc.py::test_does_not_exist"])
    verdict = executor.verdict(calc_fix, test)
    assert verdict.outcome is Outcome.COLLECTION_ERROR
    assert not verdict.admissible
    assert "test_does_not_exist" in verdict.reason
    # a wanted id in a file that does not exist at all
    ghost = TestPatch(patch=test.patch, ids=["tests/test_ghost.py::test_x"], name="ghost")
    verdict = executor.verdict(calc_fix, ghost)
    assert verdict.outcome is Outcome.COLLECTION_ERROR
    assert "test_ghost.py" in verdict.reason


def test_import_error_in_test_file_is_collection_error(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    broken = {"tests/test_broken.py": "import no_such_module_xyz\n\n\ndef test_x():\n    assert True\n"}
    test = _test(executor, extra=broken)
    assert test.ids == ["tests/test_broken.py::test_x"]
    verdict = executor.verdict(calc_fix, test)
    assert verdict.outcome is Outcome.COLLECTION_ERROR
    assert "no_such_module_xyz" in verdict.reason


def test_syntax_error_in_test_file_is_collection_error(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    patch = make_patch(executor.workspace.source,
                       {"tests/test_syntax.py": "def test_x(:\n    assert True\n"})
    test = TestPatch(patch=patch, ids=["tests/test_syntax.py::test_x"])
    verdict = executor.verdict(calc_fix, test)
    assert verdict.outcome is Outcome.COLLECTION_ERROR
    assert "SyntaxError" in verdict.reason or "invalid syntax" in verdict.reason


def test_hanging_test_times_out_kills_the_group_and_the_run_goes_on(  # type: ignore[no-untyped-def]
    calc_repo, settings, calc_fix, tmp_path
) -> None:
    repo, base = calc_repo
    marker = f"{300 + time.time() % 1:.6f}"  # a unique sleep argument: no process with it may survive
    hanging = f"""\
        def test_hangs():
            import subprocess, time
            child = subprocess.Popen(["sleep", "{marker}"])
            while True:
                time.sleep(0.05)
        """
    instance = Instance(instance_id="calc", repo=str(repo), base_commit=base)
    with InstanceExecutor(instance, repo, settings.with_overrides(timeout=2)) as executor:
        test = _test(executor, hanging)
        verdict = executor.verdict(calc_fix, test)
        assert verdict.outcome is Outcome.TIMEOUT
        assert "time limit" in verdict.reason
        assert not processes_with(marker), "the test's child process survived the timeout"
        # the same executor goes on working
        good = _test(executor, GOOD_TEST)
        assert executor.verdict(calc_fix, good).outcome is Outcome.PASS


def test_fresh_process_runs_keep_the_same_guarantees(calc_repo, settings, calc_fix, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Time limit with the process group killed, no network, sandbox environment - for fresh processes too."""
    repo, base = calc_repo
    marker = f"{300 + time.time() % 1:.6f}"
    hanging = f"""\
        def test_hangs():
            import subprocess, time
            child = subprocess.Popen(["sleep", "{marker}"])
            while True:
                time.sleep(0.05)
        """
    checks = f"""\
        def test_env():
            import os, resource, socket, sys
            assert sys.dont_write_bytecode
            assert resource.getrlimit(resource.RLIMIT_AS)[0] == {settings.sandbox.memory_mb} * 1024 * 1024
            try:
                socket.create_connection(("1.1.1.1", 80), timeout=3).close()
            except OSError as exc:
                assert "unreachable" in str(exc) or "blocked by coharden" in str(exc), exc
            else:
                raise AssertionError("connected")
        """
    instance = Instance(instance_id="calc", repo=str(repo), base_commit=base)
    with InstanceExecutor(instance, repo, settings.with_overrides(timeout=8, **FRESH)) as executor:
        verdicts = executor.verdicts(calc_fix, [_test(executor, hanging), _test(executor, checks, name="checks")])
        assert verdicts[0].outcome is Outcome.TIMEOUT
        assert verdicts[1].outcome is Outcome.PASS, verdicts[1].short()
        assert not processes_with(marker), "the test's child process survived the timeout"


def test_network_access_is_blocked(executor) -> None:  # type: ignore[no-untyped-def]
    body = """\
        def test_net():
            import socket
            socket.create_connection(("1.1.1.1", 80), timeout=3).close()
        """
    verdict = executor.verdict("", _test(executor, body))
    assert verdict.outcome is Outcome.FAIL
    text = verdict.reason.lower()
    assert "unreachable" in text or "blocked by coharden" in text, verdict.reason
    assert "timed out" not in text


def test_sandbox_environment_of_the_test_process(executor, settings) -> None:  # type: ignore[no-untyped-def]
    body = f"""\
        def test_env():
            import os, resource, sys
            assert sys.dont_write_bytecode
            assert os.environ["PYTHONDONTWRITEBYTECODE"] == "1"
            assert resource.getrlimit(resource.RLIMIT_AS)[0] == {settings.sandbox.memory_mb} * 1024 * 1024
            assert resource.getrlimit(resource.RLIMIT_CPU)[0] > 0
            assert os.getpgid(0) == os.getpid()
        """
    verdict = executor.verdict("", _test(executor, body))
    assert verdict.outcome is Outcome.PASS, verdict.reason


def test_skipped_wanted_test_is_fail_not_pass(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    body = """\
        import pytest


        def test_skipped():
            pytest.skip("not today")
        """
    verdict = executor.verdict(calc_fix, _test(executor, body))
    assert verdict.outcome is Outcome.FAIL
    assert verdict.tests == {"tests/test_calc.py::test_skipped": [TestStatus.SKIPPED]}
    assert "not today" in verdict.reason


@pytest.mark.parametrize("code", [1, 2])
def test_nonzero_exit_with_nothing_failed_is_harness_error(executor, calc_fix, code) -> None:  # type: ignore[no-untyped-def]
    hook = f"def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = {code}\n"
    conftest = {"tests/conftest.py": hook}
    test = _test(executor, GOOD_TEST, extra=conftest)
    verdict = executor.verdict(calc_fix, test)
    assert verdict.tests == {}  # no per-test statuses from a run whose exit code contradicts them
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert f"code {code}" in verdict.reason


def test_zero_exit_with_failures_is_harness_error(executor) -> None:  # type: ignore[no-untyped-def]
    conftest = {"tests/conftest.py": "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n"}
    verdict = executor.verdict("", _test(executor, GOOD_TEST, extra=conftest))
    assert verdict.outcome is Outcome.HARNESS_ERROR
    assert "exit code 0" in verdict.reason


def test_test_killing_pytest_is_harness_error(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    body = """\
        def test_kills():
            import os
            os._exit(0)
        """
    verdict = executor.verdict(calc_fix, _test(executor, body))
    assert verdict.outcome is Outcome.HARNESS_ERROR
    assert "no results" in verdict.reason or "ended before it finished" in verdict.reason


# --- combined runs --------------------------------------------------------------------------------------------

def test_candidate_and_reference_share_one_process(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    reference = _test(executor, GOOD_TEST, name="reference")
    candidate = _test(executor, "def test_add_zero():\n    assert add(0, 0) == 0", name="candidate")
    assert set(reference.files) == set(candidate.files) == {"tests/test_calc.py"}
    buggy = executor.verdicts("", [candidate, reference], combine=True)
    assert executor.runs == 1
    assert [v.outcome for v in buggy] == [Outcome.PASS, Outcome.FAIL]
    assert list(buggy[0].tests) == ["tests/test_calc.py::test_add_zero"]
    assert list(buggy[1].tests) == ["tests/test_calc.py::test_add"]
    fixed = executor.verdicts(calc_fix, [reference, candidate], combine=True)
    assert executor.runs == 2
    assert [v.outcome for v in fixed] == [Outcome.PASS, Outcome.PASS]


def test_untrusted_tests_never_share_a_process(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    reference = _test(executor, GOOD_TEST, name="reference")
    candidate = _test(executor, "def test_add_zero():\n    assert add(0, 0) == 0", name="candidate")
    verdicts = executor.verdicts("", [candidate, reference])
    assert executor.runs == 2
    assert [v.outcome for v in verdicts] == [Outcome.PASS, Outcome.FAIL]
    # a combined run is stored under other keys: it never answers for a lone run, nor the reverse
    executor.verdicts("", [candidate, reference], combine=True)
    assert executor.runs == 3


def test_same_test_name_in_both_patches_gets_separate_verdicts(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    reference = _test(executor, GOOD_TEST, name="reference")
    lax = _test(executor, "def test_add():\n    assert add(0, 0) == 0", name="lax")
    assert lax.ids == reference.ids
    verdicts = executor.verdicts("", [reference, lax], combine=True)
    assert executor.runs == 1
    assert [v.outcome for v in verdicts] == [Outcome.FAIL, Outcome.PASS]
    assert list(verdicts[1].tests) == ["tests/test_calc.py::test_add"]


def test_candidate_conftest_does_not_reach_reference(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    skip_all = """\
        import pytest


        def pytest_collection_modifyitems(items):
            for item in items:
                item.add_marker(pytest.mark.skip(reason="skipped by the candidate's conftest"))
        """
    candidate = _test(executor, extra={"tests/conftest.py": skip_all,
                                       "tests/test_cand.py": "def test_cand():\n    assert True\n"})
    assert candidate.ids == ["tests/test_cand.py::test_cand"]
    reference = _test(executor, GOOD_TEST, name="reference")
    for order in ([candidate, reference], [reference, candidate]):
        got = executor.verdicts(calc_fix, order, combine=True)
        verdicts = dict(zip(("candidate", "reference"), got if order[0] is candidate else got[::-1], strict=True))
        assert verdicts["candidate"].outcome is Outcome.FAIL
        assert "skipped by the candidate's conftest" in verdicts["candidate"].reason
        assert verdicts["reference"].outcome is Outcome.PASS, verdicts["reference"].short()
    assert executor.runs == 4  # never in one process


def test_test_patch_that_does_not_apply_gets_apply_error(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    good = _test(executor, GOOD_TEST, name="good")
    # (a stale context line alone applies with the harness's last fallback, patch --fuzz=5: test_apply_fallbacks)
    stale = good.patch.replace("tests/test_calc.py", "tests/test_gone.py")
    bad = TestPatch(patch=stale, ids=["tests/test_gone.py::test_add"], name="stale")
    verdicts = executor.verdicts(calc_fix, [bad, good], combine=True)
    assert verdicts[0].outcome is Outcome.APPLY_ERROR
    assert "tests/test_gone.py" in verdicts[0].reason
    assert verdicts[0].applied_with == {"source": "git apply", "test": "failed"}
    assert verdicts[1].outcome is Outcome.PASS
    assert executor.runs == 1


def test_source_patch_that_does_not_apply(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    test = _test(executor, GOOD_TEST)
    broken_fix = calc_fix.replace("-    return a - b", "-    return a - b - 0")
    verdict = executor.verdict(broken_fix, test)
    assert verdict.outcome is Outcome.APPLY_ERROR
    assert verdict.reason.startswith("source patch: calc/__init__.py")
    assert executor.runs == 0


def test_broken_candidate_does_not_spoil_reference(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    reference = _test(executor, GOOD_TEST, name="reference")
    broken = _test(executor, "import no_such_module_xyz\n\n\ndef test_other():\n    assert True", name="broken")
    verdicts = executor.verdicts("", [broken, reference], combine=True)
    assert verdicts[0].outcome is Outcome.COLLECTION_ERROR
    assert "no_such_module_xyz" in verdicts[0].reason
    assert verdicts[1].outcome is Outcome.FAIL, verdicts[1].short()
    assert executor.runs == 3  # the combined run, then each alone


def test_hanging_candidate_does_not_spoil_reference(calc_repo, settings, calc_fix) -> None:  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    instance = Instance(instance_id="calc", repo=str(repo), base_commit=base)
    with InstanceExecutor(instance, repo, settings.with_overrides(timeout=2)) as executor:
        reference = _test(executor, GOOD_TEST, name="reference")
        hanging = _test(executor, "def test_hang():\n    while True:\n        pass", name="hanging")
        verdicts = executor.verdicts(calc_fix, [hanging, reference])
        assert verdicts[0].outcome is Outcome.TIMEOUT
        assert verdicts[1].outcome is Outcome.PASS, verdicts[1].short()


def test_workspace_is_reused_and_reset_between_jobs(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    writer = """\
        def test_writes_file():
            import os
            assert not os.path.exists("leftover.txt")
            open("leftover.txt", "w").write("x")
        """
    test = _test(executor, writer)
    assert executor.verdict(calc_fix, test).passed
    root = executor.workspace.root
    assert executor.verdict(calc_fix, test).passed  # the file from the first run was cleaned away
    assert executor.workspace.root == root
    assert not any(p.name == "__pycache__" for p in Path(root).rglob("*"))
    assert root.is_dir()


def test_runs_leak_no_file_descriptors(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    """A batch or a test session holds one process for hours: a descriptor leaked per run ends, past 1024, in
    'filedescriptor out of range in select()' for every later verdict."""
    test = _test(executor, "def test_ok():\n    assert True\n")
    assert executor.verdict(calc_fix, test).passed  # the fork server and its pipes exist from here on
    before = len(list(Path("/proc/self/fd").iterdir()))
    for _ in range(5):
        executor.verdict(calc_fix, _test(executor, f"def test_ok_{_}():\n    assert True\n"))
    assert len(list(Path("/proc/self/fd").iterdir())) <= before


def test_a_failure_reason_names_the_exception_and_no_temporary_path(executor, calc_fix) -> None:  # type: ignore[no-untyped-def]
    """The reason is the exception's type and message (what the test raised), with the checkout's temporary path
    cut (it differs from run to run), not the first line of a traceback."""
    test = _test(executor, "def test_where():\n"
                           "    import os\n"
                           "    where = os.path.join(os.getcwd(), 'data', 'x.json')\n"
                           "    raise LookupError('no entry in ' + where + '\\nmore')")
    verdict = executor.verdict(calc_fix, test)
    assert verdict.outcome is Outcome.FAIL
    assert "tests/test_calc.py::test_where: LookupError: no entry in data/x.json" in verdict.reason, verdict.reason
    assert "coharden-ws-" not in verdict.reason
    assert "more" not in verdict.reason
    broken = {"tests/test_broken.py": "import os\nraise ImportError('cannot load ' + os.getcwd() + '/plugin.so')\n\n\n"
                                      "def test_x():\n    assert True\n"}
    verdict = executor.verdict(calc_fix, _test(executor, extra=broken))
    assert "cannot load plugin.so" in verdict.reason, verdict.reason
    assert "coharden-ws-" not in verdict.reason
