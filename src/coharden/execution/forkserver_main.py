"""Fork server, run by the TEST interpreter (stdlib + pytest only; coharden need not be installed there).

It imports pytest, warms it up once (a collection run over an empty directory imports pytest's own modules
and every installed plugin), optionally imports ``--preload`` modules (a project's dependencies) and, when a
request asks for it, the project's own modules (see ``warm`` below), then forks one child per request. A
child starts with a warm interpreter and runs ``pytest.main`` exactly as ``python -m pytest`` would: cwd
first on sys.path, the request's environment, its own session and process group, rlimits, stdout/stderr to a
file, and no other file descriptor of the server.

The server enforces each request's time limit itself (it is the only process that can name the child when it
runs in its own PID namespace). The server makes itself non-dumpable, so a child cannot ptrace it or read its
memory. With ``--sandboxed`` (it runs as the sandbox's only long-lived process, inside a bwrap PID namespace)
it kills every other process in the namespace after each child (daemons, forks left behind) and empties the
private ``/tmp`` except the ``--keep`` entries (bind mounts), so no run sees what an earlier one left there.

Protocol (JSON lines): the client's first line is {"key": hex}, a secret of this server's life; every later
line both ways carries "seq" (the request's number, from 1; 0 for the hello) and "mac", the HMAC-SHA256 of the
line's other fields under that key, so a request or reply that anyone else wrote is rejected: a forged request
is answered with {"forged": "request"} and not run, a forged reply is taken for tampering by the client. The
key is wiped in each child before test code runs. Nothing a test can reach holds the pipes anyway: in the
sandbox the server is the namespace's init (``bwrap --as-pid-1``), non-dumpable, and a child closes them.
The server then prints {"ready": true, "safe": bool, "reason": str}. A request
{"prime": true, "cwd", "env", "warm"} imports the warm modules without forking and is answered with
{"primed": bool}. Each other request
{"cwd", "args", "env", "out", "memory_mb", "cpu_seconds", "max_processes", "timeout"} is answered with
{"pid": N} once forked and {"rc": N | null, "timed_out": bool, "warm": bool, "swapped": bool} when the child ended (rc
negative: killed by that signal; null: killed at the time limit; warm: the child started with the project's
modules imported; swapped: with changed function bodies swapped in).

Warm project imports (``execution/warm.py``, loaded by path): a request may carry ``"warm": {"modules": [...],
"optional": [...], "key": str, "volatile": [paths], "base": bool}`` - the project's modules to keep imported,
more of them (the ones the instance's tests import) kept only if they import cleanly, an id of the checkout's
base state (the instance and those modules), the files this run's patches touch, and whether every file
outside the tests is the base commit's. See :class:`_Warm`.

Collect once (``Settings.collect_once``; sandboxed servers only): a request may carry ``"collect": name``, the
client's name for the run's test state (its test patches). The first such request's child becomes a *zygote*
(:class:`_CollectOnce`): it runs pytest's configuration and collection once and, at ``pytest_runtestloop``,
forks the run itself; later requests with the same name, directory, arguments (the JUnit path and -x aside) and
environment (the result stream aside) go to that zygote, which forks a run that executes the collected items
without walking the tree again, with the changed function bodies swapped in (``warm.swap_changed``). Where that
is not the same as a fresh run (a module-level change, a changed test module or conftest, a file added next to
a loaded one), the server runs the request as a plain child, collecting again. The reply then carries
"collected": "once" (served by a zygote) or why it collected. Why this keeps the sandbox's guarantees: a zygote
is a child like any (the key wiped, the protocol and every other zygote's pipes closed, its own session); it
ran only its own tests' code, so what it reports (on a pipe of its own, read by the server, which alone signs
replies) is that test's own claim about its own run, like an exit code; the server enforces the time limit
itself; between runs every zygote is stopped (SIGSTOP, waited for) and every other process in the namespace is
killed, so no code of one test runs while another test's run is prepared or runs (a run that sends a zygote
SIGCONT has it stopped again after); zygotes are non-dumpable (no ptrace, no /proc/PID/mem); at most
``_ZYGOTES`` are kept (a candidate's and a reference's runs alternate on one server).
"""

import hashlib
import hmac
import json
import os
import pathlib
import resource
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import Any


def _exit_code(status):
    """``os.waitstatus_to_exitcode`` (Python 3.9+), for the older interpreters of spec environments."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


_NOT_PROJECT = {"conftest", "setup", "test", "tests", "testing", "doc", "docs", "examples", "benchmarks",
                "scripts", "tasks", "tools", "build", "dist"}


def _project_modules(root):
    """Top-level module names a checkout provides (at its root, or under src/ or lib/)."""
    names = set()
    for base in (root, os.path.join(root, "src"), os.path.join(root, "lib")):  # noqa: PTH118
        try:
            entries = os.listdir(base)  # noqa: PTH208
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".py"):
                names.add(entry[:-3])
            elif os.path.isfile(os.path.join(base, entry, "__init__.py")):  # noqa: PTH113, PTH118
                names.add(entry)
    return names - _NOT_PROJECT


def _set_dumpable(value):
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, value, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:  # noqa: BLE001 - best effort (not Linux, no libc)
        pass


def protocol_mac(key, message):
    """The HMAC of a protocol line's fields (all but "mac"), in a canonical JSON form (the client imports
    this one, so both sides compute it alike)."""
    body = json.dumps({k: v for k, v in message.items() if k != "mac"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


class _Channel:
    """The server's side of the authenticated protocol (see the module docstring)."""

    def __init__(self, proto, key):
        self.proto = proto
        self.key = key
        self.seq = 0

    def send(self, message):
        message = dict(message, seq=self.seq)
        message["mac"] = protocol_mac(self.key, message)
        self.proto.write(json.dumps(message) + "\n")

    def accept(self, request):
        """True for the next request the client wrote (its number and MAC), False for anything else."""
        if not isinstance(request, dict) or request.get("seq") != self.seq + 1 \
                or not hmac.compare_digest(str(request.get("mac", "")), protocol_mac(self.key, request)):
            return False
        self.seq += 1
        return True


def _read_key(stream):
    try:
        return bytearray.fromhex(json.loads(stream.readline())["key"])
    except (ValueError, KeyError, TypeError):
        return None


def _close_except(keep):
    """Close every descriptor from 3 up but ``keep``."""
    low = 3
    for fd in sorted(f for f in keep if f is not None and f >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def _child(request, swap=None, key=None, zygote=None):
    """Run one request in the forked child. ``swap``: (warm state, status fd) when the server's modules are
    warm but some module file changed: the child swaps in the changed function bodies or purges (``_Warm``)
    and writes b"1" (swapped) or b"0" to the fd before any test code runs; (warm state, None): it purges.
    ``key``: the protocol's secret, wiped here first (a test must not be able to sign a reply). ``zygote``:
    (reply fd, request fd, warm state, called) - this child collects once and serves the later runs of the same
    tests (:class:`_CollectOnce`)."""
    if key is not None:
        key[:] = bytes(len(key))
    os.setsid()
    try:
        _set_dumpable(1)
        if request.get("memory_mb"):
            limit = int(request["memory_mb"]) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if request.get("cpu_seconds"):
            cpu = int(request["cpu_seconds"])
            if zygote is None:  # a zygote's runs set their own (a fork starts at no CPU time; it must not grow)
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU dumps core: none in the worktree
        if request.get("max_file_bytes"):  # a file larger than this fails to write (EFBIG): no full disk
            limit = int(request["max_file_bytes"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        if request.get("max_processes"):
            try:
                limit = int(request["max_processes"])
                resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
            except (ValueError, OSError):
                pass
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        # the server's protocol pipes, other zygotes' pipes and anything else it holds
        _close_except([swap[1] if swap else None, *(zygote[:2] if zygote else ())])
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:0] = [cwd, *extra]
        if swap:
            state, fd = swap
            swapped = False
            if fd is not None:
                try:
                    swapped = state.module.swap_changed(state.snapshot, state.changed)
                except Exception:  # noqa: BLE001 - whatever it changed, the purge below drops it
                    swapped = False
            if not swapped:
                state.module.purge(state.snapshot.root)
            if fd is not None:
                os.write(fd, b"1" if swapped else b"0")
                os.close(fd)
        sys.argv = ["pytest", *request["args"]]
        import pytest

        plugins = []
        if zygote is not None:
            hook = _CollectOnce.pytest_runtestloop
            _CollectOnce.pytest_runtestloop = pytest.hookimpl(tryfirst=True)(hook)  # type: ignore[method-assign]
            plugins.append(_CollectOnce(request, *zygote))
        rc = pytest.main(list(request["args"]), plugins=plugins)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(rc))
    except BaseException:  # noqa: BLE001 - report and leave with pytest's internal-error code
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)


def _wait(pid, timeout):
    """The wait status of ``pid``, or None when it is still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if pidfd is not None:
                poller = select.poll()  # not select(): no FD_SETSIZE limit on the descriptor number
                poller.register(pidfd, select.POLLIN)
                poller.poll(left * 1000)
            else:
                time.sleep(min(0.005, left))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kill_rest(spare=()):
    """Inside the sandbox's PID namespace: kill every process but this one, the namespace's init and ``spare``
    (stopped zygotes). Spared ones are killed pass by pass from /proc until none is left (zombies aside); a
    namespace that does not empty that way loses its zygotes too (False)."""
    emptied = True
    if spare:
        emptied = False
        keep = {os.getpid(), 1, *spare}
        for round_ in range(200):
            found = [pid for pid in _namespace_pids() if pid not in keep and _state(pid) not in ("Z", "X", "")]
            if not found:
                emptied = True
                break
            if round_ > 2:
                time.sleep(0.001)  # killed processes still to be scheduled to die (a loaded machine)
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            _reap(keep)
    if not emptied or not spare:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    _reap(set(spare) if emptied else set())
    return emptied


def _reap(keep):
    """Reap the server's dead children (killed runs, orphans it inherited as init), never one in ``keep``."""
    while True:
        try:
            if keep:  # waitpid(-1) could reap a zygote that died: the handle reads its status instead
                found = [pid for pid in _namespace_pids() if pid not in keep and _state(pid) == "Z"]
                for pid in found:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass
                return
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break


def _namespace_pids():
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]  # noqa: PTH208
    except OSError:
        return []


def _state(pid):
    """A process's state letter from /proc (R, S, T, Z, ...), '' when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:  # noqa: PTH123
            return handle.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return ""


def _wipe_tmp(keep, home, tests_tmp="/tmp"):
    """Empty the sandbox's private /tmp (but the bind mounts ``keep``) and the tests' own TMPDIR."""
    entries = list(pathlib.Path("/tmp").iterdir())
    if tests_tmp != "/tmp":
        entries += list(pathlib.Path(tests_tmp).iterdir())
    for entry in entries:
        if entry.parent == pathlib.Path("/tmp") and entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            try:
                entry.unlink()
            except OSError:
                pass
    pathlib.Path(home).mkdir(parents=True, exist_ok=True)


def _load_warm():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm.py")  # noqa: PTH118, PTH120, PTH100
    spec = importlib.util.spec_from_file_location("_coharden_warm", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_IGNORED_ENV = ("COHARDEN_",)  # per-run file names (the result stream): the project cannot see them at import


def _import_env(env):
    return {k: v for k, v in env.items() if not k.startswith(_IGNORED_ENV)}


class _Warm:
    """The project's modules imported in the server, so children need not import them, never served stale.

    A snapshot is taken (the modules imported, in the request's environment) when the server holds none and
    the checkout is the base commit's outside its tests (``base``: the server runs no patched project code,
    only what the environment itself holds); a snapshot that leaves the project half imported, or one taken
    while a run's patch touches a file the import loads (``volatile``), is refused for this base state
    (``key``). Before each fork the server checks the run asks for warm imports in the snapshot's root and
    import environment (else that child drops every project module: ``warm.purge``) and compares its files
    with the disk (``warm.changed_files``: content hashes of every module file, listings of their
    directories). Unchanged: the child starts warm. Changed (a fix, a mutant): the server keeps its modules -
    they are still the base state - and the child swaps the changed function bodies into its own copy, or
    purges and imports afresh where that is not provably the same as a fresh import (``warm.swap_changed``)."""

    def __init__(self):
        self.module: Any = None  # warm.py, loaded by path on the first request
        self.snapshot = None
        self.env = None
        self.key = None
        self.refused = False
        self.imports = 0
        self.changed = {}  # the files a "swap" run changed (path -> new digest)

    def prepare(self, request):
        """Make the server's modules right for ``request``: "warm" when the child starts with them as they are,
        "swap" when some of their files changed (the child swaps in the changed function bodies, or purges and
        imports afresh: ``warm.swap_changed``), "purge" when the child must not use them (a run that asks for
        no warm imports - an instrumented recording, say - or in another environment: the server keeps them for
        the runs after it), "" when the server holds none."""
        spec = request.get("warm")
        if not spec:
            return "purge" if self.snapshot is not None else ""
        if self.module is None:
            self.module = _load_warm()
        cwd = os.path.abspath(request["cwd"])  # noqa: PTH100
        volatile = {os.path.join(cwd, p) for p in spec.get("volatile", [])}  # noqa: PTH118
        env = _import_env(request["env"])
        if spec.get("key") != self.key:
            self.drop()
            self.key, self.refused = spec.get("key"), False
        if self.snapshot is not None:
            if env != self.env or cwd != self.snapshot.root:
                return "purge"
            else:
                changed = self.module.changed_files(self.snapshot, cwd)
                if changed == {}:
                    return "warm"
                if not spec.get("base"):
                    # the server keeps its modules (the base state); the child swaps the changed bodies into its
                    # own copy, or purges it (a file added or removed next to a module: changed is None)
                    self.changed = changed or {}
                    self.module.analyse_snapshot(self.snapshot, list(self.changed))
                    return "swap"
                self.drop()  # the base state itself is not what the server imported: import it again
        # the server imports the project only when primed, on the reset base checkout: at a run's request the
        # checkout holds the test patch, and a test file the package's own import loads (astropy's __init__
        # imports astropy.tests.runner) would run the test's code here, in the process every later run forks
        # from (and that signs the protocol): what it patched (pytest itself) would outlive any purge
        if self.snapshot is None and not self.refused and spec.get("base") and request.get("prime"):
            optional = list(spec.get("optional", []))
            self._take(cwd, list(spec.get("modules", [])) + optional, env, volatile)
            if self.snapshot is None and optional:  # a module the tests import failed: the required ones alone
                self.refused = False
                self._take(cwd, list(spec.get("modules", [])), env, volatile)
        return "warm" if self.snapshot is not None else ""

    def _take(self, cwd, modules, env, volatile):
        saved_env, saved_path, saved_bytecode = dict(os.environ), list(sys.path), sys.dont_write_bytecode
        try:
            os.environ.clear()
            os.environ.update(env)
            sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
            extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
            sys.path[:0] = extra  # warm_import puts the root first, as the child's sys.path has it
            snapshot = self.module.warm_import(cwd, modules)
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            sys.path[:] = saved_path
            sys.dont_write_bytecode = saved_bytecode
        self.imports += 1
        if snapshot.errors or not snapshot.files or volatile & set(snapshot.files) \
                or threading.active_count() != 1:
            self.refused = True
            self.module.purge(cwd)
            return
        self.snapshot, self.env = snapshot, env

    def drop(self):
        if self.snapshot is not None:
            self.module.purge(self.snapshot.root)
        self.snapshot = None


# --- collect once: a zygote per test state ---------------------------------------------------------------------
_ZYGOTES = 3  # zygotes a server keeps at once (a candidate's and a reference's runs alternate on one server)
_LINE_LIMIT = 1 << 16
_READY_TIMEOUT = 60.0  # seconds a zygote gets to fork a run and swap bodies before the server runs it itself


def _zygote_key(request):
    """What must be equal for a zygote's collected session to serve a run: the client's name for the test state
    (``collect``: its test patches), the run's directory, arguments (the JUnit path aside), environment (the
    result stream aside), warm imports and the limits the zygote set on itself (all but CPU time)."""
    args = ["--junitxml=" if str(a).startswith("--junitxml=") else a for a in request.get("args") or []
            if a != "-x"]  # a zygote serves runs with and without -x (``_CollectOnce._maxfail``)
    env = {k: v for k, v in (request.get("env") or {}).items() if k != "COHARDEN_STREAM"}
    spec = request.get("warm") or {}
    body = [request.get("collect"), request.get("cwd"), args, env, spec.get("key"), spec.get("modules"),
            spec.get("optional"), request.get("memory_mb"), request.get("max_file_bytes"),
            request.get("max_processes")]
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _tmp_listing(dirs):
    """The entries of the temporary directories and the home (a directory made in them shows at the top)."""
    found = []
    for directory in dirs:
        try:
            found += [os.path.join(directory, e) for e in sorted(os.listdir(directory))]  # noqa: PTH118, PTH208
        except OSError:
            pass
    return found


def _profiling(profile):
    """True while ``profile`` (cProfile) still sees every call: nothing replaced it as the profiler."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        return monitoring.get_tool(monitoring.PROFILER_ID) is not None
    return sys.getprofile() is profile


def _fresh_clock(obj, names):
    """Restart the session clocks a report prints (``in 0.12s``): a run forked from a zygote starts now."""
    for name in names:
        old = getattr(obj, name, None)
        if old is None:
            continue
        try:
            setattr(obj, name, time.time() if isinstance(old, float) else type(old)())
        except Exception:  # noqa: BLE001 - cosmetic only
            pass


class _CollectOnce:
    """pytest plugin of a zygote: the server's child that collects a run's tests once and then forks one
    grandchild per run of the same tests, which executes the collected items without walking the tree again.

    The zygote runs the request that started it through pytest's configuration and collection as any child
    does; at ``pytest_runtestloop`` (collection done) it checks that forking is safe - no thread started, no file
    left in the temporary directories (a run after the server's wipe would miss it) - and takes a
    :class:`warm.Snapshot` of every module loaded from the checkout (test modules and conftests included) with
    the functions that ran while they loaded (cProfile). Unsafe: it runs the tests itself and exits, as a plain
    child would. Else, per run: the changed module files (``warm.changed_files``; a changed test module or
    conftest, or an added or removed file next to a loaded one, is stale: the server collects again), then a
    fork; the grandchild points its output, the result stream and the JUnit file at this run's, swaps the changed
    function bodies in (``warm.swap_changed``; where it cannot, it leaves before running anything and the server
    runs the request as a plain child, collecting again) and returns to pytest, which runs the items, writes the
    reports and exits with the session's code. The zygote reports to the server on its own pipe: {"stale"},
    {"fallback"}, or {"pid", "swapped"} then {"rc"}; these are the run's own claims, like its exit code. It never
    holds the protocol's key or pipes, is non-dumpable, and is kept stopped (SIGSTOP) between its runs."""

    def __init__(self, request, replies, requests, module, called, spare):
        self.request = request
        self.spare = {1, os.getpid(), os.getppid(), *spare}  # the server, this zygote, the server's other ones
        self.replies = replies
        self.requests = requests
        self.module = module
        self.called = called  # code objects the server's warm import ran; None: unknown (no body is swapped)
        self.pending = b""
        self.tmp_dirs = [d for d in {"/tmp", tempfile.gettempdir(), os.environ.get("HOME", "")}
                         if d and os.path.isdir(d)]  # noqa: PTH112
        self.tmp_before = _tmp_listing(self.tmp_dirs)
        self.out = os.fstat(1)
        self.profile = None
        try:
            import cProfile

            self.profile = cProfile.Profile()
            self.profile.enable()
        except Exception:  # noqa: BLE001 - another profiler is active: nothing may be swapped
            self.profile = None

    def _unsafe(self, session):
        if threading.active_count() != 1:
            return "a thread runs after collection"
        others = [p for p in _namespace_pids() if p not in self.spare and _state(p) not in ("Z", "X", "")]
        if others:  # a process the collection started (a daemon): the server's clean-up after a run would kill it
            return "a process runs beside the collection"
        if _tmp_listing(self.tmp_dirs) != self.tmp_before:
            return "collection left files in the temporary directories"
        if getattr(session, "shouldstop", False) or getattr(session, "shouldfail", False):
            return "the session stops"
        return ""

    def pytest_runtestloop(self, session):
        profiling = self.profile is not None and _profiling(self.profile)
        if self.profile is not None:
            self.profile.disable()
        try:
            prepared = None if self._unsafe(session) else self._prepare(session, profiling)
        except Exception:  # noqa: BLE001 - whatever failed, this process runs the tests itself
            prepared = None
        if prepared is None:
            return None  # this process runs the tests itself, as a plain child
        zygote = os.getpid()
        try:
            self._serve(session, *prepared)  # returns in a run's process only
        except BaseException:  # noqa: BLE001 - a zygote that cannot serve ends (the server collects again)
            if os.getpid() == zygote:
                os._exit(70)
            raise
        return None  # pytest goes on: runs the collected items, reports, exits

    def _prepare(self, session, profiling):
        """(snapshot, collected test files) of a zygote about to serve."""
        root = os.path.abspath(os.getcwd())  # noqa: PTH100, PTH109
        snapshot = self.module.loaded_snapshot(root, self.profile if profiling else None, self.called)
        if self.called is None:
            snapshot.called = None
        self.profile = None
        # -x is pytest's --maxfail=1: the runs forked from this session set it as theirs asks (when the collection
        # failed nowhere, where it would have stopped the session already)
        self.exitfirst = "-x" in self.request.get("args", [])
        self.toggle = not self.exitfirst and not session.testsfailed
        self.maxfail = session.config.option.maxfail
        collected = set()
        for item in session.items:
            path = getattr(item, "path", None) or getattr(item, "fspath", None)
            if path is not None:
                collected.add(os.path.abspath(str(path)))  # noqa: PTH100
        stream = sys.modules.get("coharden_stream")
        if stream is not None:  # each run opens its own (a run with a stream and no plugin leaves: fallback)
            stream.redirect(None)
        _set_dumpable(0)
        return snapshot, collected

    def _serve(self, session, snapshot, collected):
        """The zygote's loop: fork a run per request (the first: the request that started it)."""
        request = self.request
        changed: dict[str, Any] = {}
        while True:
            if request is not None:
                sys.stdout.flush()
                sys.stderr.flush()
                status, go = os.pipe(), os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(status[0])
                    os.close(go[1])
                    self._grandchild(session, request, snapshot, changed, status[1], go[0])
                    return
                os.close(status[1])
                os.close(go[0])
                ready = os.read(status[0], 256)
                os.close(status[0])
                if ready not in (b"1", b"2"):
                    os.close(go[1])
                    self._reap(pid)
                    self._send({"fallback": ready[1:].decode(errors="replace")[:200] or "the run was not set up"})
                else:
                    # the server knows the run's pid before any of its code runs: a run that kills this zygote
                    # is the server's to wait for (it inherits the orphan)
                    self._send({"pid": pid, "swapped": ready == b"1"})
                    os.write(go[1], b"1")
                    os.close(go[1])
                    self._send({"rc": self._reap(pid)})
            request = self._next()
            if request is None:
                os._exit(0)
            changed = self._check(snapshot, request, collected)
            if isinstance(changed, str):
                self._send({"stale": changed})
                request = None

    def _reap(self, pid):
        _, status = os.waitpid(pid, 0)
        try:
            os.killpg(pid, signal.SIGKILL)  # what the run left in its process group
        except OSError:
            pass
        return _exit_code(status)

    def _check(self, snapshot, request, collected):
        """The files changed since collection (path -> digest), or why the collected session does not fit."""
        if os.path.abspath(request.get("cwd") or "") != snapshot.root:  # noqa: PTH100
            return "another directory"
        if ("-x" in request.get("args", [])) != self.exitfirst and not self.toggle:
            return "collected with -x, or with a collection error: a run without it collects again"
        changed = self.module.changed_files(snapshot, snapshot.root)
        if changed is None:
            return "a loaded file is gone, or a file was added or removed next to one"
        for path in changed:
            if path in collected or os.path.basename(path) == "conftest.py":  # noqa: PTH119
                return "a test module or conftest changed"
        if changed:
            self.module.analyse_snapshot(snapshot, list(changed))
        return changed

    def _send(self, message):
        os.write(self.replies, (json.dumps(message) + "\n").encode())

    def _next(self):
        while b"\n" not in self.pending:
            try:
                chunk = os.read(self.requests, 1 << 16)
            except OSError:
                return None
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        try:
            request = json.loads(line.decode())
        except ValueError:
            return None
        return request if isinstance(request, dict) else None

    def _grandchild(self, session, request, snapshot, changed, status, go):
        """In a run forked from the zygote: this run's limits and files, the changed bodies swapped in; writes
        b"1" (swapped), b"2" (nothing to swap) or b"0" (cannot: it leaves) to ``status``, then waits for the
        zygote's go (on ``go``) before the tests run."""
        ok = b"0"
        try:
            os.setsid()
            _set_dumpable(1)
            os.close(self.replies)
            os.close(self.requests)
            if request.get("cpu_seconds"):
                cpu = int(request["cpu_seconds"])
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for fd in [1, 2, *self._descriptors()]:
                if fd not in (out, status, go) and self._is_output(fd):
                    os.dup2(out, fd)  # the zygote's output, wherever pytest kept a copy of it (capture, faulthandler)
            os.close(out)
            config = session.config
            if self.toggle:
                config.option.maxfail = 1 if "-x" in request.get("args", []) else self.maxfail
            env = request.get("env") or {}
            if env.get("COHARDEN_STREAM"):
                os.environ["COHARDEN_STREAM"] = env["COHARDEN_STREAM"]
                sys.modules["coharden_stream"].redirect(env["COHARDEN_STREAM"])
            junit = [a.split("=", 1)[1] for a in request.get("args") or [] if str(a).startswith("--junitxml=")]
            if junit:
                xml = [p for p in config.pluginmanager.get_plugins() if type(p).__name__ == "LogXML"]
                if not xml:
                    raise RuntimeError("no JUnit plugin to point at this run's file")
                xml[0].logfile = os.path.normpath(os.path.abspath(junit[-1]))  # noqa: PTH100
                _fresh_clock(xml[0], ["suite_start", "suite_start_time"])
            _fresh_clock(config.pluginmanager.get_plugin("terminalreporter"), ["_session_start", "_sessionstarttime"])
            capture = config.pluginmanager.get_plugin("capturemanager")
            if capture is not None and hasattr(capture, "read_global_capture"):
                capture.read_global_capture()  # what a killed earlier run left in the capture files
            factory = getattr(config, "_tmp_path_factory", None)
            if factory is not None and getattr(factory, "_basetemp", None) is not None:
                factory._basetemp = None  # made on first use, in this run's (wiped) temporary directory
            swapped = False
            if changed:
                why: list[str] = []
                try:
                    swapped = self.module.swap_changed(snapshot, changed, why)
                except Exception as exc:  # noqa: BLE001 - whatever it changed, this process leaves
                    why.append(repr(exc))
                if not swapped:
                    raise RuntimeError("not swappable: " + "; ".join(why))
            ok = b"1" if swapped else b"2"
        except BaseException as exc:  # noqa: BLE001 - leave before any test runs; the server runs it itself
            ok = b"0" + str(exc).encode(errors="replace")[:200]
        os.write(status, ok)
        os.close(status)
        if ok[:1] == b"0":
            os._exit(0)
        go_ahead = os.read(go, 1)
        os.close(go)
        if go_ahead != b"1":  # the zygote is gone: nobody told the server about this run
            os._exit(0)

    def _descriptors(self):
        try:
            return sorted(int(fd) for fd in os.listdir("/proc/self/fd") if fd.isdigit())  # noqa: PTH208
        except OSError:
            return list(range(3, 256))

    def _is_output(self, fd):
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.out.st_dev, self.out.st_ino)


class _Zygote:
    """The server's handle on one zygote (:class:`_CollectOnce`): its pid (a child of the server), the pipe the
    server writes requests to, the pipe it reads the zygote's reports from."""

    def __init__(self, key, pid, requests, replies):
        self.key = key
        self.pid = pid
        self.requests = requests
        self.replies = replies
        self.pending = b""
        self.status = None  # the wait status once it ended
        os.set_blocking(requests, False)  # a zygote that stops reading cannot block the server
        os.set_blocking(replies, False)

    def exited(self):
        if self.status is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done, status = self.pid, signal.SIGKILL  # reaped elsewhere: gone
            if done:
                self.status = status
        return self.status is not None

    def send(self, message):
        try:
            os.write(self.requests, (json.dumps(message) + "\n").encode())
            return True
        except OSError:
            return False

    def read(self, deadline):
        """("line", message), ("gone", None) when it ended, ("timeout", None) or ("garbage", None)."""
        poller = select.poll()
        poller.register(self.replies, select.POLLIN)
        eof = False
        while True:
            if b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                try:
                    message = json.loads(line.decode())
                except ValueError:
                    return "garbage", None
                return ("line", message) if isinstance(message, dict) else ("garbage", None)
            if len(self.pending) > _LINE_LIMIT:
                return "garbage", None
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", None
            if eof:
                if self.exited():
                    return "gone", None
                time.sleep(min(left, 0.005))
                continue
            if poller.poll(min(left, 0.05) * 1000):
                try:
                    chunk = os.read(self.replies, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if chunk:
                    self.pending += chunk
                else:
                    eof = True
            elif self.exited():
                eof = True

    def cont(self):
        try:
            os.kill(self.pid, signal.SIGCONT)
        except OSError:
            pass

    def stop(self):
        """Stop it (SIGSTOP) and wait until it is: a stopped zygote runs nothing between its runs. False: it ended
        (or would not stop and was killed)."""
        if self.exited():
            return False
        try:
            os.kill(self.pid, signal.SIGSTOP)
        except OSError:
            return False
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                self.status = signal.SIGKILL
                return False
            if done and not os.WIFSTOPPED(status):
                self.status = status
                return False
            if done or _state(self.pid) in ("T", "t"):
                return True
            time.sleep(0.001)
        self.kill()
        return False

    def kill(self):
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        if self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.status = signal.SIGKILL
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass


def _number(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _wait_zygote_run(zygote, deadline, run_pid=None):
    """Wait for the end of a run a zygote serves: ({"rc": N}, {"timed_out": True} or {"fallback": why}) and
    whether the zygote lives on. ``run_pid``: the run's pid when the zygote already said it forked (else its
    {"pid"} line comes first). A zygote that ends mid-run (a test killed its parent) leaves its run to the server
    (the namespace's init inherits the orphan), whose own exit status is waited for."""
    while True:
        kind, message = zygote.read(deadline)
        if kind != "line":
            break
        if run_pid is None and _number(message.get("pid")) and message["pid"] > 1:
            run_pid = message["pid"]
            continue
        if run_pid is None and "fallback" in message:
            return {"fallback": str(message["fallback"])[:200]}, True
        if _number(message.get("rc")):
            return {"rc": message["rc"]}, True
        kind = "garbage"
        break
    if kind == "timeout":
        zygote.kill()
        return {"timed_out": True}, False
    zygote.kill()
    if kind == "gone" and run_pid is not None:
        try:
            status = _wait(run_pid, max(0.0, deadline - time.monotonic()))
        except ChildProcessError:  # not the server's child: the zygote reaped it, or it is no run of the zygote's
            return {"rc": -signal.SIGKILL}, False
        if status is None:
            return {"timed_out": True}, False
        return {"rc": _exit_code(status)}, False
    if kind == "gone":  # the zygote ran the tests itself (forking was unsafe), or crashed
        return {"rc": _exit_code(zygote.status)}, False
    return {"rc": -signal.SIGKILL}, False


def main():
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    _set_dumpable(0)
    key = _read_key(sys.stdin)
    if not key:
        return  # not started by coharden's client
    channel = _Channel(proto, key)
    here = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - stdlib-only script
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # noqa: PTH100
    options = {}
    for arg in sys.argv[1:]:
        name, eq, value = arg[2:].partition("=")
        options[name] = value if eq else "1"
    sandboxed = "sandboxed" in options
    keep = set(filter(None, options.get("keep", "").split(",")))
    home = options.get("home", "/tmp/coharden-home")
    tests_tmp = options.get("tmp", "/tmp")
    safe, reason = True, ""
    try:
        import pytest

        with tempfile.TemporaryDirectory() as empty:
            pytest.main(["-q", "-p", "no:cacheprovider", "--co", empty])
        for module in filter(None, options.get("preload", "").split(",")):
            __import__(module)
    except BaseException as exc:  # noqa: BLE001
        safe, reason = False, f"warm-up failed: {exc!r}"
    if safe and options.get("project"):
        imported = sorted(_project_modules(options["project"]) & set(sys.modules))
        if imported:
            safe, reason = False, (f"the warm-up imported the project under test ({', '.join(imported)}: an "
                                   "installed copy, e.g. a pytest plugin); runs need fresh processes")
    if safe and threading.active_count() != 1:
        safe, reason = False, "threads are running after warm-up; forking would not be safe"
    if safe and not hasattr(os, "fork"):
        safe, reason = False, "os.fork is not available"
    if sandboxed:
        _wipe_tmp(keep, home, tests_tmp)
    channel.send({"ready": True, "safe": safe, "reason": reason})
    if not safe:
        return
    warm = _Warm()
    zygotes: dict[Any, _Zygote] = {}  # collect once: zygote key -> _Zygote, oldest first
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        if not channel.accept(request):
            channel.send({"forged": "request"})
            continue
        try:
            mode = warm.prepare(request)
        except Exception:  # noqa: BLE001 - a failed warm import leaves the child cold
            warm.drop()
            mode = ""
        if request.get("prime"):  # import now, run nothing (the checkout is at its base state)
            channel.send({"primed": mode == "warm"})
            continue
        zkey = _zygote_key(request) if sandboxed and request.get("collect") and hasattr(os, "set_blocking") \
            else None
        why: list[str] = []  # why a zygote did not serve the run
        done = _serve_from_zygote(zygotes, zkey, request, channel, why) if zkey in zygotes else None
        if done is None:
            created = zkey is not None and zkey not in zygotes
            done = _run_child(request, mode, warm, key, proto, channel, zkey if created else None, zygotes)
            if zkey is not None:
                done["collected"] = ("collected (" + "; ".join(why) + ")" if why else "collected") \
                    + (", a zygote" if zkey in zygotes else "")
        # between runs no zygote runs (a run may have sent one SIGCONT) and nothing else lives
        for held, zygote in list(zygotes.items()):
            if not zygote.stop():
                zygote.kill()
                del zygotes[held]
        if sandboxed:
            if not _kill_rest([z.pid for z in zygotes.values()]):
                for zygote in zygotes.values():
                    zygote.kill()
                zygotes.clear()
            _wipe_tmp(keep, home, tests_tmp)
        channel.send(done)


def _run_child(request, mode, warm, key, proto, channel, zkey, zygotes, announce=True):
    """Run ``request`` as a fork of the server (today's path); with ``zkey`` the child becomes a zygote
    (:class:`_CollectOnce`), kept in ``zygotes`` when it serves on after this run. Returns the reply.
    ``announce``: send the client the {"pid"} line (not when a zygote that could not serve already did)."""
    swap_status = os.pipe() if mode == "swap" and zkey is None else None
    ends = (os.pipe(), os.pipe()) if zkey is not None else None  # (replies, requests)
    pid = os.fork()
    if pid == 0:
        proto.close()
        child_warm: tuple[_Warm, int | None] | None = None
        zygote = None
        if swap_status is not None:
            os.close(swap_status[0])
            child_warm = (warm, swap_status[1])
        elif mode in ("purge", "swap"):  # a zygote imports afresh what a plain child would swap: its own profile
            child_warm = (warm, None)
        if ends is not None:
            (_, replies), (requests, _) = ends
            called = set()
            if mode == "warm":
                called = warm.snapshot.called
            zygote = (replies, requests, warm.module or _load_warm(), called, [z.pid for z in zygotes.values()])
        _child(request, child_warm, key, zygote)
    if swap_status is not None:
        os.close(swap_status[1])
    if announce:
        channel.send({"pid": pid})
    timeout = float(request.get("timeout") or 1e9)
    if ends is not None:
        (replies, replies_w), (requests_r, requests) = ends
        os.close(replies_w)
        os.close(requests_r)
        made = _Zygote(zkey, pid, requests, replies)
        result, alive = _wait_zygote_run(made, time.monotonic() + timeout)
        if "fallback" in result:  # it could not set up its first run: that run is a plain child's
            made.kill()
            return _run_child(request, mode, warm, key, proto, channel, None, zygotes, announce=False)
        if alive:
            zygotes[zkey] = made
            while len(zygotes) > _ZYGOTES:
                zygotes.pop(next(iter(zygotes))).kill()
        return {"rc": result.get("rc"), "timed_out": bool(result.get("timed_out")), "warm": mode == "warm",
                "swapped": False}
    status = _wait(pid, timeout)
    timed_out = status is None
    if timed_out:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
    try:
        os.killpg(pid, signal.SIGKILL)  # what the tests left behind in their process group
    except OSError:
        pass
    rc = None if timed_out else _exit_code(status)
    swapped = False
    if swap_status is not None:
        swapped = os.read(swap_status[0], 1) == b"1"
        os.close(swap_status[0])
    warmed = mode == "warm" or swapped
    return {"rc": rc, "timed_out": timed_out, "warm": warmed, "swapped": swapped}


def _serve_from_zygote(zygotes, zkey, request, channel, why):
    """Run ``request`` as a fork of the zygote that collected its tests; None when the zygote cannot serve it
    (stale: dropped; the changed bodies cannot be swapped: kept for later runs) - the server runs it itself."""
    zygote = zygotes.pop(zkey)
    zygote.cont()
    if not zygote.send({k: v for k, v in request.items() if k not in ("mac", "seq")}):
        zygote.kill()
        return None
    # a zygote that does not fork the run in time costs no more than the run's own limit once more
    kind, message = zygote.read(time.monotonic() + min(_READY_TIMEOUT, float(request.get("timeout") or 1e9)))
    if kind == "line" and "fallback" in message:
        why.append(str(message["fallback"])[:200])
        zygotes[zkey] = zygote
        return None
    pid = message.get("pid") if kind == "line" else None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        why.append("stale: " + str(message.get("stale"))[:200] if kind == "line" and "stale" in message
                   else "the zygote " + kind)
        zygote.kill()  # stale, gone, silent or garbled: collect again
        return None
    channel.send({"pid": pid})
    result, alive = _wait_zygote_run(zygote, time.monotonic() + float(request.get("timeout") or 1e9), pid)
    if alive:
        zygotes[zkey] = zygote
    swapped = bool(message.get("swapped"))
    return {"rc": result.get("rc"), "timed_out": bool(result.get("timed_out")), "warm": True, "swapped": swapped,
            "collected": "once"}


if __name__ == "__main__":
    main()
