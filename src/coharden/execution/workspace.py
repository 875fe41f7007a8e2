"""Throwaway checkouts of a repository at a commit; the user's checkout is never touched.

A workspace is a ``git clone --shared --no-checkout`` of the user's repository into a temporary directory
(objects are borrowed through alternates, so it is cheap and writes nothing into the source repository,
unlike ``git worktree add`` which registers itself there). It is reset between jobs instead of being
re-created, and removed on exit, on errors and on Ctrl-C.

A :class:`Checkout` is a clone that outlives its workspaces: a workspace given one moves it to its commit
(``git checkout --force`` + ``git clean``) instead of cloning, and leaves it in place on close. Runs over many
instances of one repository (the real-bugs study) reuse a few checkouts instead of cloning per instance.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from coharden.execution.git import apply_patch, check_repo, git, resolve_commit
from coharden.execution.locks import file_lock
from coharden.execution.sandbox import mark_owner, sweep_leftovers


def _clone(source: Path, commit: str, parent: Path | None) -> Path:
    sweep_leftovers(parent=parent)  # workspaces of coharden runs that were killed
    root = Path(tempfile.mkdtemp(prefix="coharden-ws-", dir=parent))
    mark_owner(root)
    path = root / "repo"
    try:
        git(["clone", "--quiet", "--shared", "--no-checkout", str(source), str(path)], root)
        git(["checkout", "--quiet", "--detach", commit], path)
        drop_refs(path)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return path


def base_objects(source: Path, commit: str, cache_dir: Path) -> Path:
    """An object directory holding ``commit`` and its tree only, packed once into ``cache_dir``.

    A worktree borrows its objects from the source repository (``clone --shared``), which holds the commits
    after the base too: for a SWE-bench instance, the fix among them. :func:`drop_refs` hides them from ``git
    log --all``, but ``git cat-file --batch-all-objects`` still lists every object of the alternates, so a test
    (or an agent) could read the fixed files. Inside the sandbox this directory is mounted where the source's
    objects are, so git there works on the base commit (status, diff, show) and finds nothing newer; coharden's
    own git commands, outside, still see the whole source. The commit's parents are absent: ``git log`` inside
    shows the base commit, then stops."""
    source_git = source / ".git" if (source / ".git").exists() else source
    key = hashlib.sha256(f"{source_git.resolve()}\0{commit}".encode()).hexdigest()[:24]
    target = cache_dir / "base-objects" / key
    done = target / "info" / "coharden-complete"  # git ignores unknown files under info/
    if done.is_file():
        return target
    with file_lock(cache_dir / "base-objects" / f"{key}.lock"):
        if done.is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        (target / "pack").mkdir(parents=True)
        (target / "info").mkdir()
        objects = git(["rev-list", "--objects", "--no-walk", commit], source).stdout
        git(["pack-objects", "-q", str(target / "pack" / "pack")], source, input=objects)
        done.write_text(commit + "\n")
    return target


def drop_refs(path: Path) -> None:
    """Delete every ref of a clone (branches, tags, the origin's): a test that runs ``git log --all`` or ``git
    show origin/main`` in its worktree must not find the commits after the instance's base - the fix among
    them. The clone stays at its detached HEAD; commits are still found by hash through the alternates."""
    refs = git(["for-each-ref", "--format=delete %(refname)"], path).stdout
    if refs.strip():
        git(["update-ref", "--no-deref", "--stdin"], path, input=refs)
    git(["remote", "remove", "origin"], path, check=False)


class Checkout:
    """A long-lived clone that workspaces borrow one at a time (see the module docstring).

    ``keep``: ``git clean`` exclude patterns that survive every move and reset (e.g. ``__pycache__`` holding
    checked-hash bytecode); ``on_move(path)``: called after every move (e.g. to refresh that bytecode)."""

    def __init__(self, *, parent: Path | None = None, keep: Sequence[str] = (),
                 on_move: Callable[[Path], None] | None = None) -> None:
        self.path: Path | None = None
        self.source: Path | None = None
        self._parent = parent
        self.clean_args = ["-fdxq", *(arg for pattern in keep for arg in ("-e", pattern))]
        self._keep = tuple(keep)
        self._on_move = on_move
        self._trusted: dict[str, str] = {}  # kept files as coharden left them: relative path -> sha256

    def move(self, source: Path, commit: str) -> Path:
        """The clone, at ``commit`` of ``source`` with untracked files removed (cloned on first use, and
        again when the source repository changes)."""
        if self.path is not None and self.source == source and self.path.is_dir():
            git(["checkout", "--quiet", "--force", "--detach", commit], self.path)
            git(["clean", *self.clean_args], self.path)
            self.scrub(self.path)  # the last workspace may have closed after an untrusted run without a reset
        else:
            self.close()
            self.path = _clone(source, commit, self._parent)
            self.source = source
        if self._on_move is not None:
            self._on_move(self.path)
        self._trusted = {rel: digest for rel, digest in self._kept_files(self.path)}
        return self.path

    def scrub(self, path: Path) -> int:
        """Remove every kept file (e.g. ``__pycache__`` bytecode) that differs from what coharden left after the
        last move: a test runs with a writable checkout and could plant a ``.pyc`` (checked-hash, or pytest's
        assertion-rewrite cache, which trusts size and mtime only) that a later test would import. Returns how
        many files were removed."""
        removed = 0
        for rel, digest in self._kept_files(path):
            if self._trusted.get(rel) != digest:
                (path / rel).unlink(missing_ok=True)
                removed += 1
        return removed

    def _kept_files(self, path: Path) -> list[tuple[str, str]]:
        """(relative path, sha256) of every file inside a directory named by a keep pattern."""
        names = {pattern.strip("/") for pattern in self._keep}
        found: list[tuple[str, str]] = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            if Path(dirpath).name not in names:
                continue
            for name in filenames:
                full = Path(dirpath, name)
                if full.is_symlink() or not full.is_file():
                    full.unlink(missing_ok=True)  # a link planted to redirect a later read: never trusted
                    continue
                found.append((str(full.relative_to(path)), hashlib.sha256(full.read_bytes()).hexdigest()))
        return found

    def close(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path.parent, ignore_errors=True)
            self.path = None


class Workspace:
    """A checkout of ``repo`` at ``commit``: a fresh temporary clone, or the borrowed ``checkout``."""

    def __init__(self, repo: Path, commit: str, *, parent: Path | None = None,
                 checkout: Checkout | None = None, overlay: Path | None = None) -> None:
        self.source = check_repo(repo)
        self.overlay = overlay  # built files (C extensions) laid over every fresh or reset checkout
        self.commit = resolve_commit(self.source, commit)
        self._parent = parent
        self.checkout = checkout
        self.path: Path | None = None
        self._dirty: set[str] = set()

    def __enter__(self) -> Workspace:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def open(self) -> Path:
        if self.checkout is not None:
            self.path = self.checkout.move(self.source, self.commit)
        else:
            self.path = _clone(self.source, self.commit, self._parent)
        self._dirty.clear()
        self._lay_overlay()
        return self.path

    def close(self) -> None:
        if self.path is not None and self.checkout is None:  # a borrowed checkout outlives the workspace
            shutil.rmtree(self.path.parent, ignore_errors=True)
        self.path = None

    @property
    def root(self) -> Path:
        if self.path is None:
            raise RuntimeError("workspace is not open")
        return self.path

    def apply(self, patch: str) -> None:
        apply_patch(self.root, patch)
        self._dirty.add("*")

    def write(self, rel: str, content: str) -> None:
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        self._dirty.add(rel)

    def read(self, rel: str) -> str | None:
        target = self.root / rel
        return target.read_text() if target.is_file() else None

    def reset(self) -> None:
        """Back to the pristine base commit: tracked files restored, untracked (and ignored) files removed."""
        if not self._dirty:
            return
        git(["reset", "--quiet", "--hard", self.commit], self.root)
        git(["clean", *(self.checkout.clean_args if self.checkout is not None else ["-fdxq"])], self.root)
        if self.checkout is not None:
            self.checkout.scrub(self.root)
        self._dirty.clear()
        self._lay_overlay()

    def _lay_overlay(self) -> None:
        if self.overlay is not None and self.overlay.is_dir():
            shutil.copytree(self.overlay, self.root, dirs_exist_ok=True, symlinks=True, copy_function=_copy)


def _copy(src: str, dst: str) -> None:
    """A copy, never a hard link: the checkout is writable inside the sandbox, and a test writing through a
    link would change the environment's built files (C extensions) for every later run."""
    Path(dst).unlink(missing_ok=True)
    shutil.copy2(src, dst)
