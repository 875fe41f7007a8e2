"""Run pytest node ids in a sandboxed subprocess and turn JUnit XML into verdicts.

The verdict rules follow the SWE-bench harness's guards against false passes: a wanted test that is
skipped or missing is not a pass; no parsed results, or a non-zero exit code with no failure parsed, is an
inadmissible HARNESS_ERROR and never PASS; a zero exit code with failures parsed is also a HARNESS_ERROR
(something printed or rewrote results).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.execution import interrupt
from coharden.execution.docker import CONTAINER_ROOT, CONTAINER_SCRATCH, docker_command
from coharden.execution.environ import untrusted_environment
from coharden.execution.forkserver import ForkServer
from coharden.execution.readback import UnsafeFile, read_bytes, read_text
from coharden.execution.sandbox import NETWORK_FAILURE, Confinement, mark_owner, run_limited
from coharden.execution.testids import runnable_id
from coharden.schema import timelimit
from coharden.schema.timelimit import TimeLimit
from coharden.schema.verdict import Outcome, Raised, TestStatus, Verdict

# pytest exit codes
_EXIT_INTERNAL, _EXIT_USAGE, _EXIT_NO_TESTS = 3, 4, 5
# a process killed by RLIMIT_CPU's signal: directly (a fork) or as bwrap reports its child's death (128 + signal)
_CPU_EXHAUSTED = (-signal.SIGXCPU, 128 + signal.SIGXCPU)


# a parameter id pytest generated (``unit0``, ``x3``): the stand-in pytest 3 uses for an empty id
_GENERATED_PARAM = re.compile(r"[A-Za-z_]\w*?(\d+)\]")
_COLOUR = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")  # terminal colours (JUnit writes ESC as "#x1B")


@dataclass
class Case:
    classname: str
    name: str
    status: TestStatus
    message: str = ""
    details: str = ""  # the failure/error text (traceback) when there is one
    captured: str = ""  # the test's captured stdout / stderr (JUnit system-out / system-err)

    def network_hint(self) -> str:
        """For a failure whose own message does not say so: the first captured line showing the test reached for
        the network (sphinx's "Could not fetch remote image: ... Name or service not known"), else ''."""
        raised = "\n".join(line for line in self.details.splitlines() if line.startswith("E "))  # not the source
        if NETWORK_FAILURE.search(self.message) or NETWORK_FAILURE.search(raised):
            return ""
        for line in self.captured.splitlines():
            if found := NETWORK_FAILURE.search(line):
                line = _COLOUR.sub("", line).strip()
                found = NETWORK_FAILURE.search(line) or found
                if found.end() <= 200:
                    return line[:200]
                return f"{line[:120]} ... {line[max(120, found.start() - 40):found.end() + 20]}"
        return ""

    def summary(self) -> str:
        """One line saying why: the last ``E   `` line of the traceback, else the message, else the status."""
        errors = [line[1:].strip() for line in self.details.splitlines() if line.startswith("E ")]
        if errors and errors[-1]:
            return errors[-1]
        return self.message.splitlines()[0] if self.message else self.status.value


@dataclass
class PytestRun:
    returncode: int | None
    timed_out: bool
    duration: float
    output: str
    cases: list[Case] = field(default_factory=list)
    junit_ok: bool = False
    isolation: str = "none"
    stream: list[dict] | None = None  # per-test events from the coharden_stream plugin (None: not streamed)
    lost: str = ""  # why the run has no result of its own (the fork server died under it)
    tampering: str = ""  # what forged the run's result (an unsigned line on the fork server's protocol)
    replaced: list[str] = field(default_factory=list)  # files read back that a test swapped for a link or a fifo
    disk: str = ""  # why the run was killed for writing too much into its directories (max_disk_mb), else empty
    time_limit: float | None = None
    junit_present: bool = False
    first_failure: bool = False  # run with -x: ids after the first failure were not run
    cpu_limited: bool = False  # the TIMEOUT came from the CPU-time limit (SIGXCPU), not the wall clock
    cpu_time_limit: bool = False  # time_limit bounded CPU time (a scaled limit); the wall clock allowed more

    @property
    def session_finished(self) -> bool:
        return any("finish" in event for event in self.stream or [])

    def hung_test(self) -> str | None:
        """The test that was running when the process stopped (started, no teardown report), if any."""
        running: str | None = None
        for event in self.stream or []:
            if "start" in event:
                running = event["start"]
            elif event.get("when") == "teardown" and event.get("report") == running:
                running = None
        return running

    def streamed_outcomes(self) -> dict[str, bool]:
        """node id -> passed (every phase fine and the call passed or xfailed), from the stream."""
        seen: dict[str, bool] = {}
        for event in self.stream or []:
            if "report" not in event:
                continue
            node, when, outcome = event["report"], event.get("when"), event.get("outcome")
            if outcome == "failed":
                seen[node] = False
            elif when == "call":
                seen.setdefault(node, outcome == "passed" or bool(event.get("xfail")))
                if outcome == "skipped" and not event.get("xfail"):
                    seen[node] = False
        return seen

    def raised(self) -> list[Raised]:
        """The exceptions test phases raised, from the stream (the exception objects' own types)."""
        found = []
        for event in self.stream or []:
            if isinstance(event.get("raised"), str) and isinstance(event.get("type"), str):
                bases = [b for b in event.get("bases") or [] if isinstance(b, str)]
                found.append(Raised(case=event["raised"], when=str(event.get("when", "")), type=event["type"],
                                    bases=bases or [event["type"]], message=str(event.get("message", ""))))
        return found

    def collection_errors(self) -> list[Case]:
        # with --continue-on-collection-errors pytest reports a broken module as an <error> case whose
        # classname is empty and whose name is the module path (dotted)
        return [c for c in self.cases if c.status is TestStatus.ERROR and not c.classname]


def split_node_id(node_id: str) -> tuple[str, list[str], str]:
    """'a/b/test_x.py::C::test_m[p]' -> ('a/b/test_x.py', ['C'], 'test_m[p]')."""
    path, *rest = node_id.split("::")
    if not rest:
        return path, [], ""
    return path, rest[:-1], rest[-1]


def junit_classname(node_id: str) -> str:
    path, classes, _ = split_node_id(node_id)
    module = path[:-3] if path.endswith(".py") else path
    return ".".join([module.replace("/", "."), *classes])


def case_matches(node_id: str, case: Case) -> bool:
    _, _, name = split_node_id(node_id)
    if case.classname != junit_classname(node_id):
        return False
    return case.name == name or ("[" not in name and case.name.startswith(name + "["))


def matching_cases(node_id: str, cases: list[Case]) -> list[Case]:
    """The cases of ``node_id``: its own, or every parameter of a base test. An id pytest cannot select as it is
    (:func:`~coharden.execution.testids.runnable_id`: the harness's parser cut it at a space, or its parameter
    holds ``::``) runs as its base test, and its cases are the parameters whose id, cut at the first space as
    the harness reads it, is this id - all of the base test's when none is (a parameter path the harness
    shortened). An empty parameter (``test_x[]``) is, under pytest 3, the parameter named ``<argname><index>``."""
    base = runnable_id(node_id)
    if base == node_id:
        return [c for c in cases if case_matches(node_id, c)]
    of_base = [c for c in cases if case_matches(base, c)]
    name = split_node_id(base)[2] + node_id[len(base):]
    named = [c for c in of_base if (c.name.split() or [""])[0] == name]
    if not named and name.endswith("[]"):  # pytest 3 named the empty parameter <argname><its position>
        named = [c for n, c in enumerate(of_base)
                 if (found := _GENERATED_PARAM.fullmatch(c.name.partition("[")[2])) and int(found[1]) == n]
    return named or of_base


_JUNIT_TYPE = re.compile(r"([A-Za-z_][\w.]*)(?::|$)")


def _raised_of(ran_id: str, matched: list[Case], run: PytestRun) -> list[Raised]:
    """The exceptions the failing cases of ``ran_id`` raised: from the stream where the run streamed (the first
    failing phase of each case), else the type name JUnit's failure message starts with (pytest writes the
    exception's ``Type: message`` there); nothing where neither says."""
    if run.stream is not None:
        base = runnable_id(ran_id)
        first: dict[str, Raised] = {}
        for raised in run.raised():
            if raised.case == ran_id or raised.case == base or raised.case.startswith(base + "["):
                first.setdefault(raised.case, raised)
        return list(first.values())
    found = []
    for case in matched:
        if case.status in (TestStatus.FAILED, TestStatus.ERROR) and (hit := _JUNIT_TYPE.match(case.message)):
            found.append(Raised(case=f"{case.classname}::{case.name}", type=hit[1], bases=[hit[1]],
                                message=case.message.partition(":")[2].strip()))
    return found


def parse_junit(path: Path, *, anchor: Path | None = None) -> list[Case] | None:
    """The cases of a JUnit XML file (None when it is missing or malformed). Read through
    :func:`~coharden.execution.readback.read_bytes` from ``anchor``: :class:`UnsafeFile` when a test replaced
    it with a link or a fifo."""
    try:
        root = ET.fromstring(read_bytes(path, anchor=anchor))
    except UnsafeFile:
        raise
    except (ET.ParseError, OSError):
        return None
    cases: list[Case] = []
    for tc in root.iter("testcase"):
        status = TestStatus.PASSED
        message = details = ""
        captured = "\n".join(child.text or "" for child in tc if child.tag in ("system-out", "system-err"))
        for child in tc:
            if child.tag == "failure":
                status, message = TestStatus.FAILED, child.get("message", "") or (child.text or "")
                details = child.text or ""
            elif child.tag == "error":
                status, message = TestStatus.ERROR, child.get("message", "") or (child.text or "")
                details = child.text or ""
            elif child.tag == "skipped":
                kind = child.get("type", "")
                status = TestStatus.XFAIL if kind == "pytest.xfail" else TestStatus.SKIPPED
                message = child.get("message", "")
        # a failing teardown adds a second <testcase> with the same name; keep the worst one
        cases.append(Case(tc.get("classname", ""), tc.get("name", ""), status, message.strip(), details, captured))
    return cases


def test_environment(pass_env: Sequence[str]) -> dict[str, str]:
    """The environment every test process gets: the host's allow-listed variables and those the user passes
    (``pass_env``; never a key of ours otherwise, see :mod:`coharden.execution.environ`), no bytecode writing
    (a rewritten file must never run from a stale .pyc), a fixed hash seed, and unbuffered output: the log-based
    runners (Django's, sympy's) parse stdout and stderr interleaved in one file, which is line-true only
    unbuffered (it used to come from the host's environment where that set it)."""
    return {**untrusted_environment(pass_env), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
            "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}


test_environment.__test__ = False  # type: ignore[attr-defined]


STREAM_PLUGIN_DIR = str(Path(__file__).with_name("plugin"))


PLUGIN_PATH = "COHARDEN_PLUGIN_PATH"  # directories of coharden's pytest plugins (an instrumenting run adds its own)


def fork_env(extra_env: dict[str, str] | None, pass_env: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a local pytest run (fresh or forked), the per-run result stream aside. The plugins'
    directories go first on PYTHONPATH for pytest's ``-p``; the stream plugin takes them off again before the
    tests run (see ``plugin/coharden_stream.py``)."""
    env = {**test_environment(pass_env), **(extra_env or {})}
    plugins = [STREAM_PLUGIN_DIR, *(p for p in env.get(PLUGIN_PATH, "").split(os.pathsep) if p)]
    env[PLUGIN_PATH] = os.pathsep.join(plugins)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*plugins, env.get("PYTHONPATH", "")) if p)
    return env


def run_pytest(root: Path, ids: list[str], settings: Settings, python: str | None = None, *,
               extra_args: list[str] | None = None, extra_env: dict[str, str] | None = None,
               server: ForkServer | None = None, image: str | None = None,
               confine: Confinement | None = None, time_limit: float | None = None,
               warm: dict | None = None, first_failure: bool = False, collect: str | None = None) -> PytestRun:
    """Run ``ids`` with ``python -m pytest`` from ``root`` (or as a fork of a warm ``server``, or inside the
    Docker ``image``); results come from a JUnit XML file outside the workspace, and per-test events are
    streamed while it runs. ``confine`` sandboxes a fresh process (a server is confined when started);
    ``time_limit`` overrides ``settings.timeout`` for this run; ``warm``: see :meth:`ForkServer.run`;
    ``first_failure``: stop at the first failing test (``-x``; only the run's pass / fail is wanted);
    ``collect``: the name of the run's test state, for a server that collects once (see :meth:`ForkServer.run`)."""
    interrupt.check()  # a batch was interrupted: start no test process
    # a service (httpbin) runs beside a fresh process in its sandbox; a server's forks cannot have one
    use_server = server is not None and server.alive and image is None and not settings.services
    # an id the harness cut runs as its whole base test: a sibling parameter's failure must not stop the run
    # before the parameters the id names have run (they decide its result)
    first_failure = first_failure and all(runnable_id(i) == i for i in ids)
    limits = TimeLimit.of(time_limit, timeout=settings.timeout, cpu_seconds=settings.cpu_seconds,
                          docker=image is not None)
    limit = limits.limit
    scratch = server.scratch if use_server and server is not None else None
    # a test may swap this directory (inside the server's writable scratch directory) for a link: its removal
    # then leaves the link alone instead of failing
    with tempfile.TemporaryDirectory(prefix="coharden-junit-", dir=scratch, ignore_cleanup_errors=True) as tmp:
        mark_owner(Path(tmp))
        junit = Path(tmp) / "junit.xml"
        stream = Path(tmp) / "stream.jsonl"
        in_docker = image is not None
        cmd = [
            "python" if in_docker else (python or settings.python),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            # pytest < 3.5 (astropy 1.3's 3.3.1) has no --rootdir: it finds the same root from the ini file
            *([] if _before(settings.pytest_version, (3, 5)) else [f"--rootdir={CONTAINER_ROOT if in_docker else root}"
                                                                   ]),
            "-o",
            "junit_family=xunit1",
            f"--junitxml={CONTAINER_SCRATCH + '/junit.xml' if in_docker else junit}",
            "--continue-on-collection-errors",
            "-q",
            # pytest < 6 (old SWE-bench environments) has neither option
            *([] if settings.legacy_pytest else ["--no-header", "-rN"]),
            # captured output in the JUnit file (Case.captured: why a test failed offline, printed at its
            # teardown too); before 5.4 pytest writes it unasked and has no such value
            *([] if _before(settings.pytest_version, (5, 4)) else ["-o", "junit_logging=out-err"]),
            *([] if in_docker else ["-p", "coharden_stream"]),
            *settings.pytest_args,
            *(extra_args or []),
            *(["-x"] if first_failure else []),
            *dict.fromkeys(runnable_id(i) for i in ids),
        ]
        env = {**test_environment(settings.pass_env), **(extra_env or {})}
        if not in_docker:
            env = fork_env(extra_env, settings.pass_env)
            env["COHARDEN_STREAM"] = str(stream)
        # a limit scaled from the test's own run (a mutant's) bounds the run's CPU time (schema/timelimit.py)
        scaled, cpu, wall = limits.scaled, limits.cpu, limits.wall
        if image is not None:
            docker = docker_command(image=image, workspace=root, scratch=Path(tmp), inner=cmd,
                                    timeout=settings.timeout, memory_mb=settings.memory_mb, network=settings.network)
            # the container has no network of its own (--network none); the client needs the engine's socket, and
            # its own settings (DOCKER_HOST, DOCKER_CONFIG): the host's environment, which stays outside the
            # container (it gets only the -e values docker_command names)
            proc = run_limited(docker, root, timeout=settings.timeout + 60, env=dict(os.environ), network=True)
        elif use_server and server is not None:
            proc = server.run(root, cmd[3:], env, timeout=wall, memory_mb=settings.memory_mb, cpu_seconds=cpu,
                              warm=warm, collect=collect if settings.collect_once else None)
        else:
            from coharden.execution.services import wrap

            cmd, shown = wrap(cmd, settings.services, settings.cache_dir)
            if confine is not None:
                confine = dataclasses.replace(confine.with_writable(Path(tmp)),
                                              readable=(*confine.readable, *shown))
            proc = run_limited(cmd, root, timeout=wall, env=env, memory_mb=settings.memory_mb,
                               cpu_seconds=cpu, network=settings.network, confine=confine)
        # the files a test could have swapped for a link to a host file or a fifo are read back safely, from the
        # directory this run made (the server's scratch directory, which holds it, is a mount point a test
        # cannot replace)
        anchor = scratch if scratch is not None else Path(tmp)
        replaced = [proc.tampering] if proc.tampering and not proc.lost else []
        try:
            cases = parse_junit(junit, anchor=anchor)
        except UnsafeFile as exc:
            cases = None
            replaced.append(f"the JUnit file was replaced: {exc.why} (not read)")
        try:
            events = None if in_docker else read_stream(stream, anchor=anchor)
        except UnsafeFile as exc:
            events = []
            replaced.append(f"the result stream was replaced: {exc.why} (not read)")
        present = os.path.lexists(junit)
    # RLIMIT_CPU's signal, after at least that much time: a test that exits with the same code (or signals
    # itself) earlier is not taken for a timeout (one that waits that long before doing so gains nothing)
    cpu_out = (scaled and not proc.timed_out and proc.returncode in _CPU_EXHAUSTED
               and proc.duration >= 0.95 * cpu)
    return PytestRun(
        returncode=proc.returncode,
        timed_out=proc.timed_out or cpu_out,
        cpu_limited=cpu_out,
        cpu_time_limit=scaled,
        duration=proc.duration,
        output=proc.output,
        cases=cases or [],
        junit_ok=cases is not None,
        isolation="docker" if in_docker else proc.isolation,
        stream=events,
        lost=proc.lost,
        tampering=proc.tampering,
        replaced=replaced,
        disk=proc.disk,
        time_limit=limit,
        junit_present=present,
        first_failure=first_failure,
    )


def read_stream(path: Path, *, anchor: Path | None = None) -> list[dict]:
    """The events the coharden_stream plugin wrote (a torn last line, as at a kill, is dropped); read as
    :func:`parse_junit` reads (:class:`UnsafeFile` for a link or a fifo)."""
    events: list[dict] = []
    try:
        text = read_text(path, anchor=anchor)
    except UnsafeFile:
        raise
    except OSError:
        return events
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# what pytest prints (exit code 4) when a node id on the command line matches nothing
_NOT_FOUND = ("ERROR: not found:", "ERROR: file or directory not found:", "ERROR: file not found:",
              "ERROR: found no collectors for")


def _before(version: str, wanted: tuple[int, int]) -> bool:
    """``version`` (a pytest version string; '' = unknown, taken as new) is older than ``wanted``."""
    parts = re.findall(r"\d+", version)[:2]
    return len(parts) == 2 and (int(parts[0]), int(parts[1])) < wanted


def _last_words(output: str, lines: int = 3) -> str:
    """The last non-empty lines of an output nobody parsed, for a reason that must say what went wrong."""
    kept = [line.strip() for line in output.splitlines() if line.strip()][-lines:]
    return (": " + " | ".join(kept))[:400] if kept else ""


def _collection_detail(run: PytestRun) -> str:
    errors = run.collection_errors()
    return f"; collection error in {errors[0].name}: {errors[0].summary()}" if errors else ""


_CONFTEST = re.compile(r"ImportError while loading conftest '(?P<path>[^']+)'")


def _conftest_import_error(output: str) -> str:
    """The reason when pytest stopped because a conftest.py does not import (exit code 4): the code under
    test cannot be imported in this environment - a deterministic collection error, not a harness error."""
    match = _CONFTEST.search(output)
    if not match:
        return ""
    path = match["path"]
    rel = path.split("/repo/", 1)[1] if "/repo/" in path else Path(path).name  # workspace paths vary per run
    errors = [line[1:].strip() for line in output[match.end():].splitlines() if line.startswith("E ")]
    return f"conftest {rel} does not import" + (f": {errors[-1]}" if errors else "")


def verdict_for(ids: list[str], run: PytestRun, *, rename: dict[str, str] | None = None) -> Verdict:
    """The verdict of the group ``ids`` inside ``run``.

    ``rename`` maps an id as it ran (e.g. in a renamed copy of a test file) back to the id reported.
    """
    verdict = _verdict_for(ids, run, rename or {})
    verdict.isolation = run.isolation
    verdict.time_limit = run.time_limit
    verdict.cpu_time_limit = run.cpu_time_limit
    return verdict


def _streamed_problem(run: PytestRun) -> tuple[str, list[str]] | None:
    """(reason, tampering notes) when the stream contradicts the exit code or the JUnit file, else None."""
    if run.stream is None or run.timed_out or run.lost or run.disk:
        return None
    started = any("start" in e for e in run.stream)
    if started and not run.session_finished:
        notes = []
        if run.junit_present:
            notes.append("a JUnit file exists although the pytest session never finished (written by a test)")
        if run.returncode == 0:
            notes.append("the process exited with code 0 in the middle of the session (os._exit)")
        if run.returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
            return ("the test process was killed for writing a file over the disk limit (max_file_mb, "
                    f"RLIMIT_FSIZE; exit code {run.returncode})"), notes
        return (f"the pytest session ended before it finished (exit code {run.returncode}): a test called "
                "os._exit or crashed the interpreter"), notes
    if run.junit_ok and run.stream:
        streamed = run.streamed_outcomes()
        for node, passed in streamed.items():
            matched = [c for c in run.cases if case_matches(node, c)]
            junit_passed = bool(matched) and all(c.status in (TestStatus.PASSED, TestStatus.XFAIL) for c in matched)
            if matched and junit_passed != passed:
                note = (f"the JUnit file says {node} {'passed' if junit_passed else 'did not pass'}, "
                        f"pytest reported it {'passed' if passed else 'not passed'} (results rewritten)")
                return "JUnit results contradict pytest's own reports", [note]
    return None


def _verdict_for(ids: list[str], run: PytestRun, rename: dict[str, str]) -> Verdict:
    base: dict[str, Any] = {"duration": run.duration, "output_tail": _tail(run.output)}
    if run.disk:
        # coharden killed it (the disk limit): whatever it reported is not its result. A HARNESS_ERROR, never
        # stored: the verdict is inadmissible for MPE, like a TIMEOUT, and a later run is graded afresh
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=run.disk, **base)
    if run.lost:
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=run.lost,
                       tampering=[run.tampering] if run.tampering else [], **base)
    if run.replaced:
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason="a test replaced files the grader reads back (with a "
                       "link or a fifo): the run has no result", tampering=list(run.replaced), **base)
    if run.timed_out:
        hung = run.hung_test()
        hung = rename.get(hung, hung) if hung else None
        if run.cpu_limited:
            reason = f"test process exceeded the CPU time limit ({run.time_limit:g} s) and was killed"
        elif run.cpu_time_limit and run.time_limit:
            reason = (f"test process ran {timelimit.LOAD_MARGIN:g} x its time limit ({run.time_limit:g} s of CPU "
                      "time) on the wall clock and was killed")
        elif run.time_limit:
            reason = f"test process exceeded the time limit ({run.time_limit:g} s) and was killed"
        else:
            reason = "test process exceeded the time limit and was killed"
        if hung:
            reason += f"; running at the limit: {hung}"
        return Verdict(outcome=Outcome.TIMEOUT, reason=reason, **base)
    problem = _streamed_problem(run)
    if problem is not None:
        reason, notes = problem
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, tampering=notes, **base)
    if run.returncode == _EXIT_USAGE:
        # a wanted id that does not exist, or whose module cannot be imported: pytest stops before running
        # anything (whether or not it still writes an empty JUnit file)
        missing = [line.strip() for line in run.output.splitlines() if line.strip().startswith(_NOT_FOUND)]
        if missing:
            reason = "; ".join(missing[:3]) + _collection_detail(run)
            return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=reason, **base)
        conftest = _conftest_import_error(run.output)
        if conftest:
            return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=conftest, **base)
        reason = "pytest usage error (exit code 4)" + _last_words(run.output)
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, **base)
    if not run.junit_ok:
        reason = f"pytest produced no results (exit code {run.returncode})"
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, **base)
    any_failure = any(c.status in (TestStatus.FAILED, TestStatus.ERROR) for c in run.cases)
    if run.returncode not in (0, 1, 2, _EXIT_NO_TESTS):
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=f"pytest exited with code {run.returncode}", **base)
    if run.returncode == 0 and any_failure:
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason="exit code 0 but failures were reported", **base)
    if run.returncode in (1, 2) and not any_failure:
        # 2: the session was interrupted (pytest.exit, KeyboardInterrupt) - results may be incomplete
        reason = f"exit code {run.returncode} but no failure was parsed"
        return Verdict(outcome=Outcome.HARNESS_ERROR, reason=reason, **base)

    tests: dict[str, list[TestStatus]] = {}
    raised: dict[str, list[Raised]] = {}
    messages: list[str] = []
    for ran_id in ids:
        reported = rename.get(ran_id, ran_id)
        matched = matching_cases(ran_id, run.cases)
        tests[reported] = [c.status for c in matched] or [TestStatus.MISSING]
        if any(c.status in (TestStatus.FAILED, TestStatus.ERROR) for c in matched):
            raised[reported] = _raised_of(ran_id, matched, run)
        messages += [f"{reported}: "
                     + (f"[the test reached for the network: {hint}] " if (hint := c.network_hint()) else "")
                     + (c.message.splitlines()[0] if c.message else c.status.value)
                     for c in matched if c.status not in (TestStatus.PASSED, TestStatus.XFAIL)][:3]
    missing = [i for i, st in tests.items() if st == [TestStatus.MISSING]]
    bad = {TestStatus.FAILED, TestStatus.ERROR, TestStatus.SKIPPED}
    failed = any(c.status in (TestStatus.FAILED, TestStatus.ERROR) for c in run.cases)
    if missing and run.first_failure and failed and run.returncode == 1:
        # pytest -x stopped at a failure: the verdict is FAIL whatever the ids it did not run would have done
        reason = "; ".join(messages)[:400] + f" (stopped at the first failure; {len(missing)} ids not run)"
        return Verdict(outcome=Outcome.FAIL, reason=reason, tests=tests, raised=raised, **base)
    if missing:
        reason = f"test ids not run: {', '.join(missing)}{_collection_detail(run)}"
        return Verdict(outcome=Outcome.COLLECTION_ERROR, reason=reason, tests=tests, **base)
    if any(s in bad for statuses in tests.values() for s in statuses):
        return Verdict(outcome=Outcome.FAIL, reason="; ".join(messages)[:500], tests=tests, raised=raised, **base)
    return Verdict(outcome=Outcome.PASS, tests=tests, **base)
