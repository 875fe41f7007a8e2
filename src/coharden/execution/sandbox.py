"""Run an untrusted command confined: a wall-clock limit, rlimits, a process-count limit, no network and, where
bubblewrap runs, a filesystem it cannot change outside the directories it was given.

Isolation levels, strongest first (every verdict records the one it got):

* ``bwrap``: a bubblewrap sandbox. The whole system is mounted read-only; only the given ``writable``
  directories (the job's worktree, a scratch directory for results) are writable, plus a private ``/tmp`` and a
  private ``$HOME`` inside it (and a private ``/var/tmp``, the tests' ``TMPDIR``, when the worktree is under
  ``/tmp``: see :func:`tests_tmp`); the host's cgroup tree is hidden. Fresh PID, network (loopback only), IPC and
  UTS namespaces, no capabilities: no view of any process outside the sandbox (so no ``/proc/<ancestor>/fd``),
  and when the sandbox's first process ends the kernel kills every process left inside it.
* ``netns``: ``unshare --net`` only (where bwrap cannot run): no network, nothing else.
* ``guard``: a ``sitecustomize`` put first on PYTHONPATH refuses non-loopback connections from Python code;
  native code, ``python -S`` and raw ``_socket`` get around it.

Where bwrap is missing or cannot create namespaces, one warning is printed and the next level is used. The
process-count limit is a cgroup ``pids.max`` where coharden may create cgroups, else ``RLIMIT_NPROC`` (which the
kernel does not enforce for root). Every process started here gets no file descriptor of ours but 0-2.

What a process may change is its :class:`~coharden.execution.confinement.Confinement`; what the bwrap sandbox
shows and its command line are :mod:`coharden.execution.bwrap`'s, the pids cgroup
:mod:`coharden.execution.pidslimit`'s. Here: the levels, and starting, limiting, waiting for and killing a process.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import functools
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError
from coharden.execution.bwrap import bwrap_args, bwrap_path, pythonpath_dirs, sandbox_env
from coharden.execution.confinement import Confinement
from coharden.execution.disklimit import DiskWatch, descendants
from coharden.execution.pidslimit import PidsCgroup, pids_cgroups, process_limit
from coharden.schema.timelimit import TimeLimit

_GUARD = '''\
import socket as _s
def _blocked(address):
    host = address[0] if isinstance(address, tuple) else address
    return host not in ("127.0.0.1", "::1", "localhost")
def _wrap(name):
    orig = getattr(_s.socket, name)
    def guarded(self, address, *a, **k):
        if self.family in (_s.AF_INET, _s.AF_INET6) and _blocked(address):
            raise OSError(101, "network access blocked by coharden (tests run offline)")
        return orig(self, address, *a, **k)
    setattr(_s.socket, name, guarded)
for _name in ("connect", "connect_ex"):
    _wrap(_name)
'''

# What a test's output says when it reached for the network a test run does not have (the guard's own refusal,
# resolver and socket errors, the HTTP clients' wrappers). Offline tests that fail this way are reported as such.
NETWORK_FAILURE = re.compile(r"network access blocked|Name or service not known|Temporary failure in name resolution|"
                             r"Network is unreachable|ConnectionError|MaxRetryError|NewConnectionError|"
                             r"nodename nor servname|getaddrinfo failed|Connection refused|"
                             # https to a local stand-in (httpbin on loopback speaks plain HTTP, with no certificate
                             # the tests trust): only the real host on the network answers it
                             r"SSLError", re.I)

#: How much of a fresh process's output is read back (its end: verdicts keep the last lines).
OUTPUT_LIMIT = 16 << 20

#: The longest single argument or environment string Linux takes (``MAX_ARG_STRLEN``, 32 pages, with its NUL).
MAX_ARG_BYTES = 32 * 4096
#: Room kept under ``ARG_MAX`` for what the kernel adds (the program's path, the auxiliary vector) and the rounding.
_ARG_MARGIN = 16 << 10


class CommandTooLong(CoHardenError):
    """A command line (with its environment) the kernel would refuse (``E2BIG``): it was not started."""


def command_line_problem(cmd: Sequence[str], env: dict[str, str]) -> str:
    """Why ``cmd`` with ``env`` cannot be started (``execve`` refuses it with ``E2BIG``), or ''. A test id or an
    argument from untrusted input can make a command line of any size; it is refused before it is started, with
    the sizes in words, instead of an ``OSError`` out of the grader."""
    strings = [*cmd, *(f"{k}={v}" for k, v in env.items())]
    longest = max((len(s.encode(errors="surrogateescape")) + 1 for s in strings), default=0)
    total = sum(len(s.encode(errors="surrogateescape")) + 1 + 8 for s in strings)  # each with its pointer
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        arg_max = 2 << 20
    if longest > MAX_ARG_BYTES:
        return (f"the command line was not started: one of its arguments is {longest:,} bytes, over the system's "
                f"limit of {MAX_ARG_BYTES:,} for one argument")
    if total > arg_max - _ARG_MARGIN:
        return (f"the command line was not started: its {len(cmd):,} arguments and environment take {total:,} "
                f"bytes, over the system's limit of {arg_max - _ARG_MARGIN:,}")
    return ""


@dataclass
class ProcessResult:
    returncode: int | None
    output: str
    duration: float
    timed_out: bool
    isolation: str  # "bwrap", "bwrap-net" (an agent's, with the network), "netns", "guard" or "none" (network)
    # why the run has no result of its own (the fork server died under it, its command line was too long), else ''
    lost: str = ""
    tampering: str = ""  # what forged the run's result (a line on the fork server's protocol nobody signed)
    disk: str = ""  # why the run was killed for writing more than ``max_disk_bytes`` (disklimit), else empty

    def killed_at_cpu_limit(self, limits: TimeLimit) -> bool:
        """Killed by RLIMIT_CPU's signal (directly in a fork, or as bwrap reports its child's death: 128 + signal)
        at a scaled limit, after at least that much time: a test that exits with the same code (or signals itself)
        earlier is not taken for a timeout (one that waits that long before doing so gains nothing)."""
        return (limits.scaled and not self.timed_out and self.returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU)
                and self.duration >= 0.95 * limits.cpu)


# --- levels ---------------------------------------------------------------------------------------------------


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


@functools.cache
def _warn_fallback(level: str) -> None:
    why = "bwrap is not installed" if not shutil.which("bwrap") else "bwrap cannot create namespaces here"
    print(f"coharden: warning: {why}; tests run with weaker isolation ({level}): they can write outside their "
          "worktree and see other processes (install bubblewrap for the full sandbox)", file=sys.stderr)


def weak_confinement(network: bool, confine: Confinement | None) -> str:
    """Why runs confined by ``confine`` would get less than the full sandbox asked for, or '' when they get it
    (or asked for network access, which is no sandbox by the user's own choice)."""
    level = isolation_level(network, confine)
    if level == "none" and not (confine is not None and confine.share_network and confine.sandbox):
        return ""
    if level in ("bwrap", "bwrap-net"):
        if confine is None or not confine.max_processes or pids_cgroups():
            return ""
        return ("no pids cgroup can be made here, so the process-count limit falls back to RLIMIT_NPROC, "
                "which the kernel does not enforce for root")
    if confine is not None and not confine.sandbox:
        why = "the bubblewrap sandbox is turned off (bwrap = false)"
    elif not shutil.which("bwrap"):
        why = "bwrap is not installed (apt-get install bubblewrap)"
    else:
        why = "bwrap cannot create namespaces here (user namespaces disabled?)"
    return f"{why}: tests would run with {level} isolation only, seeing the whole machine"


def require_confinement(network: bool, confine: Confinement | None, allow_weak: bool) -> None:
    """Refuse (:class:`CoHardenError`, the reason in one line) to run untrusted tests under a weaker sandbox than
    asked for, unless the user accepted it (``allow_weak``: ``--allow-weak-sandbox``)."""
    weak = weak_confinement(network, confine)
    if weak and not allow_weak:
        raise CoHardenError(f"refusing to run untrusted tests: {weak}; pass --allow-weak-sandbox (or set "
                            "allow_weak_sandbox = true in the config) to accept the weaker confinement")


def isolation_level(network: bool, confine: Confinement | None) -> str:
    """The isolation a process started with these options gets on this machine."""
    if network:
        shared = confine is not None and confine.share_network and confine.sandbox and bwrap_path()
        return "bwrap-net" if shared else "none"
    if confine is not None and confine.sandbox and bwrap_path():
        return "bwrap"
    return "netns" if netns_prefix() else "guard"


def sandbox_wrap(cmd: list[str], env: dict[str, str], network: bool, confine: Confinement | None = None,
                 cwd: Path | None = None, *, as_pid_1: bool = False) -> tuple[list[str], dict[str, str], str]:
    """``cmd`` and ``env`` changed for the strongest isolation available: (command, environment, level)."""
    level = isolation_level(network, confine)
    if level == "none":
        return cmd, env, level
    if level in ("bwrap", "bwrap-net"):
        assert confine is not None
        shown = pythonpath_dirs(env)
        if shown:
            confine = dataclasses.replace(confine, readable=(*confine.readable, *shown))
        wrapped = [*bwrap_args(confine, cwd, cmd, as_pid_1=as_pid_1), *cmd]
        return wrapped, {**env, **sandbox_env(confine)}, level
    if confine is not None and confine.sandbox:
        _warn_fallback(level)
    prefix = netns_prefix()
    if prefix:
        return [*prefix, *cmd], env, "netns"
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (network_guard_dir(), env.get("PYTHONPATH", "")) if p)}
    return cmd, env, "guard"


# --- a confined process --------------------------------------------------------------------------------------

def _child_setup(memory_mb: int | None, cpu_seconds: int | None, max_processes: int | None,
                 cgroup: PidsCgroup | None, max_file_bytes: int | None = None) -> None:
    """In the forked child, before exec: rlimits and the process-count limit."""
    if max_file_bytes:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU dumps core: none in the worktree
    if cgroup is not None:
        cgroup.join()
    elif max_processes:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))


def spawn(cmd: list[str], cwd: Path, env: dict[str, str], *, memory_mb: int | None = None,
          cpu_seconds: int | None = None, confine: Confinement | None = None, cgroup: PidsCgroup | None = None,
          **popen: object) -> subprocess.Popen:
    """Popen in a new session with limits; no inherited descriptor but 0-2 (and pipes asked for).
    :class:`CommandTooLong` for a command line the kernel refuses (checked first, and ``E2BIG`` from the exec)."""
    problem = command_line_problem(cmd, env)
    if problem:
        raise CommandTooLong(problem)
    try:
        return subprocess.Popen(  # type: ignore[call-overload]
            cmd, cwd=cwd, env=env, start_new_session=True, close_fds=True,
            preexec_fn=functools.partial(_child_setup, memory_mb, cpu_seconds,
                                         confine.max_processes if confine and confine.nproc_fallback else None,
                                         cgroup, confine.max_file_bytes if confine else None),
            **popen,
        )
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        raise CommandTooLong(f"the command line was not started: {exc.strerror} ({len(cmd):,} arguments)") from exc


_SPAWNER: ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def spawn_long_lived(cmd: list[str], cwd: Path, env: dict[str, str], **options: Any) -> subprocess.Popen:
    """:func:`spawn` from a thread that lives as long as this process, for a process that outlives its
    caller's thread (a fork server started by a warm-up or worker thread).

    bwrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which the kernel sends when the *thread* that
    forked the sandbox ends, not the process: a sandbox started from a short-lived thread was killed as soon
    as that thread returned, and its next user found it dead (and lost what it had put in its shared
    directory). Started from here, it still dies with coharden, never earlier."""
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coharden-spawner")
        spawner = _SPAWNER
    return spawner.submit(spawn, cmd, cwd, env, **options).result()


def run_limited(
    cmd: list[str],
    cwd: Path,
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    memory_mb: int | None = None,
    cpu_seconds: int | None = None,
    network: bool = False,
    confine: Confinement | None = None,
) -> ProcessResult:
    """Run ``cmd``; on timeout the whole process group (and sandbox) is killed, and after a normal exit so is
    every process it left behind. Output (stdout+stderr) goes to a temp file, not a pipe, so a chatty test
    cannot block on a full pipe. With ``confine`` the process runs in the bwrap sandbox where possible; with its
    ``max_disk_bytes`` a run that writes more into its writable directories is killed (``disk`` says so). A command
    line the kernel refuses (:class:`CommandTooLong`) is not started: ``lost`` (and the output) say why."""
    if confine is not None:
        confine = confine.with_writable(cwd)
    cmd, env, isolation = sandbox_wrap(cmd, dict(os.environ if env is None else env), network, confine, cwd)
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+b") as out, process_limit(confine) as cgroup:
        started: list[int] = []  # the process, once it runs (the watch's baseline is taken before)
        watch = _disk_watch(confine, cgroup, started)
        try:
            proc = spawn(cmd, cwd, env, memory_mb=memory_mb, cpu_seconds=cpu_seconds, confine=confine,
                         cgroup=cgroup, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        except CommandTooLong as exc:
            return ProcessResult(None, f"coharden: {exc}", time.monotonic() - start, False, isolation, lost=str(exc))
        started.append(proc.pid)
        timed_out = False
        try:
            timed_out = _wait(proc, timeout, watch)
        except BaseException:
            _kill_group(proc, cgroup)
            raise
        # on a timeout the whole group dies; after a normal exit, so do processes the tests left behind
        _kill_group(proc, cgroup)
        duration = time.monotonic() - start
        # the end of the output only: a test may print up to its file-size limit (gigabytes) into it
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - OUTPUT_LIMIT))
        output = out.read().decode(errors="replace")
    disk = watch.reason() if watch is not None and watch.exceeded else ""
    return ProcessResult(None if timed_out else proc.returncode, output, duration, timed_out, isolation, disk=disk)


def _disk_watch(confine: Confinement | None, cgroup: PidsCgroup | None, started: Sequence[int]) -> DiskWatch | None:
    """The watch over what a run confined by ``confine`` writes (None without a disk limit). Its processes: the
    pids cgroup's, else those ``started`` and what lies below them."""
    if confine is None or not confine.max_disk_bytes or not confine.writable:
        return None

    def pids() -> list[int]:
        if cgroup is not None:
            return cgroup.pids()
        return [p for pid in started for p in (pid, *descendants(pid))]

    return DiskWatch(confine.writable, confine.max_disk_bytes, skip=confine.protected, pids=pids)


def _wait(proc: subprocess.Popen, timeout: float, watch: DiskWatch | None) -> bool:
    """Wait for ``proc`` to end: True when ``timeout`` passed first, False when it ended or when ``watch`` found
    it wrote too much (``watch.exceeded``; the caller kills it)."""
    if watch is None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return True
        return False
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(left, watch.interval)))
            return False
        except subprocess.TimeoutExpired:
            if watch.check():
                return False
            if left <= watch.interval:
                return True


def _kill_group(proc: subprocess.Popen, cgroup: PidsCgroup | None = None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cgroup is not None:  # daemons that left the process group (setsid) are still in the cgroup
        cgroup.kill_all()
    proc.wait()
