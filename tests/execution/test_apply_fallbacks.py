"""Patches applied as the SWE-bench harness applies them (``git apply``, ``git apply --reject``, ``patch
--fuzz=5``), safely, with the method in the verdict; and SWT-bench's reproduction-script mode: a test patch whose
script the runner collects no test from is graded by the script's exit status."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from tests.conftest import CALC_FILES, GOOD_TEST, calc_test_file, make_patch, run_git

from coharden.config import Settings
from coharden.errors import ApplyError, PatchError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.git import GIT_APPLY, PATCH_FUZZ, apply_patch
from coharden.execution.runners import SympyRunner
from coharden.execution.store import Store
from coharden.execution.testids import patch_tests
from coharden.execution.verify import fail_to_pass
from coharden.execution.workspace import Workspace
from coharden.patches import safe_paths
from coharden.schema.instance import Instance
from coharden.schema.verdict import Outcome, Raised, TestStatus, Verdict

needs_patch = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")

LINES = [f"v{i} = {i}\n" for i in range(1, 31)]


def _stale_repo(repo_factory) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """A repository and a patch made before one context line of its hunk changed (a stale context line)."""
    repo, _ = repo_factory({"pkg/mod.py": "".join(LINES)})
    changed = list(LINES)
    changed[14] = "v15 = 'fifteen'\n"
    patch = make_patch(repo, {"pkg/mod.py": "".join(changed)})
    drifted = list(LINES)
    drifted[12] = "v13 = 'drifted'\n"  # a context line of the hunk, not the line it changes
    (repo / "pkg" / "mod.py").write_text("".join(drifted))
    run_git(repo, "commit", "-qam", "drift")
    return repo, patch


@needs_patch
def test_a_stale_context_line_applies_with_the_harness_fuzz_fallback(repo_factory) -> None:  # type: ignore[no-untyped-def]
    repo, patch = _stale_repo(repo_factory)
    with Workspace(repo, "HEAD") as ws:
        applied = apply_patch(ws.root, patch)
        assert applied is not None
        assert applied.method == PATCH_FUZZ
        assert any("with fuzz" in note for note in applied.notes), applied.notes
        assert "v15 = 'fifteen'" in (ws.read("pkg/mod.py") or "")
        assert "v13 = 'drifted'" in (ws.read("pkg/mod.py") or "")
        # no backup or reject file left for a test to find
        assert sorted(p.name for p in (ws.root / "pkg").iterdir()) == ["mod.py"]
        ws.reset()
        # without the fallbacks it is git's error, as before
        with pytest.raises(ApplyError, match="pkg/mod.py: hunk #1"):
            apply_patch(ws.root, patch, fallbacks=False)


@needs_patch
def test_no_fallback_applies_part_of_a_patch(repo_factory) -> None:  # type: ignore[no-untyped-def]
    """A patch with one good file and one whose changed line is gone: git's --reject would apply the good one
    and leave a .rej; nothing of it may stay, and the error says every fallback failed."""
    repo, _ = repo_factory({"a.py": "".join(LINES), "b.py": "".join(LINES)})
    changed = list(LINES)
    changed[14] = "v15 = 'fifteen'\n"
    patch = make_patch(repo, {"a.py": "".join(changed), "b.py": "".join(changed)})
    gone = list(LINES)
    gone[14] = "v15 = 'elsewhere'\n"
    (repo / "b.py").write_text("".join(gone))
    run_git(repo, "commit", "-qam", "drift")
    with Workspace(repo, "HEAD") as ws:
        with pytest.raises(ApplyError) as info:
            ws.apply(patch)
        assert "b.py" in str(info.value)
        assert "patch --fuzz=5" in str(info.value)
        assert ws.read("a.py") == "".join(LINES)  # the good file was not applied either
        assert sorted(p.name for p in ws.root.iterdir() if p.name != ".git") == ["a.py", "b.py"]


def test_unsafe_paths_are_refused() -> None:
    body = "@@ -0,0 +1 @@\n+x\n"
    for name in ("../outside.py", "/etc/passwd", "a/../../x.py", ".git/hooks/pre-commit", "a//b.py"):
        patch = f"--- /dev/null\n+++ b/{name.lstrip('/')}\n{body}" if not name.startswith("/") else \
            f"--- /dev/null\n+++ {name}\n{body}"
        with pytest.raises(PatchError, match="unsafe path"):
            safe_paths(patch)
    assert safe_paths(f"--- /dev/null\n+++ b/pkg/new.py\n{body}") == ["pkg/new.py"]


@needs_patch
def test_a_patch_escaping_the_worktree_is_refused_by_every_fallback(repo_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mod.py").write_text("".join(LINES))
    repo, _ = repo_factory({"keep.py": "x = 1\n"})
    (repo / "link").symlink_to(outside)
    run_git(repo, "add", "link")
    run_git(repo, "commit", "-qm", "a link out of the repository")
    body = "".join(f" {line}" for line in LINES[11:14]) + "-v15 = 15\n+v15 = 'owned'\n" + \
        "".join(f" {line}" for line in LINES[15:18])
    stale = body.replace(" v13 = 13\n", " v13 = 'stale'\n")  # git refuses; patch --fuzz would match
    for target in ("../outside/mod.py", "link/mod.py"):
        patch = f"diff --git a/{target} b/{target}\n--- a/{target}\n+++ b/{target}\n@@ -12,7 +12,7 @@\n{stale}"
        with Workspace(repo, "HEAD") as ws, pytest.raises((ApplyError, PatchError)) as info:
            ws.apply(patch)
        assert "unsafe path" in str(info.value) or "symbolic link" in str(info.value), str(info.value)
    assert (outside / "mod.py").read_text() == "".join(LINES)


@needs_patch
def test_the_verdict_says_a_test_patch_was_fuzzed(calc_repo, calc_fix, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A test prediction written against an older test file (one context line changed since) is graded - F->P
    here - and its verdicts say it was applied by ``patch --fuzz=5``; a cached APPLY_ERROR from before the
    fallbacks is not reused."""
    repo, _ = calc_repo
    test_patch = make_patch(repo, calc_test_file(GOOD_TEST))
    text = (repo / "tests" / "test_calc.py").read_text()
    (repo / "tests" / "test_calc.py").write_text(text.replace("assert mul(2, 3) == 6", "assert mul(3, 2) == 6"))
    run_git(repo, "commit", "-qam", "the test file moved on")
    base = run_git(repo, "rev-parse", "HEAD").strip()
    settings = Settings(python=sys.executable, timeout=60, store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache")
    instance = Instance(instance_id="calc-1", repo=str(repo), base_commit=base, patch=calc_fix)
    store = Store(settings.store)
    with InstanceExecutor(instance, repo, settings, store) as executor:
        test = executor.test_patch(test_patch, name="stale")
        assert test.ids == ["tests/test_calc.py::test_add"]
        # an APPLY_ERROR stored by a coharden without fallbacks
        store.put_verdict(executor.key("", test), Verdict(outcome=Outcome.APPLY_ERROR, reason="test patch: old"))
        result = fail_to_pass(executor, test, calc_fix)
    assert result.fail_to_pass, result.summary()
    assert result.buggy.applied_with == {"test": PATCH_FUZZ}
    assert result.fixed.applied_with == {"source": GIT_APPLY, "test": PATCH_FUZZ}
    assert any("fuzz" in note for note in result.fixed.apply_notes)
    assert result.buggy.exec_mode == "unit_test"


REPRODUCE = """\
from calc import add

result = add(2, 3)
assert result == 5, f"add(2, 3) returned {result}"
print("reproduced: fixed")
"""

REPRODUCE_EXIT = """\
import sys
from calc import add

if add(2, 3) != 5:
    print("BUG: add is wrong")
    sys.exit(1)
"""


@pytest.mark.parametrize("script", [REPRODUCE, REPRODUCE_EXIT])
def test_a_reproduction_script_is_graded_by_its_exit_status(calc_repo, calc_fix, settings, script) -> None:  # type: ignore[no-untyped-def]
    """A root-level test_reproduce.py with no test function (module-level asserts, or sys.exit(1)): F->P by its
    exit status, as SWT-bench's reproduction_script mode grades it, and every verdict says so."""
    repo, base = calc_repo
    patch = make_patch(repo, {"test_reproduce.py": script})
    instance = Instance(instance_id="calc-1", repo=str(repo), base_commit=base, patch=calc_fix)
    with InstanceExecutor(instance, repo, settings.with_overrides(python=sys.executable)) as executor:
        test = executor.test_patch(patch, name="devstral")
        assert (test.ids, test.exec_mode) == (["test_reproduce.py"], "reproduction_script")
        result = fail_to_pass(executor, test, calc_fix)
    assert result.fail_to_pass, result.summary()
    assert result.buggy.exec_mode == result.fixed.exec_mode == "reproduction_script"
    assert result.buggy.tests == {"test_reproduce.py": [TestStatus.FAILED]}
    assert "test_reproduce.py exited with status 1" in result.buggy.reason
    assert result.fixed.tests == {"test_reproduce.py": [TestStatus.PASSED]}
    assert result.buggy.isolation == result.fixed.isolation != ""  # the tests' sandbox
    # the exception it died of, where its traceback shows one (a wrong fix's behaviour: its message, its place)
    if script is REPRODUCE:
        assert result.buggy.raised == {"test_reproduce.py": [Raised(
            case="test_reproduce.py", type="AssertionError", bases=["AssertionError"],
            message="add(2, 3) returned -1",
            where='test_reproduce.py:4: assert result == 5, f"add(2, 3) returned {result}"')]}
    else:  # it printed and exited: no exception to read
        assert result.buggy.raised == {}


def test_a_mixed_patch_runs_its_collected_tests(calc_repo, calc_fix, settings) -> None:  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    patch = make_patch(repo, {"test_reproduce.py": REPRODUCE, **calc_test_file(GOOD_TEST)})
    instance = Instance(instance_id="calc-1", repo=str(repo), base_commit=base, patch=calc_fix)
    with InstanceExecutor(instance, repo, settings.with_overrides(python=sys.executable)) as executor:
        test = executor.test_patch(patch, name="mixed")
        assert (test.ids, test.exec_mode) == (["tests/test_calc.py::test_add"], "unit_test")
        verdict = executor.verdict(calc_fix, test)
    assert verdict.passed, verdict.reason
    assert verdict.exec_mode == "unit_test"


def test_which_files_run_as_scripts() -> None:
    """sympy's bin/test collects only sympy/**/test_*.py: a root-level file with test functions is a script
    there, and a file with none is a script for every runner; given ids, the mode is unit_test."""
    after = {"test_reproduce.py": "def test_issue():\n    assert 1\n\nif __name__ == '__main__':\n    test_issue()\n",
             "sympy/core/tests/test_new.py": "x = 1\n"}

    def base(path: str) -> str | None:
        return None

    sympy = SympyRunner()
    assert patch_tests(after, base, name="t", ids=None, ids_are_descriptions=False, test_patterns=["test_*.py"],
                       collects=sympy.collects) == (["sympy/core/tests/test_new.py", "test_reproduce.py"],
                                                    "reproduction_script")
    assert patch_tests(after, base, name="t", ids=None, ids_are_descriptions=False, test_patterns=["test_*.py"],
                       collects=lambda p: True) == (["test_reproduce.py::test_issue"], "unit_test")
    broken = {"test_reproduce.py": "def (:\n"}
    with pytest.raises(Exception, match="syntax error"):
        patch_tests(broken, base, name="t", ids=None, ids_are_descriptions=False, test_patterns=["test_*.py"],
                    collects=sympy.collects)
    assert patch_tests(after, base, name="t", ids=["test_issue"], ids_are_descriptions=False,
                       test_patterns=["test_*.py"], collects=sympy.collects)[1] == "unit_test"


SYMPY_STYLE = """\
from calc import add


def test_issue():
    assert add(2, 3) == 5


if __name__ == "__main__":
    test_issue()
    print("ok")
"""


def test_a_root_script_sympy_s_runner_never_collects_is_graded_as_a_script(repo_factory) -> None:  # type: ignore[no-untyped-def]
    """Devstral-testgen's sympy predictions: a root-level test_reproduce.py with a test function, which bin/test
    (it searches sympy/ only) never runs - Invalid before ('ran no test'); now F->P by its exit status."""
    banner = "print('=' * 18 + ' tests finished: 0 passed, in 0.00 seconds ' + '=' * 19)"
    repo, base = repo_factory({**CALC_FILES, "bin/test": f"import sys\n{banner}\n"})
    fix = make_patch(repo, {"calc/__init__.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n"
                                                "    return a * b\n"})
    patch = make_patch(repo, {"test_reproduce.py": SYMPY_STYLE})
    instance = Instance(instance_id="sympy__calc-1", repo=str(repo), base_commit=base, patch=fix)
    settings = Settings(python=sys.executable, runner="sympy", fork_server=False, timeout=60)
    with InstanceExecutor(instance, repo, settings) as executor:
        test = executor.test_patch(patch, name="devstral")
        assert (test.ids, test.exec_mode) == (["test_reproduce.py"], "reproduction_script")
        result = fail_to_pass(executor, test, fix)
    assert result.fail_to_pass, result.summary()
    assert result.buggy.exec_mode == "reproduction_script"
    assert "AssertionError" in result.buggy.output_tail
