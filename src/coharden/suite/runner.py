"""The kill oracle: real pytest runs of a test suite against a module and its mutants.

Workspace: the module's project root is copied (without VCS, caches and virtualenvs) into a throwaway
directory; the user's files are never written. The suite is written there as one test file
(:data:`SUITE_FILE`). A mutant run writes the mutated module over the copy, runs pytest and restores the
original; with several workers each has its own copy, a :class:`~coharden.execution.run_site.RunSite` (the
instance executor's: the same sandbox, warm fork server and restart after a test killed it), so no two runs
share a mutable tree (mutmut / cosmic-ray's per-variant isolation).

Before any mutant is trusted, as in mutmut: a **baseline** run (the suite must pass on the original module;
its duration sets the per-mutant timeout) and a **forced-fail** run (a module that raises on import; the
suite must fail, else it does not exercise the module and every mutant would "survive").

Statuses (fixed vocabulary, after mutmut / cosmic-ray): ``killed`` (a test failed or errored, including a
collection error caused by the mutant), ``survived`` (every test ran and passed), ``timeout`` (the run was
killed by the time or CPU limit; counted separately, never as a kill) and ``error`` (pytest itself could not
produce results: internal or usage error, no results file; inadmissible, never a kill).

Finished runs (killed / survived) are cached in the result store keyed by the sha256 of (mutated module, suite
text, test ids, environment), so arms that start from the same frozen round 0 share their round-0 runs and an
interrupted comparison resumes where it stopped.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any

from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.execution.confinement import Confinement, run_confinement
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_results import PytestRun
from coharden.execution.run_site import RunSite
from coharden.execution.sandbox import require_confinement
from coharden.execution.store import SUITE_RUN, Store, suite_run_key
from coharden.schema.verdict import TestStatus
from coharden.suite.operators import ModuleMutant

SUITE_DIR = "coharden_suite"
FORCED_FAIL = 'raise RuntimeError("coharden forced-fail sanity check: every mutant raises")\n'
_IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".venv", "venv", ".tox", ".nox", "node_modules",
                                 ".mypy_cache", ".pytest_cache", ".ruff_cache", "*.pyc", ".coharden")
_TIMEOUT_SIGNALS = (-9, -24)  # SIGKILL (address-space limit or our kill), SIGXCPU (CPU limit)


class MutantStatus(StrEnum):
    KILLED = "killed"
    SURVIVED = "survived"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass
class RunResult:
    """One pytest run of (some of) the suite on one version of the module."""

    status: MutantStatus
    failed: list[str] = field(default_factory=list)
    """Test names (``Class::test`` or ``test``) that failed or errored; collection errors as ``<collection>``."""
    passed: list[str] = field(default_factory=list)
    reason: str = ""
    duration: float = 0.0
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        return cls(**{**data, "status": MutantStatus(data["status"])})


def mutant_status(run: PytestRun) -> RunResult:
    """Mechanical status of one run (see module docs). Never guesses: no results means ``error``."""
    base: dict[str, Any] = {"duration": run.duration}
    if run.disk:  # killed at the disk limit (max_disk_mb): an error, never cached
        return RunResult(MutantStatus.ERROR, reason=run.disk, **base)
    if run.timed_out or (run.returncode in _TIMEOUT_SIGNALS):
        return RunResult(MutantStatus.TIMEOUT, reason="time or CPU limit reached", **base)
    failed = [_name(c.classname, c.name) for c in run.cases if c.status in (TestStatus.FAILED, TestStatus.ERROR)]
    passed = [_name(c.classname, c.name) for c in run.cases if c.status is TestStatus.PASSED]
    if run.returncode in (3, 4) or run.returncode is None or run.returncode < 0:
        tail = " | ".join(run.output.strip().splitlines()[-3:])[:300]
        return RunResult(MutantStatus.ERROR, failed, passed, f"pytest exit code {run.returncode}: {tail}", **base)
    if not run.junit_ok:
        return RunResult(MutantStatus.ERROR, reason=f"no results file (exit code {run.returncode})", **base)
    if failed:
        return RunResult(MutantStatus.KILLED, failed, passed, **base)
    if run.returncode == 0 and passed:
        return RunResult(MutantStatus.SURVIVED, [], passed, **base)
    if run.returncode == 5 or not run.cases:
        return RunResult(MutantStatus.ERROR, reason="no tests ran", **base)
    return RunResult(MutantStatus.ERROR, failed, passed,
                     f"exit code {run.returncode} without a parsed failure", **base)


def _name(classname: str, name: str) -> str:
    if not classname:
        return "<collection>"
    # classname is "coharden_suite.test_mod" or "coharden_suite.test_mod.TestX": keep the class part
    parts = classname.split(".")
    cls = parts[2:] if len(parts) > 2 and parts[0] == SUITE_DIR else []
    return "::".join([*cls, name])


class KillOracle:
    """Runs the suite against the module and its mutants. Use as a context manager."""

    #: a mutant's time limit: the suite's baseline duration times this, plus ``TIMEOUT_CONSTANT`` seconds
    TIMEOUT_MULTIPLIER = 10.0
    TIMEOUT_CONSTANT = 5.0

    def __init__(self, module: Path, settings: Settings, *, root: Path | None = None, store: Store | None = None,
                 workers: int = 1) -> None:
        self.module = Path(module).resolve()
        if not self.module.is_file() or self.module.suffix != ".py":
            raise CoHardenError(f"{module}: not a Python file")
        self.root = Path(root).resolve() if root is not None else self.module.parent
        try:
            self.module_rel = self.module.relative_to(self.root).as_posix()
        except ValueError as exc:
            raise CoHardenError(f"{module} is not inside --root {self.root}") from exc
        self.original = self.module.read_text()
        self.settings = settings
        self.store = store
        self.workers = max(1, workers)
        self.suite_rel = f"{SUITE_DIR}/test_{self.module.stem}.py"
        self.mutant_timeout = settings.sandbox.timeout
        self._tmp: Path | None = None
        self._pool: queue.Queue[RunSite] = queue.Queue()
        self._all: list[RunSite] = []
        self._env_id = ""
        self.runs = 0
        self.cache_hits = 0
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------------------
    def __enter__(self) -> KillOracle:
        self._tmp = Path(tempfile.mkdtemp(prefix="coharden-suite-"))
        try:
            for k in range(self.workers):
                root = self._tmp / f"w{k}"
                shutil.copytree(self.root, root, ignore=_IGNORE, symlinks=True)
                (root / SUITE_DIR).mkdir(exist_ok=True)
                # the executor's run site: a warm fork server started on first use and again after a mutant
                # killed it (a fresh process per run where none starts), in the same sandbox builder's confinement
                site = RunSite(root, self.settings.environment.python, self.settings, self._confinement(root))
                self._all.append(site)
                self._pool.put(site)
        except BaseException:
            self.close()
            raise
        self._env_id = f"{self.settings.environment.python}|{self.settings.tests.pytest_args}|{self.module_rel}"
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _confinement(self, root: Path) -> Confinement:
        """The same bwrap sandbox as the executor's test runs: the suite's tests (an LLM's among them) may write
        only their worker copy; the store's directory is hidden."""
        hidden: tuple[Path, ...] = ()
        if self.store is not None:
            store_dir = self.store.path.resolve().parent
            if store_dir != root and store_dir not in root.parents and root not in store_dir.parents:
                hidden = (store_dir,)
        confine = run_confinement(self.settings.sandbox, writable=(root,), hidden=hidden)
        require_confinement(self.settings.sandbox.network, confine, self.settings.sandbox.allow_weak_sandbox)
        return confine

    def close(self) -> None:
        for site in self._all:
            site.close()
        self._all.clear()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # -- runs --------------------------------------------------------------------------------------------
    def _key(self, module_source: str, suite: str, ids: Sequence[str]) -> str:
        return suite_run_key(module_source=module_source, suite=suite, test_ids=list(ids), environment=self._env_id)

    def run(self, module_source: str, suite: str, tests: Sequence[str] = (), *, timeout: float | None = None,
            use_cache: bool = True) -> RunResult:
        """Run the suite (or only ``tests``: names like ``test_x`` / ``TestC::test_y``) on ``module_source``."""
        if not self._all:
            raise RuntimeError("KillOracle is not open")
        limit = timeout or self.settings.sandbox.timeout
        key = self._key(module_source, suite, tests)
        if use_cache and self.store is not None:
            stored = self.store.get_record(SUITE_RUN, key)
            if stored is not None:
                with self._lock:
                    self.cache_hits += 1
                return RunResult.from_json({**stored, "cached": True})
        site = self._pool.get()
        try:
            (site.root / self.suite_rel).write_text(suite)
            (site.root / self.module_rel).write_text(module_source)
            ids = [f"{self.suite_rel}::{t}" for t in tests] or [self.suite_rel]
            limited = self.settings.with_overrides(timeout=limit)
            result = mutant_status(site.run(ids, ProcessOptions(), settings=limited))
        finally:
            (site.root / self.module_rel).write_text(self.original)
            self._pool.put(site)
        with self._lock:
            self.runs += 1
        # only finished verdicts are cached: they do not depend on the time limit (which follows the baseline
        # duration of each session); timeouts and harness errors are run again
        if self.store is not None and result.status in (MutantStatus.KILLED, MutantStatus.SURVIVED):
            self.store.put_record(SUITE_RUN, key, result.to_json())
        return result

    def baseline(self, suite: str) -> RunResult:
        """The suite on the original module; must pass. Sets the per-mutant timeout from its duration."""
        result = self.run(self.original, suite, use_cache=False)
        if result.status is not MutantStatus.SURVIVED:
            detail = result.reason or ", ".join(result.failed[:5])
            raise CoHardenError(f"baseline: the suite does not pass on the original module ({result.status.value}: "
                                f"{detail})")
        self.mutant_timeout = min(self.settings.sandbox.timeout,
                                  result.duration * self.TIMEOUT_MULTIPLIER + self.TIMEOUT_CONSTANT)
        return result

    def forced_fail(self, suite: str) -> RunResult:
        """mutmut's sanity check: with a module that raises on import, the suite must fail."""
        result = self.run(FORCED_FAIL + self.original, suite, use_cache=False)
        if result.status is not MutantStatus.KILLED:
            raise CoHardenError("forced-fail sanity check: the suite does not fail when the module raises on import "
                                f"({result.status.value}); it does not exercise {self.module_rel}, so no mutant "
                                "verdict could be trusted")
        return result

    def run_mutants(self, mutants: Sequence[ModuleMutant], suite: str, tests: Sequence[str] = (), *,
                    progress: Callable[[ModuleMutant, RunResult], None] | None = None) -> dict[str, RunResult]:
        """Every mutant against the suite (or ``tests`` of it); results by mutant id, in input order."""
        def one(mutant: ModuleMutant) -> RunResult:
            result = self.run(mutant.source, suite, tests, timeout=self.mutant_timeout)
            if progress is not None:
                progress(mutant, result)
            return result

        if self.workers == 1 or len(mutants) < 2:
            return {m.id: one(m) for m in mutants}
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            results = list(pool.map(one, mutants))
        return {m.id: r for m, r in zip(mutants, results, strict=True)}
