"""Throwaway checkouts of a repository at a commit; the user's checkout is never touched.

A workspace is a ``git clone --shared --no-checkout`` of the user's repository into a temporary directory
(objects are borrowed through alternates, so it is cheap and writes nothing into the source repository,
unlike ``git worktree add`` which registers itself there). It is reset between jobs instead of being
re-created, and removed on exit, on errors and on Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from coharden.execution.git import apply_patch, check_repo, git, resolve_commit


class Workspace:
    def __init__(self, repo: Path, commit: str, *, parent: Path | None = None, overlay: Path | None = None) -> None:
        self.source = check_repo(repo)
        self.overlay = overlay  # built files (C extensions) laid over every fresh or reset checkout
        self.commit = resolve_commit(self.source, commit)
        self._parent = parent
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
        root = Path(tempfile.mkdtemp(prefix="coharden-ws-", dir=self._parent))
        self.path = root / "repo"
        try:
            git(["clone", "--quiet", "--shared", "--no-checkout", str(self.source), str(self.path)], root)
            git(["checkout", "--quiet", "--detach", self.commit], self.path)
            self._lay_overlay()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            self.path = None
            raise
        return self.path

    def close(self) -> None:
        if self.path is not None:
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
        git(["clean", "-fdxq"], self.root)
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
