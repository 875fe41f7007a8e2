"""One test run as a fork of a warm server (:class:`ForkRun`): what a runner - pytest's
(:func:`~coharden.execution.pytest_runner.run_pytest`) or a log-based one's
(:func:`~coharden.execution.log_runs.run_with`) - hands the fast path's server
(:meth:`~coharden.execution.run_site.ForkServer.run`), in one value. It lives outside ``execution/fast/`` because
the runners build it and nothing outside that package but ``run_site.py`` imports it (``tests/test_layers.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ForkRun:
    """Where and what to run: ``cwd``, pytest's ``args`` (or the runner ``script``'s, see below) and the run's
    ``env``; its limits: ``timeout`` (wall-clock seconds, enforced by the server), ``memory_mb`` and
    ``cpu_seconds`` (None: none); ``out``: the file its output goes to (None: a file in the server's scratch
    directory). ``warm``: the project's modules the server may keep imported for it (``warm_state.WarmState``).
    ``collect``: a name of the run's test state (its test patches): a sandboxed server collects the tests of runs
    with the same name, arguments and environment once and forks each run after that collection
    (``collect_once.CollectOnce``), and ``instrument`` is the plugin such a run loads into its fork of that
    collection. ``script``: a runner script's path in ``cwd`` (a ``scripts`` server's): the fork runs it with
    ``args``, as ``python script args`` would, not pytest."""

    cwd: Path
    args: Sequence[str]
    env: Mapping[str, str]
    timeout: float
    memory_mb: int | None
    cpu_seconds: int | None
    out: Path | None = None
    warm: dict | None = None
    collect: str | None = None
    instrument: dict | None = None
    script: str | None = None
