"""Read a repository's files at a commit (through git, no checkout) or from a plain directory."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from coharden.execution.git import check_repo, git, resolve_commit, show_file

#: Directories never read by inference (virtual environments, caches, vendored trees).
SKIP_DIRS = frozenset({".git", ".tox", ".nox", ".venv", "venv", "env", "node_modules", "__pycache__", "build",
                       "dist", ".eggs", ".mypy_cache", ".pytest_cache", "site-packages"})


#: Sources of compiled extensions (Cython, C, C++, Fortran).
EXTENSION_SOURCES = (".pyx", ".pxd", ".pxi", ".c", ".h", ".cpp", ".cc", ".cxx", ".hpp", ".f", ".f90")


class FileSource(Protocol):
    """What inference needs: the list of files and the text of one file."""

    label: str

    def files(self) -> list[str]: ...

    def read(self, path: str) -> str | None: ...


class GitSource:
    """Files of ``repo`` at ``commit``, read with ``git ls-tree`` / ``git show``."""

    def __init__(self, repo: Path, commit: str = "HEAD") -> None:
        self.repo = check_repo(repo)
        self.commit = resolve_commit(self.repo, commit)
        self.label = f"{self.repo}@{self.commit[:12]}"
        self._files: list[str] | None = None

    def files(self) -> list[str]:
        if self._files is None:
            out = git(["ls-tree", "-r", "--name-only", "-z", self.commit], self.repo).stdout
            self._files = sorted(p for p in out.split("\0") if p and not (set(p.split("/")[:-1]) & SKIP_DIRS))
        return self._files

    def read(self, path: str) -> str | None:
        if path not in set(self.files()):
            return None
        return show_file(self.repo, self.commit, path)


class DirSource:
    """Files below a plain directory (fixtures, a checkout)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.label = str(root)
        self._files: list[str] | None = None

    def files(self) -> list[str]:
        if self._files is None:
            found: list[str] = []
            for path in self.root.rglob("*"):
                rel = path.relative_to(self.root)
                if path.is_file() and not (set(rel.parts[:-1]) & SKIP_DIRS):
                    found.append(rel.as_posix())
            self._files = sorted(found)
        return self._files

    def read(self, path: str) -> str | None:
        target = self.root / path
        try:
            return target.read_text(errors="replace") if target.is_file() else None
        except OSError:
            return None
