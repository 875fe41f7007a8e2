"""The bubblewrap sandbox: what it shows and its command line.

The system's directories read-only (secret files in them covered), coharden's runtime files, the directories of
the Python interpreters a command runs, the run's own paths (``writable`` ones bound read-write); a private
``/tmp`` with a private ``$HOME`` in it (and a second private tmpfs, the tests' ``TMPDIR``, where the checkout
lives under ``/tmp``: :func:`tests_tmp`); the host's cgroup tree hidden; fresh PID, network, IPC and UTS
namespaces, no capabilities. Which isolation level a run gets, and the weaker ones, are
:mod:`coharden.execution.sandbox`'s.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from coharden.execution.confinement import Confinement

# Hidden inside the sandbox (an empty tmpfs): the host's cgroup tree is none of a test's business, and on a
# cgroup-v1 host its ``cpu.shares`` of 1024 reads as "one CPU" to tools that size themselves by it (pylint's
# ``_cpu_count``, loky), so tests would see fewer cores than the harness's containers show them.
CGROUP_ROOT = "/sys/fs/cgroup"
PRIVATE_HOME = "/tmp/coharden-home"  # inside a bwrap sandbox: $HOME, on the sandbox's private /tmp
SANDBOX_TMP = "/tmp"
# A second private tmpfs, the tests' TMPDIR when their checkout lives under /tmp: see :func:`tests_tmp`.
OTHER_TMP = "/var/tmp"


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
