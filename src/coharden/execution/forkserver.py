"""Client side of the fork server (see :mod:`coharden.execution.forkserver_main`).

One server per worker: it pays the interpreter start-up and pytest's import and plugin loading once, then
every test run is a fork. When the server cannot start or reports that forking is unsafe, callers fall back
to a fresh ``python -m pytest`` process per run.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from coharden.execution.sandbox import ProcessResult, sandbox_wrap


class ForkServerError(RuntimeError):
    pass


class ForkServer:
    def __init__(self, python: str, *, env: dict[str, str], network: bool, preload: list[str] | None = None,
                 start_timeout: float = 120.0) -> None:
        script = Path(__file__).with_name("forkserver_main.py")
        cmd = [python, str(script)]
        if preload:
            cmd.append("--preload=" + ",".join(preload))
        cmd, env, self.isolation = sandbox_wrap(cmd, env, network)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, text=True, bufsize=1, start_new_session=True)
        hello = self._read(start_timeout)
        if hello is None or not hello.get("ready"):
            self.close()
            raise ForkServerError("fork server did not start")
        if not hello.get("safe"):
            self.close()
            raise ForkServerError(hello.get("reason") or "fork server reports forking is unsafe")

    def _read(self, timeout: float | None) -> dict | None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, cwd: Path, args: list[str], env: dict[str, str], *, timeout: float, memory_mb: int | None,
            cpu_seconds: int | None) -> ProcessResult:
        assert self.proc.stdin is not None
        with tempfile.NamedTemporaryFile(prefix="coharden-out-", delete=False) as handle:
            out = handle.name
        try:
            start = time.monotonic()
            request = {"cwd": str(cwd), "args": args, "env": env, "out": out, "memory_mb": memory_mb,
                       "cpu_seconds": cpu_seconds}
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
            except BrokenPipeError as exc:
                raise ForkServerError("fork server is gone") from exc
            forked = self._read(30)
            if forked is None or "pid" not in forked:
                raise ForkServerError("fork server did not fork")
            pid = int(forked["pid"])
            timed_out = False
            try:
                done = self._read(timeout)
            except BaseException:
                _killpg(pid)
                self._read(30)
                raise
            if done is None:
                timed_out = True
                _killpg(pid)
                done = self._read(30)
                if done is None:
                    raise ForkServerError("fork server did not reap a killed child")
            _killpg(pid)  # processes the tests left behind die with their group
            duration = time.monotonic() - start
            output = Path(out).read_text(errors="replace")
        finally:
            Path(out).unlink(missing_ok=True)
        return ProcessResult(None if timed_out else int(done["rc"]), output, duration, timed_out, self.isolation)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
