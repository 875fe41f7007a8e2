"""Thin wrappers over the git command line (real git, no library in between)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from coharden.errors import ApplyError, PatchError, RepoError, SnapshotError
from coharden.patches import hunks, parse, safe_paths

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


GIT_APPLY = "git apply"
GIT_APPLY_REJECT = "git apply --reject"
PATCH_FUZZ = "patch --fuzz=5"
APPLY_FAILED = "failed"
COPY = "copy"
"""What :attr:`Applied.method` and ``Verdict.applied_with`` say: the SWE-bench harness's fallbacks
(``GIT_APPLY_CMDS``), in its order, and a patch none of them applied."""

_PATCH_NOTE = re.compile(r"^Hunk #\d+ succeeded at \d+(?: with fuzz \d+)?(?: \(offset -?\d+ lines?\))?\.$")
_CHECKING = re.compile(r"^checking file (?P<path>.+)$")


@dataclass(frozen=True)
class Applied:
    """How a patch was applied: ``method`` (:data:`GIT_APPLY`, :data:`GIT_APPLY_REJECT`, :data:`PATCH_FUZZ`)
    and, for GNU patch, where it had to fuzz or shift a hunk (``b.py: Hunk #1 succeeded at 4 with fuzz 1.``)."""

    method: str
    notes: tuple[str, ...] = ()


def apply_patch(worktree: Path, patch: str, *, reverse: bool = False, fallbacks: bool = True) -> Applied | None:
    """Apply (or revert) ``patch`` in ``worktree``; None for an empty patch. Without ``fallbacks`` (and always
    for ``reverse``) only ``git apply``; else the SWE-bench harness's fallbacks in its order (``git apply
    --verbose``, ``git apply --verbose --reject``, ``patch --batch --fuzz=5 -p1``): the first that applies the
    whole patch wins, and :class:`Applied` says which. Raises :class:`ApplyError` naming the failed hunk (git's
    reading) when none does; the tree is then as it was.

    Where this differs from the harness, on purpose: each fallback starts from the tree as it was (the harness
    runs ``patch`` on the tree ``--reject`` left half applied, where ``patch --batch`` takes the hunks already
    applied for reversed ones and undoes them, exiting 0), so a patch is applied whole or not at all: no partial
    application and no ``.rej`` or ``.orig`` file ever reaches a test. ``patch`` is dry-run first and runs with
    ``--forward`` (a hunk that looks reversed or already applied is a failure, not a hunk undone). The fallbacks
    run only once every path the patch names is checked to stay inside the worktree
    (:func:`~coharden.patches.safe_paths`) and to pass through no symbolic link, and ``patch`` only on the files
    the diff names."""
    if not patch.strip():
        return None
    if not patch.endswith("\n"):
        # a diff stored in JSON often loses its final newline; git apply then calls the patch corrupt
        patch += "\n"
    parse(patch)  # clear error for garbage input before git sees it
    args = ["apply", "--verbose", "--whitespace=nowarn"]
    if reverse:
        args.append("--reverse")
    proc = git([*args, "-"], worktree, input=patch, check=False)
    if proc.returncode == 0:
        return Applied(GIT_APPLY)
    failure = describe_apply_failure(patch, proc.stderr)
    if reverse or not fallbacks:
        raise ApplyError(failure)
    try:
        paths = _checked_paths(worktree, patch)
    except ApplyError as exc:
        raise ApplyError(f"{failure} (no fallback tried: {exc})") from None
    before = _snapshot(worktree, paths)
    try:
        if git([*args, "--reject", "-"], worktree, input=patch, check=False).returncode == 0:
            return Applied(GIT_APPLY_REJECT)
        _restore(worktree, before)  # what --reject applied of a patch it could not apply whole
        fuzzed = _patch_fuzz(worktree, patch, paths)
        if isinstance(fuzzed, Applied):
            return fuzzed
        _restore(worktree, before)
    finally:
        _drop_leftovers(worktree, before)
    raise ApplyError(f"{failure} (nor with the fallbacks {GIT_APPLY_REJECT} and {PATCH_FUZZ}: {fuzzed})")


_Snapshot = dict[str, "tuple[bytes, int] | None"]
_LEFTOVERS = (".rej", ".orig")


def _checked_paths(worktree: Path, patch: str) -> list[str]:
    """The paths ``patch`` names, each inside the worktree and reached through no symbolic link (else
    :class:`ApplyError`): the fallbacks write, back up and restore files there outside git's own checks."""
    try:
        paths = safe_paths(patch)
    except PatchError as exc:
        raise ApplyError(str(exc)) from None
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            here = worktree / "/".join(parts[:i])
            if here.is_symlink() or (i < len(parts) and here.exists() and not here.is_dir()):
                raise ApplyError(f"{'/'.join(parts[:i])} is a symbolic link or not a directory")
    return paths


def _snapshot(worktree: Path, paths: list[str]) -> _Snapshot:
    """The content and mode of every file ``paths`` name and of their leftover names (None: absent)."""
    snap: _Snapshot = {}
    for path in paths:
        for name in (path, *(path + ext for ext in _LEFTOVERS)):
            target = worktree / name
            snap[name] = (target.read_bytes(), target.stat().st_mode) if target.is_file() and \
                not target.is_symlink() else None
    return snap


def _restore(worktree: Path, snap: _Snapshot) -> None:
    """The files of ``snap`` as they were (the leftovers are :func:`_drop_leftovers`'s)."""
    import os

    for name, was in snap.items():
        if name.endswith(_LEFTOVERS):
            continue
        target = worktree / name
        if was is None:
            if target.is_symlink() or target.is_file():
                target.unlink()
            continue
        if target.is_symlink() or (os.path.lexists(target) and not target.is_file()):
            raise ApplyError(f"{name}: replaced by a link or a directory while a fallback applied the patch")
        target.write_bytes(was[0])
        target.chmod(was[1] & 0o7777)


def _drop_leftovers(worktree: Path, snap: _Snapshot) -> None:
    """Remove the ``.rej`` and ``.orig`` files a fallback left beside the patch's files (never one that was there
    before): no test reads them, and no later run finds them (a reset sweeps untracked files too)."""
    for name, was in snap.items():
        target = worktree / name
        if name.endswith(_LEFTOVERS) and was is None and (target.is_file() or target.is_symlink()):
            target.unlink()


def _patch_fuzz(worktree: Path, patch: str, paths: list[str]) -> Applied | str:
    """``patch`` applied by GNU patch with fuzz 5 (the harness's last fallback) to the checked ``paths``, or why
    not (a short reason)."""
    import os
    import shutil

    tool = shutil.which("patch")
    if tool is None:
        return "skipped: GNU patch is not installed (the Debian package 'patch')"
    argv = [tool, "--batch", "--fuzz=5", "-p1", "--forward", "--no-backup-if-mismatch", "--reject-file=-",
            "--quoting-style=literal", "--get=0"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    try:
        dry = subprocess.run([*argv, "--dry-run"], cwd=worktree, input=patch, capture_output=True, text=True,
                             env=env, timeout=120, check=False)
        lines = dry.stdout.splitlines()
        named = [m["path"] for line in lines if (m := _CHECKING.match(line))]
        stray = [name for name in named if name not in paths]
        if stray:  # patch read a file name from a header the diff parser did not: never let it write there
            return f"refused: patch would touch {stray[0]!r}, which the diff does not name"
        if dry.returncode != 0:
            why = [line for line in lines if "FAILED" in line or "ignored" in line or "can't find" in line.lower()]
            return (why or lines or [dry.stderr.strip() or f"exit code {dry.returncode}"])[-1]
        real = subprocess.run(argv, cwd=worktree, input=patch, capture_output=True, text=True, env=env,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"failed to run: {exc}"
    if real.returncode != 0:
        return f"failed after its dry run: {(real.stdout.strip().splitlines() or [real.stderr.strip()])[-1]}"
    notes: list[str] = []
    current = ""
    for line in real.stdout.splitlines():
        if line.startswith("patching file "):
            current = line[len("patching file "):]
        elif _PATCH_NOTE.match(line):
            notes.append(f"{current}: {line}")
    return Applied(PATCH_FUZZ, tuple(notes))
