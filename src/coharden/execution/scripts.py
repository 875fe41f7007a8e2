"""Reproduction scripts (SWT-bench's ``--exec_mode reproduction_script``): a test patch whose Python scripts the
runner collects no test from (:func:`coharden.execution.testids.reproduction_scripts`) runs each script as
``python SCRIPT`` from the repository root, and the script's exit status is its verdict: 0 PASS, anything else
FAIL (the harness echoes ``$?`` and reads 0 as PASSED, any other status as FAILED). A failing script's verdict
holds the exception it died of, where its traceback shows one (:func:`~coharden.execution.log_failures.script_failure`),
so that two wrong fixes a script rejects differently are two behaviours.

The scripts run in the same sandbox, under the same time, CPU, memory and disk limits as the tests of the
executor's runner (:func:`~coharden.execution.sandbox.run_limited` with the executor's confinement): a fresh
process each, never a fork of a warm server (the script is the whole program). A script that runs past the limit
is a TIMEOUT, one killed at the disk limit a HARNESS_ERROR, as for any test run.
"""

from __future__ import annotations

from pathlib import Path

from coharden.config import Settings
from coharden.execution.log_failures import in_checkout, script_failure
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_runner import test_environment
from coharden.execution.sandbox import run_limited
from coharden.schema.testpatch import TestPatch
from coharden.schema.timelimit import TimeLimit
from coharden.schema.verdict import Outcome, TestStatus, Verdict

_TAIL_LINES = 40
REPRODUCTION_SCRIPT = "reproduction_script"


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_scripts(root: Path, test: TestPatch, settings: Settings, options: ProcessOptions) -> Verdict:
    """The verdict of ``test``'s scripts (its ``ids``), laid down in ``root``: each run as ``python SCRIPT``
    there, in order, under the sandbox settings' limits, until one does not exit 0 (FAIL, with its status and last
    line) or runs out of time. Of the :class:`ProcessOptions`, a fresh process's: ``python``, ``env``, ``confine``,
    ``time_limit``."""
    from coharden.execution import interrupt

    sandbox, python, env, time_limit = settings.sandbox, options.python, options.env, options.time_limit
    python = python or settings.environment.python
    limits = TimeLimit.of(time_limit, timeout=sandbox.timeout, cpu_seconds=sandbox.cpu_seconds)
    full_env = {**test_environment(sandbox.pass_env), **(env or {})}
    tests: dict[str, list[TestStatus]] = {}
    outputs: list[str] = []
    verdict = Verdict(outcome=Outcome.PASS, exec_mode=REPRODUCTION_SCRIPT, time_limit=limits.limit,
                      cpu_time_limit=limits.scaled)
    for script in test.ids:
        interrupt.check()  # a batch was interrupted: start no test process
        proc = run_limited([python, script], root, timeout=limits.wall, env=full_env, memory_mb=sandbox.memory_mb,
                           cpu_seconds=limits.cpu, network=sandbox.network, confine=options.confine)
        verdict.duration += proc.duration
        verdict.isolation = proc.isolation
        outputs.append(f"$ python {script}\n{proc.output}")
        verdict.output_tail = _tail("\n".join(outputs))
        missing = {s: [TestStatus.MISSING] for s in test.ids if s not in tests and s != script}
        if proc.timed_out or proc.killed_at_cpu_limit(limits):
            verdict.outcome = Outcome.TIMEOUT
            verdict.reason = f"{script}: the script exceeded the time limit and was killed"
            verdict.tests = {**tests, script: [TestStatus.MISSING], **missing}
            return verdict
        if proc.lost or proc.tampering or proc.disk:
            verdict.outcome = Outcome.HARNESS_ERROR
            verdict.reason = f"{script}: {proc.lost or proc.disk or proc.tampering}"
            verdict.tampering = [proc.tampering] if proc.tampering else []
            return verdict
        if proc.returncode != 0:
            how = f"was killed by signal {-proc.returncode}" if proc.returncode is not None and proc.returncode < 0 \
                else f"exited with status {proc.returncode}"
            last = (proc.output.strip().splitlines() or [""])[-1].strip()[:200]
            verdict.outcome = Outcome.FAIL
            verdict.reason = f"{script} {how}" + (f": {last}" if last else "")
            verdict.tests = {**tests, script: [TestStatus.FAILED], **missing}
            raised = script_failure(script, in_checkout(proc.output, root))
            verdict.raised = {script: [raised]} if raised is not None else {}
            return verdict
        tests[script] = [TestStatus.PASSED]
    verdict.tests = tests
    return verdict
