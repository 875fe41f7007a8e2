"""The process-count limit of a sandboxed run: a pids cgroup (``pids.max``, v1 or v2) per sandbox where coharden
may create cgroups; where it may not, :func:`coharden.execution.sandbox.spawn` sets ``RLIMIT_NPROC`` instead
(which the kernel does not enforce for root). A cgroup also lists every process of the run, daemons that left
its process group included, so they can all be killed.
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from coharden.execution.confinement import Confinement
from coharden.execution.disklimit import kill_listed


class PidsCgroup:
    """A cgroup with ``pids.max`` (v1 ``pids`` hierarchy or v2) for one sandbox; ``None`` from :meth:`create`
    where cgroups cannot be made. Its processes can be listed and killed, and it is removed on :meth:`close`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> PidsCgroup | None:
        for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
            if not (base / "cgroup.procs").exists():
                continue
            if base.name != "pids" and "pids" not in read_or_empty(base / "cgroup.subtree_control").split():
                continue
            path = base / f"coharden-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(limit))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            return cls(path)
        return None

    def join(self) -> None:
        """Move the calling process into the group (run in the child before exec)."""
        (self.path / "cgroup.procs").write_text("0")

    def pids(self) -> list[int]:
        return [int(p) for p in read_or_empty(self.path / "cgroup.procs").split()]

    def kill_all(self, spare: Sequence[int] = ()) -> None:
        kill_listed(self.pids, spare)

    def close(self) -> None:
        self.kill_all()
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def read_or_empty(path: Path) -> str:
    """A small file's text (a cgroup's, /proc's), '' when it cannot be read (gone, no permission)."""
    try:
        return path.read_text()
    except OSError:
        return ""


@contextlib.contextmanager
def process_limit(confine: Confinement | None) -> Iterator[PidsCgroup | None]:
    cgroup = PidsCgroup.create(confine.max_processes) if confine is not None and confine.max_processes else None
    try:
        yield cgroup
    finally:
        if cgroup is not None:
            cgroup.close()


@functools.cache
def pids_cgroups() -> bool:
    """Whether a pids cgroup can be made here (the process-count limit; RLIMIT_NPROC does not bind root)."""
    group = PidsCgroup.create(64)
    if group is None:
        return False
    group.close()
    return True
