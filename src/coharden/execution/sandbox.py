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
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
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
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError
from coharden.execution.disklimit import DiskWatch, descendants, kill_listed

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

# Hidden inside the sandbox (an empty tmpfs): the host's cgroup tree is none of a test's business, and on a
# cgroup-v1 host its ``cpu.shares`` of 1024 reads as "one CPU" to tools that size themselves by it (pylint's
# ``_cpu_count``, loky), so tests would see fewer cores than the harness's containers show them.
CGROUP_ROOT = "/sys/fs/cgroup"
PRIVATE_HOME = "/tmp/coharden-home"  # inside a bwrap sandbox: $HOME, on the sandbox's private /tmp
SANDBOX_TMP = "/tmp"
# A second private tmpfs, the tests' TMPDIR when their checkout lives under /tmp: see :func:`tests_tmp`.
OTHER_TMP = "/var/tmp"


#: How much of a fresh process's output is read back (its end: verdicts keep the last lines).
OUTPUT_LIMIT = 16 << 20


@dataclass
class ProcessResult:
    returncode: int | None
    output: str
    duration: float
    timed_out: bool
    isolation: str  # "bwrap", "bwrap-net" (an agent's, with the network), "netns", "guard" or "none" (network)
    lost: str = ""  # why the run has no result of its own (the fork server died under it), else empty
    tampering: str = ""  # what forged the run's result (a line on the fork server's protocol nobody signed)
    disk: str = ""  # why the run was killed for writing more than ``max_disk_bytes`` (disklimit), else empty


@dataclass(frozen=True)
class Confinement:
    """What a sandboxed process may change. ``readable`` lists extra paths to show read-only inside a bwrap
    sandbox (ones the private ``/tmp`` would otherwise hide); ``hidden`` paths get an empty tmpfs over them."""

    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    # read-only binds of a host path at another path: (host, inside); e.g. a worktree's borrowed objects, shown
    # as only the base commit's (see coharden.execution.workspace.base_objects)
    mounts: tuple[tuple[Path, Path], ...] = ()
    hidden: tuple[Path, ...] = ()
    protected: tuple[Path, ...] = ()  # read-only although inside a writable path (a worktree's .git)
    max_processes: int | None = 512
    max_file_bytes: int | None = None  # RLIMIT_FSIZE: the largest file a process may write (None: no limit)
    # what a run may write into its ``writable`` directories in all (coharden watches it: see disklimit)
    max_disk_bytes: int | None = None
    sandbox: bool = True  # False: no bwrap even where it runs (network levels only)
    # where no pids cgroup can be made, RLIMIT_NPROC stands in for it - but that counts every process of the
    # user on the machine, not only this one's: False leaves such a run without a limit instead
    nproc_fallback: bool = True
    # the host's network inside the bwrap sandbox (level ``bwrap-net``), for an agent's commands that call their
    # model; test processes never get it (with the network on they run unsandboxed, by the user's own choice)
    share_network: bool = False

    def with_writable(self, *paths: Path) -> Confinement:
        return dataclasses.replace(self, writable=tuple(dict.fromkeys((*self.writable, *paths))))

    def keep_in_tmp(self) -> list[str]:
        """Top-level entries of ``/tmp`` that hold a bind mount (never wiped between runs inside one sandbox)."""
        names = set()
        for path in (*self.writable, *self.readable, *self.hidden, *(inside for _, inside in self.mounts)):
            parts = Path(path).resolve().parts
            if len(parts) > 2 and parts[1] == "tmp":
                names.add(parts[2])
        return sorted(names)


# Build steps (pip installs, a repository's ``setup.py``) need the network, so they get no sandbox, but they run
# the repository's own code: they get a process-count limit, so a runaway build (a ``setup.py`` that re-runs
# itself) fails its step instead of filling the machine. The limit counts threads too (a pids cgroup does):
# installers and compilers stay far below it.
BUILD_STEPS = Confinement(max_processes=512, sandbox=False, nproc_fallback=False)


def tests_tmp(confine: Confinement) -> str:
    """The tests' ``TMPDIR`` inside a bwrap sandbox: a private tmpfs under a top-level directory other than the
    checkout's (``confine.writable[0]``). The harness runs tests in ``/testbed`` with ``TMPDIR=/tmp``; code that
    relates the two by a relative path (docutils' include directive: ``../pytest-of-root/...`` when both start
    with ``/tmp``, an absolute path when they do not) behaves as there only if they differ in their first
    component."""
    if not confine.writable:
        return SANDBOX_TMP
    checkout = Path(confine.writable[0]).resolve()  # the worktree (further entries: scratch directories)
    shown = [Path(p).resolve() for p in (*confine.writable, *confine.readable)]
    if (checkout.parts[1:2] == ("tmp",) and Path(OTHER_TMP).is_dir()
            and not any(p.is_relative_to(OTHER_TMP) for p in shown)):  # never over a directory shown inside
        return OTHER_TMP
    return SANDBOX_TMP


# --- what the sandbox shows ------------------------------------------------------------------------------
# The system's directories, read-only; nothing else of the host is there but what a run is given: its worktree,
# the objects it borrows, the test interpreter's directories, coharden's own runtime files (:data:`RUNTIME`). No
# home directory, no user checkout, store, instance or record file, no other run's worktree.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
# Inside those: what a test has no business reading (password hashes, host keys, private TLS keys, package
# index credentials). Files get an empty file over them, directories an empty tmpfs.
SECRET_SYSTEM_PATHS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh", "/etc/sudoers",
                       "/etc/sudoers.d", "/etc/ssl/private", "/etc/security/opasswd", "/etc/apt/auth.conf",
                       "/etc/apt/auth.conf.d", "/etc/pip.conf", "/etc/xdg/pip", "/etc/docker", "/etc/machine-id")
# coharden's files a test process loads (the fork server's script, warm.py, the result-stream plugin): the
# package directory, wherever coharden is installed (a checkout under /tmp included: the private /tmp would
# hide it otherwise)
RUNTIME = Path(__file__).resolve().parent


def _system_args() -> list[str]:
    args: list[str] = []
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():  # merged /usr: /bin -> usr/bin
            args += ["--symlink", str(path.readlink()), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    for name in SECRET_SYSTEM_PATHS:
        path = Path(name)
        if path.is_dir() and not path.is_symlink():
            args += ["--tmpfs", name]
        elif path.exists() or path.is_symlink():
            args += ["--ro-bind", str(_empty_file()), name]
    return args


@functools.cache
def _empty_file() -> Path:
    """An empty regular file to lay over a secret one (``/dev/null`` cannot be opened on a nodev bind)."""
    handle, name = tempfile.mkstemp(prefix="coharden-empty-")
    os.close(handle)
    Path(name).chmod(0o444)
    atexit.register(Path(name).unlink, missing_ok=True)
    return Path(name)


_NAMESPACES = ("--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-pid", "--unshare-net",
               "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL", "--die-with-parent")


@functools.cache
def _bwrap_base() -> tuple[str, ...]:
    return (*_system_args(), *_NAMESPACES)


@functools.cache
def interpreter_dirs(python: str) -> tuple[Path, ...]:
    """What a Python interpreter needs to run, read-only inside the sandbox: its prefixes (a virtual environment
    and the installation it was made from) and the entries of its ``sys.path`` (``.pth`` files add some), outside
    the system directories. Empty for a command that is not a Python interpreter.

    The probe runs outside the sandbox (it decides what the sandbox shows), so it runs only the interpreter's own
    start-up: ``-I`` (no ``PYTHONPATH``, no user site, no script directory) and the environment's ``.pth``
    files, which coharden's environment build wrote and which no test can change (the environment is shown
    read-only to every run). Nothing of a test, fix or mutant runs here."""
    probe = ("import json, sys; print(json.dumps([sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, "
             "sys.base_exec_prefix, *sys.path]))")
    try:
        proc = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        found = []
    found.append(python)
    shown: list[Path] = []
    for entry in found:
        if not isinstance(entry, str) or not Path(entry).is_absolute() or not Path(entry).exists():
            continue
        for path in dict.fromkeys((Path(entry), Path(entry).resolve())):
            if path.is_file() and path.suffix not in (".zip", ".egg", ".whl"):
                path = path.parent  # an executable: its directory (a venv's bin/ has its activate scripts)
            if not _in_system_dirs(path):
                shown.append(path)
    return tuple(dict.fromkeys(shown))


def _in_system_dirs(path: Path) -> bool:
    return any(path == Path(d) or path.is_relative_to(d) for d in SYSTEM_DIRS if d not in ("/etc", "/sys"))


# --- levels ---------------------------------------------------------------------------------------------------


@functools.cache
def bwrap_path() -> str | None:
    """The bwrap executable when it can build the sandbox on this machine (namespaces allowed), else None."""
    exe = shutil.which("bwrap")
    if not exe or os.environ.get("COHARDEN_NO_BWRAP"):
        return None
    try:
        ok = subprocess.run([exe, *_bwrap_base(), "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return exe if ok else None


def _base(size: tuple[str, ...], *, share_network: bool = False) -> list[str]:
    base = [a for a in _bwrap_base() if not (share_network and a == "--unshare-net")]
    at = base.index("--tmpfs")
    return [*base[:at], *size, *base[at:]]


@functools.cache
def _tmp_size() -> tuple[str, ...]:
    """``--size`` for the private /tmp (1 GiB: a test cannot fill the machine's memory) where bwrap has it."""
    exe = bwrap_path()
    args = ("--size", str(1 << 30))
    try:
        ok = exe is not None and subprocess.run([exe, *_base(args), "true"], capture_output=True,
                                          timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return args if ok else ()


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


@functools.cache
def pids_cgroups() -> bool:
    """Whether a pids cgroup can be made here (the process-count limit; RLIMIT_NPROC does not bind root)."""
    group = PidsCgroup.create(64)
    if group is None:
        return False
    group.close()
    return True


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


def shown_paths(confine: Confinement, cmd: Sequence[str] = ()) -> list[Path]:
    """Every host path a run confined by ``confine`` sees besides the system directories, read-only: coharden's
    runtime files, the directories of the Python interpreters ``cmd`` runs (its program, and an interpreter it
    hands a command to: a service wrapper's), the confinement's ``readable`` paths."""
    pythons = [arg for i, arg in enumerate(cmd) if Path(arg).name.startswith("python")
               and (i == 0 or (Path(arg).is_absolute() and Path(arg).is_file()))]
    shown = [RUNTIME, *(d for python in pythons for d in interpreter_dirs(python)), *confine.readable]
    unique = sorted({Path(p) for p in shown if Path(p).exists()}, key=lambda p: len(p.parts))
    hidden = [Path(h).resolve() for h in confine.hidden]
    kept: list[Path] = []
    for path in unique:  # one mount for a directory and what lies inside it - unless a hidden directory lies
        # between them: the hidden one's tmpfs covers the inner path, which is then bound again on top
        if not any(path.is_relative_to(outer) and not any(h.is_relative_to(outer.resolve())
                                                           and path.resolve().is_relative_to(h) for h in hidden)
                   for outer in kept):
            kept.append(path)
    return kept


def bwrap_args(confine: Confinement, cwd: Path | None = None, cmd: Sequence[str] = (), *,
               as_pid_1: bool = False) -> list[str]:
    """The bwrap command line for ``confine`` (see the module docstring). ``as_pid_1``: the command itself is
    the namespace's init, with no bwrap process beside it (a long-lived server: then no process a test can
    inspect holds the server's descriptors)."""
    exe = bwrap_path()
    assert exe is not None
    tmp = tests_tmp(confine)
    size = _tmp_size()
    if size and tmp != SANDBOX_TMP:  # two private tmpfs share the one budget
        size = (size[0], str(int(size[1]) // 2))
    args = [exe, *_base(size, share_network=confine.share_network), "--dir", PRIVATE_HOME,
            "--setenv", "HOME", PRIVATE_HOME, "--setenv", "TMPDIR", tmp]
    if as_pid_1:
        args.append("--as-pid-1")
    if tmp != SANDBOX_TMP:
        args += [*size, "--tmpfs", tmp]
    # a hidden directory (the user's checkout, a store) is an empty tmpfs laid over whatever shows it (an
    # interpreter whose sys.path holds it); what the run must see inside it is bound again on top
    hidden = [Path(p).resolve() for p in confine.hidden if Path(p).is_dir()]
    shown = shown_paths(confine, cmd)
    inside = [p for p in shown if any(Path(p).resolve().is_relative_to(h) for h in hidden)]
    for path in shown:
        if path not in inside:
            args += ["--ro-bind", str(path), str(path)]
    for path in hidden:
        args += ["--tmpfs", str(path)]
    for path in inside:
        args += ["--ro-bind", str(path), str(path)]
    for host, inside_path in confine.mounts:
        args += ["--ro-bind", str(host), str(inside_path)]
    for path in confine.writable:
        args += ["--bind", str(path), str(path)]
    for path in confine.protected:
        if Path(path).exists():
            args += ["--ro-bind", str(path), str(path)]
    if Path(CGROUP_ROOT).is_dir():
        args += ["--tmpfs", CGROUP_ROOT]
    # the sandbox's own root (a tmpfs holding the mount points) read-only: no unbounded in-memory writes there
    args += ["--remount-ro", "/"]
    if cwd is not None:
        args += ["--chdir", str(cwd)]
    return args


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


def sandbox_env(confine: Confinement) -> dict[str, str]:
    """The variables every process in a bwrap sandbox gets: its private ``HOME`` and ``TMPDIR``.

    No ``PYTHONPYCACHEPREFIX``: with one set, an interpreter looks for *every* module's bytecode under it - the
    standard library's and pytest's included - and compiles all of them from source in every fresh process (0.1 s
    -> 0.6 s for ``import pytest``; seconds for sympy). Bytecode a test leaves in the checkout is dealt with by
    the reset (:func:`coharden.execution.workspace.sweep`) and tests run with ``PYTHONDONTWRITEBYTECODE``."""
    return {"HOME": PRIVATE_HOME, "TMPDIR": tests_tmp(confine)}


def pythonpath_dirs(env: dict[str, str]) -> tuple[Path, ...]:
    """The absolute ``PYTHONPATH`` entries of ``env`` (a spec environment's per-job path), to be shown read-only
    where no writable path holds them already."""
    entries = (Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
    return tuple(p for p in entries if p.is_absolute() and p.exists())


# --- process-count limit ----------------------------------------------------------------------------------
class PidsCgroup:
    """A cgroup with ``pids.max`` (v1 ``pids`` hierarchy or v2) for one sandbox; ``None`` from :meth:`create`
    where cgroups cannot be made. Its processes can be listed and killed, and it is removed on :meth:`close`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> PidsCgroup | None:
        for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
            if not (base / "cgroup.procs").exists():
                continue
            if base.name != "pids" and "pids" not in _read(base / "cgroup.subtree_control").split():
                continue
            path = base / f"coharden-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(limit))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            return cls(path)
        return None

    def join(self) -> None:
        """Move the calling process into the group (run in the child before exec)."""
        (self.path / "cgroup.procs").write_text("0")

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.path / "cgroup.procs").split()]

    def kill_all(self, spare: Sequence[int] = ()) -> None:
        kill_listed(self.pids, spare)

    def close(self) -> None:
        self.kill_all()
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


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


@contextlib.contextmanager
def process_limit(confine: Confinement | None) -> Iterator[PidsCgroup | None]:
    cgroup = PidsCgroup.create(confine.max_processes) if confine is not None and confine.max_processes else None
    try:
        yield cgroup
    finally:
        if cgroup is not None:
            cgroup.close()


def spawn(cmd: list[str], cwd: Path, env: dict[str, str], *, memory_mb: int | None = None,
          cpu_seconds: int | None = None, confine: Confinement | None = None, cgroup: PidsCgroup | None = None,
          **popen: object) -> subprocess.Popen:
    """Popen in a new session with limits; no inherited descriptor but 0-2 (and pipes asked for)."""
    return subprocess.Popen(  # type: ignore[call-overload]
        cmd, cwd=cwd, env=env, start_new_session=True, close_fds=True,
        preexec_fn=functools.partial(_child_setup, memory_mb, cpu_seconds,
                                     confine.max_processes if confine and confine.nproc_fallback else None,
                                     cgroup, confine.max_file_bytes if confine else None),
        **popen,
    )


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
    ``max_disk_bytes`` a run that writes more into its writable directories is killed (``disk`` says so)."""
    if confine is not None:
        confine = confine.with_writable(cwd)
    cmd, env, isolation = sandbox_wrap(cmd, dict(os.environ if env is None else env), network, confine, cwd)
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+b") as out, process_limit(confine) as cgroup:
        started: list[int] = []  # the process, once it runs (the watch's baseline is taken before)
        watch = _disk_watch(confine, cgroup, started)
        proc = spawn(cmd, cwd, env, memory_mb=memory_mb, cpu_seconds=cpu_seconds, confine=confine, cgroup=cgroup,
                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
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


# --- leftovers of killed runs ------------------------------------------------------------------------------
OWNER_FILE = ".coharden-owner"


def mark_owner(directory: Path) -> None:
    """Record which process owns a temporary directory, so a later run can remove it once that process is gone."""
    (directory / OWNER_FILE).write_text(f"{os.getpid()} {_start_time(os.getpid())}")


def sweep_leftovers(prefixes: Sequence[str] = ("coharden-ws-", "coharden-io-", "coharden-junit-"),
                    parent: Path | None = None) -> list[Path]:
    """Remove temporary directories whose owning coharden process died without cleaning up (SIGKILL, OOM)."""
    removed = []
    base = Path(parent or tempfile.gettempdir())
    for prefix in prefixes:
        for directory in base.glob(prefix + "*"):
            owner = _read(directory / OWNER_FILE).split()
            if len(owner) != 2 or not owner[0].isdigit():
                continue
            pid, started = int(owner[0]), owner[1]
            if _start_time(pid) == started:
                continue  # still running
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def _start_time(pid: int) -> str:
    """The start time of ``pid`` (clock ticks since boot), or '' when it is gone: tells a reused pid apart."""
    stat = _read(Path(f"/proc/{pid}/stat"))
    return stat.rsplit(")", 1)[1].split()[19] if stat else ""

