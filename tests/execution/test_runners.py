"""Runners beyond pytest: Django's runtests.py and sympy's bin/test, with the harness's reading of their logs."""

from __future__ import annotations

import difflib
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError
from tests.conftest import make_patch, make_repo, run_git

from coharden.config import RunnerName, Settings
from coharden.environment.specs import EnvSpec
from coharden.execution.executor import InstanceExecutor
from coharden.execution.log_parsers import parse_django_log, parse_pytest_log, parse_sympy_log
from coharden.execution.log_runs import run_with
from coharden.execution.process_options import ProcessOptions
from coharden.execution.runners import RUNNERS, DjangoRunner, PytestRunner, SympyRunner, make_runner
from coharden.execution.testids import runnable_id
from coharden.schema.instance import Instance
from coharden.schema.verdict import Outcome, TestStatus, Verdict

#: a run with the interpreter running these tests
THIS_PYTHON = ProcessOptions(python=sys.executable)

DJANGO_LOG = """\
test_a (app.tests.ATests) ... ok
test_b (app.tests.ATests) ... FAIL
test_c (app.tests.ATests) ... ERROR
test_d (app.tests.ATests) ... skipped 'no db'
test_e (app.tests.ATests) ... expected failure
test_f (app.tests.ATests) ... printed something
ok
test_g (app.tests.ATests.test_g)
A docstring that describes test g. ... ok
======================================================================
FAIL: test_b (app.tests.ATests)
----------------------------------------------------------------------
"""


def test_django_log_is_read_like_the_harness() -> None:
    status = parse_django_log(DJANGO_LOG)
    assert status["test_a (app.tests.ATests)"] is TestStatus.PASSED
    assert status["test_b (app.tests.ATests)"] is TestStatus.FAILED
    assert status["test_c (app.tests.ATests)"] is TestStatus.ERROR
    assert status["test_d (app.tests.ATests)"] is TestStatus.SKIPPED
    assert status["test_e (app.tests.ATests)"] is TestStatus.XFAIL
    assert status["test_f (app.tests.ATests)"] is TestStatus.PASSED  # 'ok' on its own line
    assert status["A docstring that describes test g."] is TestStatus.PASSED  # the harness's id
    assert status["test_g (app.tests.ATests.test_g)"] is TestStatus.PASSED  # and the test it describes
    assert status["test_g (app.tests.ATests)"] is TestStatus.PASSED  # in either unittest format
    assert status["test_a (app.tests.ATests.test_a)"] is TestStatus.PASSED


def test_django_ids_become_labels() -> None:
    assert DjangoRunner.label("test_x (admin_views.tests.AdminTests)") == "admin_views.tests.AdminTests.test_x"
    assert DjangoRunner.label("test_x (admin_views.tests.AdminTests.test_x)") == "admin_views.tests.AdminTests.test_x"
    assert DjangoRunner.label("A docstring line") is None
    assert DjangoRunner.module_label("tests/utils_tests/test_text.py") == "utils_tests.test_text"
    runner = DjangoRunner()
    runner.runner_ids(["A docstring line"], ["tests/str/tests.py", "tests/str/models.py"])
    argv = runner.command("python", ["A docstring line", "test_y (str.tests.T)"]).argv
    assert argv[:6] == ["python", "tests/runtests.py", "--verbosity", "2", "--settings=test_sqlite", "--parallel"]
    assert argv[7:] == ["str.tests", "str.models", "str.tests.T.test_y"]


def test_sympy_and_pytest_logs() -> None:
    log = ("test_one ok\ntest_two F\ntest_three E\ntest_four f\ntest_six ok                 [OK]\n"
           "________________ sympy/core/tests/test_x.py:test_five ________________\n")
    assert parse_sympy_log(log) == {"test_one": TestStatus.PASSED, "test_two": TestStatus.FAILED,
                                    "test_three": TestStatus.ERROR, "test_four": TestStatus.XFAIL,
                                    "test_five": TestStatus.FAILED, "test_six": TestStatus.PASSED}
    pytest_log = "PASSED t.py::a\nFAILED t.py::b - assert 1 == 2\nt.py::c SKIPPED\n"
    assert parse_pytest_log(pytest_log) == {"t.py::a": TestStatus.PASSED, "t.py::b": TestStatus.FAILED,
                                            "t.py::c": TestStatus.SKIPPED}
    with pytest.raises(ValueError, match="known: pytest, django, sympy"):
        make_runner("nose")


LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def test_a_failing_sympy_test_that_printed_is_failed_by_its_section_s_header() -> None:
    """A test that prints between its name and its ``F`` has no per-test line; its failure section's header says
    it failed, in each of bin/test's forms (sympy 1.12 on: ``path::name``; wider than the terminal: no
    underscores). Read as missing, it made the run a COLLECTION_ERROR."""
    long_name = "test_a_rather_long_test_name_that_pushes_the_header_past_the_terminal_width"
    log = (LOGS / "sympy_1_15_long_name.txt").read_text(encoding="utf-8")
    assert parse_sympy_log(log) == {"test_two_asserts": TestStatus.FAILED, long_name: TestStatus.FAILED}
    demo = (LOGS / "sympy_1_15_demo.txt").read_text(encoding="utf-8")
    printed = demo.replace("test_assert_message F", "test_assert_message printed\nF")
    assert parse_sympy_log(printed)["test_assert_message"] is TestStatus.FAILED
    # a line that only looks like a header (no underscores, no line of them before it) is not one
    assert parse_sympy_log("test_a ok\n sympy/a.py:test_b \n") == {"test_a": TestStatus.PASSED}


def test_runner_names_are_the_registry_keys() -> None:
    assert list(RUNNERS) == list(get_args(RunnerName))  # the one list of names, and the type settings check
    assert all(make_runner(name).name == name for name in RUNNERS)
    with pytest.raises(ValidationError, match="runner"):
        Settings(runner="nose")
    commands = {"pytest -rA": "pytest", "./tests/runtests.py --verbosity 2": "django",
                "PYTHONWARNINGS=ignore bin/test -C --verbose": "sympy"}
    for command, name in commands.items():
        assert EnvSpec(repo="o/r", version="1", python="3.9", test_cmd=command, log_parser="").runner == name


def _fake_bin_test(root: Path, body: str) -> None:
    script = root / "bin" / "test"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_unparseable_output_is_a_harness_error_with_the_tail(tmp_path: Path) -> None:
    _fake_bin_test(tmp_path, "print('Segmentation fault in the runner itself'); sys.exit(3)")
    verdict = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON)
    assert verdict.outcome is Outcome.HARNESS_ERROR
    assert "no per-test result" in verdict.reason
    assert "Segmentation fault in the runner itself" in verdict.reason


def test_log_runner_rules_missing_skipped_and_timeout(tmp_path: Path) -> None:
    _fake_bin_test(tmp_path, "print('test_a ok'); print('test_b s')")
    settings = Settings(timeout=30)
    assert run_with(SympyRunner(), tmp_path, ["test_a"], settings, THIS_PYTHON).passed
    skipped = run_with(SympyRunner(), tmp_path, ["test_a", "test_b"], settings, THIS_PYTHON)
    assert skipped.outcome is Outcome.FAIL
    assert "test_b: SKIPPED" in skipped.reason
    missing = run_with(SympyRunner(), tmp_path, ["test_c"], settings, THIS_PYTHON)
    assert missing.outcome is Outcome.COLLECTION_ERROR
    assert "test_c" in missing.reason
    _fake_bin_test(tmp_path, "import time; time.sleep(30)")
    slow = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=1), THIS_PYTHON)
    assert slow.outcome is Outcome.TIMEOUT


def test_a_run_that_ran_no_test_is_not_a_harness_error(tmp_path: Path) -> None:
    """bin/test given a file outside sympy/ (a generated ``test_reproduce.py`` at the root, Devstral's layout), or
    a test file that fails to import, finishes having run nothing: the ids did not run (COLLECTION_ERROR, as
    pytest's uncollected ids), where a harness error would be retried by every rerun. Output that is neither
    per-test lines nor the runner's own 'ran nothing' line stays a harness error."""
    banner = "print('=' * 18 + ' tests finished: 0 passed, in 0.00 seconds ' + '=' * 19)"
    _fake_bin_test(tmp_path, banner)
    verdict = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON)
    assert verdict.outcome is Outcome.COLLECTION_ERROR, verdict.reason
    assert "test ids not run: test_a (sympy finished and ran no test" in verdict.reason
    assert verdict.tests == {"test_a": [TestStatus.MISSING]}
    _fake_bin_test(tmp_path, banner + "; sys.exit(3)")  # the banner, then a crash of the runner: its own failure
    assert run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON).outcome \
        is Outcome.HARNESS_ERROR
    _fake_bin_test(tmp_path, "print('tests finished: 0 passed, in 0.01 seconds')")  # not the runner's own line
    assert run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON).outcome \
        is Outcome.HARNESS_ERROR
    # a test file that imports what the environment lacks (sympy-13773's generated test imports pytest)
    _fake_bin_test(tmp_path, "print('sympy/t/test_x.py[?]   Failed to import'); print('_' * 40); "
                   "print(\"ModuleNotFoundError: No module named 'pytest'\"); "
                   "print('=' * 11 + ' tests finished: 0 passed, 1 exceptions, in 0.00 seconds ' + '=' * 12); "
                   "sys.exit(1)")
    failed = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON)
    assert failed.outcome is Outcome.COLLECTION_ERROR
    assert "a test file failed to import: ModuleNotFoundError: No module named 'pytest'" in failed.reason
    assert DjangoRunner.empty_run.search("\nRan 0 tests in 0.000s\n\nOK\n")
    assert not DjangoRunner.empty_run.search("Ran 10 tests in 0.100s")
    assert PytestRunner.empty_run.search("============================ no tests ran in 0.01s =============")


def test_code_that_raises_before_any_test_runs_is_not_a_harness_error(tmp_path: Path) -> None:
    """A mutant that breaks the package's import (sympy-12481: ``import sympy`` in bin/test raised) leaves no
    test run: COLLECTION_ERROR naming the error, as a test module that fails to import under pytest. A traceback
    whose innermost frame is outside the checkout (the runner's or the environment's own failure) stays a harness
    error."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise ValueError('there were repeated elements.')\n")
    _fake_bin_test(tmp_path, f"sys.path.insert(0, {str(tmp_path)!r})\nimport pkg")
    verdict = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON)
    assert verdict.outcome is Outcome.COLLECTION_ERROR, verdict.reason
    assert verdict.reason == ("test ids not run: test_a (the code under test raised before sympy ran a test: "
                              "ValueError: there were repeated elements.)")
    # sympy-12481's wrong fix: a test module's import raises in the code, then bin/test's reporter crashes while
    # handling it (a chained traceback whose last one is in the runner's own file): the code's exception decides
    (tmp_path / "sympy" / "utilities").mkdir(parents=True)
    (tmp_path / "sympy" / "utilities" / "runtests.py").write_text(
        "def run(path):\n    try:\n        __import__(path)\n    except Exception:\n        self_reporter = None\n"
        "        self_reporter._active_file\n")
    _fake_bin_test(tmp_path, f"sys.path.insert(0, {str(tmp_path)!r})\nfrom sympy.utilities.runtests import run\n"
                   "run('pkg')")
    chained = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON)
    assert chained.outcome is Outcome.COLLECTION_ERROR, chained.reason
    assert "ValueError: there were repeated elements." in chained.reason
    # the runner's own failure, not while handling the code's exception, stays a harness error
    (tmp_path / "sympy" / "utilities" / "runtests.py").write_text("def run(path):\n    None._active_file\n")
    alone = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON)
    assert alone.outcome is Outcome.HARNESS_ERROR, alone.reason
    _fake_bin_test(tmp_path, "import json\njson.loads('not json')")
    outside = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON)
    assert outside.outcome is Outcome.HARNESS_ERROR
    # the environment's failures, raised through the runner's own file or Python's frozen modules, stay harness
    # errors: a variable the sandbox did not pass, a module the environment lacks, the disk
    for body in ("import os\nos.environ['COHARDEN_NOT_SET']", "import importlib\nimportlib.import_module('absent_mod')",
                 f"sys.path.insert(0, {str(tmp_path)!r})\nimport pkg2"):
        (tmp_path / "pkg2.py").write_text("open('/proc/no/such/file')\n")
        _fake_bin_test(tmp_path, body)
        verdict = run_with(SympyRunner(), tmp_path, ["test_a"], Settings(timeout=30), THIS_PYTHON)
        assert verdict.outcome is Outcome.HARNESS_ERROR, (body, verdict.reason)


def test_log_runners_have_no_network(tmp_path: Path) -> None:
    _fake_bin_test(tmp_path, "import socket\ntry:\n    socket.create_connection(('192.0.2.1', 80), timeout=3)\n"
                   "    print('test_net ok')\nexcept OSError as exc:\n    print(exc); print('test_net F')")
    verdict = run_with(SympyRunner(), tmp_path, ["test_net"], Settings(timeout=30), THIS_PYTHON)
    assert verdict.outcome is Outcome.FAIL


def test_a_bare_name_in_two_files_grades_both_of_its_ids(tmp_path: Path) -> None:
    """sympy's harness names tests bare; ``test_settings`` defined in two files of the test patch resolves to two
    ids, and both get the status bin/test reports for the name (sympy-14531: the first id had none, so the golden
    fix looked unresolved)."""
    repo, _ = make_repo(tmp_path / "repo", {
        "bin/test": "import sys\nfor f in sys.argv[1:]:\n    if f.endswith('.py'):\n"
                    "        print(f + '[1]')\n        print('test_settings ok')\n",
        "pkg/tests/test_a.py": "", "pkg/tests/test_b.py": ""})
    test_patch = make_patch(repo, {"pkg/tests/test_a.py": "def test_settings():\n    pass\n",
                                   "pkg/tests/test_b.py": "def test_settings():\n    pass\n"})
    instance = Instance(instance_id="acme__names-1", repo=str(repo), base_commit="HEAD", test_patch=test_patch,
                        FAIL_TO_PASS=["test_settings"])
    settings = Settings(python=sys.executable, runner="sympy", fork_server=False, timeout=60)
    with InstanceExecutor(instance, repo, settings) as executor:
        golden = executor.golden_test()
        assert golden.ids == ["pkg/tests/test_a.py::test_settings", "pkg/tests/test_b.py::test_settings"]
        verdict = executor.verdict("", golden)
    assert verdict.passed, verdict.reason
    assert verdict.tests == {i: [TestStatus.PASSED] for i in golden.ids}


SYMPY = Path(os.environ.get("COHARDEN_REPOS", "/work/repos")) / "sympy__sympy"
SYMPY_PY = Path(os.environ.get("COHARDEN_SYMPY_PYTHON") or "/nonexistent")  # with pytest, mpmath
needs_sympy = pytest.mark.skipif(not (SYMPY / "bin" / "test").is_file() or not SYMPY_PY.exists(),
                                 reason="set COHARDEN_REPOS to a directory with a sympy__sympy clone and "
                                        "COHARDEN_SYMPY_PYTHON to a Python with mpmath")


@needs_sympy
def test_sympy_bin_test_through_the_executor(tmp_path: Path) -> None:
    """Bare FAIL_TO_PASS names (sympy's format) run with bin/test on a real sympy checkout."""
    # a 2021 commit: sympy's own runner there needs only mpmath (later ones also need hypothesis)
    commit = run_git(SYMPY, "rev-list", "-1", "--before=2021-06-01", "HEAD").strip()
    path = "sympy/core/tests/test_singleton.py"
    original = run_git(SYMPY, "show", f"{commit}:{path}")
    test_patch = _diff(path, original, original + "\n\ndef test_coharden_probe():\n    assert S.One == 1\n")
    instance = Instance(instance_id="sympy__probe", repo=str(SYMPY), base_commit=commit, test_patch=test_patch,
                        FAIL_TO_PASS=["test_coharden_probe"])
    settings = Settings(python=str(SYMPY_PY), runner="sympy", fork_server=False, timeout=300)
    with InstanceExecutor(instance, SYMPY, settings) as executor:
        golden = executor.golden_test()
        assert golden.ids == [f"{path}::test_coharden_probe"]
        verdict = executor.verdict("", golden)
        # a mutant's cell (only pass / fail wanted): bin/test -k runs the wanted test, not its whole file
        selected = executor.verdicts("", [golden], first_failure=True)[0]
    assert verdict.passed, verdict.reason
    assert verdict.tests == {f"{path}::test_coharden_probe": [TestStatus.PASSED]}
    assert "test_Singleton" in verdict.output_tail  # the fail-to-pass check runs the file, as the harness does
    assert selected.passed, selected.reason
    assert selected.tests == verdict.tests
    assert "test_Singleton" not in selected.output_tail
    assert "hash randomization: off" in verdict.output_tail  # the test environment's PYTHONHASHSEED=0, one process


def test_sympy_runner_selects_the_wanted_tests_only_for_a_mutant_s_cell() -> None:
    from coharden.execution.runners import SympyRunner

    runner = SympyRunner()
    ids = runner.runner_ids(["sympy/core/tests/test_a.py::test_x", "test_y"], ["sympy/core/tests/test_a.py"])
    whole = runner.command("py", ids).argv
    assert whole == ["py", "bin/test", "-C", "--verbose", "sympy/core/tests/test_a.py"]
    # -k takes every word after it, so it comes last
    assert runner.command("py", ids, select=True).argv == [*whole, "-k", "test_x", "test_y"]
    # no hash seed of its own: the test environment's fixed one, which also keeps bin/test in one process
    assert "PYTHONHASHSEED" not in runner.command("py", ids).env


@needs_sympy
def test_a_test_file_bin_test_does_not_collect_is_not_run(tmp_path: Path) -> None:
    """A test patch that adds ``test_reproduce.py`` at the root of a real sympy checkout: bin/test runs no test
    there, and the verdict says the ids did not run (not a harness error a rerun would retry)."""
    commit = run_git(SYMPY, "rev-list", "-1", "--before=2021-06-01", "HEAD").strip()
    test_patch = _diff("test_reproduce.py", "", "def test_reproduce():\n    assert 1 == 2\n").replace(
        "--- a/test_reproduce.py", "new file mode 100644\n--- /dev/null")
    instance = Instance(instance_id="sympy__root", repo=str(SYMPY), base_commit=commit, test_patch=test_patch,
                        FAIL_TO_PASS=["test_reproduce"])
    settings = Settings(python=str(SYMPY_PY), runner="sympy", fork_server=False, timeout=300)
    with InstanceExecutor(instance, SYMPY, settings) as executor:
        verdict = executor.verdict("", executor.golden_test())
    assert verdict.outcome is Outcome.COLLECTION_ERROR, verdict.reason + verdict.output_tail
    assert "ran no test" in verdict.reason


def _diff(path: str, old: str, new: str) -> str:
    body = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


# --- Django's own test suite, from its PyPI sdist -----------------------------------------------------------
DJANGO_CACHE = Path(os.environ.get("COHARDEN_TEST_CACHE", Path.home() / ".cache" / "coharden-tests")) / "django"


def _django_sdist() -> tuple[Path, str] | None:
    """(extracted sdist as a git repository, python with Django's dependencies), cached across runs; None when
    the sdist or the dependencies cannot be fetched."""
    root = DJANGO_CACHE / "src"
    venv = DJANGO_CACHE / "venv"
    python = venv / "bin" / "python"
    if not (root / ".git").is_dir() or not python.exists():
        shutil.rmtree(DJANGO_CACHE, ignore_errors=True)
        DJANGO_CACHE.mkdir(parents=True)
        download = subprocess.run([sys.executable, "-m", "pip", "download", "django<6", "--no-binary", ":all:",
                                   "--no-deps", "-d", str(DJANGO_CACHE), "-q"], capture_output=True, timeout=600)
        archives = list(DJANGO_CACHE.glob("[Dd]jango-*.tar.gz"))
        if download.returncode != 0 or not archives:
            return None
        with tarfile.open(archives[0]) as tar:
            tar.extractall(DJANGO_CACHE, filter="data")
        extracted = next(p for p in DJANGO_CACHE.iterdir() if p.is_dir() and p.name.lower().startswith("django-"))
        extracted.rename(root)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        deps = subprocess.run([str(python), "-m", "pip", "install", "-q", "asgiref", "sqlparse"],
                              capture_output=True, timeout=600)
        if deps.returncode != 0:
            return None
        make_repo(root, {})
    return root, str(python)


@pytest.fixture(scope="module")
def django_sdist() -> tuple[Path, str]:
    found = _django_sdist()
    if found is None:
        pytest.skip("Django's sdist (or its dependencies) cannot be downloaded here")
    return found


@pytest.mark.slow
def test_django_runner_on_djangos_own_suite(django_sdist: tuple[Path, str], tmp_path: Path) -> None:
    root, python = django_sdist
    settings = Settings(timeout=300)
    env = {"PYTHONPATH": str(root)}
    ids = ["test_defaults (str.tests.SimpleTests)", "test_international (str.tests.SimpleTests)"]
    ok = run_with(DjangoRunner(), root, ids, settings, ProcessOptions(python=python, env=env))
    assert ok.passed, ok.reason + ok.output_tail
    # the harness's id of a test with a docstring is the docstring's first line: its module runs whole
    runner = DjangoRunner(extra_labels=["str.tests"])
    doc = "The default implementation of __str__ and __repr__ should return"
    by_doc = run_with(runner, root, [doc], settings, ProcessOptions(python=python, env=env))
    assert by_doc.passed, by_doc.reason


@pytest.mark.slow
def test_django_fail_to_pass_through_the_executor(django_sdist: tuple[Path, str]) -> None:
    root, python = django_sdist
    commit = run_git(root, "rev-parse", "HEAD").strip()
    tests_py = (root / "tests" / "str" / "tests.py").read_text()
    marker = "class SimpleTests(TestCase):\n"
    assert marker in tests_py
    probe = ("    def test_coharden_probe(self):\n        from django.utils.text import capfirst\n\n"
             "        self.assertEqual(capfirst('hello'), 'Hello!')\n\n")
    test_patch = make_patch(root, {"tests/str/tests.py": tests_py.replace(marker, marker + probe)})
    text_py = (root / "django" / "utils" / "text.py").read_text()
    old = "return x[0].upper() + x[1:]"
    assert old in text_py
    fix = make_patch(root, {"django/utils/text.py": text_py.replace(old, old + " + '!'")})
    instance = Instance(instance_id="django__probe", repo=str(root), base_commit=commit, patch=fix,
                        test_patch=test_patch, FAIL_TO_PASS=["test_coharden_probe (str.tests.SimpleTests)"])
    settings = Settings(python=python, runner="django", fork_server=False, timeout=300,
                        test_env={"PYTHONPATH": "{workspace}"})
    with InstanceExecutor(instance, root, settings) as executor:
        golden = executor.golden_test()
        buggy, fixed = executor.verdict("", golden), executor.verdict(fix, golden)
        isolation = executor.isolation
    assert fixed.isolation == buggy.isolation == isolation  # the log runner gets the pytest runs' sandbox
    assert buggy.outcome is Outcome.FAIL
    assert buggy.tests == {"test_coharden_probe (str.tests.SimpleTests)": [TestStatus.FAILED]}
    assert fixed.passed, fixed.reason + fixed.output_tail
    # runtests.py's FAIL: section: the exception, and the line of the test's file that raised it
    [raised] = buggy.raised["test_coharden_probe (str.tests.SimpleTests)"]
    assert (raised.type, raised.message.splitlines()[0]) == ("AssertionError", "'Hello' != 'Hello!'")
    check = "        self.assertEqual(capfirst('hello'), 'Hello!')"
    line = tests_py.replace(marker, marker + probe).splitlines().index(check) + 1
    assert raised.where == f"str/tests.py:{line}: {check.strip()}"


def test_a_log_runner_that_dies_part_way_says_how_and_where() -> None:
    """bin/test killed by a signal in the middle of a file: the tests after it are not run, and the reason names
    the signal and the test that was running (not only 'ids not run')."""
    from coharden.execution.log_runs import verdict_from_log
    from coharden.schema.verdict import Outcome, TestStatus

    output = "test_a ok\ntest_b ok\ntest_c"
    verdict = verdict_from_log(["test_a", "test_c", "test_d"], {"test_a": TestStatus.PASSED}, output=output,
                               returncode=-11, timed_out=False, duration=1.0, runner="sympy")
    assert verdict.outcome is Outcome.COLLECTION_ERROR
    assert "test ids not run: test_c, test_d" in verdict.reason
    assert "ended with signal 11 at: test_c" in verdict.reason
    clean = verdict_from_log(["test_a", "test_x"], {"test_a": TestStatus.PASSED}, output=output, returncode=1,
                             timed_out=False, duration=1.0, runner="sympy")
    assert clean.reason == "test ids not run: test_x"


_PATH_TEST = '''\
import os, subprocess, sys

PLUGINS = {plugins!r}
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_path_is_the_harness_path():
    assert not set(PLUGINS) & set(sys.path), sys.path
    assert os.environ.get("PYTHONPATH") == CHECKOUT, os.environ.get("PYTHONPATH")
    assert "COHARDEN_PLUGIN_PATH" not in os.environ
    # pylint's way: run a tool with PYTHONPATH + ":"; the tool pops sys.path entries by position
    env = dict(os.environ, PYTHONPATH=os.environ["PYTHONPATH"] + ":")
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.path[1])"], env=env, cwd="/",
                           capture_output=True, text=True)
    assert child.stdout.strip() == CHECKOUT, child.stdout
'''


@pytest.mark.parametrize("fork_server", [False, True])
def test_tests_see_the_path_without_coharden_plugins(tmp_path: Path, fork_server: bool) -> None:
    """coharden's pytest plugins come in on PYTHONPATH and leave it before the tests run: a test sees the
    checkout's PYTHONPATH as the harness sets it, and so does every process it starts (pylint's
    ``test_do_not_import_files_from_local_directory*`` failed otherwise); an instrumenting plugin's directory
    (the input recorder's) leaves too."""
    from coharden.execution.pytest_runner import STREAM_PLUGIN_DIR

    extra = tmp_path / "instrument"
    extra.mkdir()
    (extra / "coharden_probe_plugin.py").write_text("")
    text = _PATH_TEST.format(plugins=[STREAM_PLUGIN_DIR, str(extra)])
    repo, commit = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "tests/test_path.py": text})
    test_patch = make_patch(repo, {"tests/test_path.py": text + "\n\ndef test_more():\n    pass\n"})
    instance = Instance(instance_id="acme__path-1", repo=str(repo), base_commit=commit, test_patch=test_patch,
                        FAIL_TO_PASS=["tests/test_path.py::test_path_is_the_harness_path"],
                        PASS_TO_PASS=["tests/test_path.py::test_more", "test_hello.py::test_hello"])
    settings = Settings(fork_server=fork_server, timeout=120, test_env={"PYTHONPATH": "{workspace}"})
    with InstanceExecutor(instance, repo, settings) as executor:
        golden = executor.golden_test()
        verdict = executor.verdict("", golden)
        assert verdict.passed, verdict.reason + verdict.output_tail
        run = executor.run_raw("", golden, extra_args=["-p", "coharden_probe_plugin"],
                               extra_env={"COHARDEN_PLUGIN_PATH": str(extra)}, readable=[extra])
        assert run.returncode == 0, run.output[-2000:]
        # a PASS_TO_PASS id naming a file the checkout lacks (a line of a pytester run the harness parsed)
        assert executor.absent_files(instance.PASS_TO_PASS, test_patch) == ["test_hello.py::test_hello"]
        created = make_patch(repo, {"test_new.py": "def test_hello():\n    pass\n"})
        assert executor.absent_files(["test_new.py::test_hello"], created) == []


def test_selected_tests_run_in_the_order_their_file_defines_them(tmp_path: Path) -> None:
    """Ids given out of order run in file order, as a run of the whole file does (the harness runs whole files):
    a test that reads what an earlier test of its file left (sphinx's shared build output) sees the same state."""
    from coharden.execution.pytest_runner import run_pytest

    (tmp_path / "test_order.py").write_text(
        "SEEN = []\n\n\ndef test_first():\n    SEEN.append(1)\n\n\n"
        "def test_second():\n    assert SEEN == [1]\n\n\n"
        "class TestLater:\n    def test_third(self):\n        assert SEEN == [1]\n")
    (tmp_path / "test_other.py").write_text("def test_elsewhere():\n    pass\n")
    ids = ["test_other.py::test_elsewhere", "test_order.py::TestLater::test_third", "test_order.py::test_second",
           "test_order.py::test_first"]
    run = run_pytest(tmp_path, ids, Settings(fork_server=False, timeout=60))
    assert run.returncode == 0, run.output[-2000:]
    started = [e["start"] for e in run.stream or [] if "start" in e]
    assert started == ["test_other.py::test_elsewhere", "test_order.py::test_first", "test_order.py::test_second",
                       "test_order.py::TestLater::test_third"]


def test_whole_files_run_every_test_of_the_files_and_grade_the_selected_ids(tmp_path: Path) -> None:
    """A test patch marked ``whole_files`` runs the files of its ids whole, as the harness runs a test patch's
    files, and is graded by its ids alone: a selected test that needs what an unselected earlier test of its
    file left passes, as in the harness; another test of the file failing does not fail the verdict. The two
    kinds of run are cached under different keys."""
    files = {"tests/test_state.py": "STATE = []\n\n\ndef test_setup_state():\n    STATE.append(1)\n\n\n"
                                    "def test_uses_state():\n    assert STATE == [1]\n\n\n"
                                    "def test_unrelated_failure():\n    assert False\n"}
    repo, commit = make_repo(tmp_path / "repo", {"pkg/__init__.py": ""})
    test_patch = make_patch(repo, files)
    instance = Instance(instance_id="acme__state-1", repo=str(repo), base_commit=commit, test_patch=test_patch)
    with InstanceExecutor(instance, repo, Settings(fork_server=False, timeout=60)) as executor:
        selected = executor.test_patch(test_patch, name="t", ids=["tests/test_state.py::test_uses_state"])
        alone = executor.verdict("", selected)
        whole = executor.verdict("", selected.model_copy(update={"whole_files": True}))
        assert executor.key("", selected) != executor.key("", selected.model_copy(update={"whole_files": True}))
    assert alone.failed
    assert whole.passed, whole.reason
    assert whole.tests == {"tests/test_state.py::test_uses_state": [TestStatus.PASSED]}


def test_old_pytest_gets_no_rootdir_option() -> None:
    """pytest before 3.5 (astropy 1.3's spec pins 3.3.1) rejects --rootdir; an unknown version is taken as new."""
    from coharden.execution.pytest_runner import _before

    assert _before("3.3.1", (3, 5))
    assert not _before("3.5.0", (3, 5))
    assert not _before("6.0.1.dev180+g634cde950", (3, 5))
    assert not _before("", (3, 5))


def test_an_id_the_harness_cut_at_a_space_is_graded_by_the_parameters_it_names(tmp_path: Path) -> None:
    """The harness's parser cuts an id at its first space (``test_inline[a b]`` -> ``test_inline[a``). Such an id
    runs as its base test, but only the parameters whose cut id it is decide its result, as in the harness:
    another parameter's failure (sphinx-8621's ``:pep:`` cases, which fail in the harness too) does not count.
    A cut id that names no parameter falls back to all of them."""
    from coharden.execution.pytest_runner import run_pytest
    from coharden.execution.pytest_verdicts import verdict_for

    (tmp_path / "test_markup.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('text', ['kbd one', 'kbd two', 'pep eight', '::\\n\\nx y', '::'])\n"
        "def test_inline(text):\n    assert not text.startswith('pep')\n")
    ids = ["test_markup.py::test_inline[kbd"]
    run = run_pytest(tmp_path, ids, Settings(fork_server=False, timeout=60))
    verdict = verdict_for(ids, run)
    assert verdict.outcome is Outcome.PASS, verdict.reason
    assert verdict.tests == {"test_markup.py::test_inline[kbd": [TestStatus.PASSED, TestStatus.PASSED]}
    assert verdict_for(["test_markup.py::test_inline[pep"], run).outcome is Outcome.FAIL
    # '::' in the parameter (pytest would split the id there), cut or whole
    both = ["test_markup.py::test_inline[::\\n\\nx", "test_markup.py::test_inline[::]"]
    assert verdict_for(both, run).tests == {i: [TestStatus.PASSED] for i in both}
    unknown = verdict_for(["test_markup.py::test_inline[zzz"], run)  # names none: every parameter counts
    assert unknown.outcome is Outcome.FAIL
    assert len(unknown.tests["test_markup.py::test_inline[zzz"]) == 5
    # a mutant's run stops at its first failure (-x), but not when a cut id runs its whole base test: a failing
    # parameter defined before the named ones must not stop the run before they have run
    (tmp_path / "test_first.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('text', ['pep eight', 'kbd one'])\n"
        "def test_inline(text):\n    assert not text.startswith('pep')\n")
    cut = ["test_first.py::test_inline[kbd"]
    stopped = verdict_for(cut, run_pytest(tmp_path, cut, Settings(fork_server=False, timeout=60),
                                          ProcessOptions(first_failure=True)))
    assert stopped.outcome is Outcome.PASS, stopped.reason


def test_an_empty_parameter_id_is_graded_under_pytest_3_and_later(tmp_path: Path) -> None:
    """An ``ids`` function that returns ``""`` gives ``test_u[]`` from pytest 4 on (the harness's astropy-7606
    id), ``test_u[unit0]`` under pytest 3 (astropy 1.3's spec pins 3.3.1). The id runs as its base test and is
    graded by the empty parameter, or by the generated one where pytest replaced it."""
    from coharden.execution.pytest_results import Case, matching_cases
    from coharden.execution.pytest_runner import run_pytest
    from coharden.execution.pytest_verdicts import verdict_for

    assert runnable_id("t.py::test_u[]") == "t.py::test_u"
    old = [Case("t", "test_u[unit0]", TestStatus.PASSED), Case("t", "test_u[m]", TestStatus.FAILED),
           Case("t", "test_u[py3]", TestStatus.FAILED), Case("t", "test_u[float64]", TestStatus.FAILED)]
    assert [c.name for c in matching_cases("t.py::test_u[]", old)] == ["test_u[unit0]"]  # not float64, py3
    (tmp_path / "test_units.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('unit', ['', 'm'], ids=lambda unit: unit)\n"
        "def test_u(unit):\n    assert unit != 'm'\n")
    ids = ["test_units.py::test_u[]"]
    verdict = verdict_for(ids, run_pytest(tmp_path, ids, Settings(fork_server=False, timeout=60)))
    assert verdict.tests == {"test_units.py::test_u[]": [TestStatus.PASSED]}, verdict.reason


@pytest.mark.parametrize("fork_server", [False, True])
def test_a_scaled_time_limit_bounds_cpu_time_not_the_machines_load(tmp_path: Path, fork_server: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A limit scaled from the test's own run (MPE's mutant limits) is a CPU-time limit: a run that waits
    (a loaded machine gives it no CPU; here it sleeps) past the limit still gets its verdict, within
    ``LOAD_MARGIN`` times the limit on the wall clock; a busy loop is stopped by the CPU limit and is a TIMEOUT
    that says so; a hang asleep is stopped by the wall clock. A test that kills itself with SIGXCPU at once is
    no timeout. The setting's own timeout stays a wall-clock one. The fresh process runs in the sandbox (bwrap
    reports its child's signal as an exit code) where it can."""
    from coharden.execution.fast.forkserver import ForkServer, ServerStart
    from coharden.execution.pytest_runner import run_pytest, test_environment
    from coharden.execution.pytest_verdicts import verdict_for
    from coharden.execution.sandbox import Confinement
    from coharden.schema import timelimit

    (tmp_path / "test_slow.py").write_text(
        "import time\n\n\n"
        "def test_waits():\n    time.sleep(3.5)\n\n\n"
        "def test_spins():\n    while True:\n        pass\n\n\n"
        "def test_sleeps_forever():\n    time.sleep(60)\n\n\n"
        "def test_forges():\n    import os, signal\n    os.kill(os.getpid(), signal.SIGXCPU)\n")
    settings = Settings(fork_server=fork_server, timeout=60)
    server = ForkServer(ServerStart(sys.executable, env=test_environment(()), network=False)) if fork_server else None
    try:
        def run(test: str, limit: float | None) -> Verdict:
            ids = [f"test_slow.py::{test}"]
            result = run_pytest(tmp_path, ids, settings, ProcessOptions(
                server=server, time_limit=limit, confine=None if fork_server else Confinement(writable=(tmp_path,))))
            return verdict_for(ids, result)

        waited = run("test_waits", 3.0)
        assert waited.outcome is Outcome.PASS, waited.reason
        forged = run("test_forges", 3.0)
        assert forged.outcome is Outcome.HARNESS_ERROR, forged.reason
        monkeypatch.setattr(timelimit, "LOAD_MARGIN", 10.0)  # a loaded machine must not reach the wall first
        spun = run("test_spins", 2.0)
        assert spun.outcome is Outcome.TIMEOUT
        assert "CPU time limit (2 s)" in spun.reason  # the CPU limit stopped it, not the wall clock (20 s)
        assert "running at the limit: test_slow.py::test_spins" in spun.reason
        monkeypatch.setattr(timelimit, "LOAD_MARGIN", 2.0)
        asleep = run("test_sleeps_forever", 2.0)
        assert asleep.outcome is Outcome.TIMEOUT
        assert "2 x its time limit (2 s of CPU time) on the wall clock" in asleep.reason  # not the 60 s timeout
    finally:
        if server is not None:
            server.close()
    plain = Settings(fork_server=False, timeout=1)  # no scaled limit: the wall clock, as before
    ids = ["test_slow.py::test_waits"]
    assert verdict_for(ids, run_pytest(tmp_path, ids, plain)).outcome is Outcome.TIMEOUT


def test_a_failure_whose_captured_output_shows_a_network_error_says_so(tmp_path: Path) -> None:
    """sphinx logs "Could not fetch remote image: ... Temporary failure in name resolution" and a later assertion
    fails on the missing image: the failure's own message does not say why, its captured output does. The
    verdict's reason carries that line (envcheck then counts the test as needing the network)."""
    from coharden.execution.pytest_runner import run_pytest
    from coharden.execution.pytest_verdicts import verdict_for
    from coharden.execution.sandbox import NETWORK_FAILURE

    (tmp_path / "test_remote.py").write_text(
        "import socket\n\n\n"
        "def test_remote_image():\n"
        "    try:\n"
        "        socket.create_connection(('www.python.org', 443), timeout=5)\n"
        "        fetched = True\n"
        "    except OSError as exc:\n"
        "        print('WARNING: Could not fetch remote image: https://www.python.org/logo.png', exc)\n"
        "        print('WARNING: network access blocked (ConnectionError)')\n"
        "        fetched = False\n"
        "    assert fetched, 'the image is missing'\n\n\n"
        "def test_plain_failure():\n"
        "    assert 1 == 2\n")
    ids = ["test_remote.py::test_remote_image", "test_remote.py::test_plain_failure"]
    verdict = verdict_for(ids, run_pytest(tmp_path, ids, Settings(fork_server=False, timeout=60)))
    assert verdict.outcome is Outcome.FAIL
    remote, plain = verdict.reason.split("; ")
    assert remote.startswith("test_remote.py::test_remote_image: [the test reached for the network: WARNING: ")
    assert NETWORK_FAILURE.search(remote)
    assert not NETWORK_FAILURE.search(plain)
    assert not verdict.network  # one failure is the code's own
    (tmp_path / "test_fetch.py").write_text(
        "import socket\n\n\ndef test_fetch():\n    socket.create_connection(('www.python.org', 443), timeout=5)\n")
    fetch = ["test_fetch.py::test_fetch"]
    alone = verdict_for(fetch, run_pytest(tmp_path, fetch, Settings(fork_server=False, timeout=60)))
    assert alone.outcome is Outcome.FAIL
    assert alone.network, alone.reason  # its exception is the network's: a FAIL that says nothing about the code
    # only the captured output mentions the network, the failure is an assertion: a hint, not a network verdict;
    # nor is a test that wanted a ConnectionError and got none (requests' pytest.raises(ConnectionError))
    (tmp_path / "test_wants.py").write_text(
        "import pytest\n\n\nclass ConnectionError(Exception):\n    pass\n\n\n"
        "def test_wants():\n    with pytest.raises(ConnectionError):\n        pass\n")
    # a refused connection: only loopback answers in the sandbox, so a server of the test's own was not listening
    (tmp_path / "test_local.py").write_text(
        "import socket\n\n\ndef test_local():\n    socket.create_connection(('127.0.0.1', 9), timeout=5)\n")
    for only in (ids[:1], ["test_wants.py::test_wants"], ["test_local.py::test_local"]):
        other = verdict_for(only, run_pytest(tmp_path, only, Settings(fork_server=False, timeout=60)))
        assert other.outcome is Outcome.FAIL
        assert not other.network, other.reason


def test_an_internal_error_raised_in_the_code_under_test_is_a_collection_error(tmp_path: Path) -> None:
    """sphinx-11445's mutants broke a plugin the repository's conftest.py loads, and pytest ended with an
    INTERNALERROR (exit code 3) and no results: no test ran because of the code, as when a test module does not
    import, so the verdict is a COLLECTION_ERROR (stored; a rerun would not change it), not a HARNESS_ERROR
    (retried for ever). An INTERNALERROR raised outside the checkout stays the harness's."""
    from coharden.execution.pytest_runner import run_pytest
    from coharden.execution.pytest_verdicts import verdict_for

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def order(items):\n    raise ValueError('broken by a mutant')\n")
    (tmp_path / "conftest.py").write_text(
        "import pkg\n\n\ndef pytest_collection_modifyitems(items):\n    pkg.order(items)\n")
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    ids = ["test_a.py::test_a"]
    verdict = verdict_for(ids, run_pytest(tmp_path, ids, Settings(fork_server=False, timeout=60)))
    assert verdict.outcome is Outcome.COLLECTION_ERROR, verdict.reason
    assert "broke pytest's session" in verdict.reason
    assert "ValueError: broken by a mutant" in verdict.reason
    # the plugin itself no longer imports (sphinx-11445's mutant): a traceback, exit code 1, no results
    (tmp_path / "pkg" / "plugin.py").write_text("@pass_environment\ndef f():\n    pass\n")
    (tmp_path / "conftest.py").write_text("pytest_plugins = ['pkg.plugin']\n")
    verdict = verdict_for(ids, run_pytest(tmp_path, ids, Settings(fork_server=False, timeout=60)))
    assert verdict.outcome is Outcome.COLLECTION_ERROR, verdict.reason
    assert "NameError: name 'pass_environment' is not defined" in verdict.reason
    # raised by a module outside the checkout (the environment's): the harness's failure
    assert _raised_outside(tmp_path, ids, "order(items)", "pytest_collection_modifyitems(items)") \
        is Outcome.HARNESS_ERROR


def _raised_outside(root: Path, ids: list[str], call: str, hook: str) -> Outcome:
    """The outcome of ``ids`` in ``root`` when its conftest's ``hook`` calls ``extlib.<call>``, which raises in a
    module outside the checkout (on PYTHONPATH: the environment's)."""
    from coharden.execution.pytest_runner import run_pytest
    from coharden.execution.pytest_verdicts import verdict_for

    outside = root.parent / f"{root.name}_site"
    outside.mkdir()
    (outside / "extlib.py").write_text(f"def {call}:\n    raise ValueError('the environment')\n")
    (root / "conftest.py").write_text(f"import extlib\n\n\ndef {hook}:\n    extlib.{call}\n")
    run = run_pytest(root, ids, Settings(fork_server=False, timeout=60),
                     ProcessOptions(env={"PYTHONPATH": str(outside)}))
    return verdict_for(ids, run).outcome


def test_a_session_the_code_under_test_ends_after_its_tests_ran_is_no_harness_error(tmp_path: Path) -> None:
    """pytest-5692's mutants of pytest's own junitxml broke the session at its end, after the tests had run: the
    run was a HARNESS_ERROR (retried for ever, the table's row left at harness_error) although the error came
    from the code under test. Raised in the checkout, it is the code's failure; raised elsewhere, the harness's."""
    from coharden.execution.pytest_runner import run_pytest
    from coharden.execution.pytest_verdicts import verdict_for

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(
        "def finish(session):\n    raise ValueError('broken by a mutant')\n")
    (tmp_path / "conftest.py").write_text(
        "import pkg\n\n\ndef pytest_sessionfinish(session):\n    pkg.finish(session)\n")
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    ids = ["test_a.py::test_a"]
    for fork in (False, True):
        verdict = verdict_for(ids, run_pytest(tmp_path, ids, Settings(fork_server=fork, timeout=60)))
        assert verdict.outcome is Outcome.COLLECTION_ERROR, (fork, verdict.reason)
        assert "ValueError: broken by a mutant" in verdict.reason
    assert _raised_outside(tmp_path, ids, "finish(session)", "pytest_sessionfinish(session)") is Outcome.HARNESS_ERROR


# a repository with a runner script of sympy's kind (bin/test: files, -k names, "test_x ok" / "test_x F" lines)
BIN_TEST = '''\
import importlib.util
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import calc  # noqa: E402,F401 - the project, imported before any test as bin/test imports sympy

args = sys.argv[1:]
names = args[args.index("-k") + 1:] if "-k" in args else None
files = [a for a in (args[:args.index("-k")] if names else args) if a.endswith(".py")]
print("hash randomization: on (PYTHONHASHSEED=%s)" % os.environ.get("PYTHONHASHSEED"))
print("warnings ignored:", any(f[0] == "ignore" and f[2] is UserWarning for f in warnings.filters))
failed = 0
for path in files:
    spec = importlib.util.spec_from_file_location("t", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in sorted(n for n in dir(module) if n.startswith("test_")):
        if names is None or any(k in name for k in names):
            try:
                getattr(module, name)()
                print(name, "ok")
            except AssertionError:
                print(name, "F")
                failed += 1
print("=== tests finished ===")
sys.exit(1 if failed else 0)
'''
CALC = {"bin/test": BIN_TEST, "calc/__init__.py": "from calc.ops import half\n",
        "calc/ops.py": "def half(x):\n    return x // 2\n", "calc/tests/__init__.py": "",
        "calc/tests/test_ops.py": "from calc import half\n\n\ndef test_old():\n    assert half(4) == 2\n"}
CALC_TEST = CALC["calc/tests/test_ops.py"] + "\n\ndef test_odd():\n    assert half(3) == 1.5\n"


def test_a_runner_script_runs_as_a_warm_fork_and_sees_the_code_it_runs_on(tmp_path: Path) -> None:
    """sympy's bin/test as a fork of a server that imported the project once: the same verdicts as a fresh
    process on the buggy code, the fix and a mutant of it (the fork sees the changed body), PYTHONWARNINGS
    applied as at an interpreter's start, and the server's hash seed named in the run's environment."""
    repo, commit = make_repo(tmp_path / "calc", CALC)
    fix = make_patch(repo, {"calc/ops.py": "def half(x):\n    return x / 2\n"})
    mutant = make_patch(repo, {"calc/ops.py": "def half(x):\n    return x / 2 if x % 2 == 0 else x // 2\n"})
    test_patch = make_patch(repo, {"calc/tests/test_ops.py": CALC_TEST})
    inst = Instance(instance_id="calc__half", repo=str(repo), base_commit=commit, patch=fix, test_patch=test_patch,
                    FAIL_TO_PASS=["test_odd"])
    outcomes: dict[bool, list[tuple[Outcome, dict]]] = {}
    for forks in (False, True):
        settings = Settings(runner="sympy", fork_server=forks, warm_imports=["calc"], timeout=60,
                            cache_dir=tmp_path / f"cache-{forks}")
        with InstanceExecutor(inst, repo, settings) as ex:
            golden = ex.golden_test()
            verdicts = [ex.verdicts(patch, [golden], first_failure=first)[0]
                        for patch, first in (("", False), (fix, False), (mutant, True))]
            outcomes[forks] = [(v.outcome, v.tests) for v in verdicts]
            # an instrumented run (a recording) is a fresh process of the test's own tests, not of its whole files
            raw = ex.run_raw("", golden)
            assert "test_odd F" in raw.output
            assert "test_old" not in raw.output
            server = ex.site.current
            if forks:
                assert server is not None
                assert server.hash_seed is not None
                assert f"PYTHONHASHSEED={server.hash_seed})" in verdicts[1].output_tail
                assert server.swapped_runs == 2, (server.warm_runs, server.swapped_runs)  # the fix, the mutant
            else:
                assert server is None
            assert "warnings ignored: True" in verdicts[1].output_tail
    assert [o for o, _ in outcomes[True]] == [Outcome.FAIL, Outcome.PASS, Outcome.FAIL]
    assert outcomes[True] == outcomes[False]


def test_a_runner_script_killed_at_its_cpu_limit_is_a_timeout(tmp_path: Path) -> None:
    """sympy-19954's mutant that never ends: killed by RLIMIT_CPU's signal at its scaled limit, in a fork (exit
    -SIGXCPU) as in a fresh process, the run is a TIMEOUT (inadmissible), not a harness error retried for ever."""
    repo, commit = make_repo(tmp_path / "calc", CALC)
    fix = make_patch(repo, {"calc/ops.py": "def half(x):\n    return x / 2\n"})
    spins = make_patch(repo, {"calc/ops.py": "def half(x):\n    while True:\n        x += 1\n"})
    inst = Instance(instance_id="calc__half", repo=str(repo), base_commit=commit, patch=fix,
                    test_patch=make_patch(repo, {"calc/tests/test_ops.py": CALC_TEST}), FAIL_TO_PASS=["test_odd"])
    for forks in (False, True):
        settings = Settings(runner="sympy", fork_server=forks, warm_imports=["calc"], timeout=60,
                            cache_dir=tmp_path / f"cache-{forks}")
        with InstanceExecutor(inst, repo, settings) as ex:
            verdict = ex.verdicts(spins, [ex.golden_test()], limits=[2.0], first_failure=True)[0]
        assert verdict.outcome is Outcome.TIMEOUT, (forks, verdict.reason, verdict.output_tail)
