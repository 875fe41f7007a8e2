"""A directory's files committed into a git repository of their own (one commit), cached by their contents:
a plain project directory in an instance manifest, or a directory inside a repository that ``env build``
builds as its files are on disk."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from coharden.execution.git import git
from coharden.execution.locks import file_lock


def snapshot_files(directory: Path, files: list[str], cache_dir: Path) -> tuple[Path, str]:
    """(repository, commit) holding ``files`` (paths relative to ``directory``) as they are on disk.

    The repository lives under ``cache_dir`` keyed by a hash of the files' names and contents, so an edit gives
    a new repository and the same files always give the same one (and its commit).
    """
    files = sorted(files)
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (directory / name).read_bytes() + b"\0")
    target = cache_dir / f"{directory.name}-{digest.hexdigest()[:16]}"
    # one builder at a time (two workers of `examples check` materialize one example together: without the
    # lock one removed the other's half-built or finished repository, and that candidate came out Invalid)
    with file_lock(target.with_name(target.name + ".lock")):
        if not (target / ".git").is_dir() or git(["rev-parse", "HEAD"], target, check=False).returncode != 0:
            _build(directory, files, target)
    return target, git(["rev-parse", "HEAD"], target).stdout.strip()


def _build(directory: Path, files: list[str], target: Path) -> None:
    """The repository at ``target``: built beside it, then renamed into place."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for name in files:
        dest = tmp / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(directory / name, dest)
    tmp.mkdir(parents=True, exist_ok=True)
    git(["init", "--quiet", "--initial-branch=main"], tmp)
    git(["add", "-A"], tmp)
    git(["commit", "--quiet", "--no-gpg-sign", "--allow-empty", "-m", f"{directory.name}: base commit"], tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
