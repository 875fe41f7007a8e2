"""The files an install generated in the user's checkout that the checked code imports: a version module
(setuptools-scm writes ``src/_pytest/_version.py``), compiled extensions. They are in no commit, so a clone of
the commit lacks them and its package does not import; spec environments keep them as their overlay
(:mod:`coharden.environment.overlay`), and so does a check: copied once, by content, under the cache directory,
and laid over every clone after it is reset (``env_overlay``).

Only what git *ignores* in the import roots (at the repository's root: in the fix's top-level packages, never an
ignored settings file beside them) is taken, and only Python modules and extensions: build products. An
untracked file git does not ignore is the user's work in progress, which the check never shows to a test."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Collection, Sequence
from pathlib import Path, PurePosixPath

from coharden.execution.git import git

#: What an install generates that an import needs (a module, an extension), by suffix.
SUFFIXES = (".py", ".so", ".pyd")
_SKIP = {"__pycache__", ".git", "build", "dist", ".eggs", ".tox", ".nox", ".venv", "venv", ".pytest_cache"}


def generated_files(repo: Path, roots: Sequence[str], tracked: Collection[str]) -> list[str]:
    """The ignored modules and extensions under ``roots`` (relative directories) of the checkout at ``repo``,
    but any of ``tracked`` (the checked commit's files: what the clone holds itself)."""
    if not roots:
        return []
    out = git(["ls-files", "--others", "--ignored", "--exclude-standard", "-z", "--", *roots], repo).stdout
    return sorted(p for p in out.split("\0") if p and p.endswith(SUFFIXES) and p not in tracked
                  and not set(PurePosixPath(p).parts) & _SKIP and ".egg-info" not in p
                  and (repo / p).is_file() and not (repo / p).is_symlink())


def overlay(repo: Path, roots: Sequence[str], tracked: Collection[str], cache_dir: Path) -> Path | None:
    """A directory holding copies of :func:`generated_files` (under ``cache_dir``, named by their content, so
    another build of them is another overlay), or None when there are none."""
    files = generated_files(repo, roots, tracked)
    if not files:
        return None
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0" + (repo / rel).read_bytes() + b"\0")
    target = cache_dir / "check-overlays" / digest.hexdigest()[:24]
    if not target.is_dir():
        partial = target.with_name(target.name + f".partial-{hashlib.sha256(str(repo).encode()).hexdigest()[:8]}")
        shutil.rmtree(partial, ignore_errors=True)
        for rel in files:
            (partial / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, partial / rel)
        try:
            partial.rename(target)
        except OSError:  # another check made it meanwhile
            shutil.rmtree(partial, ignore_errors=True)
    return target
