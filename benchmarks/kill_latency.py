"""How long coharden takes to stop what must be stopped: the seconds the tests no longer assert.

    python benchmarks/kill_latency.py [-n 3]

The tests check *that* a limit stopped a run (its outcome and reason, no process left); the wall-clock time it
took depends on the machine's load, so it is measured here, each case ``-n`` times (median and worst):

* ``run_limited`` with a 1 s timeout on a shell whose background ``sleep 300`` holds the output pipe: the
  whole process group is killed at the limit (tests/execution/test_sandbox.py);
* a pytest run with a scaled limit of 2 s of CPU time: a busy loop (stopped by the CPU limit) and a sleep
  (stopped by the wall clock at ``LOAD_MARGIN`` x the limit), with and without the fork server (its case
  includes starting it) (tests/execution/test_runners.py);
* ``coharden verify`` of a hanging test, interrupted with Ctrl-C once the test runs: seconds from the signal
  to the exit (tests/cli/test_cli.py).

Prints one row per case: the limit, the median and the worst seconds, and the seconds past the limit.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from coharden.config import Settings
from coharden.execution.fast.forkserver import ForkServer, ServerStart
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_runner import run_pytest, test_environment
from coharden.execution.pytest_verdicts import verdict_for
from coharden.execution.sandbox import Confinement, run_limited
from coharden.schema.timelimit import LOAD_MARGIN

ROOT = Path(__file__).resolve().parents[1]
TESTS = ("import time\n\n\ndef test_spins():\n    while True:\n        pass\n\n\n"
         "def test_sleeps():\n    time.sleep(60)\n")


def timed(job: Callable[[], object]) -> float:
    start = time.monotonic()
    job()
    return time.monotonic() - start


def group_kill(work: Path) -> float:
    result = run_limited(["sh", "-c", "sleep 300 & wait"], work, timeout=1)
    if not result.timed_out:
        raise SystemExit("run_limited did not time out")
    return 1.0


def scaled(work: Path, test: str, fork_server: bool) -> float:
    ids = [f"test_slow.py::{test}"]
    server = ForkServer(ServerStart(sys.executable, env=test_environment(()), network=False)) if fork_server else None
    try:
        result = run_pytest(work, ids, Settings(fork_server=fork_server, timeout=60), ProcessOptions(
            server=server, time_limit=2.0, confine=None if fork_server else Confinement(writable=(work,))))
    finally:
        if server is not None:
            server.close()
    verdict = verdict_for(ids, result)
    if verdict.outcome.value != "TIMEOUT":
        raise SystemExit(f"{test}: {verdict.short()}")
    return 2.0


def ctrl_c(work: Path) -> float:
    """Seconds from SIGINT to the exit of ``coharden verify`` on a hanging test of a bundled example (the test
    can write only its checkout, which lies under the run's TMPDIR: it says there that it started)."""
    patch = work / "hang.diff"
    patch.write_text("--- /dev/null\n+++ b/tests/test_hang.py\n@@ -0,0 +1,6 @@\n+import time\n+\n+\n"
                     "+def test_hangs():\n+    open('started', 'w').close()\n+    time.sleep(600)\n")
    scratch = Path(tempfile.mkdtemp(dir=work))
    proc = subprocess.Popen([sys.executable, "-m", "coharden", "verify", str(ROOT / "examples" / "boundary_check"),
                             "--test", str(patch), "--timeout", "300", "--store", str(work / "s.sqlite")],
                            cwd=work, env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        while not any(scratch.glob("coharden-ws-*/repo/started")):
            if proc.poll() is not None:
                raise SystemExit(f"coharden verify ended before its test started: {proc.communicate()[1]}")
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        return timed(proc.communicate)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=3, help="runs per case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "test_slow.py").write_text(TESTS)
        cases: dict[str, tuple[float, Callable[[], float]]] = {
            "run_limited, group with a background sleep": (1.0, lambda: group_kill(work)),
            "pytest, busy loop, CPU limit": (2.0, lambda: scaled(work, "test_spins", False)),
            "pytest, sleep, wall clock (LOAD_MARGIN x limit)": (2.0 * LOAD_MARGIN,
                                                                lambda: scaled(work, "test_sleeps", False)),
            "fork server (started too), busy loop, CPU limit": (2.0, lambda: scaled(work, "test_spins", True)),
            "coharden verify, Ctrl-C to exit": (0.0, lambda: ctrl_c(work)),
        }
        print(f"{'case':52} {'limit':>6} {'median':>7} {'worst':>7} {'past limit':>10}")
        for name, (limit, job) in cases.items():
            seconds = []
            for _ in range(args.n):
                if name.startswith("coharden verify"):
                    seconds.append(job())
                else:
                    seconds.append(timed(job))
            median = statistics.median(seconds)
            print(f"{name:52} {limit:6.1f} {median:7.2f} {max(seconds):7.2f} {median - limit:10.2f}")


if __name__ == "__main__":
    main()
