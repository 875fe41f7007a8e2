"""``coharden check``: the regression test of a commit in a scratch git repository, checked from its root as a
user would, with real git, real pytest runs in the sandbox and a real store. Every check compares the user's
checkout (status, HEAD, files) before and after: nothing in it changes."""

from __future__ import annotations

import json
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

    def check(repo: Path, *args: str):
        monkeypatch.chdir(repo)
        before = state(repo) if (repo / ".git").exists() else None
        result = CliRunner().invoke(app, ["check", *args, "--store", str(store), "-c", "timeout=60"])
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

    again = checking(repo, "--fail-on", "borderline")  # the same commit: every verdict from the store
    assert again.exit_code == 1, again.output
    assert "verdicts: 0 run, " in again.output
    assert "from the store" in again.output
    assert checking(repo, "--fail-on", "never").exit_code == 0


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
