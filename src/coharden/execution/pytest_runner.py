"""Run pytest node ids in a sandboxed subprocess (or a fork of a warm server, or a Docker container): the
command line, the test process's environment, and the run's results read back (:class:`PytestRun`, from
:mod:`coharden.execution.pytest_results`); :mod:`coharden.execution.pytest_verdicts` turns them into verdicts.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from coharden.config import Settings
from coharden.execution import interrupt
from coharden.execution.docker import CONTAINER_ROOT, CONTAINER_SCRATCH, ContainerRun, docker_command
from coharden.execution.env_plugins import plugin_args, plugin_env
from coharden.execution.environ import untrusted_environment
from coharden.execution.fork_run import ForkRun
from coharden.execution.leftovers import mark_owner
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_results import Case, PytestRun, parse_junit, read_stream
from coharden.execution.readback import OversizeFile, UnsafeFile
from coharden.execution.removal import temporary_directory
from coharden.execution.sandbox import Confinement, ProcessResult, run_limited
from coharden.execution.testids import runnable_id
from coharden.schema.timelimit import TimeLimit


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


def fork_env(extra_env: Mapping[str, str] | None, pass_env: Sequence[str] = (),
             pytest_version: str = "") -> dict[str, str]:
    """The environment of a local pytest run (fresh or forked), the per-run result stream aside. The plugins'
    directories go first on PYTHONPATH for pytest's ``-p``; the stream plugin takes them off again before the
    tests run (see ``plugin/coharden_stream.py``). Plugin autoload is off where the pytest version allows it
    (:mod:`coharden.execution.env_plugins`: the command line names the environment's plugins)."""
    env = {**test_environment(pass_env), **(extra_env or {}), **plugin_env(pytest_version)}
    plugins = [STREAM_PLUGIN_DIR, *(p for p in env.get(PLUGIN_PATH, "").split(os.pathsep) if p)]
    env[PLUGIN_PATH] = os.pathsep.join(plugins)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*plugins, env.get("PYTHONPATH", "")) if p)
    return env


def run_pytest(root: Path, ids: list[str], settings: Settings, options: ProcessOptions = ProcessOptions()) -> PytestRun:
    """Run ``ids`` with ``python -m pytest`` from ``root`` (or as a fork of a warm ``options.server``, or inside
    the Docker ``options.image``); results come from a JUnit XML file outside the workspace, and per-test events
    are streamed while it runs. ``options.confine`` sandboxes a fresh process (a server is confined when
    started); the other options: :class:`ProcessOptions`."""
    interrupt.check()  # a batch was interrupted: start no test process
    server, image = options.server, options.image
    # a service (httpbin) runs beside a fresh process in its sandbox; a server's forks cannot have one
    use_server = server is not None and server.alive and image is None and not settings.environment.services
    # an id the harness cut runs as its whole base test: a sibling parameter's failure must not stop the run
    # before the parameters the id names have run (they decide its result)
    options = dataclasses.replace(options, first_failure=options.first_failure
                                  and all(runnable_id(i) == i for i in ids))
    sandbox = settings.sandbox
    limits = TimeLimit.of(options.time_limit, timeout=sandbox.timeout, cpu_seconds=sandbox.cpu_seconds,
                          docker=image is not None)
    scratch = server.scratch if use_server and server is not None else None
    # a test may swap this directory (inside the server's writable scratch directory) for a link, or fill it with a
    # tree of any depth: its removal takes the link, never what it points to, and trees of any depth
    with temporary_directory(prefix="coharden-junit-", dir=scratch) as tmp:
        mark_owner(Path(tmp))
        junit = Path(tmp) / "junit.xml"
        stream = Path(tmp) / "stream.jsonl"
        in_docker = image is not None
        cmd = _command(root, ids, settings, junit, options)
        env = {**test_environment(settings.sandbox.pass_env), **(options.env or {})}
        if not in_docker:
            env = fork_env(options.env, settings.sandbox.pass_env, settings.environment.pytest_version)
            env["COHARDEN_STREAM"] = str(stream)
        if image is not None:
            docker = docker_command(ContainerRun(image, workspace=root, scratch=Path(tmp), inner=cmd), sandbox)
            # the container has no network of its own (--network none); the client needs the engine's socket, and
            # its own settings (DOCKER_HOST, DOCKER_CONFIG): the host's environment, which stays outside the
            # container (it gets only the -e values docker_command names)
            proc = run_limited(docker, root, timeout=sandbox.timeout + 60, env=dict(os.environ), network=True)
        elif use_server and server is not None:
            proc = server.run(ForkRun(root, cmd[3:], env, timeout=limits.wall, memory_mb=sandbox.memory_mb,
                                      cpu_seconds=limits.cpu, warm=options.warm,
                                      collect=options.collect if settings.server.collect_once else None,
                                      instrument=options.instrument))
        else:
            confine = options.confine.with_writable(Path(tmp)) if options.confine is not None else None
            proc = _run_fresh(cmd, root, env, settings, limits, confine)
        # the files a test could have swapped for a link to a host file or a fifo are read back safely, from the
        # directory this run made (the server's scratch directory, which holds it, is a mount point a test
        # cannot replace)
        anchor = scratch if scratch is not None else Path(tmp)
        back = _read_back(junit, None if in_docker else stream, anchor, proc)
    return _pytest_run(proc, limits, back, options, root)


def _command(root: Path, ids: list[str], settings: Settings, junit: Path, options: ProcessOptions) -> list[str]:
    """The pytest command line of a run: its results in a JUnit file (and, outside Docker, streamed), in the
    forms the environment's pytest version knows."""
    in_docker, python = options.image is not None, options.python
    return [
        "python" if in_docker else (python or settings.environment.python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        # the environment's own plugins, loaded by name: autoload is off (env_plugins), so no plugin the checkout
        # brings (a *.dist-info with a pytest11 entry point) runs
        *([] if in_docker else plugin_args(python or settings.environment.python, settings.environment.pytest_version)),
        # pytest < 3.5 (astropy 1.3's 3.3.1) has no --rootdir: it finds the same root from the ini file
        *([] if _before(settings.environment.pytest_version, (3, 5))
          else [f"--rootdir={CONTAINER_ROOT if in_docker else root}"]),
        "-o",
        "junit_family=xunit1",
        f"--junitxml={CONTAINER_SCRATCH + '/junit.xml' if in_docker else junit}",
        "--continue-on-collection-errors",
        "-q",
        # pytest < 6 (old SWE-bench environments) has neither option
        *([] if settings.environment.legacy_pytest else ["--no-header", "-rN"]),
        # captured output in the JUnit file (Case.captured: why a test failed offline, printed at its
        # teardown too); before 5.4 pytest writes it unasked and has no such value
        *([] if _before(settings.environment.pytest_version, (5, 4)) else ["-o", "junit_logging=out-err"]),
        *([] if in_docker else ["-p", "coharden_stream"]),
        *settings.tests.pytest_args,
        *options.extra_args,
        *(["-x"] if options.first_failure else []),
        *dict.fromkeys(runnable_id(i) for i in ids),
    ]


def _run_fresh(cmd: list[str], root: Path, env: dict[str, str], settings: Settings, limits: TimeLimit,
               confine: Confinement | None) -> ProcessResult:
    """A fresh, sandboxed pytest process (with the settings' services beside it)."""
    from coharden.execution.services import wrap

    cmd, shown = wrap(cmd, settings.environment.services, settings.cache_dir)
    if confine is not None:
        confine = dataclasses.replace(confine, readable=(*confine.readable, *shown))
    # a limit scaled from the test's own run (a mutant's) bounds the run's CPU time (schema/timelimit.py)
    return run_limited(cmd, root, timeout=limits.wall, env=env, memory_mb=settings.sandbox.memory_mb,
                       cpu_seconds=limits.cpu, network=settings.sandbox.network, confine=confine)


@dataclasses.dataclass(frozen=True)
class _ReadBack:
    """What a run left behind, read back: its JUnit cases (None: no report could be read), its streamed events
    (None: it streamed nothing), the files a test replaced, why a file was too large to read, and whether the
    JUnit file was there at all."""

    cases: list[Case] | None
    events: list[dict] | None
    replaced: list[str]
    oversize: str
    junit_present: bool


def _read_back(junit: Path, stream: Path | None, anchor: Path, proc: ProcessResult) -> _ReadBack:
    """What a run left in ``anchor`` (:class:`_ReadBack`); ``stream`` None: it streamed nothing."""
    replaced = [proc.tampering] if proc.tampering and not proc.lost else []
    oversize: list[str] = []
    try:
        cases = parse_junit(junit, anchor=anchor)
    except OversizeFile as exc:
        cases = None
        oversize.append(f"the run's JUnit report is {_mib(exc.size)} MiB, over the grader's limit of "
                        f"{_mib(exc.limit)} MiB (not read)")
    except UnsafeFile as exc:
        cases = None
        replaced.append(f"the JUnit file was replaced: {exc.why} (not read)")
    try:
        events = None if stream is None else read_stream(stream, anchor=anchor)
    except OversizeFile as exc:
        events = []
        oversize.append(f"the run's result stream is {_mib(exc.size)} MiB, over the grader's limit of "
                        f"{_mib(exc.limit)} MiB (not read)")
    except UnsafeFile as exc:
        events = []
        replaced.append(f"the result stream was replaced: {exc.why} (not read)")
    return _ReadBack(cases, events, replaced, "; ".join(oversize), os.path.lexists(junit))


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.4g}"


def _pytest_run(proc: ProcessResult, limits: TimeLimit, back: _ReadBack, options: ProcessOptions,
                root: Path) -> PytestRun:
    cpu_out = proc.killed_at_cpu_limit(limits)
    in_docker = options.image is not None
    return PytestRun(
        returncode=proc.returncode,
        timed_out=proc.timed_out or cpu_out,
        cpu_limited=cpu_out,
        cpu_time_limit=limits.scaled,
        duration=proc.duration,
        output=proc.output,
        cases=back.cases or [],
        junit_ok=back.cases is not None,
        isolation="docker" if in_docker else proc.isolation,
        stream=back.events,
        lost=proc.lost,
        tampering=proc.tampering,
        replaced=back.replaced,
        oversize=back.oversize,
        disk=proc.disk,
        time_limit=limits.limit,
        junit_present=back.junit_present,
        first_failure=options.first_failure,
        root="" if in_docker else str(root),
    )


def _before(version: str, wanted: tuple[int, int]) -> bool:
    """``version`` (a pytest version string; '' = unknown, taken as new) is older than ``wanted``."""
    parts = re.findall(r"\d+", version)[:2]
    return len(parts) == 2 and (int(parts[0]), int(parts[1])) < wanted
