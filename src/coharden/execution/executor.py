"""Verdicts for one instance: a reusable workspace, confined test runs, and the result store.

``InstanceExecutor.verdicts(source_patch, tests)`` answers "what do these test patches say on base +
source_patch?". Cached verdicts are returned without running anything (:mod:`~coharden.execution.verdict_cache`
names what a key holds). Otherwise the workspace is reset to the base commit, the source patch applied with
git, and the test patch applied; every test patch runs in its own pytest process (a fork of the warm server of
the workspace's :class:`~coharden.execution.run_site.RunSite`), inside the sandbox of
:mod:`coharden.execution.sandbox`, so a hostile test can forge at most its own verdict. Only with
``combine=True`` (both tests trusted: the caller says so) may several test patches share one process
(:mod:`~coharden.execution.run_layout` lays them down); every test of a combined run that did not end cleanly
runs again alone (the test running at a time limit gets the TIMEOUT). Two tests that must run apart run at once
in a second lane where a core is free for it (the fast path's, reached through ``run_site``).

Size: over 400 lines because it is the one owner of the workspace's state, and its verdict loop, process
runs, instrumented runs and post-images reset, lay down, run in and taint one checkout in the order the
hostile-test guarantees depend on (every part with a job of its own lives in the modules named above).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from pathlib import Path

from coharden.config import Settings
from coharden.errors import ApplyError, CoHardenError, TestIdError
from coharden.execution.confinement import Confinement
from coharden.execution.docker import docker_available, swebench_image
from coharden.execution.env_plugins import plugins_id
from coharden.execution.git import APPLY_FAILED, Applied, show_file
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_results import PytestRun
from coharden.execution.pytest_verdicts import verdict_for
from coharden.execution.run_layout import collect_key, lay_out
from coharden.execution.run_site import (
    ForkServer,
    RunSite,
    SecondLane,
    WarmPlan,
    job_environment,
    second_lane_wanted,
    server_lost,
    workspace_confinement,
)
from coharden.execution.runners import make_runner, runner_of
from coharden.execution.sandbox import isolation_level, require_confinement
from coharden.execution.scripts import REPRODUCTION_SCRIPT, run_scripts
from coharden.execution.store import Store
from coharden.execution.tampering import scan
from coharden.execution.testids import harness_ids, pass_to_pass_ids, patch_tests, runnable_id
from coharden.execution.verdict_cache import VerdictCache, run_settings_id, test_environment_id
from coharden.execution.workspace import Checkout, Workspace
from coharden.patches import touched_files
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
    timeout = max(settings.sandbox.timeout, min(settings.sandbox.timeout * INSTRUMENTED_SLOWDOWN, INSTRUMENTED_MAX))
    cpu = settings.sandbox.cpu_seconds
    if cpu is not None:
        cpu = max(cpu, int(cpu * timeout / settings.sandbox.timeout))
    sandbox = settings.sandbox.model_copy(update={"timeout": timeout, "cpu_seconds": cpu})
    return settings.model_copy(update={"sandbox": sandbox})


class InstanceExecutor:
    """Runs tests for one instance. Not thread-safe: give every worker its own executor."""

    def __init__(self, instance: Instance, repo: Path, settings: Settings, store: Store | None = None, *,
                 checkout: Checkout | None = None) -> None:
        """``checkout``: a long-lived clone to work in (moved to the instance's base commit) instead of a
        fresh temporary clone."""
        self.instance = instance
        self.settings = settings
        self.store = store
        self.python = instance.python or settings.environment.python
        self.workspace = Workspace(repo, instance.base_commit, parent=None, checkout=checkout,
                                   overlay=settings.environment.env_overlay)
        self.base_commit = self.workspace.commit
        self.runs = 0  # pytest processes started (cache hits do not count)
        self.image: str | None = None
        if settings.sandbox.test_host == "docker":
            if not docker_available():
                raise CoHardenError("test_host 'docker' needs a running Docker engine (docker info failed)")
            template = settings.sandbox.docker_image
            self.image = template.format(instance_id=instance.instance_id) if template \
                else swebench_image(instance.instance_id)
        env = f"docker:{self.image}" if self.image else test_environment_id(settings, self.python)
        confine = self._confinement(None)
        self.isolation = "docker" if self.image else isolation_level(settings.sandbox.network, confine)
        if not self.image:
            require_confinement(settings.sandbox.network, confine, settings.sandbox.allow_weak_sandbox)
        # sandbox=3: verdicts from before the allow-listed sandbox and environment, the thorough reset and the
        # safe read-back (which a hostile test could forge, or which may hold a key) are not reused
        self.env_id = env + " " + " ".join(settings.tests.pytest_args) + f" isolation={self.isolation} sandbox=3" + \
            run_settings_id(settings)
        if not self.image and runner_of(settings.tests.runner).loads_plugins:  # autoload off: plugins loaded by name
            self.env_id += plugins_id(self.python, settings.environment.pytest_version)
        self.cache = VerdictCache(store, instance.repo, self.base_commit, self.env_id, settings.tests.runner,
                                  settings.sandbox.timeout)
        self.warm = WarmPlan(settings, enabled=bool(settings.server.warm_imports)
                             and runner_of(settings.tests.runner).forks and self.image is None,
                             key=f"{self.base_commit} {self.env_id}",
                             golden_patch=instance.test_patch, base_file=self.base_file)
        self._site: RunSite | None = None  # where the tests run (made when the workspace opens)
        self._lane = SecondLane(lambda: InstanceExecutor(instance, self.workspace.source,
                                                         settings.with_overrides(test_lanes=1), None))

    # --- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> InstanceExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._site is not None:
            self._site.close()
        self._lane.close()
        self.workspace.close()

    @property
    def site(self) -> RunSite:
        """Where this executor's tests run: its workspace (opened on first use), sandbox and fork server."""
        if self._site is None:
            root = self._root()
            self._site = RunSite(root, self.python, self.settings, self._confinement(root), image=self.image,
                                 job_env=job_environment(self.settings.environment, root), isolation=self.isolation,
                                 warm=self.warm)
        return self._site

    @property
    def server_losses(self) -> list[str]:
        """Why a fork server died during a run, one entry per such run."""
        return self._site.losses if self._site is not None else []

    def fork_server(self) -> ForkServer | None:
        """The warm fork server of the workspace, started now if it is not running (None: none is used)."""
        return self.site.server()

    def _confinement(self, root: Path | None) -> Confinement:
        return workspace_confinement(self.workspace, self.settings, self.python, self.store, root)

    def warm_up(self) -> None:
        """Open the workspace and start (and prime) the fork server now, ahead of the first run: a second
        worker does this while the first runs a single test process, instead of on the F->P checks' clock."""
        self._root()
        self.workspace.reset()
        if self.fork_server() is not None:
            self.site.prime()

    def shared_dir(self) -> Path | None:
        """A directory for files coharden hands to instrumented runs (:meth:`run_raw` ``readable``): visible
        read-only to the warm server's runs, so they need no fresh process. None without a fork server."""
        server = self.fork_server()
        return server.shared if server is not None else None

    def workspace_root(self) -> Path:
        """The workspace directory (opened on first use)."""
        return self._root()

    def confinement(self) -> Confinement:
        """The sandbox of a fresh test process in this executor's workspace (the one its own runs get), for a
        caller that runs pytest itself (an instrumented probe)."""
        return self.site.confine

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
        tests = self.settings.tests
        resolved, mode = patch_tests(files, self.base_file, name=name, ids=ids,
                                     ids_are_descriptions=runner_of(tests.runner).ids_are_descriptions,
                                     test_patterns=tests.test_patterns, collects=make_runner(tests.runner).collects)
        return TestPatch(patch=patch, ids=resolved, name=name, files=files, exec_mode=mode)

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

    def pass_to_pass_test(self) -> tuple[TestPatch | None, dict[str, int]]:
        """The instance's PASS_TO_PASS tests of the golden test's own files, as one test patch (the golden
        patch, which brings those files to the state the list was made in), and per reason the names left out
        (see :func:`~coharden.execution.testids.pass_to_pass_ids`); None when the record has no golden test or
        none of its PASS_TO_PASS tests is left. The plausibility of a mutant is measured with it."""
        names = harness_ids(self.instance.PASS_TO_PASS)
        if not names or not self.instance.test_patch.strip():
            return None, {}
        images = self.post_images(self.instance.test_patch)
        golden = set(harness_ids(self.instance.FAIL_TO_PASS))
        ids, left_out = pass_to_pass_ids([n for n in names if n not in golden],
                                         {p: c for p, c in images.items() if c is not None},
                                         ids_are_descriptions=runner_of(self.settings.tests.runner).ids_are_descriptions)
        if not ids:
            return None, left_out
        return TestPatch(patch=self.instance.test_patch, ids=ids, name="pass_to_pass", files=images), left_out

    # --- verdicts ---------------------------------------------------------------------------------------
    def key(self, source_patch: str, test: TestPatch, co_run: Sequence[TestPatch] = (), *,
            first_failure: bool = False) -> str:
        """The store key of ``test``'s verdict on ``source_patch`` (see :meth:`VerdictCache.key`)."""
        return self.cache.key(source_patch, test, co_run, first_failure=first_failure)

    def verdict(self, source_patch: str, test: TestPatch, *, time_limit: float | None = None) -> Verdict:
        return self.verdicts(source_patch, [test], limits=[time_limit])[0]

    def verdicts(self, source_patch: str, tests: list[TestPatch], *, combine: bool = False,
                 limits: Sequence[float | None] | None = None, first_failure: bool = False,
                 all_or_none: bool = False) -> list[Verdict]:
        """Verdicts of ``tests`` on base + ``source_patch``. Each test runs in its own process unless
        ``combine`` (the caller trusts every test, ``MPEConfig.trust_tests``: one cannot touch another's result)
        allows sharing one. ``limits``: a time limit per test (None: the setting).
        ``first_failure``: only pass / fail is wanted (a mutant's cell): a process that runs one test alone
        stops at its first failure (``-x``), and the verdict lists the ids it did not run as missing.
        ``all_or_none``: the verdicts count only when every one is admissible (a mutant's cell): once one is not
        (stored, or run: tests run in the given order), the tests not run yet are not run; each gets that
        verdict's outcome, marked ``implied="other_inadmissible"`` and never stored."""
        timeout = self.settings.sandbox.timeout
        limit_of = [TimeLimit.of(lim, timeout=timeout).limit for lim in (limits or [None] * len(tests))]
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
            keys[i] = self.cache.key(source_patch, test, tests if combine else (), first_failure=first_failure)
            results[i] = self.cache.get(keys[i], limit_of[i])
            if results[i] is None:
                todo.append(i)
        todo = self._unneeded(results, todo, limit_of) if all_or_none else todo
        while todo:
            if not combine and len(todo) > 1 and second_lane_wanted(self.settings) and self.image is None:
                ran, deferred, lane_runs = self._lane.run_two(self, source_patch, [tests[i] for i in todo],
                                                              [limit_of[i] for i in todo], first_failure)
                self.runs += lane_runs
            else:
                ran, deferred = self.run_process(source_patch, [tests[i] for i in todo],
                                                 [limit_of[i] for i in todo], combine, first_failure)
            again: list[int] = []
            for j, verdict in ran.items():
                index = todo[j]
                if server_lost(verdict) and index not in retried:
                    # the server died mid-batch (killed from outside, out of memory, a test): the next run starts
                    # a new one (RunSite.server); the test runs once more on a reset checkout, and a second loss
                    # is its verdict (a HARNESS_ERROR, never stored)
                    retried.add(index)
                    again.append(index)
                    continue
                if verdict.outcome is Outcome.APPLY_ERROR:
                    verdict = self._fresh_apply_error(source_patch, tests[index], limit_of[index], first_failure,
                                                      verdict)
                results[index] = verdict
                self.cache.put(keys[index], verdict)
            todo = [*again, *(todo[j] for j in deferred)]
            self._discard_overrun()
            todo = self._unneeded(results, todo, limit_of) if all_or_none else todo
        for i, j in twins.items():
            results[i] = results[j]
        final = [r for r in results if r is not None]
        for verdict, test in zip(final, tests, strict=True):
            static = [note for note in _static_notes(test.patch) if note not in verdict.tampering]
            if static:
                verdict.tampering = [*static, *verdict.tampering]
        return final

    @staticmethod
    def _unneeded(results: list[Verdict | None], todo: list[int], limit_of: list[float]) -> list[int]:
        """``todo`` when every verdict so far is admissible; else none of it: each test left gets the
        inadmissible verdict's outcome, marked as not run (see :meth:`verdicts`' ``all_or_none``)."""
        bad = next((r for r in results if r is not None and not r.admissible), None)
        if bad is None:
            return todo
        for i in todo:
            results[i] = Verdict(outcome=bad.outcome, implied="other_inadmissible", time_limit=limit_of[i],
                                 reason=f"not run: another test's verdict on this code is {bad.outcome.value}, so no "
                                        "verdict of this test makes it admissible")
        return []

    def _fresh_apply_error(self, source_patch: str, test: TestPatch, limit: float, first_failure: bool,
                           verdict: Verdict) -> Verdict:
        """``test``'s verdict once more, alone, on a checkout no test has run in since it was written afresh, when
        its APPLY_ERROR came from one where tests ran (this executor's after a run, or the second lane's): what an
        earlier test left there may be what made the patch fail, and that must never be stored as this test's
        verdict. A patch that does not apply fails in git alone, so confirming costs no test process."""
        self._root()
        self.workspace.renew()
        again, _ = self.run_process(source_patch, [test], [limit], False, first_failure)
        return again.get(0, verdict)

    def _discard_overrun(self) -> None:
        """What a run wrote past the disk limit leaves the host's disk now, not at the next run."""
        if self._site is not None and self._site.overran:
            self._site.overran = False
            self.workspace.reset()

    def run_raw(self, source_patch: str, test: TestPatch, *, extra_args: list[str] | None = None,
                extra_env: dict[str, str] | None = None, readable: Sequence[Path] = (),
                instrument: dict | None = None) -> PytestRun:
        """Run one test on base + ``source_patch`` with extra pytest arguments / environment (no caching).

        Used for instrumented runs such as recording inputs, so its time limits are those of
        :func:`instrumented_settings` (the timeout scaled for a tracer, bounded), not the bare run's.
        ``readable``: directories the run must see (read-only) although the sandbox hides them (an
        instrumenting plugin's); such a run is a fresh process. Files the run writes for the caller belong in
        the worktree (the only writable place). ``instrument`` (``{"plugin", "path", "env"}``: the plugin module
        that ``extra_args`` loads with ``-p``, its directory, the names of its ``extra_env`` variables): the run
        may be a fork of the zygote that collected this test for plain runs, the plugin loaded into the fork (a
        recording then skips the import and the collection); without one, or a zygote, it collects.
        """
        root = self._root()
        self.workspace.reset()
        self.workspace.apply(source_patch)
        self.workspace.apply(test.patch)
        self.runs += 1
        if not runner_of(self.settings.tests.runner).loads_plugins or test.exec_mode == REPRODUCTION_SCRIPT:
            return self._run_raw_log(root, test, extra_env or {}, tuple(readable))
        options = ProcessOptions(warm=self.site.warm_spec(source_patch, [test]), extra_args=tuple(extra_args or ()),
                             env=extra_env, collect=self._collect_key(source_patch, [test]) if instrument else None,
                             instrument=instrument)
        return self._run(list(test.ids), options, settings=instrumented_settings(self.settings),
                         readable=tuple(readable))

    def _run_raw_log(self, root: Path, test: TestPatch, extra_env: dict[str, str],
                     readable: tuple[Path, ...]) -> PytestRun:
        """An instrumented run with the repository's own (log-based) runner: Django's ``runtests.py``, sympy's
        ``bin/test`` (or a reproduction script's ``python SCRIPT``). It takes no pytest arguments, so an
        instrumenting plugin comes in through PYTHONPATH (``extra_env``'s entries go before the job's own, e.g. a
        spec environment's checkout)."""
        from coharden.execution.log_runs import run_test_patch

        job = self.site.job_env or {}
        env = {**job, **extra_env}
        paths = [extra_env.get("PYTHONPATH", ""), job.get("PYTHONPATH", "")]
        if any(paths):
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        confine = self.confinement()
        confine = dataclasses.replace(confine, readable=(*confine.readable, *readable))
        self.workspace.tainted = True
        # only the test's own tests, as a pytest recording runs its ids: the rest of their files (sympy's
        # test_function.py, minutes under the tracer) would only add other tests' inputs to the recording
        if test.exec_mode == REPRODUCTION_SCRIPT:  # the script itself; an instrumenting pytest plugin never loads
            verdict = run_scripts(root, test, instrumented_settings(self.settings),
                                  ProcessOptions(python=self.python, env=env, confine=confine))
        else:
            verdict = run_test_patch(root, test, instrumented_settings(self.settings),
                                     ProcessOptions(python=self.python, env=env, confine=confine, select=True))
        return PytestRun(returncode=None, timed_out=verdict.outcome is Outcome.TIMEOUT,
                         duration=verdict.duration or 0.0, output=verdict.output_tail or "",
                         isolation=verdict.isolation or "none")

    def _run(self, ids: list[str], options: ProcessOptions, *, settings: Settings | None = None,
             readable: tuple[Path, ...] = ()) -> PytestRun:
        """One pytest run in the workspace as laid out (see :meth:`RunSite.run`)."""
        self.workspace.tainted = True
        return self.site.run(ids, options, settings=settings, readable=readable)

    def run_process(self, source_patch: str, tests: list[TestPatch], limits: list[float], combine: bool,
                    first_failure: bool = False) -> tuple[dict[int, Verdict], list[int]]:
        """Lay down ``tests[0]`` (and, when ``combine``, as many more as can share its pytest process) on base +
        ``source_patch``; run them; return verdicts for those and the indices deferred to a later process."""
        ws = self.workspace
        self._root()
        ws.reset()
        self.site.prime()  # on the reset checkout: the server imports the project nowhere else
        try:
            source = ws.apply(source_patch)
        except ApplyError as exc:
            verdict = Verdict(outcome=Outcome.APPLY_ERROR, reason=f"source patch: {exc}",
                              applied_with={"source": APPLY_FAILED})
            return {j: verdict.model_copy(update={"exec_mode": tests[j].exec_mode}) for j in range(len(tests))}, []
        if not runner_of(self.settings.tests.runner).shares_process or tests[0].exec_mode == REPRODUCTION_SCRIPT:
            done = self._run_alone(source_patch, tests[0], limits[0], first_failure)
            return _applied(done, {0: tests[0]}, source), list(range(1, len(tests)))
        layout = lay_out(ws, tests, set(touched_files(source_patch)), combine)
        done = dict(layout.done)
        if layout.groups:
            done.update(self._run_groups(source_patch, tests, limits, layout.groups, first_failure))
        self._discard_overrun()
        return _applied(done, dict(enumerate(tests)), source, layout.applied), layout.deferred

    def _run_groups(self, source_patch: str, tests: list[TestPatch], limits: list[float],
                    groups: dict[int, tuple[list[str], dict[str, str]]], first_failure: bool) -> dict[int, Verdict]:
        """The verdicts of the laid-down ``groups``, run in one process. One test's problem there (an id that
        does not exist, a module that does not import, a hang, an aborted session) would be charged to every
        test of the process - and cached under their keys: when several share a run that did not end cleanly,
        the test running at the time limit gets the TIMEOUT and every other group runs again alone."""
        chosen = [tests[j] for j in groups]
        warm = self.site.warm_spec(source_patch, chosen)
        all_ids = list(dict.fromkeys(i for ids, _ in groups.values() for i in ids))
        if any(test.whole_files for test in chosen):  # alone in its process (see run_layout)
            all_ids = list(dict.fromkeys(i.split("::", 1)[0] for i in all_ids))
        # -x only for a process of one test: a failure must not stop the tests of another
        run = self._run(all_ids, ProcessOptions(time_limit=max(limits[j] for j in groups), warm=warm,
                                            first_failure=first_failure and len(groups) == 1,
                                            collect=self._collect_key(source_patch, chosen)))
        self.runs += 1
        if len(groups) == 1 or _clean(run):
            return {j: verdict_for(ids, run, rename=back) for j, (ids, back) in groups.items()}
        hung = run.hung_test() if run.timed_out else None
        done: dict[int, Verdict] = {}
        for j, (ids, back) in groups.items():
            if hung is not None and any(hung == i or hung.startswith(runnable_id(i) + "[") for i in ids):
                done[j] = verdict_for(ids, run, rename=back)
                continue
            alone = self._run(ids, ProcessOptions(time_limit=limits[j], warm=warm,
                                              collect=self._collect_key(source_patch, [tests[j]])))
            self.runs += 1
            done[j] = verdict_for(ids, alone, rename=back)
        return done

    def _collect_key(self, source_patch: str, tests: Sequence[TestPatch]) -> str | None:
        return collect_key(self.settings, source_patch, tests) if self.image is None else None

    def _run_alone(self, source_patch: str, test: TestPatch, limit: float, first_failure: bool) -> dict[int, Verdict]:
        """One test patch with a log-based runner (Django, sympy's bin/test) on the prepared checkout, under
        ``limit``; ``first_failure`` (a mutant's cell): only its own tests need to run, not their whole files."""
        try:
            applied = self.workspace.apply(test.patch)
        except ApplyError as exc:
            return {0: Verdict(outcome=Outcome.APPLY_ERROR, reason=f"test patch: {exc}",
                               applied_with={"test": APPLY_FAILED})}
        self.runs += 1
        self.workspace.tainted = True
        if test.exec_mode == REPRODUCTION_SCRIPT and self.image is not None:
            return {0: Verdict(outcome=Outcome.HARNESS_ERROR, exec_mode=REPRODUCTION_SCRIPT,
                               reason="reproduction scripts do not run with test_host 'docker' (run them locally)")}
        if test.exec_mode == REPRODUCTION_SCRIPT:
            verdict = run_scripts(self._root(), test, self.settings, ProcessOptions(
                python=self.python, env=self.site.job_env, confine=self.confinement(), time_limit=limit))
            return {0: _applied_test(verdict, applied)}
        # a runner that forks (sympy's bin/test): a warm fork of the site's server
        verdict = self.site.run_log(source_patch, test, limit, select=first_failure)
        return {0: _applied_test(verdict, applied)}


def _applied_test(verdict: Verdict, applied: Applied | None) -> Verdict:
    """``verdict`` saying how its test patch was applied (None: an empty patch)."""
    if applied is not None:
        verdict.applied_with["test"] = applied.method
        verdict.apply_notes += [f"test {note}" for note in applied.notes]
    return verdict


def _applied(done: dict[int, Verdict], tests: dict[int, TestPatch], source: Applied | None,
             applied: dict[int, Applied | None] | None = None) -> dict[int, Verdict]:
    """The verdicts of a process, each saying how the source patch and its test patch were applied (``applied``:
    each test's, from its layout; a test it has none for was applied by the run itself) and in which mode the
    test ran."""
    for j, verdict in done.items():
        if j in tests:
            verdict.exec_mode = tests[j].exec_mode
        if source is not None:
            verdict.applied_with = {"source": source.method, **verdict.applied_with}
            verdict.apply_notes = [*(f"source {note}" for note in source.notes), *verdict.apply_notes]
        if applied is not None and j in applied and "test" not in verdict.applied_with:
            _applied_test(verdict, applied[j])
    return done


@functools.lru_cache(maxsize=256)
def _static_notes(patch: str) -> tuple[str, ...]:
    return tuple(scan(patch))


def _clean(run: PytestRun) -> bool:
    """A run whose per-test results can be trusted for every test in it."""
    return not run.timed_out and not run.disk and run.junit_ok and run.returncode in (0, 1, 5)
