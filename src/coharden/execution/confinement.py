"""What a sandboxed process may change and use (:class:`Confinement`): the record every caller of
:mod:`coharden.execution.sandbox` passes, on its own so that what the sandbox shows (:mod:`coharden.execution.bwrap`)
and its limits (:mod:`coharden.execution.pidslimit`) can read it below the sandbox itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coharden.config import SandboxSettings


@dataclass(frozen=True)
class Confinement:
    """What a sandboxed process may change. ``readable`` lists extra paths to show read-only inside a bwrap
    sandbox (ones the private ``/tmp`` would otherwise hide); ``hidden`` paths get an empty tmpfs over them."""

    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    # read-only binds of a host path at another path: (host, inside); e.g. a worktree's borrowed objects, shown
    # as only the base commit's (see coharden.execution.workspace.base_objects)
    mounts: tuple[tuple[Path, Path], ...] = ()
    hidden: tuple[Path, ...] = ()
    protected: tuple[Path, ...] = ()  # read-only although inside a writable path (a worktree's .git)
    max_processes: int | None = 512
    max_file_bytes: int | None = None  # RLIMIT_FSIZE: the largest file a process may write (None: no limit)
    # what a run may write into its ``writable`` directories in all (coharden watches it: see disklimit)
    max_disk_bytes: int | None = None
    sandbox: bool = True  # False: no bwrap even where it runs (network levels only)
    # where no pids cgroup can be made, RLIMIT_NPROC stands in for it - but that counts every process of the
    # user on the machine, not only this one's: False leaves such a run without a limit instead
    nproc_fallback: bool = True
    # the host's network inside the bwrap sandbox (level ``bwrap-net``), for an agent's commands that call their
    # model; test processes never get it (with the network on they run unsandboxed, by the user's own choice)
    share_network: bool = False

    def with_writable(self, *paths: Path) -> Confinement:
        return dataclasses.replace(self, writable=tuple(dict.fromkeys((*self.writable, *paths))))


def run_confinement(sandbox: SandboxSettings, *, writable: tuple[Path, ...] = (), readable: tuple[Path, ...] = (),
                     mounts: tuple[tuple[Path, Path], ...] = (), hidden: tuple[Path, ...] = (),
                     protected: tuple[Path, ...] = ()) -> Confinement:
    """The sandbox of test processes under the ``sandbox`` settings (bwrap or not, the process, file-size and disk
    limits) with these paths: the one builder of the instance executor's and the suite kill oracle's sandboxes."""
    return Confinement(writable=writable, readable=readable, mounts=mounts, hidden=hidden, protected=protected,
                       max_processes=sandbox.max_processes, sandbox=sandbox.bwrap,
                       max_file_bytes=sandbox.max_file_mb * (1 << 20) if sandbox.max_file_mb else None,
                       max_disk_bytes=sandbox.max_disk_mb * (1 << 20) if sandbox.max_disk_mb else None)


# Build steps (pip installs, a repository's ``setup.py``) need the network, so they get no sandbox, but they run
# the repository's own code: they get a process-count limit, so a runaway build (a ``setup.py`` that re-runs
# itself) fails its step instead of filling the machine. The limit counts threads too (a pids cgroup does):
# installers and compilers stay far below it.
BUILD_STEPS = Confinement(max_processes=512, sandbox=False, nproc_fallback=False)
