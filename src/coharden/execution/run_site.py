"""One place where tests run (:class:`RunSite`): a directory, the sandbox of its test processes, and the warm
fork server that runs them, started on first use, primed with the project's warm imports, started again after a
test killed it, and given up for good (a fresh sandboxed process per run) when it cannot start.

This module is the one door to the fast path (:mod:`coharden.execution.fast`: the fork server, collect once, warm
imports, the second lane): nothing else outside that package imports it (``tests/test_layers.py``). What the
plain path names of it - the server's type, the warm plan an executor keeps, the second lane - it names from
here (``__all__``).

The instance executor runs its tests in one site (its workspace; its second lane in another), and the suite's
kill oracle in one per worker copy, so both get the same server lifecycle, the same fallback and the same
account of runs whose server died under them. :func:`workspace_confinement` is the sandbox of a workspace's
test processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coharden.config import EnvironmentSettings, Settings
from coharden.execution.confinement import Confinement, run_confinement
from coharden.execution.env_plugins import plugin_args, plugin_env
from coharden.execution.fast.forkserver import (
    SERVER_DIED,
    SERVER_GONE,
    SERVER_SILENT,
    ForkServer,
    ForkServerError,
    ServerStart,
)
from coharden.execution.fast.lanes import SecondLane, second_lane_wanted
from coharden.execution.fast.warm_plan import WarmPlan
from coharden.execution.log_runs import run_test_patch, script_server_env
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_results import PytestRun
from coharden.execution.pytest_runner import fork_env, run_pytest, test_environment
from coharden.execution.runners import runner_of
from coharden.execution.sandbox import pythonpath_dirs
from coharden.execution.store import Store
from coharden.execution.workspace import Workspace, base_objects
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict

__all__ = ["ForkServer", "RunSite", "SecondLane", "WarmPlan", "environment_dirs", "job_environment",
           "second_lane_wanted", "server_lost", "workspace_confinement"]


@dataclass
class RunSite:
    """Where one worker's tests run. ``confine``: the sandbox of every test process here (a fork server's is
    fixed when it starts); ``image``: a Docker image instead (no server then); ``job_env``: the environment
    every run here gets besides the allow-list (a spec environment's PYTHONPATH); ``isolation``: what a run
    reports when its server was lost before it could say; ``warm``: what its server may keep imported (None:
    nothing)."""

    root: Path
    python: str
    settings: Settings
    confine: Confinement
    image: str | None = None
    job_env: dict[str, str] | None = None
    isolation: str = "none"
    warm: WarmPlan | None = None
    server_failed: str = ""
    """Why the fork server is not used, once it could not start."""
    losses: list[str] = field(default_factory=list)
    """Why a server died during a run, one entry per such run."""
    overran: bool = False
    """A run was killed at the disk limit: what it wrote is still in ``root`` until the caller resets it."""
    _server: ForkServer | None = field(default=None, init=False, repr=False)
    _primed: ForkServer | None = field(default=None, init=False, repr=False)
    """The server that imported the base state (:meth:`prime`)."""

    @property
    def current(self) -> ForkServer | None:
        """The server now running (None: none started yet, or closed); :meth:`server` starts one."""
        return self._server

    def server(self) -> ForkServer | None:
        """The warm fork server of this site, started on first use (and again after a test killed it); None
        when disabled or unusable (Docker, ``fork_server`` off, or it failed to start)."""
        if not self.settings.server.fork_server or self.server_failed or self.image is not None \
                or not runner_of(self.settings.tests.runner).forks:
            return None
        if self._server is None or not self._server.alive:
            if self._server is not None:
                self._server.close()
            try:
                pytest_runs = runner_of(self.settings.tests.runner).session_server
                version = self.settings.environment.pytest_version
                # the server warms up as its forks run: autoload off, the environment's plugins by name
                self._server = ForkServer(ServerStart(
                    self.python, env={**test_environment(self.settings.sandbox.pass_env),
                                      **(plugin_env(version) if pytest_runs else {})},
                    network=self.settings.sandbox.network, preload=self.settings.server.preload,
                    confine=self.confine, project=self.root, scripts=not pytest_runs,
                    plugins=plugin_args(self.python, version)[1::2] if pytest_runs else []))
            except (ForkServerError, OSError) as exc:
                self.server_failed = str(exc)
                self._server = None
        return self._server

    def run(self, ids: list[str], options: ProcessOptions, *, settings: Settings | None = None,
            readable: tuple[Path, ...] = ()) -> PytestRun:
        """One pytest run of ``ids`` here, under ``options`` (the site's interpreter, image, server and sandbox
        fill in theirs; ``options.env`` goes over the site's job environment). ``settings``: this run's own (an
        instrumented run's limits), else the site's; ``readable``: directories the run must see although the
        sandbox hides them (a run that needs one the server's sandbox does not show is a fresh process)."""
        server = self.server()
        confine = self.confine
        if server is not None and all(Path(p).is_relative_to(server.shared) for p in readable):
            readable = ()  # the server's sandbox shows its shared directory already
        if readable:
            confine = dataclasses.replace(confine, readable=(*confine.readable, *readable))
            server = None  # a server's sandbox was fixed when it started
        env = {**(self.job_env or {}), **(options.env or {})}
        options = dataclasses.replace(options, python=self.python, image=self.image, server=server, confine=confine,
                                      env=env or None)
        try:
            run = run_pytest(self.root, ids, settings or self.settings, options)
        except ForkServerError as exc:  # it died between its liveness check and this run: a run without result
            self.close()
            run = PytestRun(returncode=None, timed_out=False, duration=0.0, output="",
                            lost=f"{SERVER_GONE} ({exc})", isolation=self.isolation)
        if run.lost:
            self.losses.append(run.lost)
        self.overran = self.overran or bool(run.disk)
        return run

    def warm_spec(self, source_patch: str, tests: Sequence[TestPatch]) -> dict | None:
        """What the server may keep imported for a run of ``tests`` on ``source_patch`` (``WarmPlan.spec``)."""
        return self.warm.spec(source_patch, tests) if self.warm is not None else None

    def prime(self) -> None:
        """With warm imports, before the first run that changes the source: the fork server imports the project
        from the (reset) base checkout, once per server, so that the fix's and the mutants' runs start warm
        even on a worker whose server never runs the base state."""
        spec = self.warm_spec("", [])
        server = self.server() if spec is not None else None
        if spec is None or server is None or self._primed is server:
            return
        self._primed = server
        env = fork_env(self.job_env, self.settings.sandbox.pass_env, self.settings.environment.pytest_version) \
            if runner_of(self.settings.tests.runner).session_server else script_server_env(self.settings, self.job_env)
        server.prime(self.root, env, spec, timeout=self.settings.sandbox.timeout)

    def run_log(self, source_patch: str, test: TestPatch, limit: float, *, select: bool) -> Verdict:
        """``test`` (laid down here on ``source_patch``) run by the settings' log-based runner under ``limit``: a
        warm fork of this site's server where the runner forks (sympy's ``bin/test``), else a fresh process;
        ``select``: see :meth:`~coharden.execution.runners.Runner.command`. A server that died under the run
        counts as a loss (its verdict a HARNESS_ERROR the caller retries)."""
        server = self.server()
        try:
            verdict = run_test_patch(self.root, test, self.settings, ProcessOptions(
                python=self.python, env=self.job_env, confine=self.confine, select=select, time_limit=limit,
                server=server, warm=self.warm_spec(source_patch, [test]) if server is not None else None))
        except ForkServerError as exc:  # it died between its liveness check and this run: retried as a lost run
            self.close()
            verdict = Verdict(outcome=Outcome.HARNESS_ERROR, reason=f"{SERVER_GONE} ({exc})")
        if server_lost(verdict):  # died, silent or gone (a forged protocol is reported as tampering)
            self.losses.append(verdict.reason)
        return verdict

    def close(self) -> None:
        """Stop the server (the next run starts a new one)."""
        if self._server is not None:
            self._server.close()
            self._server = None


def server_lost(verdict: Verdict) -> bool:
    """The verdict of a run whose fork server died under it (not one that forged the protocol: never retried)."""
    return verdict.outcome is Outcome.HARNESS_ERROR and not verdict.tampering and \
        verdict.reason.startswith((SERVER_DIED, SERVER_SILENT, SERVER_GONE))


def workspace_confinement(workspace: Workspace, settings: Settings, python: str, store: Store | None,
                          root: Path | None) -> Confinement:
    """The sandbox of the test processes in ``workspace`` (open at ``root``; None: not open yet, for the
    isolation check): only the worktree is writable, its ``.git`` is not (a test must not plant hooks or config
    that coharden's own git commands would run); of the objects it borrows, only the base commit's are there
    (read-only, where the source's are: ``base_objects``); the user's checkout and the result store's directory
    are hidden."""
    # the job's own PYTHONPATH entries (a spec environment's), outside the worktree
    job_path = pythonpath_dirs(job_environment(settings.environment, root) or {})
    readable = (*environment_dirs(python, settings.environment),
                *(p for p in job_path if root is None or not p.is_relative_to(root)))
    mounts = ((base_objects(workspace.source, workspace.commit, settings.cache_dir),
               workspace.source / ".git" / "objects"),) if root is not None else ()
    # the user's checkout (its working tree may be at a later commit, hold .env files; an interpreter with the
    # project installed from it in editable mode would show it) and the store's directory: hidden, with what the
    # run needs inside them shown again (see bwrap_args)
    hidden = (workspace.source, *((store.path.resolve().parent,) if store is not None else ()))
    return run_confinement(settings.sandbox, writable=(root,) if root is not None else (), readable=readable,
                           mounts=mounts, hidden=hidden, protected=(root / ".git",) if root is not None else ())


def environment_dirs(python: str, environment: EnvironmentSettings) -> tuple[Path, ...]:
    """The test interpreter's virtual environment and the built-file overlay, read-only inside the sandbox: a
    spec environment may live anywhere, /tmp included, which the sandbox replaces with a private one."""
    dirs = [Path(python).parent.parent] if (Path(python).parent.parent / "pyvenv.cfg").is_file() else []
    if environment.env_overlay is not None:
        dirs.append(Path(environment.env_overlay))
    return tuple(d for d in dirs if d.is_dir())


def job_environment(environment: EnvironmentSettings, root: Path | None) -> dict[str, str] | None:
    """The environment's ``test_env`` with '{workspace}' replaced by ``root`` (None when there is none)."""
    if not environment.test_env:
        return None
    return {k: v.replace("{workspace}", str(root or "")) for k, v in environment.test_env.items()}
