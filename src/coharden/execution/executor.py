"""Verdicts for one instance: a reusable workspace, confined test runs, and the result store.

``InstanceExecutor.verdicts(source_patch, tests)`` answers "what do these test patches say on base +
source_patch?". Cached verdicts are returned without running anything. Otherwise the workspace is reset to
the base commit, the source patch applied with git, and the test patch applied; every test patch runs in its
own pytest process (a fork of the warm server), inside the sandbox of :mod:`coharden.execution.sandbox`, so a
hostile test can forge at most its own verdict. Only with ``combine=True`` (both tests trusted: the caller
says so) are several test patches laid down together: one touching files no earlier one touched is applied
with git; one that shares a test module with an earlier one is written as a renamed copy of that module
(``test_coh<i>__<name>.py``) so both run in one pytest process. A test patch that touches anything but test
modules runs alone even then, and so does every test of a combined run that did not end cleanly (the test
running at a time limit gets the TIMEOUT; the others run again alone).

Cache keys name everything that can change a verdict: repository, base commit, source and test patch, ids,
interpreter and pytest version, isolation level, and the tests sharing the process. A TIMEOUT is reused only
for a time limit no larger than the one it was reached under.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import os
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from coharden import pysource
from coharden.config import Settings
from coharden.errors import ApplyError, CoHardenError, TestIdError
from coharden.execution.docker import docker_available, swebench_image
from coharden.execution.forkserver import SERVER_DIED, SERVER_GONE, SERVER_SILENT, ForkServer, ForkServerError
from coharden.execution.git import show_file
from coharden.execution.pytest_results import PytestRun, split_node_id
from coharden.execution.pytest_runner import fork_env, run_pytest, test_environment
from coharden.execution.pytest_verdicts import verdict_for
from coharden.execution.sandbox import Confinement, isolation_level, pythonpath_dirs, require_confinement
from coharden.execution.store import Store, verdict_key
from coharden.execution.tampering import scan
from coharden.execution.testids import contributed_ids, harness_ids, resolve_names, runnable_id
from coharden.execution.workspace import Checkout, Workspace, base_objects
from coharden.patches import file_path, is_test_path, parse, touched_files
from coharden.schema.instance import Instance
from coharden.schema.testpatch import TestPatch
from coharden.schema.timelimit import TimeLimit
from coharden.schema.verdict import Outcome, Verdict

INSTRUMENTED_SLOWDOWN = 8.0
"""How many times a test's time limit an instrumented run (the input recorder's) gets: a function-call tracer
(``sys.settrace``) makes a test several times slower (2x with a trivial trace function on sympy-17655, more than
5x with the recorder on sympy-17318, on a loaded machine)."""
INSTRUMENTED_MAX = 1800.0
"""The most seconds an instrumented run gets from the slowdown factor (a timeout above it is kept as it is)."""


def instrumented_settings(settings: Settings) -> Settings:
    """``settings`` with the limits of an instrumented run: ``timeout`` x ``INSTRUMENTED_SLOWDOWN``, at most
    ``INSTRUMENTED_MAX`` seconds and never less than ``timeout``; a set ``cpu_seconds`` is scaled alike (unset,
    it is 2 x the new timeout). A recording with the bare run's limit timed out on tests that pass in 30-110 s
    (sympy-17655, 17318), and a recording cut short holds no bug-revealing input."""
    timeout = max(settings.timeout, min(settings.timeout * INSTRUMENTED_SLOWDOWN, INSTRUMENTED_MAX))
    cpu = settings.cpu_seconds
    if cpu is not None:
        cpu = max(cpu, int(cpu * timeout / settings.timeout))
    return settings.model_copy(update={"timeout": timeout, "cpu_seconds": cpu})


@functools.cache
def environment_id(python: str) -> str:
    """Identity of the test environment: interpreter path, version, and installed pytest."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys, pytest; print(sys.version.split()[0], pytest.__version__)"],
            capture_output=True, text=True, timeout=60, check=False,
        )
    except OSError as exc:
        raise CoHardenError(f"test interpreter {python!r} cannot run: {exc}") from exc
    if out.returncode != 0:
        raise CoHardenError(f"test interpreter {python!r} has no pytest: {out.stderr.strip()[-300:]}")
    return f"{python} {out.stdout.strip()}"


def test_environment_id(settings: Settings, python: str) -> str:
    """:func:`environment_id` of a plain interpreter; a spec environment (``test_env`` set) or a log-based
    runner is named by its interpreter's path, which holds the spec's digest (the project under test, pytest
    itself for one, is importable only from a job's checkout, so asking it for versions would fail)."""
    if settings.runner == "pytest" and not settings.test_env:
        return environment_id(python)
    return f"{python} {settings.runner}"


def _renamed(path: str, index: int) -> str:
    p = PurePosixPath(path)
    return str(p.with_name(f"test_coh{index}__{p.name}"))


class InstanceExecutor:
    """Runs tests for one instance. Not thread-safe: give every worker its own executor."""

    def __init__(self, instance: Instance, repo: Path, settings: Settings, store: Store | None = None, *,
                 checkout: Checkout | None = None) -> None:
        """``checkout``: a long-lived clone to work in (moved to the instance's base commit) instead of a
        fresh temporary clone."""
        self.instance = instance
        self.settings = settings
        self.store = store
        self.python = instance.python or settings.python
        self.workspace = Workspace(repo, instance.base_commit, parent=None, checkout=checkout,
                                   overlay=settings.env_overlay)
        self.base_commit = self.workspace.commit
        self.runs = 0  # pytest processes started (cache hits do not count)
        self._primed: ForkServer | None = None  # the fork server that imported the base state (_prime_warm)
        self._test_modules: list[str] | None = None  # the golden tests' project imports (_test_imports)
        self._server: ForkServer | None = None
        self.image: str | None = None
        if settings.test_host == "docker":
            if not docker_available():
                raise CoHardenError("test_host 'docker' needs a running Docker engine (docker info failed)")
            template = settings.docker_image
            self.image = template.format(instance_id=instance.instance_id) if template \
                else swebench_image(instance.instance_id)
        env = f"docker:{self.image}" if self.image else test_environment_id(settings, self.python)
        confine = self._confinement(None)
        self.isolation = "docker" if self.image else isolation_level(settings.network, confine)
        if not self.image:
            require_confinement(settings.network, confine, settings.allow_weak_sandbox)
        # sandbox=3: verdicts from before the allow-listed sandbox and environment, the thorough reset and the
        # safe read-back (which a hostile test could forge, or which may hold a key) are not reused
        self.env_id = env + " " + " ".join(settings.pytest_args) + f" isolation={self.isolation} sandbox=3" + \
            _run_settings_id(settings)
        self._server_failed = ""  # why the fork server is not used, once it failed
        self.server_losses: list[str] = []  # runs during which a test killed the fork server
        self._lane: InstanceExecutor | None = None  # a second workspace + server: two tests at once
        self._lane_thread: ThreadPoolExecutor | None = None
        self._warm: dict | None = None  # what the fork server may keep imported for the next run
        self._overran = False  # a run was killed at the disk limit: its files are still in the worktree

    # --- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> InstanceExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._lane is not None:
            self._lane.close()
            self._lane = None
        if self._lane_thread is not None:
            self._lane_thread.shutdown()
            self._lane_thread = None
        self.workspace.close()

    def _second_lane(self) -> bool:
        """Whether separate test processes may run two at once: asked for (``test_lanes``) and a core is free
        for the second one. With a worker per core the lane only doubles the processes per core and starts a
        second fork server per worker that must import the project again (measured on sympy-24066, 2 cores:
        MPE with 2 workers took 17.6 s with lanes, 13.3 s without)."""
        return self.settings.test_lanes > 1 and self.settings.workers * 2 <= (os.cpu_count() or 1)

    def _run_two(self, source_patch: str, tests: list[TestPatch], limits: list[float], first_failure: bool = False
                 ) -> tuple[dict[int, Verdict], list[int]]:
        """The first two of ``tests`` at once, each alone in its own process: one in this executor's
        workspace, one in a second lane (its own workspace, its own sandboxed server). Separate processes
        then cost little more wall-clock time than a shared one."""
        if self._lane is None:
            self._lane = InstanceExecutor(self.instance, self.workspace.source,
                                          self.settings.with_overrides(test_lanes=1), None)
            # one thread runs the lane's tests beside this executor's (its sandbox is started from the
            # process-lifetime spawner thread, so this thread's life does not matter to it)
            self._lane_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coharden-lane")
        lane = self._lane
        assert self._lane_thread is not None
        before = lane.runs
        other = self._lane_thread.submit(lane._run_together, source_patch, [tests[1]], [limits[1]], False,
                                         first_failure)
        try:
            mine, _ = self._run_together(source_patch, [tests[0]], [limits[0]], False, first_failure)
        finally:
            theirs, _ = other.result()
        self.runs += lane.runs - before
        ran = {**mine, **({1: theirs[0]} if 0 in theirs else {})}
        return ran, list(range(2, len(tests)))

    def _confinement(self, root: Path | None) -> Confinement:
        """The sandbox of this executor's test processes: only the worktree is writable, its ``.git`` is not (a
        test must not plant hooks or config that coharden's own git commands would run); of the objects it
        borrows, only the base commit's are there (read-only, where the source's are: ``base_objects``); the
        result store's directory is hidden."""
        writable = (root,) if root is not None else ()
        protected = (root / ".git",) if root is not None else ()
        # the job's own PYTHONPATH entries (a spec environment's), outside the worktree
        job_path = pythonpath_dirs(self._fill_workspace(root) or {})
        readable = (*self._environment_dirs(), *(p for p in job_path if root is None or not p.is_relative_to(root)))
        mounts = ((base_objects(self.workspace.source, self.workspace.commit, self.settings.cache_dir),
                   self.workspace.source / ".git" / "objects"),) if root is not None else ()
        # the user's checkout (its working tree may be at a later commit, hold .env files; an interpreter with
        # the project installed from it in editable mode would show it) and the store's directory: hidden, with
        # what the run needs inside them shown again (see bwrap_args)
        hidden = (self.workspace.source, *((self.store.path.resolve().parent,) if self.store is not None else ()))
        max_file = self.settings.max_file_mb * (1 << 20) if self.settings.max_file_mb else None
        max_disk = self.settings.max_disk_mb * (1 << 20) if self.settings.max_disk_mb else None
        return Confinement(writable=writable, readable=readable, mounts=mounts, hidden=hidden, protected=protected,
                           max_processes=self.settings.max_processes, sandbox=self.settings.bwrap,
                           max_file_bytes=max_file, max_disk_bytes=max_disk)

    def _environment_dirs(self) -> tuple[Path, ...]:
        """The test interpreter's virtual environment and the built-file overlay, read-only inside the sandbox:
        a spec environment may live anywhere, /tmp included, which the sandbox replaces with a private one."""
        dirs = [Path(self.python).parent.parent] if (Path(self.python).parent.parent / "pyvenv.cfg").is_file() else []
        if self.settings.env_overlay is not None:
            dirs.append(Path(self.settings.env_overlay))
        return tuple(d for d in dirs if d.is_dir())

    def _runner(self) -> dict:
        """Where run_pytest runs: the Docker image, a warm fork server, or (neither) a fresh sandboxed process."""
        root = self._root()
        return {"image": self.image, "server": self._fork_server(), "confine": self._confinement(root),
                "extra_env": self._job_env()}

    def _job_env(self) -> dict[str, str] | None:
        """The settings' test environment for this job's checkout ('{workspace}' filled in)."""
        return self._fill_workspace(self._root()) if self.settings.test_env else None

    def _fill_workspace(self, root: Path | None) -> dict[str, str] | None:
        """The settings' test environment with '{workspace}' replaced by ``root`` (empty when not open yet)."""
        if not self.settings.test_env:
            return None
        return {k: v.replace("{workspace}", str(root or "")) for k, v in self.settings.test_env.items()}

    def _fork_server(self) -> ForkServer | None:
        """The warm fork server of this executor, started on first use (and again after a test killed it);
        None when disabled or unusable."""
        if not self.settings.fork_server or self._server_failed or self.image is not None:
            return None
        if self._server is None or not self._server.alive:
            if self._server is not None:
                self._server.close()
            try:
                self._server = ForkServer(self.python, env=test_environment(self.settings.pass_env),
                                          network=self.settings.network, preload=self.settings.preload,
                                          confine=self._confinement(self._root()),
                                          project=self._root())
            except (ForkServerError, OSError) as exc:
                self._server_failed = str(exc)
                self._server = None
        return self._server

    def warm_up(self) -> None:
        """Open the workspace and start (and prime) the fork server now, ahead of the first run: a second
        worker does this while the first runs a single test process, instead of on the F->P checks' clock."""
        self._root()
        self.workspace.reset()
        if self._fork_server() is not None:
            self._prime_warm()

    def shared_dir(self) -> Path | None:
        """A directory for files coharden hands to instrumented runs (:meth:`run_raw` ``readable``): visible
        read-only to the warm server's runs, so they need no fresh process. None without a fork server."""
        server = self._fork_server()
        return server.shared if server is not None else None

    def workspace_root(self) -> Path:
        """The workspace directory (opened on first use)."""
        return self._root()

    def confinement(self) -> Confinement:
        """The sandbox of a fresh test process in this executor's workspace (the one its own runs get), for a
        caller that runs pytest itself (an instrumented probe)."""
        return self._confinement(self._root())

    def _root(self) -> Path:
        if self.workspace.path is None:
            self.workspace.open()
        return self.workspace.root

    # --- test patches -----------------------------------------------------------------------------------
    def base_file(self, path: str) -> str | None:
        return show_file(self.workspace.source, self.base_commit, path)

    def post_images(self, patch: str) -> dict[str, str | None]:
        """Content of every file ``patch`` touches after applying it to the base commit (git apply)."""
        self._root()
        self.workspace.reset()
        try:
            try:
                self.workspace.apply(patch)
            except ApplyError:
                if not self.workspace.renew():  # a fresh checkout: does it fail there too?
                    raise
                self.workspace.apply(patch)
            return {path: self.workspace.read(path) for path in touched_files(patch)}
        finally:
            self.workspace.reset()

    def test_patch(self, patch: str, *, name: str = "", ids: list[str] | None = None) -> TestPatch:
        """A :class:`TestPatch` with the ids it contributes (or the given ids / names, resolved)."""
        if not patch.strip():
            raise TestIdError(f"{name or 'test'}: the test patch is empty")
        files = self.post_images(patch)
        if ids and self.settings.runner == "django":  # unittest descriptions, not names in the files
            resolved = list(ids)
        elif ids:
            test_files = {p: c for p, c in files.items() if c is not None}
            resolved = resolve_names(ids, test_files)
        else:
            pairs = {p: (self.base_file(p), c) for p, c in files.items()
                     if is_test_path(p, self.settings.test_patterns)}
            resolved = contributed_ids(pairs)
            if not resolved:
                raise TestIdError(f"{name or 'test'}: " + (_syntax_error(pairs) or
                                                           "the test patch adds or changes no test function"))
        return TestPatch(patch=patch, ids=resolved, name=name, files=files)

    def absent_files(self, ids: Sequence[str], patch: str) -> list[str]:
        """The node ids among ``ids`` whose file neither the base commit nor ``patch`` has. SWE-bench's pytest
        log parser also reads the lines of pytest runs a test starts itself (pytester), so a record's
        PASS_TO_PASS can name ``test_foo.py::test_hello``, a file that exists only inside such a run."""
        created = {p for p, c in self.post_images(patch).items() if c is not None} if patch.strip() else set()
        files = {i.split("::", 1)[0] for i in ids if "::" in i and i.split("::", 1)[0].endswith(".py")}
        absent = {f for f in files if f not in created and self.base_file(f) is None}
        return [i for i in ids if i.split("::", 1)[0] in absent]

    def golden_test(self) -> TestPatch:
        """The instance's golden test; its FAIL_TO_PASS ids take precedence over contributed ids."""
        ids = harness_ids(self.instance.FAIL_TO_PASS)
        return self.test_patch(self.instance.test_patch, name="golden", ids=ids or None)

    # --- verdicts ---------------------------------------------------------------------------------------
    def key(self, source_patch: str, test: TestPatch, co_run: Sequence[TestPatch] = (), *,
            first_failure: bool = False) -> str:
        """The store key of ``test``'s verdict on ``source_patch``; ``co_run``: the tests that may share its
        process (named in the key, so a verdict from a shared process never answers for a lone run);
        ``first_failure``: a verdict that may stop at the first failure (its per-test results are partial)."""
        env = self.env_id
        others = sorted({_digest(t) for t in co_run} - {_digest(test)})
        if others:
            env += " co-run=" + ",".join(others)
        if first_failure:
            env += " first-failure"
        if test.whole_files:
            env += " whole-files"
        if self.settings.runner == "sympy" and len({i.split("::")[-1] for i in test.ids}) < len(test.ids):
            env += " shared-names"  # stored before every id sharing a bare name got its status: not reused
        return verdict_key(repo=self.instance.repo, base_commit=self.base_commit, source_patch=source_patch,
                           test_patch=test.patch, test_ids=test.ids, environment=env)

    def verdict(self, source_patch: str, test: TestPatch, *, time_limit: float | None = None) -> Verdict:
        return self.verdicts(source_patch, [test], limits=[time_limit])[0]

    def verdicts(self, source_patch: str, tests: list[TestPatch], *, combine: bool = False,
                 limits: Sequence[float | None] | None = None, first_failure: bool = False) -> list[Verdict]:
        """Verdicts of ``tests`` on base + ``source_patch``. Each test runs in its own process unless
        ``combine`` (the caller trusts every test, ``MPEConfig.trust_tests``: one cannot touch another's result)
        allows sharing one. ``limits``: a time limit per test (None: the setting).
        ``first_failure``: only pass / fail is wanted (a mutant's cell): a process that runs one test alone
        stops at its first failure (``-x``), and the verdict lists the ids it did not run as missing."""
        limit_of = [TimeLimit.of(lim, timeout=self.settings.timeout).limit for lim in (limits or [None] * len(tests))]
        results: list[Verdict | None] = [None] * len(tests)
        retried: set[int] = set()  # tests run again once because their fork server died under them
        todo: list[int] = []
        first_of: dict[tuple[str, tuple[str, ...]], int] = {}
        twins: dict[int, int] = {}  # identical test patches run once
        keys: dict[int, str] = {}
        for i, test in enumerate(tests):
            ident = (test.patch, tuple(test.ids))
            if ident in first_of:
                twins[i] = first_of[ident]
                continue
            first_of[ident] = i
            keys[i] = self.key(source_patch, test, tests if combine else (), first_failure=first_failure)
            cached = self.store.get_verdict(keys[i]) if self.store else None
            if cached is not None and not _stale_timeout(cached, limit_of[i], self.settings.timeout):
                results[i] = cached
            else:
                todo.append(i)
        while todo:
            if not combine and len(todo) > 1 and self._second_lane() and self.image is None:
                ran, deferred = self._run_two(source_patch, [tests[i] for i in todo], [limit_of[i] for i in todo],
                                              first_failure)
            else:
                ran, deferred = self._run_together(source_patch, [tests[i] for i in todo],
                                                   [limit_of[i] for i in todo], combine, first_failure)
            again: list[int] = []
            for j, verdict in ran.items():
                index = todo[j]
                if _server_lost(verdict) and index not in retried:
                    # the server died mid-batch (killed from outside, out of memory, a test): the next run starts
                    # a new one (_fork_server); the test runs once more on a reset checkout, and a second loss is
                    # its verdict (a HARNESS_ERROR, never stored)
                    retried.add(index)
                    again.append(index)
                    continue
                if verdict.outcome is Outcome.APPLY_ERROR:
                    verdict = self._fresh_apply_error(source_patch, tests[index], limit_of[index], first_failure,
                                                      verdict)
                results[index] = verdict
                if self.store is not None and verdict.outcome is not Outcome.HARNESS_ERROR:
                    self.store.put_verdict(keys[index], verdict)
            todo = [*again, *(todo[j] for j in deferred)]
            for executor in (self, self._lane):
                if executor is not None and executor._overran:
                    # what a run wrote past the disk limit leaves the host's disk now, not at the next run
                    executor._overran = False
                    executor.workspace.reset()
        for i, j in twins.items():
            results[i] = results[j]
        final = [r for r in results if r is not None]
        for verdict, test in zip(final, tests, strict=True):
            static = [note for note in _static_notes(test.patch) if note not in verdict.tampering]
            if static:
                verdict.tampering = [*static, *verdict.tampering]
        return final

    def _fresh_apply_error(self, source_patch: str, test: TestPatch, limit: float, first_failure: bool,
                           verdict: Verdict) -> Verdict:
        """``test``'s verdict once more, alone, on a checkout no test has run in since it was written afresh, when
        its APPLY_ERROR came from one where tests ran (this executor's after a run, or the second lane's): what an
        earlier test left there may be what made the patch fail, and that must never be stored as this test's
        verdict. A patch that does not apply fails in git alone, so confirming costs no test process."""
        self._root()
        self.workspace.renew()
        again, _ = self._run_together(source_patch, [test], [limit], False, first_failure)
        return again.get(0, verdict)

    def run_raw(self, source_patch: str, test: TestPatch, *, extra_args: list[str] | None = None,
                extra_env: dict[str, str] | None = None, readable: Sequence[Path] = ()) -> PytestRun:
        """Run one test on base + ``source_patch`` with extra pytest arguments / environment (no caching).

        Used for instrumented runs such as recording inputs, so its time limits are those of
        :func:`instrumented_settings` (the timeout scaled for a tracer, bounded), not the bare run's.
        ``readable``: directories the run must see (read-only) although the sandbox hides them (an
        instrumenting plugin's); such a run is a fresh process. Files the run writes for the caller belong in
        the worktree (the only writable place).
        """
        root = self._root()
        self.workspace.reset()
        self.workspace.apply(source_patch)
        self.workspace.apply(test.patch)
        self.runs += 1
        if self.settings.runner != "pytest":
            return self._run_raw_log(root, test, extra_env or {}, tuple(readable))
        self._warm = self._warm_spec(source_patch, [test])
        return self._run(root, list(test.ids), None, extra_args=extra_args, extra_env=extra_env,
                         readable=tuple(readable), settings=instrumented_settings(self.settings))

    def _run_raw_log(self, root: Path, test: TestPatch, extra_env: dict[str, str],
                     readable: tuple[Path, ...]) -> PytestRun:
        """An instrumented run with the repository's own (log-based) runner: Django's ``runtests.py``, sympy's
        ``bin/test``. It takes no pytest arguments, so an instrumenting plugin comes in through PYTHONPATH
        (``extra_env``'s entries go before the job's own, e.g. a spec environment's checkout)."""
        from coharden.execution.runners import make_runner, run_with

        runner = make_runner(self.settings.runner)
        ids = runner.runner_ids(list(test.ids), [p for p in (test.files or {}) if test.files.get(p) is not None])
        env = {**(self._job_env() or {}), **extra_env}
        paths = [extra_env.get("PYTHONPATH", ""), (self._job_env() or {}).get("PYTHONPATH", "")]
        if any(paths):
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        confine = self._confinement(root)
        confine = dataclasses.replace(confine, readable=(*confine.readable, *readable))
        self.workspace.tainted = True
        verdict = run_with(runner, root, ids, instrumented_settings(self.settings), self.python, env=env,
                           confine=confine)
        return PytestRun(returncode=None, timed_out=verdict.outcome is Outcome.TIMEOUT,
                         duration=verdict.duration or 0.0, output=verdict.output_tail or "",
                         isolation=verdict.isolation or "none")

    def _run(self, root: Path, ids: list[str], limit: float | None, *, readable: tuple[Path, ...] = (),
             settings: Settings | None = None, **extra: object) -> PytestRun:
        """One pytest run; ``settings``: this run's own (an instrumented run's limits), else the executor's."""
        runner = self._runner()
        server = runner["server"]
        if server is not None and all(Path(p).is_relative_to(server.shared) for p in readable):
            readable = ()  # the server's sandbox shows its shared directory already
        if readable and runner["confine"] is not None:
            runner["confine"] = dataclasses.replace(runner["confine"],
                                                    readable=(*runner["confine"].readable, *readable))
            runner["server"] = None  # a server's sandbox was fixed when it started
        job, more = runner.pop("extra_env") or {}, dict(extra.pop("extra_env", None) or {})  # type: ignore[call-overload]
        self.workspace.tainted = True
        try:
            run = run_pytest(root, ids, settings or self.settings, self.python, **runner, time_limit=limit,
                             extra_env={**job, **more} or None, warm=self._warm, **extra)  # type: ignore[arg-type]
        except ForkServerError as exc:  # it died between its liveness check and this run: a run without result
            if self._server is not None:
                self._server.close()
                self._server = None
            run = PytestRun(returncode=None, timed_out=False, duration=0.0, output="",
                            lost=f"{SERVER_GONE} ({exc})", isolation=self.isolation)
        if run.lost:
            self.server_losses.append(run.lost)
        self._overran = self._overran or bool(run.disk)
        return run

    def _run_together(self, source_patch: str, tests: list[TestPatch], limits: list[float], combine: bool,
                      first_failure: bool = False) -> tuple[dict[int, Verdict], list[int]]:
        """Lay down ``tests[0]`` (and, when ``combine``, as many more as can share its pytest process); run
        them; return verdicts for those and the indices deferred to a later process."""
        ws = self.workspace
        self._root()
        ws.reset()
        self._prime_warm()  # on the reset checkout: the server imports the project nowhere else
        try:
            ws.apply(source_patch)
        except ApplyError as exc:
            verdict = Verdict(outcome=Outcome.APPLY_ERROR, reason=f"source patch: {exc}")
            return {j: verdict.model_copy() for j in range(len(tests))}, []
        if self.settings.runner != "pytest":
            return self._run_alone(tests[0]), list(range(1, len(tests)))
        claimed: set[str] = set(touched_files(source_patch))
        done: dict[int, Verdict] = {}
        groups: dict[int, tuple[list[str], dict[str, str]]] = {}
        deferred: list[int] = []
        exclusive = False  # a group whose files could change how other tests run (conftest.py, helpers)
        for j, test in enumerate(tests):
            paths = set(test.files) or set(touched_files(test.patch))
            overlap = paths & claimed
            if groups and (not combine or exclusive or not _shareable(test, paths) or test.whole_files):
                deferred.append(j)
                continue
            if not overlap or not groups:
                try:
                    ws.apply(test.patch)
                except ApplyError as exc:
                    done[j] = Verdict(outcome=Outcome.APPLY_ERROR, reason=f"test patch: {exc}")
                    continue
                claimed |= paths
                groups[j] = (list(test.ids), {})
                exclusive = not _shareable(test, paths) or test.whole_files
                continue
            combinable = (
                combine and groups and test.files
                and all(PurePosixPath(p).name.startswith("test") and p.endswith(".py")
                        and PurePosixPath(p).name != "conftest.py" and test.files.get(p) is not None
                        for p in overlap)
            )
            if not combinable:
                deferred.append(j)
                continue
            rename = {p: _renamed(p, j) for p in overlap}
            # taken in any form (a file, or a link a source patch laid down): never written through
            if set(rename.values()) & claimed or any(os.path.lexists(ws.root / r) for r in rename.values()):
                deferred.append(j)
                continue
            for path, content in test.files.items():
                target = rename.get(path, path)
                if content is not None:
                    ws.write(target, content)
            claimed |= set(rename.values()) | (paths - overlap)
            ids: list[str] = []
            back: dict[str, str] = {}
            for node in test.ids:
                path, classes, name = split_node_id(node)
                ran = "::".join([rename.get(path, path), *classes, name])
                ids.append(ran)
                back[ran] = node
            groups[j] = (ids, back)
        if groups:
            self._warm = self._warm_spec(source_patch, [tests[j] for j in groups])
            all_ids = list(dict.fromkeys(i for ids, _ in groups.values() for i in ids))
            if any(tests[j].whole_files for j in groups):  # alone in its process (exclusive above)
                all_ids = list(dict.fromkeys(i.split("::", 1)[0] for i in all_ids))
            # -x only for a process of one test: a failure must not stop the tests of another
            run = self._run(self._root(), all_ids, max(limits[j] for j in groups),
                            first_failure=first_failure and len(groups) == 1,
                            collect=self._collect_key(source_patch, [tests[j] for j in groups]))
            self.runs += 1
            if len(groups) > 1 and not _clean(run):
                # one test's problem (an id that does not exist, a module that does not import, a hang, an
                # aborted session) would be charged to every test of the process - and cached under their keys:
                # the test running at the time limit gets the TIMEOUT; every other group runs again alone
                hung = run.hung_test() if run.timed_out else None
                for j, (ids, back) in groups.items():
                    if hung is not None and any(hung == i or hung.startswith(runnable_id(i) + "[") for i in ids):
                        done[j] = verdict_for(ids, run, rename=back)
                        continue
                    alone = self._run(self._root(), ids, limits[j],
                                      collect=self._collect_key(source_patch, [tests[j]]))
                    self.runs += 1
                    done[j] = verdict_for(ids, alone, rename=back)
                return done, deferred
            for j, (ids, back) in groups.items():
                done[j] = verdict_for(ids, run, rename=back)
        return done, deferred


    def _collect_key(self, source_patch: str, tests: Sequence[TestPatch]) -> str | None:
        """The name of the test state of a run of ``tests`` on ``source_patch``, for a fork server that collects
        once (``Settings.collect_once``): their patches and ids. None - collect as every run does - when the
        source patch touches anything but Python modules outside the tests (a conftest, a test helper, an ini
        file, data read at collection): the server only compares the Python modules the collection loaded."""
        if not self.settings.collect_once or self.settings.runner != "pytest" or self.image is not None:
            return None
        for path in touched_files(source_patch):
            name = PurePosixPath(path).name
            if not path.endswith(".py") or name == "conftest.py" or is_test_path(path, self.settings.test_patterns):
                return None
        body = [[t.patch, list(t.ids), t.whole_files] for t in tests]
        return hashlib.sha256(repr(body).encode()).hexdigest()

    def _prime_warm(self) -> None:
        """With warm imports, before the first run that changes the source: the fork server imports the project
        from the (reset) base checkout, once per server, so that the fix's and the mutants' runs start warm
        even on a worker whose server never runs the base state."""
        spec = self._warm_spec("", [])
        server = self._fork_server() if spec is not None else None
        if spec is None or server is None or self._primed is server:
            return
        self._primed = server
        server.prime(self._root(), fork_env(self._job_env(), self.settings.pass_env), spec,
                     timeout=self.settings.timeout)

    def _warm_spec(self, source_patch: str, tests: Sequence[TestPatch]) -> dict | None:
        """What the fork server may keep imported for a run of ``tests`` on ``source_patch`` (None: nothing):
        ``Settings.warm_imports``, with the files the patches touch (a warm module loaded from one of them is
        never used) and whether the checkout is the base commit's outside test files (only then may the server
        import the project itself)."""
        if not self.settings.warm_imports or self.settings.runner != "pytest" or self.image is not None:
            return None
        volatile = set(touched_files(source_patch))
        base = not source_patch.strip()
        for test in tests:
            paths = set(test.files) or set(touched_files(test.patch))
            volatile |= paths
            base = base and all(is_test_path(p, self.settings.test_patterns) for p in paths)
        optional = self._test_imports()
        return {"modules": list(self.settings.warm_imports), "optional": optional,
                "key": f"{self.base_commit} {self.env_id} {' '.join(optional)}", "volatile": sorted(volatile),
                "base": base}

    def _test_imports(self) -> list[str]:
        """The project's modules the instance's golden test files import (``sympy.physics.units`` beside
        ``sympy``): warm too, so a fix outside what ``import sympy`` loads still starts warm. From the golden
        test patch only, so the set - and the server's state - is the same for every run of the instance."""
        if self._test_modules is None:
            sources: list[str] = []
            try:  # read without touching the checkout (a run may have laid it out already)
                for patched in parse(self.instance.test_patch) if self.instance.test_patch.strip() else []:
                    path = file_path(patched)
                    if path.endswith(".py"):
                        sources.append(self.base_file(path) or "")
                        sources += [line.value.strip() for hunk in patched for line in hunk if line.is_added]
            except CoHardenError:
                pass
            self._test_modules = _project_imports(sources, {m.split(".")[0] for m in self.settings.warm_imports})
        return self._test_modules

    def _run_alone(self, test: TestPatch) -> dict[int, Verdict]:
        """One test patch with a log-based runner (Django, sympy's bin/test) on the prepared checkout."""
        from coharden.execution.runners import make_runner, run_with

        try:
            self.workspace.apply(test.patch)
        except ApplyError as exc:
            return {0: Verdict(outcome=Outcome.APPLY_ERROR, reason=f"test patch: {exc}")}
        runner = make_runner(self.settings.runner)
        ids = runner.runner_ids(list(test.ids), [p for p in (test.files or {}) if test.files.get(p) is not None])
        self.runs += 1
        self.workspace.tainted = True
        verdict = run_with(runner, self._root(), ids, self.settings, self.python, env=self._job_env(),
                           confine=self._confinement(self._root()))
        # report under the test patch's own ids; ids sharing a runner id (sympy's bare names: ``test_settings`` in
        # two files of the patch) all get its status, as the harness's log parser reads them, by name
        ran_as = dict(zip(test.ids, ids, strict=True))
        found = verdict.tests
        verdict.tests = {own: found[ran] for own, ran in ran_as.items() if ran in found}
        return {0: verdict}


def _project_imports(sources: Sequence[str], tops: set[str]) -> list[str]:
    """Absolute imports of modules under the ``tops`` packages in ``sources`` (whole files, or single lines
    that parse alone), in the order the sources name them, test modules left out; a source that does not parse
    gives nothing."""
    found: dict[str, None] = {}
    for source in sources:
        try:
            tree = pysource.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                parts = name.split(".")
                if parts[0] in tops and len(parts) > 1 and not any(p == "tests" or p.startswith("test_")
                                                                  for p in parts):
                    found[name] = None
    return list(found)


def _run_settings_id(settings: Settings) -> str:
    """The settings besides the environment that can change a verdict, each only when not at its default (so
    verdicts stored before they were named keep their keys): the memory and process limits, the services beside
    the test, and the host variables it is given (names and values). Verdicts are shared across commands and
    sessions of one store (the reference's runs on a pool, say), so a run under other limits must not answer."""
    defaults = Settings.model_fields
    parts = []
    for name in ("memory_mb", "cpu_seconds", "max_processes", "max_file_mb"):
        value = getattr(settings, name)
        if value != defaults[name].default:
            parts.append(f"{name}={value}")
    if settings.services:
        parts.append("services=" + ",".join(sorted(settings.services)))
    if settings.pass_env:
        values = {name: os.environ.get(name) for name in sorted(settings.pass_env)}
        parts.append("pass_env=" + hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:16])
    return "".join(f" {part}" for part in parts)


def _server_lost(verdict: Verdict) -> bool:
    """The verdict of a run whose fork server died under it (not one that forged the protocol: never retried)."""
    return verdict.outcome is Outcome.HARNESS_ERROR and not verdict.tampering and \
        verdict.reason.startswith((SERVER_DIED, SERVER_SILENT, SERVER_GONE))


def _digest(test: TestPatch) -> str:
    return hashlib.sha256((test.patch + "\0" + "\0".join(sorted(test.ids))).encode()).hexdigest()[:16]


def _stale_timeout(verdict: Verdict, limit: float, timeout: float) -> bool:
    """A stored TIMEOUT reached under a smaller time limit (or an unknown one) says nothing about ``limit``; nor
    does one reached on the wall clock alone when ``limit`` is a scaled one (below ``timeout``), which now bounds
    CPU time (a TIMEOUT stored before that could have been the machine's load)."""
    if verdict.outcome is not Outcome.TIMEOUT:
        return False
    return (verdict.time_limit is None or verdict.time_limit < limit
            or (limit < timeout and not verdict.cpu_time_limit))


@functools.lru_cache(maxsize=256)
def _static_notes(patch: str) -> tuple[str, ...]:
    return tuple(scan(patch))


def _clean(run: PytestRun) -> bool:
    """A run whose per-test results can be trusted for every test in it."""
    return not run.timed_out and not run.disk and run.junit_ok and run.returncode in (0, 1, 5)


def _shareable(test: TestPatch, paths: set[str]) -> bool:
    """True when ``test`` only adds or edits test modules (and package ``__init__.py`` files), so laying it down
    beside another test cannot change how that test runs. A conftest.py or a helper module can."""
    for path in paths:
        name = PurePosixPath(path).name
        if test.files and test.files.get(path) is None:  # deletes a file
            return False
        if name == "__init__.py":
            continue
        if not (name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py"))):
            return False
    return True


def _syntax_error(files: dict[str, tuple[str | None, str | None]]) -> str | None:
    """Why a test patch contributes no test when a touched Python file does not parse after it (else None)."""
    for path, (_, after) in sorted(files.items()):
        if after is None or not path.endswith(".py"):
            continue
        try:
            compile(after, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return f"the test patch leaves {path} with a syntax error (line {exc.lineno}: {exc.msg})"
    return None
