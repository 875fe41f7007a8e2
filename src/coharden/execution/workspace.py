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

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from coharden.execution.git import apply_patch, check_repo, git, resolve_commit


def _clone(source: Path, commit: str, parent: Path | None) -> Path:
    root = Path(tempfile.mkdtemp(prefix="coharden-ws-", dir=parent))
    path = root / "repo"
    try:
        git(["clone", "--quiet", "--shared", "--no-checkout", str(source), str(path)], root)
        git(["checkout", "--quiet", "--detach", commit], path)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return path


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
        self._on_move = on_move

    def move(self, source: Path, commit: str) -> Path:
        """The clone, at ``commit`` of ``source`` with untracked files removed (cloned on first use, and
        again when the source repository changes)."""
        if self.path is not None and self.source == source and self.path.is_dir():
            git(["checkout", "--quiet", "--force", "--detach", commit], self.path)
            git(["clean", *self.clean_args], self.path)
        else:
            self.close()
            self.path = _clone(source, commit, self._parent)
            self.source = source
        if self._on_move is not None:
            self._on_move(self.path)
        return self.path

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
        self._dirty.clear()
        self._lay_overlay()

    def _lay_overlay(self) -> None:
        if self.overlay is not None and self.overlay.is_dir():
            shutil.copytree(self.overlay, self.root, dirs_exist_ok=True, symlinks=True, copy_function=_link_or_copy)


def _link_or_copy(src: str, dst: str) -> None:
    """Hard links are instant for large built files; a copy where linking is impossible (another device)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
