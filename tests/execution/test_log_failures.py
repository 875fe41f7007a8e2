"""The failure sections of sympy's ``bin/test`` and of unittest (Django's ``runtests.py``) read into each failing
test's exceptions, on the output of real runs (``tests/fixtures/logs/``, whose README says how each was made)."""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

import pytest
from tests.conftest import make_patch, make_repo, run_git

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.log_failures import django_failures, in_checkout, script_failure, sympy_failures
from coharden.execution.log_parsers import parse_django_log, parse_sympy_log
from coharden.execution.log_runs import verdict_from_log
from coharden.execution.store import verdict_key
from coharden.execution.verdict_cache import VerdictCache
from coharden.schema.instance import Instance
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Raised, TestStatus, Verdict

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
DEMO = "sympy/core/tests/test_zz_demo.py"


def _log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def _seen(found: dict[str, list[Raised]]) -> dict[str, list[tuple[str, str, str]]]:
    return {test: [(r.type, r.message, r.where) for r in raised] for test, raised in found.items()}


#: what the demo tests raised, and where in their file (tests/fixtures/logs/README.md has the file)
DEMO_RAISED = {
    "test_bare_assert": [("AssertionError", "", f"{DEMO}:14: assert x + x == 3*x")],
    "test_assert_in_helper": [("AssertionError", "", f"{DEMO}:5: assert value > 0")],
    "test_assert_message": [("AssertionError", "one is not two", f'{DEMO}:37: assert 1 == 2, "one is not two"')],
    "test_value_error": [("ValueError", "bad value for the demo:\nsecond line of the message",
                          f'{DEMO}:22: raise ValueError("bad value for the demo:\\nsecond line of the message")')],
    # raised in sympy's code: where the test called it
    "test_sympify_error": [("sympy.core.sympify.SympifyError", "SympifyError: 'x +* 2'",
                            f'{DEMO}:26: sympify("x +* 2", strict=True)')],
    # a chain: the last exception
    "test_chained": [("TypeError", "while handling a missing key",
                      f'{DEMO}:33: raise TypeError("while handling a missing key")')],
}


def test_each_failing_sympy_test_gets_its_exception_and_the_place_in_its_file_that_raised() -> None:
    found = sympy_failures(_log("sympy_1_15_demo.txt"))
    assert _seen(found) == DEMO_RAISED
    assert found["test_bare_assert"][0].case == f"{DEMO}::test_bare_assert"
    assert found["test_value_error"][0].bases == ["ValueError"]
    # every failing test the status parser reads has its exception, and nothing else has one
    failing = {t for t, s in parse_sympy_log(_log("sympy_1_15_demo.txt")).items() if s is not TestStatus.PASSED}
    assert set(found) == failing


def test_every_bin_test_format_reads_alike() -> None:
    """sympy 1.9 heads a failure ``path:name`` (1.12 on: ``path::name``); 1.0 and 1.1 print no ``Traceback`` line;
    the checkout's own directory differs. None of it changes what a test is seen to raise."""
    assert _seen(sympy_failures(_log("sympy_1_9_demo.txt"))) == DEMO_RAISED
    old = _seen(sympy_failures(_log("sympy_1_1_sections.txt")))
    assert old == {test: DEMO_RAISED[test] for test in old}
    assert len(old) == 4


def test_a_header_longer_than_the_terminal_and_a_test_that_printed_are_read() -> None:
    long_name = "test_a_rather_long_test_name_that_pushes_the_header_past_the_terminal_width"
    found = _seen(sympy_failures(_log("sympy_1_15_long_name.txt")))
    assert found == {
        "test_two_asserts": [("AssertionError", "", "sympy/core/tests/test_zz_two.py:12: "
                              'assert half.p == (1 if _wrong() != "first" else 2)')],
        long_name: [("AssertionError", "", "sympy/core/tests/test_zz_two.py:18: assert False")]}


def test_a_test_file_that_failed_to_import_names_no_test() -> None:
    assert sympy_failures(_log("sympy_1_15_import_error.txt")) == {}


MATH = "demo_app.tests.MathTests"


def test_unittest_sections_are_read_under_every_id_the_status_parser_gives() -> None:
    log = _log("unittest_demo.txt")
    found = django_failures(log)
    failing = {t for t, s in parse_django_log(log).items() if s in (TestStatus.FAILED, TestStatus.ERROR)}
    assert failing <= set(found)
    helper = found[f"test_fails_in_helper ({MATH}.test_fails_in_helper)"]
    assert [(r.type, r.message, r.where) for r in helper] == [
        ("AssertionError", "5 != 4", "demo_app/tests.py:6: self.assertEqual(total, 4)")]
    assert found[f"test_fails_in_helper ({MATH})"] == found["test_fails_in_helper"] == helper  # the other forms
    documented = found["A test with a docstring: unittest shows its first line."]
    assert documented == found[f"test_documented ({MATH})"]
    assert documented[0].message == "'a' not found in 'bcd'"
    assert found[f"test_chained ({MATH})"][0].type == "RuntimeError"  # 'The above exception was the direct cause'
    assert found[f"test_bare_assert ({MATH})"][0].where == "demo_app/tests.py:19: assert x == 4"
    assert found[f"test_errors ({MATH})"][0].message == "bad value\nwith a second line"
    assert found[f"test_fails ({MATH})"][0].message.startswith("Lists differ: [1, 2, 3] != [1, 2, 4]\n\n")
    # a subTest's failures: each under its own description, and all under its test's
    subtests = found[f"test_subtests ({MATH})"]
    assert [r.case for r in subtests] == [f"test_subtests ({MATH}.test_subtests) (i={i})" for i in (1, 2)]
    assert [r.message for r in subtests] == ["1 not less than 1", "2 not less than 1"]
    assert found[f"test_subtests ({MATH}.test_subtests) (i=2)"] == subtests[1:]


def test_a_real_runtests_failure_is_read_under_both_description_forms() -> None:
    found = django_failures(_log("django_runtests_tail.txt"))
    raised = [("AssertionError", "'Hello' != 'Hello!'\n- Hello\n+ Hello!\n?      +",
               "str/tests.py:14: self.assertEqual(capfirst('hello'), 'Hello!')")]
    for test in ("test_coharden_probe (str.tests.SimpleTests)",
                 "test_coharden_probe (str.tests.SimpleTests.test_coharden_probe)"):
        assert _seen({test: found[test]}) == {test: raised}


def test_unittest_sections_of_python_before_3_11_read_alike() -> None:
    """Before Python 3.11 unittest describes a test ``test_x (module.Class)``; the same output in that form."""
    log = _log("unittest_demo.txt")
    names = ["test_bare_assert", "test_chained", "test_documented", "test_errors", "test_fails",
             "test_fails_in_helper", "test_passes", "test_subtests"]
    for name in names:
        log = log.replace(f"({MATH}.{name})", f"({MATH})")
    found, new = django_failures(log), django_failures(_log("unittest_demo.txt"))
    for name in names[:-2]:
        old_id, new_id = f"{name} ({MATH})", f"{name} ({MATH}.{name})"
        assert _seen({"t": found[old_id]}) == _seen({"t": found[new_id]}) == _seen({"t": new[new_id]}), name


def test_output_cut_short_or_garbled_gives_what_it_shows_and_never_raises() -> None:
    log = _log("sympy_1_15_demo.txt")
    # cut before its chain's last exception, test_chained shows the first
    printed = {**DEMO_RAISED, "test_chained": [*DEMO_RAISED["test_chained"],
                                               ("KeyError", "'missing'", f"{DEMO}:31: {{}}['missing']")]}
    for end in range(0, len(log), 3):  # cut anywhere: never an error, only what was printed up to the cut
        for test, raised in sympy_failures(log[:end]).items():
            assert len(raised) == 1
            assert any(kind.startswith(raised[0].type) and where.startswith(raised[0].where)
                       for kind, _, where in printed[test]), raised
    unittest_log = _log("unittest_demo.txt")
    for end in range(0, len(unittest_log), 7):
        django_failures(unittest_log[:end])
    # cut after the failing frame: its section shows no exception, so the test has none
    bare = log.index("AssertionError", log.index("::test_bare_assert"))
    assert "test_bare_assert" not in sympy_failures(log[:bare])
    # a section with no traceback at all, a header alone, odd lines
    odd = ("_" * 80 + "\n" + "_" * 20 + " sympy/a/tests/test_a.py:test_x " + "_" * 20 + "\nsomething else\n"
           + "_" * 80 + "\n" + "___ sympy/a/tests/test_a.py::test_y ___\n" + "_" * 80 + "\n"
           + "=" * 70 + "\nERROR: test_z (app.tests.T)\n" + "=" * 70 + "\nFAIL: \n" + "-" * 70 + "\n  File \"x\n")
    assert sympy_failures(odd) == {}
    assert django_failures(odd) == {}
    assert sympy_failures("") == {}
    assert django_failures("\x00" * 100) == {}


def test_a_long_message_is_capped() -> None:
    section = (f"{'_' * 80}\n___ {DEMO}::test_bare_assert ___\nTraceback (most recent call last):\n"
               f'  File "/x/{DEMO}", line 14, in test_bare_assert\n    assert {"y" * 5000}\n'
               f"AssertionError: {'x' * 1_000_000}\n{'z' * 100_000}\n")
    raised = sympy_failures(section)["test_bare_assert"][0]
    assert 4000 < len(raised.message) < 5000
    assert 400 < len(raised.where) < 600


def test_verdict_from_log_records_the_exceptions_of_the_wanted_tests_that_failed() -> None:
    log = _log("sympy_1_15_demo.txt")
    ids = ["test_passes", "test_bare_assert", "test_value_error"]
    verdict = verdict_from_log(ids, parse_sympy_log(log), output=log, returncode=1, timed_out=False, duration=1.0,
                               runner="sympy", failures=sympy_failures(log))
    assert verdict.outcome is Outcome.FAIL
    assert _seen(verdict.raised) == {t: DEMO_RAISED[t] for t in ids[1:]}
    passing = verdict_from_log(ids[:1], parse_sympy_log(log), output=log, returncode=1, timed_out=False,
                               duration=1.0, runner="sympy", failures=sympy_failures(log))
    assert passing.passed
    assert passing.raised == {}
    stored = Verdict.model_validate_json('{"outcome": "FAIL", "raised": {"t": [{"case": "t", "type": "E"}]}}')
    assert stored.raised["t"][0].where == ""  # a verdict stored before ``where`` existed still reads


_FAKE_BIN_TEST = '''\
import os, sys
for path in [a for a in sys.argv[1:] if a.endswith(".py")]:
    print(path + "[1] ")
    print("test_settings F")
for path in [a for a in sys.argv[1:] if a.endswith(".py")]:
    print("_" * 80)
    print(" %s::test_settings " % path)
    print("Traceback (most recent call last):")
    print('  File "%s", line 2, in test_settings' % os.path.abspath(path))
    print("    assert 1 == 2")
    print("AssertionError")
sys.exit(1)
'''


def test_a_test_patch_s_verdict_has_the_exceptions_under_its_own_ids(tmp_path: Path) -> None:
    """bin/test reports bare names; the verdict is under the test patch's ``path::name`` ids, its exceptions too."""
    repo, _ = make_repo(tmp_path / "repo", {"bin/test": _FAKE_BIN_TEST, "pkg/tests/test_a.py": ""})
    test_patch = make_patch(repo, {"pkg/tests/test_a.py": "def test_settings():\n    assert 1 == 2\n"})
    instance = Instance(instance_id="acme__raised-1", repo=str(repo), base_commit="HEAD", test_patch=test_patch,
                        FAIL_TO_PASS=["test_settings"])
    settings = Settings(python=sys.executable, runner="sympy", fork_server=False, timeout=60)
    with InstanceExecutor(instance, repo, settings) as executor:
        golden = executor.golden_test()
        verdict = executor.verdict("", golden)
    own = "pkg/tests/test_a.py::test_settings"
    assert golden.ids == [own]
    assert verdict.failed, verdict.reason
    assert verdict.raised == {own: [Raised(case=own, type="AssertionError", bases=["AssertionError"],
                                           where="pkg/tests/test_a.py:2: assert 1 == 2")]}


def test_a_log_runner_s_verdicts_stored_before_its_failures_were_read_are_not_reused() -> None:
    test = TestPatch(patch="diff", ids=["test_x"])
    keys = {runner: VerdictCache(None, "o/r", "abc", "env", runner, 60.0).key("fix", test)
            for runner in ("pytest", "sympy", "django")}
    before = verdict_key(repo="o/r", base_commit="abc", source_patch="fix", test_patch="diff", test_ids=["test_x"],
                         environment="env")
    assert keys["pytest"] == before  # pytest's verdicts had their exceptions already
    assert before not in (keys["sympy"], keys["django"])


SYMPY = Path(os.environ.get("COHARDEN_REPOS", "/work/repos")) / "sympy__sympy"
SYMPY_PY = Path(os.environ.get("COHARDEN_SYMPY_PYTHON") or "/nonexistent")  # with mpmath
needs_sympy = pytest.mark.skipif(not (SYMPY / "bin" / "test").is_file() or not SYMPY_PY.exists(),
                                 reason="set COHARDEN_REPOS to a directory with a sympy__sympy clone and "
                                        "COHARDEN_SYMPY_PYTHON to a Python with mpmath")


@needs_sympy
def test_a_real_bin_test_run_records_which_assert_failed(tmp_path: Path) -> None:
    """Two bare asserts of one test, on a real sympy checkout through the executor: the verdict says which one
    failed (the line of the test's file and its source), and the run's other test that passed has nothing."""
    commit = run_git(SYMPY, "rev-list", "-1", "--before=2021-06-01", "HEAD").strip()  # its own runner, mpmath only
    path = "sympy/core/tests/test_singleton.py"
    original = run_git(SYMPY, "show", f"{commit}:{path}")
    added = "\n\ndef test_coharden_probe():\n    assert S.One == 1\n    assert S.Half == 1\n"
    lines = len((original + added).splitlines())
    body = difflib.unified_diff(original.splitlines(True), (original + added).splitlines(True), f"a/{path}",
                                f"b/{path}")
    instance = Instance(instance_id="sympy__raised", repo=str(SYMPY), base_commit=commit,
                        test_patch=f"diff --git a/{path} b/{path}\n" + "".join(body),
                        FAIL_TO_PASS=["test_coharden_probe"])
    settings = Settings(python=str(SYMPY_PY), runner="sympy", fork_server=False, timeout=300)
    with InstanceExecutor(instance, SYMPY, settings) as executor:
        golden = executor.golden_test()
        verdict = executor.verdict("", golden)
    own = f"{path}::test_coharden_probe"
    assert verdict.failed, verdict.reason + verdict.output_tail
    assert _seen(verdict.raised) == {own: [("AssertionError", "", f"{path}:{lines}: assert S.Half == 1")]}


_SCRIPT_DIED = """\
Symbolic: sin(x)*sin(y) + cos(x)*cos(y) -> cos(x - y)
Traceback (most recent call last):
  File "{root}/test_reproduce.py", line 53, in <module>
    test_rational_trig_simplification()
  File "{root}/test_reproduce.py", line 38, in test_rational_trig_simplification
    assert r_rational_simplified == expected, f"Expected {{expected}}, got {{r_rational_simplified}}"
  File "{root}/sympy/core/basic.py", line 9, in __eq__
    raise FileNotFoundError("{root}/sympy/data.txt")
FileNotFoundError: {root}/sympy/data.txt
"""


def test_a_script_s_exception_reads_the_same_in_every_workspace(tmp_path: Path) -> None:
    """A reproduction script's traceback (a real one's shape): its last exception, where the script was, and the
    checkout's path cut from the message, so that one wrong fix run in two workspaces is one behaviour."""
    seen = [script_failure("test_reproduce.py", in_checkout(_SCRIPT_DIED.format(root=root), Path(root)))
            for root in (str(tmp_path / "ws-a" / "repo"), str(tmp_path / "ws-b" / "repo"))]
    assert seen == 2 * [Raised(case="test_reproduce.py", type="FileNotFoundError", bases=["FileNotFoundError"],
                           message="sympy/data.txt",
                           where='test_reproduce.py:38: assert r_rational_simplified == expected, '
                                 'f"Expected {expected}, got {r_rational_simplified}"')]
    assert script_failure("test_reproduce.py", "BUG: add is wrong\n") is None  # printed and exited
