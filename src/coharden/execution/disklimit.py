"""A total limit on what one test run writes into its writable host directories (``max_disk_mb``).

``RLIMIT_FSIZE`` (``max_file_mb``) bounds one file; a test that writes a hundred files just under it into its
worktree (a bind mount of a host directory) still fills the host's disk. The private ``/tmp`` is a size-capped
tmpfs already; what is left are the ``writable`` directories of a :class:`~coharden.execution.sandbox.Confinement`:
the worktree and the scratch directories where a run's results land.

Why a watcher on coharden's side, and not a filesystem that cannot grow past the limit:

* a size-limited tmpfs for the worktree would hold the checkout in memory (and a test's writes up to the limit),
  and it lives inside the sandbox only, where coharden's own ``git apply`` / reset between runs cannot reach it:
  every run would copy the checkout in, and the files an instrumented run writes for the caller would be lost;
* an overlay over the worktree (``bwrap --overlay``) puts its upper layer on an unbounded tmpfs (memory again),
  and a fork server's sandbox lives across runs while coharden changes the lower layer under it, which overlayfs
  does not support;
* a loop-mounted image or filesystem (project) quotas need privileges and a filesystem that has them.

So :class:`DiskWatch` polls ``os.statvfs`` of the writable directories' filesystems while the run is in progress
(every :data:`INTERVAL` seconds: one system call per filesystem, nothing measurable beside a test run). Only when
the free space dropped by more than the limit since the run started does it walk those directories (no symlink
followed; the read-only ``.git`` skipped) and sum the blocks of every file and directory changed since the run
started (``ctime``, which a test cannot set back), plus the deleted files the run's processes still hold open.
Every file counts at least one block (:data:`INODE_COST`), free inodes count as that much free space: a million
empty files, which take inodes and no data blocks, are as much as 4 GiB of data.
That sum, not the free space, decides: a drop caused by someone else (another worker, a download) never kills
a run; after a walk the free space it found is the new baseline, so that others' use does not trigger a walk at
every tick. Space others free while the run writes can hide its writes from the free space; so every rise of the
free space since the last walk counts towards the trigger as if it were written: hidden writes are found by a
walk once others have freed the limit's worth at the most (the cost: a walk more per limit freed elsewhere).
Past the limit the caller kills the run's processes and the verdict says why (``ProcessResult.disk``).

The limit is approximate by design: a run may write up to :data:`INTERVAL` seconds' worth beyond it before it is
killed, and what others free in the very tick the run writes as much (the free space unmoved) stays hidden until
a walk. Files the run left behind are removed by the workspace's reset (the worktree) or with the run's scratch
directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

INTERVAL = 0.2  # seconds between two looks at the free space
# what a file or directory costs at least, in bytes: one block. Empty files cost no data block but an inode each;
# without it a run could exhaust the filesystem's inodes (millions of empty files) under any byte limit
INODE_COST = 4096
_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5)  # the clock file timestamps are taken from (Linux)


def _now_ns() -> int:
    """A wall-clock time no later than the timestamp the kernel gives a file changed from now on (file
    timestamps come from the coarse clock, which may lag the precise one by a tick)."""
    try:
        return time.clock_gettime_ns(_COARSE)
    except OSError:
        return time.time_ns() - 20_000_000


class DiskWatch:
    """Watches what one run writes into ``paths`` (see the module docstring); :meth:`check` is cheap enough to
    call from a wait loop as often as it likes (it looks at most every ``interval`` seconds).

    ``pids`` lists the host pids of the run's processes (for the deleted files they hold open); ``skip`` lists
    directories inside ``paths`` the run cannot write (a worktree's read-only ``.git``)."""

    def __init__(self, paths: Iterable[Path], limit: int, *, skip: Iterable[Path] = (),
                 pids: Callable[[], Iterable[int]] = tuple, interval: float = INTERVAL) -> None:
        self.limit = limit
        self.interval = interval
        self.written = 0  # bytes this run wrote, as last measured (by a walk)
        self.exceeded = False
        self._pids = pids
        self._skip = {os.fspath(p) for p in skip}
        self._paths = [os.fspath(p) for p in dict.fromkeys(paths) if Path(p).is_dir()]
        self._since = _now_ns()
        by_device: dict[int, str] = {}
        for path in self._paths:
            with contextlib.suppress(OSError):
                by_device.setdefault(Path(path).stat().st_dev, path)
        self._devices = set(by_device)
        self._probes = list(by_device.values())  # one directory per filesystem
        # free space when the run's writes were last known to be ``written``: a drop below it is new writes (the
        # run's or others'); it rises with the free space, each rise since the last walk kept in ``_risen``
        self._base_free = self._free()
        self._risen = 0
        self._next = time.monotonic() + interval

    def _free(self) -> int:
        """Free space of the watched filesystems, each free inode counted as :data:`INODE_COST` bytes."""
        free = 0
        for path in self._probes:
            with contextlib.suppress(OSError):
                found = os.statvfs(path)
                free += found.f_bavail * found.f_frsize + found.f_favail * INODE_COST
        return free

    def check(self) -> bool:
        """True once the run has written more than the limit (it stays True)."""
        if self.exceeded or not self._probes:
            return self.exceeded
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        free = self._free()
        if free > self._base_free:  # freed space, which may hide as much of the run's writes: counted
            self._risen += free - self._base_free
            self._base_free = free
        if self._base_free - free + self._risen + self.written <= self.limit:
            return False
        self.written = self.measure()
        if self.written > self.limit:
            self.exceeded = True
        else:  # the drop so far is others' or counted in ``written``
            self._base_free, self._risen = free, 0
        return self.exceeded

    def measure(self) -> int:
        """Bytes (allocated blocks, :data:`INODE_COST` at least) of what changed in the watched directories since
        the run started, each file counted once (hard links), plus the deleted files on those filesystems the
        run's processes hold open."""
        seen: set[tuple[int, int]] = set()
        total = 0
        skip = set()
        for path in self._skip:
            with contextlib.suppress(OSError):
                found = os.stat(path, follow_symlinks=False)  # noqa: PTH116
                skip.add((found.st_dev, found.st_ino))
        for top in self._paths:
            for info in _entries(top, skip, self._devices):
                key = (info.st_dev, info.st_ino)
                if info.st_ctime_ns >= self._since and key not in seen:
                    seen.add(key)
                    total += max(info.st_blocks * 512, INODE_COST)
        for pid in self._pids():
            total += _deleted_open(pid, self._devices, seen)
        return total

    def reason(self) -> str:
        """The verdict's reason once the limit was passed."""
        return (f"the run wrote more than {_mib(self.limit)} MiB into its worktree and scratch directories "
                f"(max_disk_mb; {_mib(self.written)} MiB found) and was killed")


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _entries(top: str, skip: set[tuple[int, int]], devices: set[int]) -> Iterator[os.stat_result]:
    """The ``lstat`` of every entry below ``top``, into directories on ``devices`` but those in ``skip`` ((device,
    inode) pairs), links never followed. A path-based walk missed everything past PATH_MAX (a test nests 5,000
    directories in a second, and writes at the bottom) and one holding a descriptor per level ran out of them: one
    descriptor is open at a time, going down through a child's and back up through ``..`` (checked to be the
    directory it came from; a tree moved under the walk ends it)."""
    try:
        fd = os.open(top, _DIR)
    except OSError:
        return
    try:
        here = os.fstat(fd)
        stack = [((here.st_dev, here.st_ino), _listing(fd))]
        while stack:
            ident, pending = stack[-1]
            below = None
            while pending:
                name = pending.pop()
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                yield info
                if stat.S_ISDIR(info.st_mode) and info.st_dev in devices and (info.st_dev, info.st_ino) not in skip:
                    below = name
                    break
            if below is not None:
                try:
                    inner = os.open(below, _DIR, dir_fd=fd)
                except OSError:
                    continue
                os.close(fd)
                fd = inner
                here = os.fstat(fd)
                stack.append(((here.st_dev, here.st_ino), _listing(fd)))
                continue
            stack.pop()
            if not stack:
                return
            up = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = up
            there = os.fstat(fd)
            if (there.st_dev, there.st_ino) != stack[-1][0]:
                return
    except OSError:
        return
    finally:
        os.close(fd)


def _listing(fd: int) -> list[str]:
    try:
        return os.listdir(fd)  # noqa: PTH208 - a descriptor
    except OSError:
        return []


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.4g}"


def _deleted_open(pid: int, devices: set[int], seen: set[tuple[int, int]]) -> int:
    """Blocks of the regular files on ``devices`` that ``pid`` holds open although no directory names them any
    more (written, then unlinked: no walk finds them, yet they fill the disk until the process ends)."""
    total = 0
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return 0
    for fd in fds:
        try:
            info = fd.stat()  # follows the descriptor's link to the open file itself
        except OSError:
            continue
        key = (info.st_dev, info.st_ino)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 0 and info.st_dev in devices and key not in seen:
            seen.add(key)
            total += info.st_blocks * 512
    return total


def children(pid: int) -> list[int]:
    """The host pids of ``pid``'s children (every thread's)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError, ValueError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return found


def descendants(pid: int) -> list[int]:
    """Every host pid below ``pid`` in the process tree (``pid`` itself not included)."""
    found: list[int] = []
    stack = children(pid)
    while stack:
        child = stack.pop()
        if child not in found:
            found.append(child)
            stack += children(child)
    return found


def kill_below(pid: int, spare: Sequence[int] = ()) -> None:
    """SIGKILL every process below ``pid`` but ``spare``, until none is left (one forking meanwhile included);
    for a run without a pids cgroup to list its processes."""
    kill_listed(lambda: descendants(pid), spare)


def kill_listed(listed: Callable[[], Iterable[int]], spare: Sequence[int] = ()) -> None:
    """SIGKILL the processes ``listed()`` names but ``spare``, again until it names none (a process forking
    while the others die is caught by the next round); at most 20 rounds."""
    for _ in range(20):
        victims = [p for p in listed() if p not in spare]
        if not victims:
            return
        for victim in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(victim, signal.SIGKILL)
        time.sleep(0.01)
