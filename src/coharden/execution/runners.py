"""Test runners: build the command for a set of test ids and read per-test outcomes from its output.

Three runners, by name in :data:`RUNNERS`: ``pytest`` (coharden's JUnit-based runner,
:mod:`coharden.execution.pytest_runner`, with its fork server), Django's ``tests/runtests.py`` (unittest ids
``test_x (module.Class)``, verbosity 2) and sympy's ``bin/test``. The two log-based runners read output the
way the SWE-bench harness's log parsers do. Each runner states what it supports (the ``ClassVar[bool]``
capabilities of :class:`Runner`: ``forks``, ``ids_are_descriptions``, ...); code elsewhere asks
``runner_of(name)`` for them and never compares a runner's name.
Every runner's process goes through :func:`coharden.execution.sandbox.run_limited`, so the time and memory
limits, the process-group kill and the no-network rule are the same; so are the false-pass rules: a wanted
test that is missing or skipped is not a pass, and output that yields no per-test result is an inadmissible
HARNESS_ERROR carrying the unparsed tail.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from coharden.config import RunnerName, Settings
from coharden.execution.sandbox import Confinement, run_limited
from coharden.execution.tracebacks import raised_in
from coharden.schema.testpatch import TestPatch
from coharden.schema.timelimit import TimeLimit
from coharden.schema.verdict import Outcome, TestStatus, Verdict

if TYPE_CHECKING:
    from coharden.execution.forkserver import ForkServer

_TAIL_LINES = 40


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


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
    # --- what it supports: call sites ask these (``runner_of(settings.runner).forks``), never its name ---------
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
    its verdict read from the runner's log (:func:`run_test_patch`)."""
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
    empty_run: ClassVar[re.Pattern[str]]
    """The line a finished run prints when it ran no test at all (the ids name nothing it collects: a test file
    outside the directories it searches). Such a run is not a harness failure: its tests did not run."""

    def parse(self, output: str) -> dict[str, TestStatus]:
        """{test id: status} from the command's output (empty when nothing could be read)."""

    def collects(self, path: str) -> bool:
        """Whether the runner collects tests from the file ``path`` (relative) when it is named: a file it never
        looks at (a root-level ``test_reproduce.py`` for sympy's ``bin/test``) can only run as a script."""


# --- Django --------------------------------------------------------------------------------------------------
_DJANGO_ID = re.compile(r"^(?P<name>\w+) \((?P<where>[\w.]+)\)$")


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
    runner_files: ClassVar[tuple[str, ...]] = ("tests/runtests.py", "django/test/runner.py", "django/test/utils.py")
    empty_run: ClassVar[re.Pattern[str]] = re.compile(r"^Ran 0 tests in [\d.]+s$", re.M)

    def __init__(self, extra_labels: list[str] | None = None, settings_module: str = "test_sqlite") -> None:
        self.extra_labels = list(extra_labels or [])
        self.settings_module = settings_module

    @staticmethod
    def label(test_id: str) -> str | None:
        match = _DJANGO_ID.match(test_id.strip())
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

    def collects(self, path: str) -> bool:
        # runtests.py imports its labels from tests/ (on its path) or as modules of the django package
        return path.endswith(".py") and path.startswith(("tests/", "django/"))


def parse_django_log(log: str) -> dict[str, TestStatus]:
    """Statuses from Django's verbosity-2 runner output, with the SWE-bench harness's reading rules: ``X ...
    ok`` / ``skipped`` / ``FAIL`` / ``ERROR``, ``FAIL: X`` / ``ERROR: X`` headers, and an ``ok`` on a line of
    its own closing the last ``X ...`` line (a test that printed between the dots and its result)."""
    status: dict[str, TestStatus] = {}
    previous: str | None = None
    described: str | None = None  # 'test_x (module.Class)' alone on a line: its docstring line follows
    for raw in log.split("\n"):
        line = raw.strip()
        before = dict(status)
        if " ... " in line:
            previous = line.split(" ... ")[0]
        if line.endswith((" ... ok", " ... OK", " ...  OK")):
            status[line.rsplit(" ... ", 1)[0]] = TestStatus.PASSED
        elif " ... skipped" in line:
            status[line.split(" ... skipped")[0]] = TestStatus.SKIPPED
        elif line.endswith(" ... expected failure"):
            status[line.split(" ... ")[0]] = TestStatus.XFAIL
        elif line.endswith(" ... FAIL"):
            status[line.split(" ... FAIL")[0]] = TestStatus.FAILED
        elif line.endswith(" ... ERROR"):
            status[line.split(" ... ERROR")[0]] = TestStatus.ERROR
        if line.startswith(("FAIL:", "ERROR:")) and len(line.split()) > 1:
            kind, rest = line.split(":", 1)
            test = rest.strip()
            status[test] = TestStatus.FAILED if kind == "FAIL" else TestStatus.ERROR
            # 'FAIL: test_x (module.Class)' - the harness keys on the first word; keep both forms findable
            status.setdefault(test.split()[0], status[test])
        elif line.startswith("ok") and previous is not None and " ... " not in line:
            status[previous] = TestStatus.PASSED
        new = [k for k in status if before.get(k) is not status[k]]
        if described and new:  # the docstring line got a result: so did the test it describes
            status[described] = status[new[0]]
        if _DJANGO_ID.match(line):
            described = line
        elif new or " ... " in line:
            described = None
    # Python 3.11+ prints 'test_x (module.Class.test_x)', older ones 'test_x (module.Class)': ids of either
    # form find the test
    for test_id, value in list(status.items()):
        match = _DJANGO_ID.match(test_id)
        if match:
            name, where = match["name"], match["where"]
            other = where[: -len(name) - 1] if where.endswith("." + name) else f"{where}.{name}"
            status.setdefault(f"{name} ({other})", value)
    return status


# --- sympy bin/test --------------------------------------------------------------------------------------------
_SYMPY_FAILURE_HEADER = re.compile(r"^_+ (?P<path>\S+\.py):(?P<name>\w+) _+$", re.M)


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

    def collects(self, path: str) -> bool:
        # bin/test searches sympy/ for test_*.py files and keeps those a named path matches
        return path.startswith("sympy/") and fnmatch.fnmatch(path.rsplit("/", 1)[-1], "test_*.py")


def parse_sympy_log(log: str) -> dict[str, TestStatus]:
    codes = {"ok": TestStatus.PASSED, "F": TestStatus.FAILED, "E": TestStatus.ERROR, "f": TestStatus.XFAIL,
             "s": TestStatus.SKIPPED, "X": TestStatus.PASSED, "w": TestStatus.SKIPPED}
    status: dict[str, TestStatus] = {}
    for match in _SYMPY_FAILURE_HEADER.finditer(log):
        status[match["name"]] = TestStatus.FAILED
    for raw in log.split("\n"):
        words = raw.strip().split()
        if len(words) >= 3 and re.fullmatch(r"\[\w+\]", words[-1]):
            # the last test of a file carries the file's verdict ('test_x ok   [OK]'); the harness's parser,
            # which wants the line to end in ' ok', misses that test - here it counts
            words = words[:-1]
        if len(words) >= 2 and words[0].startswith("test_") and words[-1] in codes:
            status[words[0]] = codes[words[-1]]
    return status


# --- shared verdict rules --------------------------------------------------------------------------------------
def run_with(runner: Runner, root: Path, ids: list[str], settings: Settings, python: str, *,
             env: dict[str, str] | None = None, confine: Confinement | None = None, select: bool = False,
             time_limit: float | None = None, server: ForkServer | None = None, warm: dict | None = None) -> Verdict:
    """Run ``ids`` with a log-based ``runner`` in the sandbox (``confine``: the executor's bwrap confinement; the
    same one the pytest runs get) and apply the false-pass rules; the verdict records its isolation.
    ``select``: see :meth:`Runner.command`; ``time_limit``: the run's limit (a mutant's, scaled from the test's
    run on the fixed code; None: the setting). ``server``: a ``scripts`` fork server of the same sandbox, which
    runs the command as a fork (``warm``: the project modules it may keep imported, ``WarmPlan.spec``) where the
    runner :attr:`~Runner.forks` through a ``scripts`` server and no service runs beside it; else a fresh process."""
    from coharden.execution import interrupt
    from coharden.execution.services import wrap

    interrupt.check()  # a batch was interrupted: start no test process
    command = runner.command(python, ids, select=select)
    full_env = _run_env(settings, command.env, env)
    limits = TimeLimit.of(time_limit, timeout=settings.timeout, cpu_seconds=settings.cpu_seconds)
    argv, shown = wrap(command.argv, settings.services, settings.cache_dir)  # services beside it, same sandbox
    if confine is not None and shown:
        confine = dataclasses.replace(confine, readable=(*confine.readable, *shown))
    # a fork hashes with its server's seed (fixed at the server's start): only a run that asks for that one forks
    if server is not None and server.hash_seed and full_env.get("PYTHONHASHSEED") == server.hash_seed \
            and runner.forks and not runner.session_server and not shown:
        proc = server.run(root, argv[2:], full_env, timeout=limits.wall, memory_mb=settings.memory_mb,
                          cpu_seconds=limits.cpu, warm=warm, script=argv[1])
    else:
        proc = run_limited(argv, root, timeout=limits.wall, env=full_env, memory_mb=settings.memory_mb,
                           cpu_seconds=limits.cpu, network=settings.network, confine=confine)
    if proc.killed_at_cpu_limit(limits):
        proc = dataclasses.replace(proc, timed_out=True)
    if proc.lost or proc.tampering:  # the server died, or a test forged the protocol or swapped a file read back
        verdict = Verdict(outcome=Outcome.HARNESS_ERROR, reason=proc.lost or f"tampering: {proc.tampering}",
                          duration=proc.duration, tampering=[proc.tampering] if proc.tampering else [],
                          output_tail=_tail(proc.output))
    elif proc.disk:  # killed at the disk limit: what it printed is not its result
        verdict = Verdict(outcome=Outcome.HARNESS_ERROR, reason=proc.disk, duration=proc.duration,
                          output_tail=_tail(proc.output))
    else:
        verdict = verdict_from_log(ids, runner.parse(proc.output), output=proc.output, returncode=proc.returncode,
                                   timed_out=proc.timed_out, duration=proc.duration, runner=runner.name,
                                   ran_none=bool(runner.empty_run.search(proc.output)),
                                   raised=raised_in(proc.output, root, runner.runner_files))
    verdict.isolation = proc.isolation
    verdict.time_limit, verdict.cpu_time_limit = limits.limit, limits.scaled
    return verdict


def _run_env(settings: Settings, command_env: dict[str, str], env: dict[str, str] | None) -> dict[str, str]:
    """A log-runner run's environment: the tests' own, the runner command's, then the job's (``env``)."""
    from coharden.execution.pytest_runner import test_environment

    return {**test_environment(settings.pass_env), **command_env, **(env or {})}


def script_server_env(settings: Settings, env: dict[str, str] | None) -> dict[str, str]:
    """The environment a ``scripts`` fork server imports the project in (its prime): the one its forked runs
    have, whose import environment must be the same for them to start warm (``warm_state``)."""
    return _run_env(settings, make_runner(settings.runner).command("python", []).env, env)


def run_test_patch(root: Path, test: TestPatch, settings: Settings, python: str, *,
                   env: dict[str, str] | None = None, confine: Confinement | None = None, select: bool = False,
                   time_limit: float | None = None, server: ForkServer | None = None,
                   warm: dict | None = None) -> Verdict:
    """``test``, laid down in ``root``, run by the settings' log-based runner (Django's ``runtests.py``, sympy's
    ``bin/test``); the verdict is under the test patch's own ids: ids sharing a runner id (sympy's bare names,
    ``test_settings`` in two files of the patch) all get its status, as the harness's log parser reads them."""
    runner = make_runner(settings.runner)
    ids = runner.runner_ids(list(test.ids), [p for p in (test.files or {}) if test.files.get(p) is not None])
    verdict = run_with(runner, root, ids, settings, python, env=env, confine=confine, select=select,
                       time_limit=time_limit, server=server, warm=warm)
    found = verdict.tests
    verdict.tests = {own: found[ran] for own, ran in zip(test.ids, ids, strict=True) if ran in found}
    return verdict


def verdict_from_log(ids: list[str], statuses: dict[str, TestStatus], *, output: str, returncode: int | None,
                     timed_out: bool, duration: float, runner: str, ran_none: bool = False,
                     raised: str | None = None) -> Verdict:
    """Without any per-test result, two outputs say the tests did not run (COLLECTION_ERROR, as pytest's
    uncollected ids or a test module that fails to import) rather than that the harness failed, which a rerun
    would retry for ever: ``ran_none``, the runner said it finished having run no test (its ``empty_run``
    line); ``raised``, the code under test raised before any test ran (:func:`raised_in`)."""
    base: dict[str, Any] = {"duration": duration, "output_tail": _tail(output)}
    if timed_out:
        return Verdict(outcome=Outcome.TIMEOUT, reason="test process exceeded the time limit and was killed", **base)
    why = None
    if not statuses and ran_none and returncode in (0, 1, 5):
        error = re.search(r"^\w+(?:Error|Exception): .+$", output, re.M)
        why = (f"{runner} finished and ran no test: "
               + (f"a test file failed to import: {error[0][:200]}" if error else "the files name none it collects"))
    elif not statuses and raised and returncode is not None and returncode > 0:
        why = f"the code under test raised before {runner} ran a test: {raised}"
    if why:
        return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=f"test ids not run: {', '.join(ids[:5])} ({why})",
                       tests={i: [TestStatus.MISSING] for i in ids}, **base)
    if not statuses:
        reason = f"{runner} output has no per-test result (exit code {returncode}); unparsed tail:\n{_tail(output, 15)}"
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, **base)
    tests = {i: [statuses.get(i, TestStatus.MISSING)] for i in ids}
    missing = [i for i, s in tests.items() if s == [TestStatus.MISSING]]
    if missing:
        reason = f"test ids not run: {', '.join(missing[:5])}"
        # it died part way: say how, and where
        if returncode is not None and returncode not in (0, 1) and len(missing) < len(ids):
            how = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
            last = (output.strip().splitlines() or [""])[-1].strip()[:120]
            reason += f" (the {runner} process ended with {how}" + (f" at: {last}" if last else "") + ")"
        return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=reason, tests=tests, **base)
    bad = [i for i, s in tests.items() if s[0] in (TestStatus.FAILED, TestStatus.ERROR, TestStatus.SKIPPED)]
    if bad:
        reason = "; ".join(f"{i}: {tests[i][0].value}" for i in bad[:3])
        return Verdict(outcome=Outcome.FAIL, reason=reason, tests=tests, **base)
    if returncode not in (0, None) and not any(s in (TestStatus.FAILED, TestStatus.ERROR) for s in statuses.values()):
        reason = f"{runner} exited with {returncode} but no failure was parsed"
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, tests=tests, **base)
    return Verdict(outcome=Outcome.PASS, tests=tests, **base)


def runner_of(name: str) -> type[Runner]:
    """The runner called ``name`` (a key of :data:`RUNNERS`; ``Settings.runner``, a spec's runner): ask it what it
    supports (``runner_of(settings.runner).forks``) rather than compare names."""
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
    runner_files: ClassVar[tuple[str, ...]] = ()
    empty_run: ClassVar[re.Pattern[str]] = re.compile(r"^=+ no tests ran in [\d.]+s", re.M)

    def runner_ids(self, names: list[str], test_files: list[str]) -> list[str]:
        return list(names)  # SWE-bench's pytest ids are node ids already

    def command(self, python: str, ids: list[str], *, select: bool = False) -> RunnerCommand:
        return RunnerCommand([python, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *ids])

    def parse(self, output: str) -> dict[str, TestStatus]:
        return parse_pytest_log(output)

    def collects(self, path: str) -> bool:
        return path.endswith(".py")  # a file named on the command line is collected whatever its name

    def run(self, root: Path, ids: list[str], settings: Settings, python: str, *,
            env: dict[str, str] | None = None) -> Verdict:
        from coharden.execution.pytest_runner import run_pytest
        from coharden.execution.pytest_verdicts import verdict_for

        return verdict_for(ids, run_pytest(root, ids, settings, python, extra_env=env))


def parse_pytest_log(log: str) -> dict[str, TestStatus]:
    """``PASSED id`` / ``FAILED id - message`` lines of ``pytest -rA`` (and ``id PASSED`` of ``-v``)."""
    names = {s.value for s in TestStatus if s is not TestStatus.MISSING}
    status: dict[str, TestStatus] = {}
    for raw in log.split("\n"):
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw).strip()
        words = line.split()
        if len(words) < 2:
            continue
        if words[0] in names:
            status[words[1]] = TestStatus(words[0])
        elif words[1] in names and "::" in words[0]:
            status[words[0]] = TestStatus(words[1])
    return status


RUNNERS: dict[str, type[Runner]] = {cls.name: cls for cls in (PytestRunner, DjangoRunner, SympyRunner)}
"""Every test runner by name: ``Settings.runner`` names one (``config.RunnerName`` lists the same names), a
spec's test command picks one by its ``command_marker``."""
