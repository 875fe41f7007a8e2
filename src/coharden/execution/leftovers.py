"""Leftovers of killed runs: coharden's temporary directories (workspaces, a server's I/O directory, a run's JUnit
directory) marked with the process that owns them, and those whose owner died without cleaning up (SIGKILL, OOM)
removed by a later run."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from coharden.execution.pidslimit import read_or_empty
from coharden.execution.removal import remove_tree_quietly

OWNER_FILE = ".coharden-owner"


def mark_owner(directory: Path) -> None:
    """Record which process owns a temporary directory, so a later run can remove it once that process is gone."""
    (directory / OWNER_FILE).write_text(f"{os.getpid()} {_start_time(os.getpid())}")


def sweep_leftovers(prefixes: Sequence[str] = ("coharden-ws-", "coharden-io-", "coharden-junit-"),
                    parent: Path | None = None) -> list[Path]:
    """Remove temporary directories whose owning coharden process died without cleaning up (SIGKILL, OOM)."""
    removed = []
    base = Path(parent or tempfile.gettempdir())
    for prefix in prefixes:
        for directory in base.glob(prefix + "*"):
            owner = read_or_empty(directory / OWNER_FILE).split()
            if len(owner) != 2 or not owner[0].isdigit():
                continue
            pid, started = int(owner[0]), owner[1]
            if _start_time(pid) == started:
                continue  # still running
            remove_tree_quietly(directory)  # a test's tree of any depth
            removed.append(directory)
    return removed


def _start_time(pid: int) -> str:
    """The start time of ``pid`` (clock ticks since boot), or '' when it is gone: tells a reused pid apart."""
    stat = read_or_empty(Path(f"/proc/{pid}/stat"))
    return stat.rsplit(")", 1)[1].split()[19] if stat else ""
