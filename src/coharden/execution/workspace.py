"""Throwaway checkouts of a repository at a commit; the user's checkout is never touched.

A workspace is a ``git clone --shared --no-checkout`` of the user's repository into a temporary directory
(objects are borrowed through alternates, so it is cheap and writes nothing into the source repository,
unlike ``git worktree add`` which registers itself there). It is reset between jobs instead of being
re-created, and removed on exit, on errors and on Ctrl-C.

A :class:`Checkout` is a clone that outlives its workspaces: a workspace given one moves it to its commit
(:func:`sweep` + ``git checkout --force``) instead of cloning, and leaves it in place on close. Runs over many
instances of one repository (the real-bugs study) reuse a few checkouts instead of cloning per instance.

Untrusted tests run in a workspace, so a reset must leave nothing of theirs: :func:`sweep` removes
every untracked entry whatever git's rules say (``git clean -fdx`` skips a nested repository, so bytecode planted
in a ``__pycache__`` made one survived), every ``.gitattributes`` before git writes anything (one planted in a
subdirectory made the next reset write CRLF or UTF-16 files, so the next patch did not apply), and gives back the
permissions a test took from directories. Bytecode a test wrote into a ``__pycache__`` goes with the rest
(tests run with ``PYTHONDONTWRITEBYTECODE``; a checkout's kept bytecode is checked by hash: :meth:`Checkout.scrub`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from types import TracebackType

from coharden.errors import RepoError
from coharden.execution.git import Applied, apply_patch, check_repo, git, resolve_commit, tracked_paths
from coharden.execution.locks import file_lock
from coharden.execution.readback import read_text
from coharden.execution.removal import open_dir, remove_entry, remove_tree_quietly
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
        remove_tree_quietly(root)
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
        remove_tree_quietly(target)
        (target / "pack").mkdir(parents=True)
        (target / "info").mkdir()
        objects = git(["rev-list", "--objects", "--no-walk", commit], source).stdout
        git(["pack-objects", "-q", str(target / "pack" / "pack")], source, input=objects)
        done.write_text(commit + "\n")
    return target


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def sweep(root: Path, *, keep: Collection[str] = ()) -> int:
    """Remove from the worktree at ``root`` what a fresh checkout would not hold, before git restores the tracked
    files: every untracked or ignored entry whatever git's rules (a nested repository included), fifos, sockets
    and links at untracked paths, and every ``.gitattributes`` (git writes the tracked ones again from its index,
    so no attributes a test planted rewrite a file); directories a test locked are unlocked first. Directories
    named in ``keep`` inside tracked directories stay with their regular files only (:meth:`Checkout.scrub`
    checks those). Returns how many entries were removed."""
    files, submodules = tracked_paths(root)
    dirs = {""} | submodules
    for path in files:
        parts = path.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    removed = 0
    info = root.stat()
    if info.st_mode & 0o700 != 0o700:
        root.chmod(stat.S_IMODE(info.st_mode) | 0o700)
    stack: list[tuple[str, bool]] = [("", False)]
    while stack:
        rel, kept = stack.pop()
        fd = os.open(root / rel if rel else root, _DIR)
        try:
            with os.scandir(fd) as entries:
                names = [entry.name for entry in entries]
            for name in names:
                if not rel and name == ".git":
                    continue
                child = f"{rel}/{name}" if rel else name
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode) and not kept and (child in dirs or name in keep):
                    os.close(open_dir(name, fd, mode))
                    stack.append((child, child not in dirs))
                    continue
                if kept and stat.S_ISREG(mode):
                    continue
                if (not kept and child in files and name != ".gitattributes"
                        and (stat.S_ISREG(mode) or stat.S_ISLNK(mode))):
                    continue
                remove_entry(name, fd)
                removed += 1
        finally:
            os.close(fd)
    return removed


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
        self._keep = tuple(keep)
        self._on_move = on_move
        self._trusted: dict[str, str] = {}  # kept files as coharden left them: relative path -> sha256

    def move(self, source: Path, commit: str) -> Path:
        """The clone, at ``commit`` of ``source`` with untracked files removed (cloned on first use, and
        again when the source repository changes)."""
        if self.path is not None and self.source == source and self.path.is_dir() and self._swept(self.path):
            # the last workspace may have closed after an untrusted run without a reset
            git(["checkout", "--quiet", "--force", "--detach", commit], self.path)
            self.scrub(self.path)
        else:
            self.close()
            self.path = _clone(source, commit, self._parent)
            self.source = source
        if self._on_move is not None:
            self._on_move(self.path)
        self._trusted = {rel: digest for rel, digest in self._kept_files(self.path)}
        return self.path

    def _swept(self, path: Path) -> bool:
        """:func:`sweep` of the clone; False when what a test left defeats it (the clone is then made again)."""
        try:
            sweep(path, keep=self.keep_names)
        except OSError:
            return False
        return True

    @property
    def keep_names(self) -> frozenset[str]:
        """The names of the directories whose regular files survive a reset (checked by :meth:`scrub`)."""
        return frozenset(pattern.strip("/") for pattern in self._keep)

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
        names = self.keep_names
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
            remove_tree_quietly(self.path.parent)
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
        # a test ran here since the checkout was last written afresh (what it left may have survived a reset)
        self.tainted = False

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
        self.tainted = self.checkout is not None  # a borrowed checkout may hold what earlier runs left
        self._lay_overlay()
        return self.path

    def close(self) -> None:
        if self.path is not None and self.checkout is None:  # a borrowed checkout outlives the workspace
            remove_tree_quietly(self.path.parent)
        self.path = None

    @property
    def root(self) -> Path:
        if self.path is None:
            raise RuntimeError("workspace is not open")
        return self.path

    def apply(self, patch: str) -> Applied | None:
        """Apply ``patch`` (git, then the SWE-bench harness's fallbacks: :func:`apply_patch`); how, or None for
        an empty patch. The checkout is dirty from here on, even when it fails."""
        self._dirty.add("*")
        return apply_patch(self.root, patch)

    def write(self, rel: str, content: str) -> None:
        """Write ``content`` to ``rel`` in the worktree, never through a link: a patch (an untrusted test or fix)
        can lay down a link at that path or at a directory on the way, and coharden writes here outside the
        sandbox. Each directory is opened (or made) without following links; a link or other non-regular
        entry at the file's own path is removed first."""
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts:
            raise ValueError(f"not a path inside the worktree: {rel!r}")
        fd = os.open(self.root, _DIR)
        try:
            for part in parts[:-1]:
                try:
                    inner = os.open(part, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, dir_fd=fd)
                    inner = os.open(part, _DIR, dir_fd=fd)
                except OSError:  # a link or a file where a directory belongs: replaced by a directory
                    remove_entry(part, fd)
                    os.mkdir(part, dir_fd=fd)
                    inner = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = inner
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISREG(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
                    remove_entry(parts[-1], fd)
            handle = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=fd)
            with os.fdopen(handle, "w") as out:
                out.write(content)
        finally:
            os.close(fd)
        self._dirty.add(rel)

    def read(self, rel: str) -> str | None:
        """The text of the regular file ``rel`` (None when there is none): a patch can lay down a link (to a host
        file) or a test leave a fifo, and neither is followed or waited on."""
        try:
            return read_text(self.root / rel, anchor=self.root, errors="strict")
        except (OSError, UnicodeDecodeError):  # not text: no test file coharden could use either
            return None

    def reset(self) -> None:
        """Back to the pristine base commit: untracked (and ignored) entries and planted attributes removed
        (:func:`sweep`), then tracked files restored."""
        if not self._dirty:
            return
        self._sweep()
        git(["reset", "--quiet", "--hard", self.commit], self.root)
        if self.checkout is not None:
            self.checkout.scrub(self.root)
        self._dirty.clear()
        self._lay_overlay()

    def renew(self) -> bool:
        """When a test ran here since the checkout was last written afresh: every file but ``.git`` removed and
        written again from git's objects (as a fresh clone would; ``.git`` is read-only inside the sandbox).
        Whatever a reset might have missed is gone. Returns whether it did anything."""
        if not self.tainted:
            return False
        self._wipe()
        git(["reset", "--quiet", "--hard", self.commit], self.root)
        if self.checkout is not None:
            self.checkout.scrub(self.root)
        self._dirty.clear()
        self.tainted = False
        self._lay_overlay()
        return True

    def _sweep(self) -> None:
        """:func:`sweep`; when what a test left defeats it, every entry but ``.git`` is removed instead (as
        :meth:`renew` does), and a :class:`RepoError` says so when even that leaves something."""
        try:
            sweep(self.root, keep=self.checkout.keep_names if self.checkout is not None else ())
        except OSError as exc:
            self._wipe(f"the worktree could not be swept after a test ({exc})")

    def _wipe(self, why: str = "") -> None:
        """Remove every entry of the worktree but ``.git`` (trees of any depth; ``rm -rf`` after a failure);
        :class:`RepoError` when one stays."""
        fd = os.open(self.root, _DIR)
        try:
            names = [name for name in os.listdir(fd) if name != ".git"]  # noqa: PTH208
            for name in names:
                try:
                    remove_entry(name, fd)
                except FileNotFoundError:
                    continue
                except OSError:
                    remove_tree_quietly(self.root / name)
            left = [name for name in os.listdir(fd) if name != ".git"]  # noqa: PTH208
        finally:
            os.close(fd)
        if left:
            raise RepoError(f"{why or 'the worktree could not be emptied'}: {len(left)} entries could not be "
                            f"removed ({', '.join(sorted(left)[:3])})")

    def _lay_overlay(self) -> None:
        if self.overlay is not None and self.overlay.is_dir():
            shutil.copytree(self.overlay, self.root, dirs_exist_ok=True, symlinks=True, copy_function=_copy)


def _copy(src: str, dst: str) -> None:
    """A copy, never a hard link: the checkout is writable inside the sandbox, and a test writing through a
    link would change the environment's built files (C extensions) for every later run."""
    Path(dst).unlink(missing_ok=True)
    shutil.copy2(src, dst)
