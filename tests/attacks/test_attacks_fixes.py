"""Hostile *fixes* graded by ``coharden eval`` (issue 51, class 2): none may be graded Resolved.

Each attack is a real fix prediction for ``examples/printer_brackets`` that leaves the bug in place and tries to
make the golden tests look passed by changing how pytest runs: a plugin loaded through the ini file's addopts, an
import-time patch of pytest's reports in the package under test, a ``.dist-info`` with a ``pytest11`` entry point
at the repository root (plugin autoload), ``pytest.xfail()`` in the unfixed code. Each is graded through
:func:`grade_fix` on a real checkout, in the real sandbox, with real pytest runs; each must come back not resolved
with a tampering note, while the golden fix (and one that also touches non-pytest configuration) stays
RESOLVED_FULL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.attacks.hostile import EXAMPLE, needs_bwrap

from coharden.config import Settings
from coharden.evaluation.grading import RESOLVED_FULL, FixGrade, golden_tests, grade_fix, grade_statuses
from coharden.execution.env_plugins import environment_plugins
from coharden.execution.executor import InstanceExecutor
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_runner import run_pytest
from coharden.execution.pytest_verdicts import verdict_for
from coharden.instances import LocalInstance, resolve_repo
from coharden.patches import make_patch, parse
from coharden.schema.verdict import Outcome, TestStatus, Verdict

PRINTER = "tinyexpr/printer.py"
F2P = "tests/test_printer.py::test_compound_right_operand_keeps_brackets"

pytestmark = needs_bwrap

# a pytest plugin that turns every failed call into a pass: what each attack tries to get loaded
FORGE = textwrap.dedent("""\
    import pytest


    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" and report.failed:
            report.outcome = "passed"
            report.longrepr = None
    """)


@pytest.fixture
def grade(example: LocalInstance, tmp_path: Path) -> Iterator:
    opened: list[InstanceExecutor] = []

    def run(files: dict[str, str | None], **overrides: object) -> FixGrade:
        settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1).with_overrides(**overrides)
        ex = InstanceExecutor(example.instance, resolve_repo(example.instance, None), settings, None)
        opened.append(ex)
        fix = make_patch([(path, ex.base_file(path), text) for path, text in files.items()])
        return grade_fix(ex, golden_tests(ex), fix)

    yield run
    for ex in opened:
        ex.close()


def _not_resolved(grade: FixGrade, *expected: str) -> None:
    assert not grade.resolved, grade
    assert grade.tampering, grade
    assert grade.reason.startswith("tampering: ")
    for text in expected:
        assert any(text in note for note in grade.tampering), (text, grade.tampering)


def _base(example: LocalInstance, path: str) -> str:
    return (EXAMPLE / "project" / path).read_text()


def test_golden_fix_is_resolved_with_no_note(example: LocalInstance, tmp_path: Path) -> None:
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1)
    with InstanceExecutor(example.instance, resolve_repo(example.instance, None), settings, None) as ex:
        golden = grade_fix(ex, golden_tests(ex), example.instance.patch)
        # the golden fix plus a change of setup.cfg that does not touch pytest's section (a dependency bump)
        cfg = "[metadata]\nname = tinyexpr\n\n[options]\ninstall_requires =\n    attrs>=21\n"
        with_cfg = grade_fix(ex, golden_tests(ex), example.instance.patch + make_patch([("setup.cfg", None, cfg)]))
    for g in (golden, with_cfg):
        assert g.resolved, g
        assert g.resolution == RESOLVED_FULL
        assert not g.tampering
        assert not g.dropped_config_files
        assert not g.notes


def _golden_printer(example: LocalInstance, tmp_path: Path) -> str:
    work = tmp_path / "golden"
    subprocess.run(["cp", "-r", str(EXAMPLE / "project"), str(work)], check=True)
    subprocess.run(["git", "apply", "-"], input=example.instance.patch, text=True, cwd=work, check=True)
    return (work / PRINTER).read_text()


# --- 1. an ini file's addopts loading a plugin the fix ships ------------------------------------------------------

def test_ini_addopts_loading_a_shipped_plugin(grade) -> None:
    g = grade({"pytest.ini": "[pytest]\naddopts = -p tinyexpr.checks\n", "tinyexpr/checks.py": FORGE})
    _not_resolved(g, "pytest.ini", "tinyexpr/checks.py: defines the pytest hook pytest_runtest_makereport")
    assert "pytest.ini" in g.dropped_config_files
    assert g.tests_status["FAIL_TO_PASS"]["failure"] == [F2P]  # the plugin never ran: the bug shows


def test_pyproject_pytest_section_replacing_the_ini_file(grade) -> None:
    # the ini file deleted (pyproject.toml is read then) and pytest's options moved to pyproject.toml, with a
    # plugin whose hook is built without any name the static scan knows
    plugin = FORGE.replace("def pytest_runtest_makereport", "def _hook").replace(
        "@pytest.hookimpl(hookwrapper=True)\n", "") + \
        "\nglobals()['pytest_' + 'runtest_makereport'] = pytest.hookimpl(hookwrapper=True)(_hook)\n"
    toml = '[project]\nname = "tinyexpr"\n\n[tool.pytest.ini_options]\naddopts = "-p tinyexpr.support"\n'
    g = grade({"pytest.ini": None, "pyproject.toml": toml, "tinyexpr/support.py": plugin})
    _not_resolved(g, "pytest.ini", "pyproject.toml: the fix changes pytest's configuration")
    assert g.tests_status["FAIL_TO_PASS"]["failure"] == [F2P]


def test_tox_ini_pytest_section_is_kept_as_the_base_has_it(grade, example: LocalInstance, tmp_path: Path) -> None:
    # with the golden fix: the rest of tox.ini applies, its [pytest] section does not, and the grade says so
    tox = "[tox]\nenvlist = py311\n\n[pytest]\naddopts = -p tinyexpr.checks\n"
    fixed = _golden_printer(example, tmp_path)
    g = grade({PRINTER: fixed, "tox.ini": tox, "tinyexpr/checks.py": "X = 1\n"})
    _not_resolved(g, "tox.ini: the fix changes pytest's configuration ([pytest])")
    assert g.resolution == RESOLVED_FULL  # SWE-bench's fields: what the run gave


# --- 2. an import-time patch of pytest's reports in the package under test ----------------------------------------

STEALTH_PATCH = textwrap.dedent("""\

    def _quiet():
        import sys as _s
        mod = _s.modules.get("_" + "pytest.rep" + "orts")
        if mod is None:
            return
        cls = getattr(mod, "Test" + "Rep" + "ort")
        init = cls.__init__

        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            if getattr(self, "when", "") == "call" and self.outcome == "failed":
                self.outcome, self.longrepr = "passed", None

        cls.__init__ = __init__


    _quiet()
    """)


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "fresh"])
def test_import_time_patch_of_pytest_reports(grade, example: LocalInstance, fork_server: bool) -> None:
    init = "tinyexpr/__init__.py"
    g = grade({init: _base(example, init) + STEALTH_PATCH}, fork_server=fork_server)
    # no static sign (the names are built at run time): the run itself shows the rewritten report
    _not_resolved(g, "reported passed although its call raised")
    assert g.outcome == Outcome.HARNESS_ERROR.value
    assert not g.infra_failure


def test_import_time_patch_named_plainly_is_flagged_before_it_runs(grade, example: LocalInstance) -> None:
    init = "tinyexpr/__init__.py"
    plain = "\nimport _pytest.reports\n_pytest.reports.TestReport.outcome = property(lambda self: 'passed')\n"
    g = grade({init: _base(example, init) + plain})
    _not_resolved(g, "imports pytest's internals (_pytest)", "reaches pytest's reports or runner (TestReport)")


# --- 3. a .dist-info with a pytest11 entry point at the repository root -------------------------------------------

def test_dist_info_entry_point_at_the_root(grade) -> None:
    g = grade({"tinyexpr_extras-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinyexpr-extras\n"
               "Version: 1.0\n",
               "tinyexpr_extras-1.0.dist-info/entry_points.txt": "[pytest11]\nextras = tinyexpr_extras\n",
               "tinyexpr_extras.py": FORGE})
    _not_resolved(g, "tinyexpr_extras-1.0.dist-info/entry_points.txt: the fix adds or changes package metadata")
    assert "tinyexpr_extras-1.0.dist-info/entry_points.txt" in g.dropped_config_files
    assert g.tests_status["FAIL_TO_PASS"]["failure"] == [F2P]


DIST_INFO = {"forge-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: forge\nVersion: 1.0\n",
             "forge-1.0.dist-info/entry_points.txt": "[pytest11]\nforge = forge_plugin\n",
             "forge_plugin.py": FORGE}


def test_autoload_forges_without_coharden(tmp_path: Path) -> None:
    """The premise of the next test: plain ``python -m pytest`` in a checkout holding that entry point loads the
    plugin, and a failing test passes."""
    root = tmp_path / "repo"
    for path, text in {**DIST_INFO, "tests/test_it.py": "def test_it():\n    assert 1 == 2\n"}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    plain = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_it.py"],
                           cwd=root, capture_output=True, text=True, env=env, check=False)
    assert plain.returncode == 0, plain.stdout
    run = run_pytest(root, ["tests/test_it.py::test_it"], Settings(timeout=60, workers=1),
                     ProcessOptions(python=sys.executable))
    assert verdict_for(["tests/test_it.py::test_it"], run).outcome is Outcome.FAIL, run.output


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "fresh"])
def test_autoload_is_off_in_a_checkout_that_holds_an_entry_point(example: LocalInstance, tmp_path: Path,
                                                                  fork_server: bool) -> None:
    """The run itself, without the fix-side guard (the entry point is in the code state the tests run on): the
    golden test still fails on the unfixed code, in a fork of the warm server and in a fresh process."""
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1, fork_server=fork_server)
    with InstanceExecutor(example.instance, resolve_repo(example.instance, None), settings, None) as ex:
        state = make_patch([(path, None, text) for path, text in DIST_INFO.items()])
        verdict = ex.verdict(state, ex.golden_test())
        assert verdict.outcome is Outcome.FAIL, verdict
        assert (ex.site.current is not None) is fork_server  # the forked run did go through the server


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "fresh"])
def test_an_entry_point_named_like_an_environment_plugin(example: LocalInstance, tmp_path: Path,
                                                         fork_server: bool) -> None:
    """With autoload off the environment's plugins load by name (``-p NAME``), which pytest resolves through the
    entry points on ``sys.path``, the checkout first: a checkout entry point taking an environment plugin's name
    loads instead. The stream plugin tells where each entry-point plugin came from; one from the checkout makes
    the run tampered with, whatever its reports say."""
    plugins = environment_plugins(sys.executable)
    if not plugins:
        pytest.skip("the test interpreter has no pytest11 entry point to impersonate")
    name = plugins[0].name
    files = {**DIST_INFO, "forge-1.0.dist-info/entry_points.txt": f"[pytest11]\n{name} = forge_plugin\n"}
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1, fork_server=fork_server)
    with InstanceExecutor(example.instance, resolve_repo(example.instance, None), settings, None) as ex:
        verdict = ex.verdict(make_patch([(p, None, t) for p, t in files.items()]), ex.golden_test())
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict
    assert any(f"the pytest plugin {name!r} was loaded from package metadata in the checkout" in note
               for note in verdict.tampering), verdict.tampering


# --- 4. pytest.xfail() in the unfixed code ------------------------------------------------------------------------

def _xfailing_printer(example: LocalInstance, call: str) -> str:
    return _base(example, PRINTER).replace(
        "        den = self.parenthesize(expr.den, PREC_MUL)\n",
        "        den = self.parenthesize(expr.den, PREC_MUL)\n"
        "        if precedence(expr.den) == PREC_MUL:\n"
        f"            {call}\n")


def test_pytest_xfail_in_the_unfixed_code(grade, example: LocalInstance) -> None:
    g = grade({PRINTER: _xfailing_printer(example, 'import pytest; pytest.xfail("known limitation")')})
    _not_resolved(g, "pytest.xfail", f"{F2P}: skipped or xfailed by code in {PRINTER}")
    assert g.tests_status["FAIL_TO_PASS"]["failure"] == [F2P]  # an XFAIL is not a pass (coharden's rule)
    assert "an expected failure (XFAIL/XPASS), not a pass" in g.reason


def test_pytest_xfail_hidden_from_the_scan(grade, example: LocalInstance) -> None:
    g = grade({PRINTER: _xfailing_printer(example, 'getattr(__import__("py" + "test"), "x" + "fail")("known")')})
    _not_resolved(g, f"{F2P}: skipped or xfailed by code in {PRINTER}")
    assert g.tests_status["FAIL_TO_PASS"]["failure"] == [F2P]


def test_pytest_skip_hiding_a_regression_in_a_pass_to_pass_test(grade, example: LocalInstance,
                                                                tmp_path: Path) -> None:
    # the golden fix plus a regression of (a**b)**c that test_pow would see, hidden by a skip from library code
    broken = _golden_printer(example, tmp_path).replace(
        "        base = self.doprint(expr.base)\n",
        "        base = self.doprint(expr.base)\n"
        "        if precedence(expr.base) <= PREC_POW:\n"
        '            getattr(__import__("py" + "test"), "sk" + "ip")("unsupported")\n')
    g = grade({PRINTER: broken})
    _not_resolved(g, "tests/test_printer.py::test_pow: skipped or xfailed by code in")


# --- other configuration a fix must not bring -------------------------------------------------------------------

def test_a_module_shadowing_pytest_and_a_start_up_hook(grade, example: LocalInstance, tmp_path: Path) -> None:
    fixed = _golden_printer(example, tmp_path)
    g = grade({PRINTER: fixed, "pytest.py": "raise SystemExit(0)\n", "sitecustomize.py": "import os\n",
               "tinyexpr.pth": "import os\n"})
    _not_resolved(g, "pytest.py: the fix adds or changes a top-level module named like the test runner's",
                  "sitecustomize.py", "tinyexpr.pth")
    assert sorted(g.dropped_config_files) == ["pytest.py", "sitecustomize.py", "tinyexpr.pth"]


# --- the rule without a run -------------------------------------------------------------------------------------

def test_expected_failure_is_no_fail_to_pass_success() -> None:
    verdict = Verdict(outcome=Outcome.PASS, tests={"f1": [TestStatus.PASSED], "f2": [TestStatus.XFAIL],
                                                   "f3": [TestStatus.PASSED], "p": [TestStatus.XFAIL]},
                      expected_failures=["f3", "p"])  # f3: an XPASS (a plain pass in the JUnit file)
    status = grade_statuses(verdict, ["f1", "f2", "f3"], ["p"])
    assert status["FAIL_TO_PASS"] == {"success": ["f1"], "failure": ["f2", "f3"]}
    assert status["PASS_TO_PASS"] == {"success": ["p"], "failure": []}  # P2P keeps SWE-bench's rule


def test_plugin_loading_degrades_with_old_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    from coharden.execution import env_plugins

    fake = (env_plugins.EntryPoint("asyncio", "pytest_asyncio.plugin"), env_plugins.EntryPoint("obj", "mod:thing"))
    monkeypatch.setattr(env_plugins, "environment_plugins", lambda python: fake)
    # 4.5+: by entry-point name (registered as autoload would); 3.8-4.4: by module (an attribute target cannot be)
    assert env_plugins.plugin_args("py", "7.4.0") == ["-p", "asyncio", "-p", "obj"]
    assert env_plugins.plugin_args("py", "") == ["-p", "asyncio", "-p", "obj"]  # unknown: taken as new
    assert env_plugins.plugin_args("py", "4.4.2") == ["-p", "pytest_asyncio.plugin"]
    assert env_plugins.plugin_env("3.8.0") == {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    # before 3.8 autoload cannot be turned off: no variable, no -p (a plugin loaded twice is refused)
    assert env_plugins.plugin_args("py", "3.7.4") == []
    assert env_plugins.plugin_env("3.7.4") == {}


def test_screen_keeps_what_is_not_pytest_configuration() -> None:
    from coharden.evaluation.fix_tampering import screen_fix

    base = {"setup.cfg": "[metadata]\nname = x\n\n[tool:pytest]\ntestpaths = tests\n\n[flake8]\nmax = 1\n",
            "pyproject.toml": '[project]\nname = "x"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'}
    post = {"setup.cfg": "[metadata]\nname = x\nversion = 2\n\n[tool:pytest]\naddopts = -p evil\n\n[flake8]\nmax = 2\n",
            "pyproject.toml": '[project]\nname = "x"\nversion = "2"\n\n[tool.pytest.ini_options]\naddopts = "-p evil"\n'
                              'testpaths = ["tests"]\n'}
    fix = make_patch([(p, base[p], post[p]) for p in base])
    screen = screen_fix(fix, base.get, lambda patch: {p: post[p] for p in base if f"b/{p}" in patch})
    assert len(screen.tampering) == 2
    assert not screen.dropped
    # the applied change: everything but pytest's sections
    for patched in parse(screen.source):
        path = patched.path
        text = "".join(line.value for hunk in patched for line in hunk if not line.is_removed)
        assert "evil" not in text, path
    assert "version = 2" in screen.source
    assert 'version = "2"' in screen.source
    assert "max = 2" in screen.source
    # only a dependency bump: applied as it is, no note
    bump = make_patch([("setup.cfg", base["setup.cfg"], base["setup.cfg"].replace("max = 1", "max = 3"))])
    quiet = screen_fix(bump, base.get, lambda patch: {"setup.cfg": base["setup.cfg"].replace("max = 1", "max = 3")})
    assert quiet.source == bump
    assert not quiet.tampering
