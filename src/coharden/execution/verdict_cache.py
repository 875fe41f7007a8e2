"""The verdict cache of one instance (:class:`VerdictCache`): the store key of a test's verdict, which names
everything that can change it (repository, base commit, source and test patch, ids, interpreter and pytest
version, isolation level, limits, the tests sharing the process), and the rule for reusing a stored verdict (a
TIMEOUT only for a time limit no larger than the one it was reached under; a HARNESS_ERROR is never stored,
so a later run retries it; an APPLY_ERROR from before the apply fallbacks is tried again)."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from coharden.config import SandboxSettings, Settings
from coharden.errors import CoHardenError
from coharden.execution.runners import runner_of
from coharden.execution.store import Store, verdict_key
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict


@functools.cache
def environment_id(python: str) -> str:
    """Identity of the test environment: interpreter path, version, and installed pytest."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CoHardenError(f"test interpreter {python!r} cannot run: {exc}") from exc
    lines = out.stdout.strip().splitlines()
    if out.returncode == 3 and lines and lines[-1].startswith("no-pytest "):
        version, _, error = lines[-1][len("no-pytest "):].partition(" ")
        raise CoHardenError(f"test interpreter {python!r} (Python {version}) cannot import pytest ({error}): "
                            f"install pytest into it, or give --python an interpreter that has it")
    if out.returncode != 0 or not lines:
        said = (out.stderr.strip().splitlines() or ["nothing"])[0][:100]
        raise CoHardenError(f"test interpreter {python!r} is not a Python interpreter: `{python} -c ...` exited "
                            f"{out.returncode} ({said})")
    return f"{python} {lines[-1]}"


#: Asked of a test interpreter: its version and pytest's, or why pytest does not import (exit status 3)
_PROBE = ("import sys\nv = sys.version.split()[0]\ntry:\n    import pytest\nexcept Exception as e:\n"
          "    print('no-pytest ' + v + ' ' + type(e).__name__ + ': ' + str(e)[:200]); sys.exit(3)\n"
          "print(v + ' ' + pytest.__version__)")


def test_environment_id(settings: Settings, python: str) -> str:
    """:func:`environment_id` of a plain interpreter; a spec environment (``test_env`` set) or a log-based
    runner is named by its interpreter's path, which holds the spec's digest (the project under test, pytest
    itself for one, is importable only from a job's checkout, so asking it for versions would fail)."""
    if runner_of(settings.tests.runner).needs_pytest and not settings.environment.test_env:
        return environment_id(python)
    return f"{python} {settings.tests.runner}"


def run_settings_id(settings: Settings) -> str:
    """The settings besides the environment that can change a verdict, each only when not at its default (so
    verdicts stored before they were named keep their keys): the memory and process limits, the services beside
    the test, the host variables it is given (names and values), the environment's fingerprint where one is set.
    Verdicts are shared across commands and sessions of one store (the reference's runs on a pool, say), so a run
    under other limits must not answer."""
    defaults = SandboxSettings.model_fields
    parts = []
    for name in ("memory_mb", "cpu_seconds", "max_processes", "max_file_mb"):
        value = getattr(settings.sandbox, name)
        if value != defaults[name].default:
            parts.append(f"{name}={value}")
    if settings.environment.env_fingerprint:
        parts.append(f"env={settings.environment.env_fingerprint}")
    if settings.environment.services:
        parts.append("services=" + ",".join(sorted(settings.environment.services)))
    if settings.sandbox.pass_env:
        values = {name: os.environ.get(name) for name in sorted(settings.sandbox.pass_env)}
        parts.append("pass_env=" + hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:16])
    return "".join(f" {part}" for part in parts)


@dataclass(frozen=True)
class VerdictCache:
    """Stored verdicts of one instance's tests in ``store`` (None: nothing is cached). ``env_id``: the test
    environment, isolation and run settings (see the executor); ``timeout``: the settings' time limit."""

    store: Store | None
    repo: str
    base_commit: str
    env_id: str
    runner: str
    timeout: float

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
        if test.exec_mode != "unit_test":
            env += f" exec-mode={test.exec_mode} raised"  # stored before a failing script's exception was read
        if runner_of(self.runner).bare_ids and len({i.split("::")[-1] for i in test.ids}) < len(test.ids):
            env += " shared-names"  # stored before every id sharing a bare name got its status: not reused
        if runner_of(self.runner).log_failures:
            env += " log-failures"  # stored before the log's failure sections were read: no exceptions, not reused
        return verdict_key(repo=self.repo, base_commit=self.base_commit, source_patch=source_patch,
                           test_patch=test.patch, test_ids=test.ids, environment=env)

    def get(self, key: str, limit: float) -> Verdict | None:
        """The stored verdict under ``key`` that answers for a run with time limit ``limit`` (None: run it)."""
        cached = self.store.get_verdict(key) if self.store is not None else None
        if cached is None or _stale_timeout(cached, limit, self.timeout) or _stale_apply_error(cached):
            return None
        return cached

    def put(self, key: str, verdict: Verdict) -> None:
        """Store a finished verdict (a HARNESS_ERROR is not one: a later run retries it)."""
        if self.store is not None and verdict.outcome is not Outcome.HARNESS_ERROR:
            self.store.put_verdict(key, verdict)


def _digest(test: TestPatch) -> str:
    return hashlib.sha256((test.patch + "\0" + "\0".join(sorted(test.ids))).encode()).hexdigest()[:16]


def _stale_apply_error(verdict: Verdict) -> bool:
    """An APPLY_ERROR stored before patches fell back to ``git apply --reject`` and ``patch --fuzz=5`` (as the
    SWE-bench harness does): it does not say how it was applied (``applied_with``), and a fallback may apply it
    now. Trying again costs a few git and patch commands."""
    return verdict.outcome is Outcome.APPLY_ERROR and not verdict.applied_with


def _stale_timeout(verdict: Verdict, limit: float, timeout: float) -> bool:
    """A stored TIMEOUT reached under a smaller time limit (or an unknown one) says nothing about ``limit``; nor
    does one reached on the wall clock alone when ``limit`` is a scaled one (below ``timeout``), which now bounds
    CPU time (a TIMEOUT stored before that could have been the machine's load)."""
    if verdict.outcome is not Outcome.TIMEOUT:
        return False
    return (verdict.time_limit is None or verdict.time_limit < limit
            or (limit < timeout and not verdict.cpu_time_limit))
