"""``coharden check``: the regression test of a commit in a scratch git repository, checked from its root as a
user would, with real git, real pytest runs in the sandbox and a real store. Every check compares the user's
checkout (status, HEAD, files) before and after: nothing in it changes."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.conftest import make_repo, run_git, write_files
from typer.testing import CliRunner

from coharden.cli.main import app

BUGGY = {
    "tiny/__init__.py": "",
    "tiny/clamp.py": """\
        def clamp(value, low, high):
            \"\"\"Clamp value into [low, high].\"\"\"
            if value < low:
                return low
            if value > low:
                return high
            return value


        def mean(values):
            return sum(values) / len(values)
        """,
    "tests/test_clamp.py": """\
        from tiny.clamp import clamp, mean


        def test_below():
            assert clamp(-5, 0, 10) == 0


        def test_mean():
            assert mean([1, 2, 3]) == 2
        """,
}
FIXED_SOURCE = BUGGY["tiny/clamp.py"].replace("if value > low:", "if value > high:")
REGRESSION_TEST = BUGGY["tests/test_clamp.py"] + """

        def test_inside_stays():
            assert clamp(5, 0, 10) == 5
        """


def commit(repo: Path, files: dict[str, str | None], message: str) -> str:
    write_files(repo, files)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "--quiet", "--no-gpg-sign", "-m", message)
    return run_git(repo, "rev-parse", "HEAD").strip()


def bug_fix_repo(root: Path) -> Path:
    """A tiny package whose commit HEAD fixes clamp() and adds the regression test (which checks only a value
    inside the range: a fix that drops the upper clamp gets through)."""
    repo, _ = make_repo(root / "repo", BUGGY)
    commit(repo, {"tiny/clamp.py": FIXED_SOURCE, "tests/test_clamp.py": REGRESSION_TEST},
           "clamp: a value inside the range stays itself")
    return repo


def state(repo: Path) -> tuple[str, str, dict[str, bytes]]:
    """The checkout as the user sees it: status, HEAD, every file's bytes outside .git."""
    files = {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*"))
             if p.is_file() and ".git" not in p.relative_to(repo).parts}
    return run_git(repo, "status", "--porcelain"), run_git(repo, "rev-parse", "HEAD"), files


@pytest.fixture
def checking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``check(repo, *args)``: ``coharden check ARGS`` from the root of ``repo`` (a store and cache of the test's
    own), asserting the checkout is the same after it."""
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    store = tmp_path / "store.sqlite"

    def check(repo: Path, *args: str, fresh: bool = False):
        """``fresh``: with a store of its own (nothing of the earlier checks answers)."""
        monkeypatch.chdir(repo)
        before = state(repo) if (repo / ".git").exists() else None
        where = tmp_path / f"store-{len(list(tmp_path.glob('store-*')))}.sqlite" if fresh else store
        result = CliRunner().invoke(app, ["check", *args, "--store", str(where), "-c", "timeout=60"])
        if before is not None:
            assert state(repo) == before, "the check changed the user's checkout"
        return result

    return check


def test_check_reports_fail_to_pass_and_the_wrong_fixes_the_commit_test_lets_through(tmp_path, checking) -> None:
    repo = bug_fix_repo(tmp_path)
    result = checking(repo)
    assert result.exit_code == 0, result.output  # Borderline upper bound: --fail-on lax passes it
    out = result.output
    assert "fail-to-pass: yes (parent FAIL, fix PASS)" in out
    assert "tests: tests/test_clamp.py::test_inside_stays" in out
    assert "wrong fixes the test lets through" in out
    assert "if value > high:" in out  # the surviving fix drops the upper clamp
    assert "upper bound" in out

    again = checking(repo, "--fail-on", "borderline")  # the same commit: the whole report from the store
    assert again.exit_code == 1, again.output
    assert "verdicts: none run, the report of an earlier check of this commit from the store" in again.output
    assert checking(repo, "--fail-on", "never").exit_code == 0


def _report_lines(output: str) -> list[str]:
    """The report as printed, but the line that says how its verdicts were got."""
    return [line for line in output.splitlines() if not line.startswith("verdicts: ")]


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command line of every process started from now on (``subprocess.Popen``, which every sandboxed test
    process and fork server goes through, as do git and the interpreter probes)."""
    started: list[list[str]] = []

    class Recorded(subprocess.Popen):
        def __init__(self, args, *rest, **options) -> None:
            started.append([str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)])
            super().__init__(args, *rest, **options)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    return started


def _test_processes(started: list[list[str]]) -> list[list[str]]:
    """The test processes and fork servers among ``started``: in bwrap (every one where bwrap works, as here), or
    pytest run as a module."""
    return [argv for argv in started if Path(argv[0]).name == "bwrap" or "pytest" in argv]


def _venv_with_pytest(root: Path) -> Path:
    """A virtual environment of its own (its packages ours to change) whose site directory reaches this one's
    (pytest and its plugins) through a .pth file; its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    ours = Path(pytest.__file__).parent.parent
    (site / "ours.pth").write_text(f"{ours}\n")
    return python


def test_a_second_check_of_the_same_commit_is_the_stored_report_and_starts_no_test_process(
        tmp_path, checking, processes) -> None:
    repo = bug_fix_repo(tmp_path)
    python = _venv_with_pytest(tmp_path / "venv")
    first = checking(repo, "--python", str(python))
    assert first.exit_code == 0, first.output
    assert _test_processes(processes), "the first check ran no test"  # the observation can fail
    assert "the report of an earlier check" not in first.output

    processes.clear()
    second = checking(repo, "--python", str(python), "--fail-on", "never")  # how it is shown: not in the key
    assert second.exit_code == 0, second.output
    assert _test_processes(processes) == [], second.output
    assert "verdicts: none run, the report of an earlier check of this commit from the store" in second.output
    assert _report_lines(second.output) == _report_lines(first.output)
    data = json.loads(checking(repo, "--python", str(python), "--format", "json").stdout)
    assert data["from_store"] is True
    assert data["survivors"]

    # another package in the interpreter: the report and its verdicts are computed again
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    (site / "extra-1.0.dist-info").mkdir()
    (site / "extra-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: extra\nVersion: 1.0\n")
    processes.clear()
    upgraded = checking(repo, "--python", str(python))
    assert _test_processes(processes), upgraded.output
    assert "the report of an earlier check" not in upgraded.output
    assert _report_lines(upgraded.output) == _report_lines(first.output)

    # an option that reaches the tests (the memory limit): computed again
    processes.clear()
    limited = checking(repo, "--python", str(python), "-c", "memory_mb=3000")
    assert _test_processes(processes), limited.output
    assert "the report of an earlier check" not in limited.output


def test_each_format_is_read_by_its_own_parser(tmp_path, checking) -> None:
    repo = bug_fix_repo(tmp_path)
    markdown = checking(repo, "--format", "markdown")
    assert markdown.exit_code == 0, markdown.output
    assert "<details>" in markdown.output
    assert "```diff" in markdown.output
    assert "</details>" in markdown.output
    sarif = json.loads(checking(repo, "--format", "sarif").stdout)
    results = sarif["runs"][0]["results"]
    assert sarif["version"] == "2.1.0"
    assert results
    assert results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "tiny/clamp.py"
    suite = ET.fromstring(checking(repo, "--format", "junit").stdout.split("\n", 1)[1]).find("testsuite")
    assert suite is not None
    assert int(suite.get("failures", "0")) >= 1
    data = json.loads(checking(repo, "--format", "json", "--output", str(tmp_path / "r.json")).output or
                      (tmp_path / "r.json").read_text())
    assert data["fail_to_pass"] is True
    assert data["survivors"]


def test_a_reference_test_gives_the_full_matrix_and_the_class(tmp_path, checking) -> None:
    repo = bug_fix_repo(tmp_path)
    run_git(repo, "checkout", "--quiet", "-b", "strict", "HEAD~1")
    commit(repo, {"tiny/clamp.py": FIXED_SOURCE, "tests/test_clamp.py": REGRESSION_TEST + """
        def test_above_is_clamped():
            assert clamp(15, 0, 10) == 10
        """}, "clamp: the strict test")
    run_git(repo, "checkout", "--quiet", "main")
    result = checking(repo, "--reference", "main~1..strict", "--format", "json", "--fail-on", "never")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["laxity_is_upper_bound"] is False
    assert data["matrix"]["beta"] >= 1
    assert data["class"] in ("Lax", "Borderline")


def test_a_dirty_worktree_is_left_alone_and_not_seen_by_the_tests(tmp_path, checking) -> None:
    repo = bug_fix_repo(tmp_path)
    write_files(repo, {"tiny/clamp.py": BUGGY["tiny/clamp.py"], "scratch.txt": "mine\n"})  # the bug, uncommitted
    result = checking(repo, "--format", "json")
    assert json.loads(result.stdout)["fail_to_pass"] is True, result.output
    assert (repo / "scratch.txt").read_text() == "mine\n"


def test_an_editable_install_of_the_project_imports_the_clone_not_the_checkout(tmp_path, checking) -> None:
    """The project installed in editable mode, as one works on it: its src/ on the interpreter's sys.path (the
    .pth line setuptools writes). The checkout at the fix: were it imported, the test would pass on the parent
    (NotReproducing); at the parent: the fix would fail (Misaligned). F->P both times, and every mutant run
    imports its own clone (the surviving wrong fix is found)."""
    layout = {path.replace("tiny/", "src/tiny/"): text for path, text in BUGGY.items()}
    # the version module the install generates (setuptools-scm): ignored, in no commit
    layout |= {"src/tiny/__init__.py": "from tiny._version import version\n", ".gitignore": "_version.py\n"}
    repo, _ = make_repo(tmp_path / "repo", layout)
    commit(repo, {"src/tiny/clamp.py": FIXED_SOURCE, "tests/test_clamp.py": REGRESSION_TEST},
           "clamp: a value inside the range stays itself")
    write_files(repo, {"src/tiny/_version.py": "version = '0.1'\n", "src/tiny/wip.py": "unfinished = 1\n"})
    python = _venv_with_pytest(tmp_path / "venv")
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    (site / "__editable__.tiny-0.1.pth").write_text(f"{repo / 'src'}\n")
    imported = subprocess.run([str(python), "-c", "import tiny; print(tiny.__file__)"], cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout
    assert imported.startswith(str(repo / "src")), imported  # the interpreter imports the checkout
    at_fix = checking(repo, "--python", str(python), "--format", "json")
    data = json.loads(at_fix.stdout)
    assert data["fail_to_pass"] is True, at_fix.output
    assert any("if value > high:" in s["change"] for s in data["survivors"]), at_fix.output
    overlays = list((tmp_path / "cache" / "check-overlays").rglob("*.py"))  # generated files only
    assert [p.relative_to(p.parents[2]).as_posix() for p in overlays] == ["src/tiny/_version.py"]
    run_git(repo, "checkout", "--quiet", "HEAD~1")
    at_parent = checking(repo, "--python", str(python), "--format", "json", "main", fresh=True)
    data = json.loads(at_parent.stdout)
    assert data["fail_to_pass"] is True, at_parent.output
    assert data["from_store"] is False


def _not_a_repository(root: Path) -> Path:
    (root / "plain").mkdir()
    return root / "plain"


def _no_test_change(root: Path) -> Path:
    repo, _ = make_repo(root / "repo", BUGGY)
    commit(repo, {"tiny/clamp.py": FIXED_SOURCE}, "fix only")
    return repo


def _no_source_change(root: Path) -> Path:
    repo, _ = make_repo(root / "repo", BUGGY)
    commit(repo, {"tests/test_clamp.py": REGRESSION_TEST}, "test only")
    return repo


def _merge_commit(root: Path) -> Path:
    repo, _ = make_repo(root / "repo", BUGGY)
    run_git(repo, "checkout", "--quiet", "-b", "side")
    commit(repo, {"tiny/clamp.py": FIXED_SOURCE, "tests/test_clamp.py": REGRESSION_TEST}, "fix")
    run_git(repo, "checkout", "--quiet", "main")
    commit(repo, {"README": "x\n"}, "docs")
    run_git(repo, "merge", "--quiet", "--no-ff", "--no-gpg-sign", "-m", "merge", "side")
    return repo


def _not_reproducing(root: Path) -> Path:
    repo, _ = make_repo(root / "repo", BUGGY)
    commit(repo, {"tiny/clamp.py": FIXED_SOURCE, "tests/test_clamp.py": BUGGY["tests/test_clamp.py"] + """
        def test_mean_of_one():
            assert mean([4]) == 4
        """}, "a test that passes on the parent too")
    return repo


def _needs_a_service(root: Path) -> Path:
    repo, _ = make_repo(root / "repo", BUGGY)
    commit(repo, {"tiny/clamp.py": FIXED_SOURCE, "tests/test_clamp.py": BUGGY["tests/test_clamp.py"] + """

        def test_inside_stays():
            import socket
            socket.create_connection(("127.0.0.1", 5432), timeout=2).close()  # a database
            assert clamp(5, 0, 10) == 5
        """}, "a test that needs a database")
    return repo


@pytest.mark.parametrize(("make", "says"), [
    (_not_a_repository, "not a git repository"),
    (_no_test_change, "changes no test file"),
    (_no_source_change, "changes only test files"),
    (_merge_commit, "is a merge commit"),
    (_not_reproducing, "NotReproducing: the test does not fail on the parent commit"),
    (_needs_a_service, "needs a service"),
])
def test_a_commit_that_cannot_be_checked_is_one_error_line_and_exit_status_2(tmp_path, checking, make, says) -> None:
    where = make(tmp_path)
    result = checking(where)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert says in errors[0], result.output


def test_import_roots_name_where_the_checked_code_is_imported_from(tmp_path) -> None:
    """The interpreter's sys.path entries in the repository (not its own .venv there), the parents of what its
    editable finders map there, the directory holding each fixed file's top-level package; nothing outside the
    repository."""
    from coharden.check.interpreter import Interpreter, import_roots

    repo = tmp_path / "repo"
    (repo / "lib" / "pkg" / "sub").mkdir(parents=True)
    interp = Interpreter(python="python", digest="0" * 64,
                         path=("/usr/lib/python3.11", str(repo / "src"), str(tmp_path / "elsewhere"),
                               str(repo / ".venv" / "lib" / "site-packages")),
                         mapped=(str(repo / "flat" / "mod"), "/opt/other/pkg"), prefixes=(str(repo / ".venv"),))
    tracked = ["lib/pkg/__init__.py", "lib/pkg/sub/__init__.py", "lib/pkg/sub/core.py", "setup.py"]
    assert import_roots(repo, interp, ["lib/pkg/sub/core.py", "setup.py", "README.md"], tracked) == [
        "src", "flat", "lib", "."]


def test_documentation_of_a_fix_is_left_out_of_the_check(tmp_path) -> None:
    """A news fragment or changelog is no code to mutate (a mutant dropping it behaves as the fix); a data file
    inside a package is code."""
    from coharden.check.commit import is_documentation, read_change

    assert all(map(is_documentation, ["changelog/14474.bugfix.rst", "AUTHORS", "docs/usage.md", "HISTORY.md"]))
    assert not any(map(is_documentation, ["src/pkg/words.txt", "setup.py"]))
    repo, _ = make_repo(tmp_path / "repo", BUGGY)
    commit(repo, {"tiny/clamp.py": FIXED_SOURCE, "tests/test_clamp.py": REGRESSION_TEST,
                  "changelog/1.bugfix.rst": "clamp keeps values inside the range\n"}, "clamp")
    change = read_change(repo, "HEAD", ["tests/"])
    assert change.fix_files == ["tiny/clamp.py"]
    assert change.doc_files == ["changelog/1.bugfix.rst"]


def test_the_overlay_takes_the_generated_modules_of_the_fixed_packages_only(tmp_path) -> None:
    """At the repository's root only the fix's top-level packages are looked in: an ignored settings module
    beside them is never copied into a clone; an untracked file git does not ignore (work in progress) neither."""
    from coharden.check.commit import read_change
    from coharden.check.run import checked_settings
    from coharden.config import Settings

    repo, _ = make_repo(tmp_path / "repo", {**BUGGY, ".gitignore": "_version.py\nlocal_settings.py\n"})
    commit(repo, {"tiny/clamp.py": FIXED_SOURCE, "tests/test_clamp.py": REGRESSION_TEST}, "clamp")
    write_files(repo, {"tiny/_version.py": "version = '1'\n", "local_settings.py": "TOKEN = 'secret'\n",
                       "tiny/wip.py": "x = 1\n"})
    settings = checked_settings(read_change(repo, "HEAD", ["tests/"]),
                                Settings(python=sys.executable, cache_dir=tmp_path / "cache"))
    assert settings.environment.env_overlay is not None
    assert sorted(p.relative_to(settings.environment.env_overlay).as_posix()
                  for p in settings.environment.env_overlay.rglob("*") if p.is_file()) == ["tiny/_version.py"]
    assert len(settings.environment.env_fingerprint) == 64
