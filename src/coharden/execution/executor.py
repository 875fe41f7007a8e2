"""Verdicts for one instance: a reusable workspace, combined test runs, and the result store.

``InstanceExecutor.verdicts(source_patch, tests)`` answers "what do these test patches say on base +
source_patch?". Cached verdicts are returned without running anything. Otherwise the workspace is reset to
the base commit, the source patch applied with git, and all test patches laid down together: a test patch
touching files no earlier one touched is applied with git; one that shares a test module with an earlier
one is written as a renamed copy of that module (``test_coh<i>__<name>.py``) so both run in one pytest
process. A test patch that touches anything but test modules (a conftest.py, a helper module) runs in its own
process, and so does every test of a combined run that did not end cleanly (missing ids, a hang, an aborted
session), so no test's verdict depends on the tests it happened to share a process with.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path, PurePosixPath

from coharden.config import Settings
from coharden.errors import ApplyError, CoHardenError, TestIdError
from coharden.execution.docker import docker_available, swebench_image
from coharden.execution.forkserver import ForkServer, ForkServerError
from coharden.execution.git import show_file
from coharden.execution.pytest_runner import PytestRun, run_pytest, split_node_id, test_environment, verdict_for
from coharden.execution.store import Store, verdict_key
from coharden.execution.testids import contributed_ids, resolve_names, runnable_ids
from coharden.execution.workspace import Checkout, Workspace
from coharden.patches import is_test_path, touched_files
from coharden.schema.instance import Instance
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict


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
        self._server: ForkServer | None = None
        self.image: str | None = None
        if settings.sandbox == "docker":
            if not docker_available():
                raise CoHardenError("sandbox 'docker' needs a running Docker engine (docker info failed)")
            template = settings.docker_image
            self.image = template.format(instance_id=instance.instance_id) if template \
                else swebench_image(instance.instance_id)
        env = f"docker:{self.image}" if self.image else (
            # a spec environment (test_env set) is named by its path, which holds the spec's digest; the project
            # under test (pytest itself, for one) is importable only from a job's checkout
            environment_id(self.python) if settings.runner == "pytest" and not settings.test_env
            else f"{self.python} {settings.runner}")
        self.env_id = env + " " + " ".join(settings.pytest_args)
        self._server_failed = ""  # why the fork server is not used, once it failed

    # --- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> InstanceExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self.workspace.close()

    def _runner(self) -> dict:
        """Where run_pytest runs: the Docker image, a warm fork server, or (neither) a fresh process."""
        return {"image": self.image, "server": self._fork_server(), "extra_env": self._job_env()}

    def _job_env(self) -> dict[str, str] | None:
        """The settings' test environment for this job's checkout ('{workspace}' filled in)."""
        if not self.settings.test_env:
            return None
        root = str(self._root())
        return {k: v.replace("{workspace}", root) for k, v in self.settings.test_env.items()}

    def _fork_server(self) -> ForkServer | None:
        """The warm fork server of this executor, started on first use; None when disabled or unusable."""
        if not self.settings.fork_server or self._server_failed or self.image is not None:
            return None
        if self._server is None or not self._server.alive:
            try:
                self._server = ForkServer(self.python, env=test_environment(), network=self.settings.network,
                                          preload=self.settings.preload)
            except (ForkServerError, OSError) as exc:
                self._server_failed = str(exc)
                self._server = None
        return self._server

    def workspace_root(self) -> Path:
        """The workspace directory (opened on first use)."""
        return self._root()

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

    def golden_test(self) -> TestPatch:
        """The instance's golden test; its FAIL_TO_PASS ids take precedence over contributed ids."""
        ids = runnable_ids(self.instance.FAIL_TO_PASS)
        return self.test_patch(self.instance.test_patch, name="golden", ids=ids or None)

    # --- verdicts ---------------------------------------------------------------------------------------
    def key(self, source_patch: str, test: TestPatch) -> str:
        return verdict_key(repo=self.instance.repo, base_commit=self.base_commit, source_patch=source_patch,
                           test_patch=test.patch, test_ids=test.ids, environment=self.env_id)

    def verdict(self, source_patch: str, test: TestPatch) -> Verdict:
        return self.verdicts(source_patch, [test])[0]

    def verdicts(self, source_patch: str, tests: list[TestPatch]) -> list[Verdict]:
        results: list[Verdict | None] = [None] * len(tests)
        todo: list[int] = []
        first_of: dict[tuple[str, tuple[str, ...]], int] = {}
        twins: dict[int, int] = {}  # identical test patches run once
        for i, test in enumerate(tests):
            ident = (test.patch, tuple(test.ids))
            if ident in first_of:
                twins[i] = first_of[ident]
                continue
            first_of[ident] = i
            cached = self.store.get_verdict(self.key(source_patch, test)) if self.store else None
            if cached is not None:
                results[i] = cached
            else:
                todo.append(i)
        while todo:
            ran, deferred = self._run_together(source_patch, [tests[i] for i in todo])
            for j, verdict in ran.items():
                index = todo[j]
                results[index] = verdict
                if self.store is not None and verdict.outcome is not Outcome.HARNESS_ERROR:
                    self.store.put_verdict(self.key(source_patch, tests[index]), verdict)
            todo = [todo[j] for j in deferred]
        for i, j in twins.items():
            results[i] = results[j]
        return [r for r in results if r is not None]

    def run_raw(self, source_patch: str, test: TestPatch, *, extra_args: list[str] | None = None,
                extra_env: dict[str, str] | None = None) -> PytestRun:
        """Run one test on base + ``source_patch`` with extra pytest arguments / environment (no caching).

        Used for instrumented runs such as recording inputs.
        """
        root = self._root()
        self.workspace.reset()
        self.workspace.apply(source_patch)
        self.workspace.apply(test.patch)
        self.runs += 1
        where = self._runner()
        job, extra = where["extra_env"] or {}, dict(extra_env or {})
        if "PYTHONPATH" in job and "PYTHONPATH" in extra:  # a plugin's directory and the job's checkout, both
            extra["PYTHONPATH"] = os.pathsep.join([extra["PYTHONPATH"], job["PYTHONPATH"]])
        where["extra_env"] = {**job, **extra}
        return run_pytest(root, list(test.ids), self.settings, self.python, **where, extra_args=extra_args)

    def _run_together(self, source_patch: str, tests: list[TestPatch]) -> tuple[dict[int, Verdict], list[int]]:
        """Lay down as many of ``tests`` as can share one pytest process; run them; return verdicts for those
        and the indices deferred to a later process."""
        ws = self.workspace
        self._root()
        ws.reset()
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
            if groups and (not self.settings.combine_tests or exclusive or not _shareable(test, paths)):
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
                exclusive = not _shareable(test, paths)
                continue
            combinable = (
                self.settings.combine_tests and groups and test.files
                and all(PurePosixPath(p).name.startswith("test") and p.endswith(".py")
                        and PurePosixPath(p).name != "conftest.py" and test.files.get(p) is not None
                        for p in overlap)
            )
            if not combinable:
                deferred.append(j)
                continue
            rename = {p: _renamed(p, j) for p in overlap}
            if set(rename.values()) & claimed or any(ws.read(r) is not None for r in rename.values()):
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
            all_ids = list(dict.fromkeys(i for ids, _ in groups.values() for i in ids))
            run = run_pytest(self._root(), all_ids, self.settings, self.python, **self._runner())
            self.runs += 1
            if len(groups) > 1 and not _clean(run):
                # one test's problem (an id that does not exist, a module that does not import, a hang, an
                # aborted session) would be charged to every test of the process - and cached under their keys:
                # run each group alone so every verdict is its own
                for j, (ids, back) in groups.items():
                    alone = run_pytest(self._root(), ids, self.settings, self.python, **self._runner())
                    self.runs += 1
                    done[j] = verdict_for(ids, alone, rename=back)
                return done, deferred
            for j, (ids, back) in groups.items():
                done[j] = verdict_for(ids, run, rename=back)
        return done, deferred


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
        verdict = run_with(runner, self._root(), ids, self.settings, self.python, env=self._job_env())
        back = dict(zip(ids, test.ids, strict=True))  # report under the test patch's own ids
        verdict.tests = {back.get(k, k): v for k, v in verdict.tests.items()}
        return {0: verdict}


def _clean(run: PytestRun) -> bool:
    """A run whose per-test results can be trusted for every test in it."""
    return not run.timed_out and run.junit_ok and run.returncode in (0, 1, 5)


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
