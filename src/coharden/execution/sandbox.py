"""Run a command in its own process group with a wall-clock limit, rlimits and (where possible) no network.

Network isolation uses ``unshare --net`` (a fresh network namespace with only loopback, brought up when the
``ip`` tool exists). Where unprivileged user namespaces are not allowed, coharden falls back to a
``sitecustomize`` guard put first on PYTHONPATH that refuses socket connections to non-loopback addresses
for Python processes; that fallback does not stop native code from opening sockets, so it is reported.
"""

from __future__ import annotations

import atexit
import functools
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

_GUARD = '''\
import socket as _s
_orig = _s.socket.connect
def _guarded(self, address, *a, **k):
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (_s.AF_INET, _s.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        raise OSError(101, "network access blocked by coharden (tests run offline)")
    return _orig(self, address, *a, **k)
_s.socket.connect = _guarded
'''


@dataclass
class ProcessResult:
    returncode: int | None
    output: str
    duration: float
    timed_out: bool
    isolation: str  # "netns", "python-guard" or "none"


@functools.cache
def netns_prefix() -> tuple[str, ...] | None:
    """The command prefix that runs a process without network, or None when the OS does not allow it."""
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    for prefix in ((unshare, "--net"), (unshare, "--net", "--map-root-user")):
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            if shutil.which("ip"):
                return (*prefix, "sh", "-c", 'ip link set lo up 2>/dev/null; exec "$@"', "coharden-sandbox")
            return prefix
    return None


@functools.cache
def network_guard_dir() -> str:
    directory = tempfile.mkdtemp(prefix="coharden-netguard-")
    atexit.register(shutil.rmtree, directory, True)
    Path(directory, "sitecustomize.py").write_text(_GUARD)
    return directory


def _limits(memory_mb: int | None, cpu_seconds: int | None) -> None:
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))


def sandbox_wrap(cmd: list[str], env: dict[str, str], network: bool) -> tuple[list[str], dict[str, str], str]:
    """``cmd`` and ``env`` changed so the process has no network: (command, environment, isolation kind)."""
    if network:
        return cmd, env, "none"
    prefix = netns_prefix()
    if prefix:
        return [*prefix, *cmd], env, "netns"
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (network_guard_dir(), env.get("PYTHONPATH", "")) if p)}
    return cmd, env, "python-guard"


def run_limited(
    cmd: list[str],
    cwd: Path,
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    memory_mb: int | None = None,
    cpu_seconds: int | None = None,
    network: bool = False,
) -> ProcessResult:
    """Run ``cmd``; on timeout the whole process group is killed. Output (stdout+stderr) goes to a temp
    file, not a pipe, so a chatty test cannot block on a full pipe."""
    cmd, env, isolation = sandbox_wrap(cmd, dict(os.environ if env is None else env), network)
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+b") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=functools.partial(_limits, memory_mb, cpu_seconds),
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:
            _kill_group(proc)
            raise
        # on a timeout the whole group dies; after a normal exit, so do processes the tests left behind
        _kill_group(proc)
        duration = time.monotonic() - start
        out.seek(0)
        output = out.read().decode(errors="replace")
    return ProcessResult(None if timed_out else proc.returncode, output, duration, timed_out, isolation)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
