"""Thin wrappers over the git command line (real git, no library in between)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from coharden.errors import ApplyError, RepoError, SnapshotError
from coharden.patches import hunks, parse

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "coharden",
    "GIT_AUTHOR_EMAIL": "coharden@localhost",
    "GIT_COMMITTER_NAME": "coharden",
    "GIT_COMMITTER_EMAIL": "coharden@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
    "GIT_TERMINAL_PROMPT": "0",
}


# what git says when the object store lacks what a commit needs (a snapshot without its largest files)
_MISSING_OBJECT = re.compile(r"unable to read sha1 file of (?P<path>\S+) \((?P<sha>[0-9a-f]{7,40})\)|"
                             r"(?:missing blob|bad object|unable to read) (?P<bare>[0-9a-f]{40})")


# Settings every git command runs with: coharden runs git in worktrees where untrusted tests ran. Inside the
# sandbox a worktree's .git is read-only, so its config and hooks are coharden's own; these also hold where it is
# not (a weaker sandbox, a Docker engine): no hook runs, no fsmonitor command, no attributes file of the user's
# (the only attributes a checkout reads are the commit's own .gitattributes: a reset removes every other one).
_GIT_HARDENING = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                  "-c", "core.attributesFile=/dev/null"]


def git(args: list[str], cwd: Path, *, input: str | None = None, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``git args`` in ``cwd`` with :data:`_GIT_HARDENING` (and ``env`` on top of ours); :class:`RepoError` with
    git's message when it fails and ``check``."""
    import os

    env = {**os.environ, **_GIT_ENV, **(env or {})}
    proc = subprocess.run(
        ["git", *_GIT_HARDENING, *args], cwd=cwd, input=input, capture_output=True, text=True, env=env, check=False
    )
    if check and proc.returncode != 0:
        detail = proc.stderr.strip() or proc.stdout.strip()
        missing = _MISSING_OBJECT.search(detail)
        if missing:
            what = missing.group("path") or "a file"
            raise SnapshotError(f"the repository lacks {what} at this commit (git object "
                                f"{missing.group('sha') or missing.group('bare')} is absent: a snapshot may leave "
                                "out its largest files); use a full clone of the repository")
        raise RepoError(f"git {' '.join(args[:3])} failed in {cwd}: {detail}")
    return proc


def tracked_paths(worktree: Path) -> tuple[set[str], set[str]]:
    """(files, submodules): the paths git's index tracks in ``worktree``, relative and ``/``-separated (names
    that are not UTF-8 kept as the file system spells them, as :func:`os.fsdecode` does); a submodule's path is a
    directory that a fresh checkout leaves empty."""
    import os

    proc = subprocess.run(["git", *_GIT_HARDENING, "ls-files", "--stage", "-z"], cwd=worktree,
                          capture_output=True, env={**os.environ, **_GIT_ENV}, check=False)
    if proc.returncode != 0:
        raise RepoError(f"git ls-files failed in {worktree}: {proc.stderr.decode(errors='replace').strip()}")
    files: set[str] = set()
    submodules: set[str] = set()
    for entry in proc.stdout.split(b"\0"):
        if not entry:
            continue
        info, _, name = entry.partition(b"\t")
        (submodules if info.startswith(b"160000") else files).add(os.fsdecode(name))
    return files, submodules


def check_repo(path: Path) -> Path:
    """The top level of the git repository at ``path``, or a clear :class:`RepoError`."""
    if not path.exists():
        raise RepoError(f"{path}: repository path does not exist")
    proc = git(["rev-parse", "--show-toplevel"], path, check=False)
    if proc.returncode != 0:
        raise RepoError(f"{path}: not a git repository")
    return Path(proc.stdout.strip())


def resolve_commit(repo: Path, commit: str) -> str:
    proc = git(["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], repo, check=False)
    if proc.returncode != 0:
        raise RepoError(f"{repo}: unknown base commit {commit!r} (fetch it, or check the instance record)")
    return proc.stdout.strip()


def show_file(repo: Path, commit: str, path: str) -> str | None:
    """Content of ``path`` at ``commit``, or None when the file does not exist there."""
    proc = git(["show", f"{commit}:{path}"], repo, check=False)
    return proc.stdout if proc.returncode == 0 else None


_FAILED_AT = re.compile(r"error: patch failed: (?P<path>.+):(?P<line>\d+)")
_NOT_APPLY = re.compile(
    r"error: (?P<path>.+): (?P<what>patch does not apply|does not exist in index|No such file.*"
    r"|already exists in working directory)"
)


def describe_apply_failure(patch: str, stderr: str) -> str:
    """Turn git apply's stderr into 'path: hunk #N (@@ ... @@) does not apply' where possible."""
    match = _FAILED_AT.search(stderr)
    if match:
        path, line = match["path"], int(match["line"])
        try:
            for info in hunks(patch):
                if info.path == path and info.source_start == line:
                    return f"{path}: hunk #{info.index + 1} ({info.header}) does not apply"
        except Exception:  # noqa: BLE001 - best effort; fall through to git's text
            pass
        return f"{path}: hunk at line {line} does not apply"
    match = _NOT_APPLY.search(stderr)
    if match:
        return f"{match['path']}: {match['what']}"
    return stderr.strip().splitlines()[-1] if stderr.strip() else "git apply failed"


def apply_patch(worktree: Path, patch: str, *, reverse: bool = False) -> None:
    """Apply (or revert) ``patch`` in ``worktree`` with git; raise :class:`ApplyError` naming the failed hunk."""
    if not patch.strip():
        return
    if not patch.endswith("\n"):
        # a diff stored in JSON often loses its final newline; git apply then calls the patch corrupt
        patch += "\n"
    parse(patch)  # clear error for garbage input before git sees it
    args = ["apply", "--verbose", "--whitespace=nowarn"]
    if reverse:
        args.append("--reverse")
    proc = git([*args, "-"], worktree, input=patch, check=False)
    if proc.returncode != 0:
        raise ApplyError(describe_apply_failure(patch, proc.stderr))
