"""Test runners: build the command for a set of test ids and read per-test outcomes from its output.

Three runners, by name in :data:`RUNNERS`: ``pytest`` (coharden's JUnit-based runner,
:mod:`coharden.execution.pytest_runner`, with its fork server), Django's ``tests/runtests.py`` (unittest ids
``test_x (module.Class)``, verbosity 2) and sympy's ``bin/test``. The two log-based runners read output the
way the SWE-bench harness's log parsers do (:mod:`~coharden.execution.log_parsers`); their runs and verdicts
are :mod:`~coharden.execution.log_runs`'. Each runner states what it supports (the ``ClassVar[bool]``
capabilities of :class:`Runner`: ``forks``, ``ids_are_descriptions``, ...); code elsewhere asks
``runner_of(name)`` for them and never compares a runner's name.
Every runner's process goes through :func:`coharden.execution.sandbox.run_limited`, so the time and memory
limits, the process-group kill and the no-network rule are the same.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from coharden.config import RunnerName, Settings
from coharden.execution.log_failures import django_failures, sympy_failures
from coharden.execution.log_parsers import DJANGO_ID, parse_django_log, parse_pytest_log, parse_sympy_log
from coharden.schema.verdict import Raised, TestStatus, Verdict


@dataclass
class RunnerCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


class Runner(Protocol):
    """What the executor needs from a test runner."""

    name: ClassVar[RunnerName]
    command_marker: ClassVar[str]
    """A word of a SWE-bench spec's test command that says this runner runs it ("" for the default, pytest)."""

    def runner_ids(self, names: list[str], test_files: list[str]) -> list[str]:
        """FAIL_TO_PASS / PASS_TO_PASS names in the repository's own format -> this runner's ids."""

    def command(self, python: str, ids: list[str], *, select: bool = False) -> RunnerCommand:
        """The command (run from the repository root) that runs ``ids``. ``select``: only the wanted tests need to
        run (a mutant's cell, where only their pass / fail counts; never a fail-to-pass check, which runs what the
        SWE-bench harness runs): a runner that runs whole files runs just those tests where it can."""

    runner_files: ClassVar[tuple[str, ...]]
    """The runner's own files in the checkout (relative): a traceback that ends there is the runner's failure."""
    # --- what it supports: call sites ask these (``runner_of(settings.tests.runner).forks``), never its name ---------
    forks: ClassVar[bool]
    """Its runs may be forks of a warm fork server: coharden's pytest server (:attr:`session_server`), or a
    ``scripts`` server (``python SCRIPT ...`` run in a fork that holds the project imported) for a runner that
    starts no process of its own per run and reads its settings from its arguments and environment only."""
    session_server: ClassVar[bool]
    """Its fork server is coharden's pytest server (zygotes holding a session, the environment's plugins loaded by
    name, primed with the pytest fork environment); else a ``scripts`` server forking the runner's command."""
    collects_once: ClassVar[bool]
    """Its fork server may collect a test state once and fork each run from it (``Settings.collect_once``)."""
    loads_plugins: ClassVar[bool]
    """Its runs take ``-p PLUGIN`` arguments (an instrumenting plugin such as the recorder, loaded by name, also
    into a zygote's fork; with autoload off, the environment's plugins by name, which name the environment);
    else a plugin comes in through PYTHONPATH and starts with the interpreter (``sitecustomize``)."""
    shares_process: ClassVar[bool]
    """Several test patches may be laid out to run in one process (``run_layout``); else one test patch a run,
    its verdict read from the runner's log (:func:`~coharden.execution.log_runs.run_test_patch`)."""
    reach_pass: ClassVar[bool]
    """Its runs can carry the reach pass's tracing plugin (implied outcomes, ``mpe.implied``)."""
    needs_pytest: ClassVar[bool]
    """The test environment imports pytest, whose version it reports and which names it (a spec environment is
    checked to import it, a probe collects the test files with ``pytest --collect-only``)."""
    ids_are_descriptions: ClassVar[bool]
    """Its ids are descriptions it prints (Django's unittest ``test_x (module.Class)``), taken as given: not
    names of tests in the files, which are resolved there."""
    bare_ids: ClassVar[bool]
    """Its ids are bare test names (sympy's ``test_x``): ids of two files that share a name get one status."""
    log_failures: ClassVar[bool]
    """The exceptions its failing tests raised are read from the failure sections of its output
    (:meth:`failures`); pytest's come from its result stream or JUnit file instead."""
    empty_run: ClassVar[re.Pattern[str]]
    """The line a finished run prints when it ran no test at all (the ids name nothing it collects: a test file
    outside the directories it searches). Such a run is not a harness failure: its tests did not run."""

    def parse(self, output: str) -> dict[str, TestStatus]:
        """{test id: status} from the command's output (empty when nothing could be read)."""

    def failures(self, output: str) -> dict[str, list[Raised]]:
        """{test id: the exceptions it raised} from the failure sections of the command's output, under the ids
        :meth:`parse` gives (empty where the runner does not print them: :attr:`log_failures`)."""

    def collects(self, path: str) -> bool:
        """Whether the runner collects tests from the file ``path`` (relative) when it is named: a file it never
        looks at (a root-level ``test_reproduce.py`` for sympy's ``bin/test``) can only run as a script."""


# --- Django --------------------------------------------------------------------------------------------------


class DjangoRunner:
    """``tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 LABEL...``.

    Ids are unittest descriptions as verbosity 2 prints them: ``test_x (module.Class)`` (Django < 4.1 / Python
    < 3.11) or ``test_x (module.Class.test_x)``. A label is the dotted path ``module.Class.test_x``. Some
    harness ids are a test's docstring (unittest prints its first line instead); those cannot name a label,
    so their test modules (``extra_labels``, from the test patch) run whole and the id is looked up there.
    """

    name: ClassVar[RunnerName] = "django"
    command_marker: ClassVar[str] = "runtests.py"
    forks: ClassVar[bool] = False  # runtests.py starts worker processes and sets Django up per run
    session_server: ClassVar[bool] = False
    collects_once: ClassVar[bool] = False
    loads_plugins: ClassVar[bool] = False
    shares_process: ClassVar[bool] = False
    reach_pass: ClassVar[bool] = False
    needs_pytest: ClassVar[bool] = False
    ids_are_descriptions: ClassVar[bool] = True
    bare_ids: ClassVar[bool] = False
    log_failures: ClassVar[bool] = True
    runner_files: ClassVar[tuple[str, ...]] = ("tests/runtests.py", "django/test/runner.py", "django/test/utils.py")
    empty_run: ClassVar[re.Pattern[str]] = re.compile(r"^Ran 0 tests in [\d.]+s$", re.M)

    def __init__(self, extra_labels: list[str] | None = None, settings_module: str = "test_sqlite") -> None:
        self.extra_labels = list(extra_labels or [])
        self.settings_module = settings_module

    @staticmethod
    def label(test_id: str) -> str | None:
        match = DJANGO_ID.match(test_id.strip())
        if not match:
            return None
        where, name = match["where"], match["name"]
        return where if where.endswith("." + name) else f"{where}.{name}"

    @staticmethod
    def module_label(path: str) -> str | None:
        """'tests/admin_views/tests.py' -> 'admin_views.tests' (the harness's test directive)."""
        if not path.endswith(".py"):
            return None
        rel = path[len("tests/"):] if path.startswith("tests/") else path
        return rel[:-3].replace("/", ".")

    def runner_ids(self, names: list[str], test_files: list[str]) -> list[str]:
        self.extra_labels += [m for p in test_files if (m := self.module_label(p)) and m not in self.extra_labels]
        return list(names)

    def command(self, python: str, ids: list[str], *, select: bool = False) -> RunnerCommand:
        labels: list[str] = []
        for test_id in ids:
            label = self.label(test_id)
            if label is None:  # a docstring id: run the test patch's modules whole
                labels += self.extra_labels
            elif label not in labels:
                labels.append(label)
        labels = list(dict.fromkeys(labels))
        argv = [python, "tests/runtests.py", "--verbosity", "2", f"--settings={self.settings_module}",
                "--parallel", "1", *labels]
        return RunnerCommand(argv, {"PYTHONIOENCODING": "utf8", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})

    def parse(self, output: str) -> dict[str, TestStatus]:
        return parse_django_log(output)

    def failures(self, output: str) -> dict[str, list[Raised]]:
        return django_failures(output)

    def collects(self, path: str) -> bool:
        # runtests.py imports its labels from tests/ (on its path) or as modules of the django package
        return path.endswith(".py") and path.startswith(("tests/", "django/"))


# --- sympy bin/test --------------------------------------------------------------------------------------------


class SympyRunner:
    """``bin/test -C --verbose FILE...`` (sympy's own runner; no cache, one line per test).

    Ids are ``path.py::test_name`` (or bare ``test_name`` with ``test_files`` given); the files run whole and the
    wanted names are looked up in the per-test lines (``test_x ok`` / ``F`` / ``E`` / ``f`` / ``s``).
    """

    name: ClassVar[RunnerName] = "sympy"
    command_marker: ClassVar[str] = "bin/test"
    forks: ClassVar[bool] = True
    session_server: ClassVar[bool] = False
    collects_once: ClassVar[bool] = False
    loads_plugins: ClassVar[bool] = False
    shares_process: ClassVar[bool] = False
    reach_pass: ClassVar[bool] = False
    needs_pytest: ClassVar[bool] = False
    ids_are_descriptions: ClassVar[bool] = False
    bare_ids: ClassVar[bool] = True
    log_failures: ClassVar[bool] = True
    runner_files: ClassVar[tuple[str, ...]] = ("bin/test", "sympy/testing/runtests.py", "sympy/utilities/runtests.py")
    # bin/test given a file outside sympy/ (a generated test_reproduce.py at the root) collects nothing; a test
    # file that fails to import counts as an exception, with no per-test line
    empty_run: ClassVar[re.Pattern[str]] = re.compile(
        r"^=+ tests finished: 0 passed, (?:\d+ exceptions?, )?in [\d.]+ seconds =+$", re.M)

    def __init__(self) -> None:
        self.files: list[str] = []

    def runner_ids(self, names: list[str], test_files: list[str]) -> list[str]:
        self.files += [f for f in test_files if f.endswith(".py") and f not in self.files]
        return [n.split("::")[-1] for n in names]

    def command(self, python: str, ids: list[str], *, select: bool = False) -> RunnerCommand:
        files = list(dict.fromkeys([i.split("::")[0] for i in ids if "::" in i] + self.files))
        # -k takes every word after it (sympy 1.0 to today), so it comes last; it matches names by substring, so
        # a few more tests may run, and the wanted ones are read by their exact names
        names = list(dict.fromkeys(i.split("::")[-1] for i in ids)) if select else []
        # the test environment's fixed PYTHONHASHSEED also keeps bin/test in its own process: without one it
        # re-runs itself in a second interpreter, which imports sympy again, to give it a random seed (sympy's
        # run_in_subprocess_with_hash_randomization, alike from 1.0 on)
        return RunnerCommand([python, "bin/test", "-C", "--verbose", *files, *(["-k", *names] if names else [])],
                             {"PYTHONWARNINGS": "ignore::UserWarning,ignore::SyntaxWarning"})

    def parse(self, output: str) -> dict[str, TestStatus]:
        return parse_sympy_log(output)

    def failures(self, output: str) -> dict[str, list[Raised]]:
        return sympy_failures(output)

    def collects(self, path: str) -> bool:
        # bin/test searches sympy/ for test_*.py files and keeps those a named path matches
        return path.startswith("sympy/") and fnmatch.fnmatch(path.rsplit("/", 1)[-1], "test_*.py")


def runner_of(name: str) -> type[Runner]:
    """The runner called ``name`` (a key of :data:`RUNNERS`; ``Settings.runner``, a spec's runner): ask it what it
    supports (``runner_of(settings.tests.runner).forks``) rather than compare names."""
    try:
        return RUNNERS[name]
    except KeyError:
        raise ValueError(f"unknown test runner {name!r} (known: {', '.join(RUNNERS)})") from None


def make_runner(name: str) -> Runner:
    """A new runner called ``name`` (a key of :data:`RUNNERS`)."""
    return runner_of(name)()


def runner_for_command(test_cmd: str) -> RunnerName:
    """The runner of a SWE-bench spec's test command: the one whose marker it holds, pytest otherwise."""
    return next((cls.name for cls in RUNNERS.values() if cls.command_marker and cls.command_marker in test_cmd),
                "pytest")


# --- pytest (today's runner, wrapped) ---------------------------------------------------------------------------
class PytestRunner:
    """coharden's pytest runner (JUnit XML, fork server) behind the runner interface; ``parse`` reads ``-rA``
    short-summary lines the way the harness's pytest parser does (used to compare with harness logs)."""

    name: ClassVar[RunnerName] = "pytest"
    command_marker: ClassVar[str] = ""
    forks: ClassVar[bool] = True
    session_server: ClassVar[bool] = True
    collects_once: ClassVar[bool] = True
    loads_plugins: ClassVar[bool] = True
    shares_process: ClassVar[bool] = True
    reach_pass: ClassVar[bool] = True
    needs_pytest: ClassVar[bool] = True
    ids_are_descriptions: ClassVar[bool] = False
    bare_ids: ClassVar[bool] = False
    log_failures: ClassVar[bool] = False
    runner_files: ClassVar[tuple[str, ...]] = ()
    empty_run: ClassVar[re.Pattern[str]] = re.compile(r"^=+ no tests ran in [\d.]+s", re.M)

    def runner_ids(self, names: list[str], test_files: list[str]) -> list[str]:
        return list(names)  # SWE-bench's pytest ids are node ids already

    def command(self, python: str, ids: list[str], *, select: bool = False) -> RunnerCommand:
        return RunnerCommand([python, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *ids])

    def parse(self, output: str) -> dict[str, TestStatus]:
        return parse_pytest_log(output)

    def failures(self, output: str) -> dict[str, list[Raised]]:
        return {}  # its runs' exceptions are read from the stream or the JUnit file (pytest_verdicts)

    def collects(self, path: str) -> bool:
        return path.endswith(".py")  # a file named on the command line is collected whatever its name

    def run(self, root: Path, ids: list[str], settings: Settings, python: str, *,
            env: dict[str, str] | None = None) -> Verdict:
        from coharden.execution.process_options import ProcessOptions
        from coharden.execution.pytest_runner import run_pytest
        from coharden.execution.pytest_verdicts import verdict_for

        return verdict_for(ids, run_pytest(root, ids, settings, ProcessOptions(python=python, env=env)))


RUNNERS: dict[str, type[Runner]] = {cls.name: cls for cls in (PytestRunner, DjangoRunner, SympyRunner)}
"""Every test runner by name: ``Settings.runner`` names one (``config.RunnerName`` lists the same names), a
spec's test command picks one by its ``command_marker``."""
