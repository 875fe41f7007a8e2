"""Throwaway workspaces never touch the user's checkout; git apply errors name the file and hunk."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import GOOD_TEST, calc_test_file, make_patch, run_git

from coharden.errors import ApplyError, PatchError, RepoError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.git import apply_patch
from coharden.execution.workspace import Workspace
from coharden.schema.instance import Instance


def _snapshot(repo: Path) -> tuple[str, str, list[str]]:
    status = run_git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored")
    head = run_git(repo, "rev-parse", "HEAD")
    files = sorted(str(p.relative_to(repo / ".git")) for p in (repo / ".git").rglob("*"))
    return status, head, files


def test_user_checkout_is_never_modified(calc_repo, calc_fix, settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    test_text = make_patch(repo, calc_test_file(GOOD_TEST))  # (the helper resets the checkout: do it first)
    # the user has work in progress: an uncommitted edit and an untracked file
    (repo / "calc" / "__init__.py").write_text((repo / "calc" / "__init__.py").read_text() + "# wip\n")
    (repo / "notes.txt").write_text("mine\n")
    before = _snapshot(repo)
    worktree_content = (repo / "calc" / "__init__.py").read_text()

    instance = Instance(instance_id="calc", repo=str(repo), base_commit=base)
    with InstanceExecutor(instance, repo, settings) as executor:
        test = executor.test_patch(test_text)
        assert executor.verdict(calc_fix, test).passed
        assert executor.verdict("", test).failed
        ws_root = executor.workspace.root
        assert not str(ws_root).startswith(str(repo))
    assert not ws_root.parent.exists()

    assert _snapshot(repo) == before
    assert (repo / "calc" / "__init__.py").read_text() == worktree_content
    assert run_git(repo, "worktree", "list").count("\n") == 1


def test_workspace_removed_after_an_exception(calc_repo, calc_fix) -> None:  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    before = _snapshot(repo)
    seen: list[Path] = []

    def job() -> None:
        with Workspace(repo, base) as ws:
            seen.append(ws.root)
            ws.apply(calc_fix)
            (ws.root / "junk.txt").write_text("x")
            assert "a + b" in (ws.root / "calc" / "__init__.py").read_text()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        job()
    root = seen[0]
    assert not root.exists()
    assert not root.parent.exists()
    assert _snapshot(repo) == before
    assert "a - b" in (repo / "calc" / "__init__.py").read_text()


def test_workspace_reset_restores_base(calc_repo, calc_fix, tmp_path) -> None:  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    with Workspace(repo, base, parent=tmp_path) as ws:
        assert ws.root.parent.parent == tmp_path
        ws.apply(calc_fix)
        ws.write("tests/test_new.py", "def test_x():\n    pass\n")
        (ws.root / "build").mkdir()
        (ws.root / "build" / "out.o").write_text("binary")
        ws.reset()
        assert "a - b" in ws.read("calc/__init__.py")
        assert ws.read("tests/test_new.py") is None
        assert not (ws.root / "build").exists()
        assert run_git(ws.root, "status", "--porcelain", "--ignored") == ""
        assert run_git(ws.root, "rev-parse", "HEAD").strip() == base


def test_a_workspace_has_no_ref_to_the_commits_after_its_base(calc_repo, calc_fix, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The fix is a later commit of the user's repository: a test in the worktree must not find it by name
    (``git log --all``, ``origin/...``, a tag)."""
    repo, base = calc_repo
    run_git(repo, "checkout", "-q", "-b", "fixed")
    (repo / "fix.patch").write_text(calc_fix)
    run_git(repo, "apply", "fix.patch")
    (repo / "fix.patch").unlink()
    run_git(repo, "commit", "-qam", "the fix")
    run_git(repo, "tag", "v-fixed")
    fixed = run_git(repo, "rev-parse", "HEAD").strip()
    with Workspace(repo, base, parent=tmp_path) as ws:
        assert fixed not in run_git(ws.root, "rev-list", "--all").split()
        assert run_git(ws.root, "for-each-ref") == ""
        assert run_git(ws.root, "remote") == ""
        assert run_git(ws.root, "rev-parse", "HEAD").strip() == base
        ws.apply(calc_fix)  # objects still come from the borrowed repository
        ws.reset()


def test_unknown_base_commit_is_repo_error(calc_repo, settings) -> None:  # type: ignore[no-untyped-def]
    repo, _ = calc_repo
    with pytest.raises(RepoError, match="unknown base commit 'deadbeef"):
        Workspace(repo, "deadbeef" * 5)
    instance = Instance(instance_id="calc", repo=str(repo), base_commit="0" * 40)
    with pytest.raises(RepoError, match="unknown base commit"):
        InstanceExecutor(instance, repo, settings)


def test_not_a_git_repository(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(RepoError, match="not a git repository"):
        Workspace(plain, "HEAD")


def test_temp_dirs_honour_tmpdir(calc_repo, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tempfile

    repo, base = calc_repo
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    with Workspace(repo, base) as ws:
        assert ws.root.parent.parent == tmp
        assert [p.name.startswith("coharden-ws-") for p in tmp.iterdir()] == [True]
    assert list(tmp.iterdir()) == []


# --- git apply errors ---------------------------------------------------------------------------------------

def test_patch_that_does_not_apply_names_file_and_hunk(repo_factory) -> None:  # type: ignore[no-untyped-def]
    lines = [f"v{i} = {i}\n" for i in range(1, 31)]
    repo, base = repo_factory({"pkg/mod.py": "".join(lines)})
    changed = list(lines)
    changed[1] = "v2 = 'two'\n"
    changed[25] = "v26 = 'twenty-six'\n"
    patch = make_patch(repo, {"pkg/mod.py": "".join(changed)})
    # the second hunk's context and the line it changes no longer match the code (a stale context line alone
    # applies with the harness's last fallback, patch --fuzz=5: see test_apply_fallbacks)
    drifted = list(lines)
    drifted[24] = "v25 = 'drifted'\n"
    drifted[25] = "v26 = 'drifted'\n"
    drifted[26] = "v27 = 'drifted'\n"
    (repo / "pkg" / "mod.py").write_text("".join(drifted))
    run_git(repo, "commit", "-qam", "drift")
    with Workspace(repo, "HEAD") as ws:
        with pytest.raises(ApplyError) as info:
            ws.apply(patch)
        message = str(info.value)
        assert "pkg/mod.py" in message
        assert "hunk #2" in message
        assert "@@ -23," in message
        # all or nothing, whatever the fallback: the first hunk did not land either
        assert ws.read("pkg/mod.py") == "".join(drifted)


def test_patch_for_missing_file_and_garbage(repo_factory) -> None:  # type: ignore[no-untyped-def]
    repo, _ = repo_factory({"a.py": "x = 1\n"})
    patch = make_patch(repo, {"a.py": "x = 2\n"}).replace("a.py", "b.py")
    with pytest.raises(ApplyError, match="b.py"):
        apply_patch(repo, patch)
    with pytest.raises(PatchError):
        apply_patch(repo, "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,5 +1,5 @@\n-x\n")
    apply_patch(repo, "")  # empty patch: nothing to do
    assert (repo / "a.py").read_text() == "x = 1\n"


def test_a_checkout_is_reused_across_workspaces_and_keeps_what_it_is_told(calc_repo, calc_fix) -> None:  # type: ignore[no-untyped-def]
    from coharden.execution.workspace import Checkout

    repo, base = calc_repo
    moves: list[Path] = []
    planted_seen: list[bool] = []

    def on_move(path: Path) -> None:  # what coharden itself keeps (e.g. checked-hash bytecode)
        planted_seen.append((path / "calc" / "__pycache__" / "evil.pyc").exists())
        (path / "calc" / "__pycache__").mkdir(exist_ok=True)
        (path / "calc" / "__pycache__" / "kept.pyc").write_bytes(b"trusted")
        moves.append(path)

    checkout = Checkout(keep=["__pycache__"], on_move=on_move)
    try:
        with Workspace(repo, base, checkout=checkout) as first:
            path = first.root
            first.apply(calc_fix)
            # an untrusted test plants bytecode for a later test and rewrites the trusted file
            (path / "calc" / "__pycache__" / "evil.pyc").write_bytes(b"planted")
            (path / "calc" / "__pycache__" / "kept.pyc").write_bytes(b"rewritten")
            (path / "scratch.txt").write_text("dropped")
        assert checkout.path == path  # closing the workspace leaves the clone in place
        assert path.is_dir()
        with Workspace(repo, base, checkout=checkout) as second:
            assert second.root == path  # moved, not cloned again
            assert not (path / "scratch.txt").exists()
            assert (path / "calc" / "__pycache__" / "kept.pyc").read_bytes() == b"trusted"
            assert not (path / "calc" / "__pycache__" / "evil.pyc").exists()
            assert "a - b" in (path / "calc" / "__init__.py").read_text()  # the fix is gone
            second.apply(calc_fix)
            (path / "calc" / "__pycache__" / "evil.pyc").write_bytes(b"planted")
            second.reset()  # between two jobs of one workspace: planted files go too
            assert not (path / "calc" / "__pycache__" / "evil.pyc").exists()
            assert (path / "calc" / "__pycache__" / "kept.pyc").read_bytes() == b"trusted"
        assert moves == [path, path]
        assert planted_seen == [False, False]  # the refresh never sees a planted file
    finally:
        checkout.close()
    assert checkout.path is None
    assert not path.exists()


def test_overlay_files_are_copies_not_links(calc_repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A test writing to a built file of the overlay (a C extension) must not change the environment's copy."""
    repo, base = calc_repo
    overlay = tmp_path / "overlay"
    (overlay / "calc").mkdir(parents=True)
    (overlay / "calc" / "_speedups.so").write_bytes(b"built")
    with Workspace(repo, base, overlay=overlay) as ws:
        laid = ws.root / "calc" / "_speedups.so"
        with open(laid, "r+b") as handle:  # write through whatever the workspace laid there
            handle.write(b"EVIL!")
    assert (overlay / "calc" / "_speedups.so").read_bytes() == b"built"


def test_a_snapshot_without_a_files_blob_is_named_not_a_crash(tmp_path: Path) -> None:
    """A snapshot may leave out its largest files (astropy's IERS tables): checking out such a commit says which
    file is missing and what to do, as a SnapshotError (a RepoError) the batch commands report per instance."""
    from tests.conftest import make_repo

    from coharden.errors import SnapshotError
    from coharden.execution.git import git

    repo, commit = make_repo(tmp_path / "repo", {"pkg/__init__.py": "X = 1\n", "pkg/data/table.dat": "1 2 3\n"})
    blob = run_git(repo, "rev-parse", f"{commit}:pkg/data/table.dat").strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    (repo / "pkg" / "data" / "table.dat").unlink()
    with pytest.raises(SnapshotError, match=r"lacks pkg/data/table.dat at this commit .*full clone") as caught:
        git(["reset", "--quiet", "--hard", commit], repo)
    assert isinstance(caught.value, RepoError)


def test_a_reset_leaves_nothing_a_test_planted(calc_repo, calc_fix) -> None:  # type: ignore[no-untyped-def]
    """Nested repositories, attributes files, fifos, links, locked and very deep directories: none survives a
    reset, and the checkout's tracked files come back byte for byte (issue 32)."""
    import os
    import subprocess

    repo, base = calc_repo
    with Workspace(repo, base) as ws:
        root = ws.root
        pristine = (root / "calc" / "__init__.py").read_bytes()
        ws.apply(calc_fix)
        nested = root / "calc" / "__pycache__"
        nested.mkdir()
        (nested / "__init__.cpython-311.pyc").write_bytes(b"planted")
        subprocess.run(["git", "init", "-q", str(nested)], check=True)
        (root / "calc" / ".gitattributes").write_text("* text eol=crlf ident working-tree-encoding=UTF-16\n")
        (root / ".gitattributes").write_text("* text eol=crlf\n")
        os.mkfifo(root / "fifo")
        (root / "link").symlink_to("/etc")
        deep = root / "deep"
        deep.mkdir()
        here = Path.cwd()
        os.chdir(deep)
        try:
            for _ in range(1200):  # beyond the recursion limit
                Path("d").mkdir()
                os.chdir("d")
        finally:
            os.chdir(here)
        locked = root / "locked" / "inner"
        locked.mkdir(parents=True)
        (locked / "x.py").write_text("x = 1\n")
        locked.chmod(0)
        (root / "calc").chmod(0o500)
        ws.reset()
        tracked = {Path(p).parts[0] for p in run_git(root, "ls-files").split()}
        assert {p.name for p in root.iterdir()} == {".git", *tracked}
        assert (root / "calc" / "__init__.py").read_bytes() == pristine
        assert run_git(root, "status", "--porcelain", "--ignored") == ""
        assert not nested.exists()


def test_renew_writes_every_file_again(calc_repo) -> None:  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    with Workspace(repo, base) as ws:
        assert not ws.renew()  # nothing ran here: nothing to do
        (ws.root / "calc" / "__init__.py").write_text("changed behind git's back\n")
        ws.tainted = True
        assert ws.renew()
        assert run_git(ws.root, "status", "--porcelain", "--ignored") == ""
        assert not ws.tainted


def test_reading_back_follows_no_link_and_waits_on_no_fifo(tmp_path: Path) -> None:
    import os

    from coharden.execution.readback import UnsafeFile, read_bytes, read_text

    secret = tmp_path / "secret"
    secret.write_text("host secret")
    scratch = tmp_path / "scratch"
    (scratch / "run").mkdir(parents=True)
    (scratch / "run" / "junit.xml").write_text("<ok/>")
    assert read_text(scratch / "run" / "junit.xml", anchor=scratch) == "<ok/>"
    (scratch / "run" / "link.xml").symlink_to(secret)
    with pytest.raises(UnsafeFile, match="symbolic link"):
        read_bytes(scratch / "run" / "link.xml")
    os.mkfifo(scratch / "run" / "fifo")
    with pytest.raises(UnsafeFile, match="not a regular file"):
        read_bytes(scratch / "run" / "fifo")  # returns at once: opened without blocking
    with pytest.raises(UnsafeFile, match="not a regular file"):
        read_bytes(scratch / "run")
    (scratch / "swapped").symlink_to(tmp_path)  # a directory on the way swapped for a link
    with pytest.raises(UnsafeFile, match="on its way"):
        read_bytes(scratch / "swapped" / "secret", anchor=scratch)
    (scratch / "big").write_bytes(b"x" * 100)
    with pytest.raises(UnsafeFile, match="larger than"):
        read_bytes(scratch / "big", limit=10)
    assert read_bytes(scratch / "big", limit=10, tail=True) == b"x" * 10
    with pytest.raises(FileNotFoundError):
        read_bytes(scratch / "missing")


def test_a_workspace_reads_no_link_a_patch_laid_down(calc_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo, base = calc_repo
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    with Workspace(repo, base) as ws:
        (ws.root / "tests").mkdir(exist_ok=True)
        (ws.root / "tests" / "test_link.py").symlink_to(secret)
        assert ws.read("tests/test_link.py") is None
        assert ws.read("calc/__init__.py") is not None


def test_a_workspace_writes_through_no_link_a_patch_laid_down(calc_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """coharden writes into a worktree outside the sandbox (the import probe, a renamed test copy): a link a patch
    laid down at that path, or at a directory on its way, is replaced, never written through."""
    repo, base = calc_repo
    victim, victim_dir = tmp_path / "victim.txt", tmp_path / "victim-dir"
    victim.write_text("precious")
    victim_dir.mkdir()
    with Workspace(repo, base) as ws:
        (ws.root / "probe.py").symlink_to(victim)
        (ws.root / "deep").symlink_to(victim_dir, target_is_directory=True)
        ws.write("probe.py", "written")
        ws.write("deep/inner/file.py", "written too")
        assert (ws.root / "probe.py").read_text() == "written"
        assert not (ws.root / "probe.py").is_symlink()
        assert (ws.root / "deep" / "inner" / "file.py").read_text() == "written too"
        with pytest.raises(ValueError, match="inside the worktree"):
            ws.write("../escape.py", "x")
    assert victim.read_text() == "precious"
    assert list(victim_dir.iterdir()) == []
