"""Removing a directory tree a test wrote, however deep: every reset of a worktree, every cleanup of a worktree,
a scratch directory or a run's leftovers (inside the fork server's sandbox, between runs,
``forkserver_procs.wipe`` empties the scratch mounts the same way).

A test can nest directories far beyond what a recursive or descriptor-per-level removal survives: 5,000 levels
(made in a second with ``mkdir``/``chdir``) pass Python's recursion limit, ``PATH_MAX`` (a path to the bottom
is 50,000 characters) and the open-files limit (``shutil.rmtree`` and ``fts`` keep a descriptor per level). Here
one directory descriptor is open at a time: the walk goes down through a child's descriptor and back up through
``..``, checked to be the directory it came from (device and inode), and keeps per level only the names still to
remove. Links are never followed; a directory a test locked (no read, write or search right for its owner) gets
its owner's rights back first (a test runs as the same user).
"""

import contextlib
import errno
import os
import stat
import subprocess
import tempfile

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(name, dir_fd, mode):
    """The directory ``name`` (in ``dir_fd``) opened without following a link, its owner's rights given back
    first."""
    if mode & 0o700 != 0o700:
        os.chmod(name, stat.S_IMODE(mode) | 0o700, dir_fd=dir_fd)
    return os.open(name, _DIR, dir_fd=dir_fd)


def _names(fd):
    """The names in the directory open as ``fd`` (read through a duplicate, rewound: ``fd`` stays usable)."""
    return os.listdir(fd)  # noqa: PTH208 - a descriptor, not a path


def remove_entry(name, dir_fd):
    """Remove ``name`` in the directory open as ``dir_fd`` and, for a directory, all it holds, however deep (see
    the module docstring); ``FileNotFoundError`` when it is not there. An ``OSError`` when something cannot be
    removed, or when a directory on the way was moved while the walk was below it."""
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    try:
        os.rmdir(name, dir_fd=dir_fd)  # empty: the common case costs one call
        return
    except OSError:
        pass
    fd = open_dir(name, dir_fd, info.st_mode)
    # per level: (its name in its parent, its (device, inode), the names in it still to remove); each level keeps
    # its listing and resumes it after a subdirectory is gone (restarting the scan would make a directory of n
    # non-empty subdirectories cost n^2)
    top = os.fstat(fd)
    stack = [(name, (top.st_dev, top.st_ino), _names(fd))]
    try:
        while True:
            own, ident, pending = stack[-1]
            below = None
            while pending:
                child = pending.pop()
                mode = os.stat(child, dir_fd=fd, follow_symlinks=False).st_mode
                if not stat.S_ISDIR(mode):
                    os.unlink(child, dir_fd=fd)
                    continue
                try:
                    os.rmdir(child, dir_fd=fd)
                    continue
                except OSError:
                    pass
                below = child, mode
                break
            if below is not None:  # down one level, holding that level's descriptor only
                inner = open_dir(below[0], fd, below[1])
                os.close(fd)
                fd = inner
                here = os.fstat(fd)
                stack.append((below[0], (here.st_dev, here.st_ino), _names(fd)))
                continue
            stack.pop()
            if not stack:
                break
            up = os.open("..", _DIR, dir_fd=fd)  # back up, to the directory the walk came from
            os.close(fd)
            fd = up
            there = os.fstat(fd)
            if (there.st_dev, there.st_ino) != stack[-1][1]:
                raise OSError(errno.ESTALE, f"a directory was moved while {name} was being removed")
            os.rmdir(own, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def remove_tree(path, missing_ok=True):
    """Remove the file or directory tree at ``path`` (a link: the link only), however deep. Its parent is
    trusted (opened normally); nothing below it is followed."""
    path = os.fspath(path)
    parent, name = os.path.split(os.path.abspath(path))  # noqa: PTH100 - lexical: a link at path stays one
    fd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        remove_entry(name, fd)
    except FileNotFoundError:
        if not missing_ok:
            raise
    finally:
        os.close(fd)


def remove_tree_quietly(path):
    """:func:`remove_tree`, errors ignored (a cleanup that must not fail the run it follows), ``rm -rf`` (which
    stays on the tree's filesystem) tried after a failure: True when ``path`` is gone."""
    try:
        remove_tree(path)
    except OSError:
        try:
            subprocess.run(["rm", "-rf", "--one-file-system", "--", os.fspath(path)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False)
        except (OSError, subprocess.SubprocessError):
            pass
    return not os.path.lexists(path)


@contextlib.contextmanager
def temporary_directory(prefix, dir=None):  # noqa: A002 - tempfile's name
    """``tempfile.TemporaryDirectory`` removed by :func:`remove_tree_quietly`: a test that can write into it (a
    run's JUnit directory) may leave a tree of any depth, or swap the directory for a link (the link goes)."""
    path = tempfile.mkdtemp(prefix=prefix, dir=dir)
    try:
        yield path
    finally:
        remove_tree_quietly(path)
