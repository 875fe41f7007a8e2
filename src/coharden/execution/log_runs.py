"""A log-based runner's run (Django's ``runtests.py``, sympy's ``bin/test``): its command in the sandbox, or a fork
of a ``scripts`` fork server, and its verdict read from the log under the shared false-pass rules: a wanted
test that is missing or skipped is not a pass, and output that yields no per-test result is an inadmissible
HARNESS_ERROR carrying the unparsed tail. The exceptions of its failing tests are read from the log's failure
sections (:mod:`~coharden.execution.log_failures`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.execution.fork_run import ForkRun
from coharden.execution.log_failures import in_checkout
from coharden.execution.process_options import ProcessOptions
from coharden.execution.runners import Runner, make_runner
from coharden.execution.sandbox import run_limited
from coharden.execution.tracebacks import raised_in
from coharden.schema.testpatch import TestPatch
from coharden.schema.timelimit import TimeLimit
from coharden.schema.verdict import Outcome, Raised, TestStatus, Verdict

_TAIL_LINES = 40


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_with(runner: Runner, root: Path, ids: list[str], settings: Settings, options: ProcessOptions) -> Verdict:
    """Run ``ids`` with a log-based ``runner`` in the sandbox (``options.confine``: the executor's bwrap
    confinement; the same one the pytest runs get) and apply the false-pass rules; the verdict records its
    isolation. ``options.server``: a ``scripts`` fork server of the same sandbox, which runs the command as a fork
    (``options.warm``: the project modules it may keep imported) where the runner :attr:`~Runner.forks` through a
    ``scripts`` server and no service runs beside it; else a fresh process. The other options:
    :class:`ProcessOptions`."""
    from coharden.execution import interrupt
    from coharden.execution.services import wrap

    interrupt.check()  # a batch was interrupted: start no test process
    command = runner.command(options.python or settings.environment.python, ids, select=options.select)
    full_env = _run_env(settings, command.env, options.env)
    limits = TimeLimit.of(options.time_limit, timeout=settings.sandbox.timeout,
                          cpu_seconds=settings.sandbox.cpu_seconds)
    confine, server = options.confine, options.server
    # services beside it, in the same sandbox
    argv, shown = wrap(command.argv, settings.environment.services, settings.cache_dir)
    if confine is not None and shown:
        confine = dataclasses.replace(confine, readable=(*confine.readable, *shown))
    # a fork hashes with its server's seed (fixed at the server's start): only a run that asks for that one forks
    if server is not None and server.hash_seed and full_env.get("PYTHONHASHSEED") == server.hash_seed \
            and runner.forks and not runner.session_server and not shown:
        proc = server.run(ForkRun(root, argv[2:], full_env, timeout=limits.wall, memory_mb=settings.sandbox.memory_mb,
                                  cpu_seconds=limits.cpu, warm=options.warm, script=argv[1]))
    else:
        proc = run_limited(argv, root, timeout=limits.wall, env=full_env, memory_mb=settings.sandbox.memory_mb,
                           cpu_seconds=limits.cpu, network=settings.sandbox.network, confine=confine)
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
                                   raised=raised_in(proc.output, root, runner.runner_files),
                                   failures=runner.failures(in_checkout(proc.output, root)))
    verdict.isolation = proc.isolation
    verdict.time_limit, verdict.cpu_time_limit = limits.limit, limits.scaled
    return verdict


def _run_env(settings: Settings, command_env: dict[str, str], env: Mapping[str, str] | None) -> dict[str, str]:
    """A log-runner run's environment: the tests' own, the runner command's, then the job's (``env``)."""
    from coharden.execution.pytest_runner import test_environment

    return {**test_environment(settings.sandbox.pass_env), **command_env, **(env or {})}


def script_server_env(settings: Settings, env: dict[str, str] | None) -> dict[str, str]:
    """The environment a ``scripts`` fork server imports the project in (its prime): the one its forked runs
    have, whose import environment must be the same for them to start warm (``warm_state``)."""
    return _run_env(settings, make_runner(settings.tests.runner).command("python", []).env, env)


def run_test_patch(root: Path, test: TestPatch, settings: Settings, options: ProcessOptions) -> Verdict:
    """``test``, laid down in ``root``, run by the settings' log-based runner (Django's ``runtests.py``, sympy's
    ``bin/test``); the verdict is under the test patch's own ids: ids sharing a runner id (sympy's bare names,
    ``test_settings`` in two files of the patch) all get its status, as the harness's log parser reads them, and
    the exceptions read for it."""
    runner = make_runner(settings.tests.runner)
    ids = runner.runner_ids(list(test.ids), [p for p in (test.files or {}) if test.files.get(p) is not None])
    verdict = run_with(runner, root, ids, settings, options)
    found, raised = verdict.tests, verdict.raised
    verdict.tests = {own: found[ran] for own, ran in zip(test.ids, ids, strict=True) if ran in found}
    verdict.raised = {own: raised[ran] for own, ran in zip(test.ids, ids, strict=True) if ran in raised}
    return verdict


def verdict_from_log(ids: list[str], statuses: dict[str, TestStatus], *, output: str, returncode: int | None,
                     timed_out: bool, duration: float, runner: str, ran_none: bool = False,
                     raised: str | None = None, failures: Mapping[str, Sequence[Raised]] | None = None) -> Verdict:
    """Without any per-test result, two outputs say the tests did not run (COLLECTION_ERROR, as pytest's
    uncollected ids or a test module that fails to import) rather than that the harness failed, which a rerun
    would retry for ever: ``ran_none``, the runner said it finished having run no test (its ``empty_run``
    line); ``raised``, the code under test raised before any test ran (:func:`raised_in`). ``failures``: the
    exceptions the log shows per runner id (:meth:`Runner.failures`), the verdict's ``raised`` for the wanted
    ids that failed or errored."""
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
    shown = failures or {}
    base["raised"] = {i: list(shown[i]) for i in ids
                      if tests[i][0] in (TestStatus.FAILED, TestStatus.ERROR) and shown.get(i)}
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
