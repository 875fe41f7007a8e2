"""The bubblewrap sandbox: what it shows and its command line.

The system's directories read-only (secret files in them covered), coharden's runtime files, the directories of
the Python interpreters a command runs, the run's own paths (``writable`` ones bound read-write); a private
``/tmp`` with a private ``$HOME`` in it (and a second private tmpfs, the tests' ``TMPDIR``, where the checkout
lives under ``/tmp``: :func:`tests_tmp`); the host's cgroup tree hidden; fresh PID, network, IPC and UTS
namespaces, no capabilities. Which isolation level a run gets, and the weaker ones, are
:mod:`coharden.execution.sandbox`'s.

What a run can write is only: its ``writable`` paths (the caller resets them), and the sandbox's own *scratch
mounts* - fresh tmpfs mounts, each with a size limit (``/tmp``, the tests' ``TMPDIR``, ``/dev/shm``), and the IPC
namespace's message queues (``/dev/mqueue``, bounded by the kernel's per-user limit). Every other mount is
read-only: the tmpfs laid over secret and hidden directories and over the cgroup tree are remounted read-only once
what lies in them is bound, ``/dev`` holds its device nodes only, and ``/proc/sys`` (as root without capabilities a
process could otherwise set the kernel's settings, most of them the host's) is read-only. A sandbox that runs many
tests (the fork server) empties its scratch mounts between runs (``forkserver_procs.wipe``), so no run sees what an
earlier one left.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from coharden.errors import CoHardenError
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
        if path.is_dir() and not path.is_symlink():  # empty and read-only: nothing a run writes there persists
            args += ["--tmpfs", name, "--remount-ro", name]
        elif path.exists() or path.is_symlink():
            args += ["--ro-bind", str(_empty_file()), name]
    return args


EMPTY = RUNTIME / "empty"
"""An empty file shipped with coharden, laid read-only over a secret one (``/dev/null`` cannot be opened on a
nodev bind). A file of the installation, not a temporary one: a temporary file per process was left behind by
every process that ended without running ``atexit`` (fork servers, killed workers), hundreds a day."""


@functools.cache  # checked once per process: every sandboxed run's arguments lay it over the secret files
def _empty_file() -> Path:
    if EMPTY.is_file() and EMPTY.stat().st_size == 0:
        return EMPTY
    raise CoHardenError(f"coharden's installation lacks its empty file {EMPTY} (or it is not empty): reinstall "
                       f"coharden; the sandbox lays it over secret files such as /etc/shadow")


SHM = "/dev/shm"  # POSIX shared memory and semaphores (multiprocessing's locks): a scratch mount of its own
SHM_BYTES = 64 << 20  # Docker's default size of /dev/shm, what tests see in the harness's containers
MQUEUE = "/dev/mqueue"  # the IPC namespace's POSIX message queues, shown so that they can be emptied
_NAMESPACES = ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL",
               "--die-with-parent")
# Ways to make /proc/sys read-only, the first that works on this machine (:func:`_setup`): bwrap covers it itself
# only where it can write to it, which it cannot as root without capabilities - while its files are writable to
# the root user regardless (a sysctl checks the owner, not a capability), and most set the host's kernel.
_PROC_SYS_COVERS = (("--ro-bind", "/proc/sys", "/proc/sys"), ("--remount-ro", "/proc"))


def _core(proc_sys: Sequence[str], size: Sequence[str] = (), *, share_network: bool = False) -> list[str]:
    """The sandbox's system part: the system directories, ``/dev`` (device nodes, a private ``/dev/shm`` and
    ``/dev/mqueue``), ``/proc`` (``proc_sys`` covering ``/proc/sys``), the private ``/tmp`` (``size``: its size
    option), the namespaces. ``/dev`` is remounted read-only by :func:`bwrap_args`, at the end (the nodes are
    bound into it first)."""
    shm = ("--size", str(SHM_BYTES)) if size else ()
    return [*_system_args(), "--dev", "/dev", *shm, "--tmpfs", SHM, "--mqueue", MQUEUE, "--proc", "/proc",
            *proc_sys, *size, "--tmpfs", SANDBOX_TMP,
            *(a for a in _NAMESPACES if not (share_network and a == "--unshare-net"))]


def _runs(exe: str, args: Sequence[str]) -> bool:
    try:
        return subprocess.run([exe, *args, "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def _setup() -> tuple[str, tuple[str, ...]] | None:
    """(the bwrap executable, the arguments that make /proc/sys read-only) when bwrap can build the sandbox on
    this machine (namespaces allowed), else None."""
    exe = shutil.which("bwrap")
    if not exe or os.environ.get("COHARDEN_NO_BWRAP"):
        return None
    for cover in (*_PROC_SYS_COVERS, ()):  # none: a /proc/sys that is read-only already, or no /proc/sys
        if _runs(exe, _core(cover)):
            return exe, tuple(cover)
    return None


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


def bwrap_path() -> str | None:
    """The bwrap executable when it can build the sandbox on this machine (namespaces allowed), else None."""
    setup = _setup()
    return setup[0] if setup else None


def _base(size: Sequence[str], *, share_network: bool = False) -> list[str]:
    """:func:`_core` with this machine's /proc/sys cover; ``size``: the private /tmp's ``--size`` option."""
    setup = _setup()
    return _core(setup[1] if setup else (), size, share_network=share_network)


@functools.cache
def _tmp_size() -> tuple[str, ...]:
    """``--size`` for the private /tmp (1 GiB: a test cannot fill the machine's memory) where bwrap has it."""
    exe = bwrap_path()
    args = ("--size", str(1 << 30))
    return args if exe is not None and _runs(exe, _base(args)) else ()


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
    # (one in the sandbox's private /tmp or TMPDIR that no bound directory holds is hidden already - nothing of the
    # host shows there - and a tmpfs laid over /tmp itself would replace the sized, emptied scratch mount with a
    # read-only one; outer ones first, so an inner one is not covered by its outer one's tmpfs)
    shown = shown_paths(confine, cmd)
    private = (Path(SANDBOX_TMP), Path(tmp))
    bound = [Path(p).resolve() for p in (*shown, *confine.writable, *(target for _, target in confine.mounts))]
    hidden = sorted({h for h in (Path(p).resolve() for p in confine.hidden if Path(p).is_dir())
                     if not any(h.is_relative_to(t) for t in private) or any(h.is_relative_to(b) for b in bound)},
                    key=lambda p: len(p.parts))
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
        args += ["--tmpfs", CGROUP_ROOT, "--remount-ro", CGROUP_ROOT]
    # now that every bind is made (their mount points are directories in these tmpfs): the hidden directories'
    # tmpfs and /dev (its device nodes are bind mounts of their own, writable as before) read-only, and so the
    # sandbox's own root (a tmpfs holding the mount points): nothing written there could persist from run to run
    # of one sandbox (the fork server's), nor grow without bound in memory
    # (a hidden directory a later bind covers - one bound itself, or lying in a writable or bound directory - is no
    # mount point any more: nothing of its tmpfs can be reached, and bwrap refuses to remount it)
    covering = [Path(p).resolve() for p in (*inside, *(target for _, target in confine.mounts), *confine.writable,
                                            *(p for p in confine.protected if Path(p).exists()))]
    for path in hidden:
        if not any(path.is_relative_to(cover) for cover in covering):
            args += ["--remount-ro", str(path)]
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
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
