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


def _child(request, swap=None, key=None):
    """Run one request in the forked child. ``swap``: (warm state, status fd) when the server's modules are
    warm but some module file changed: the child swaps in the changed function bodies or purges (``_Warm``)
    and writes b"1" (swapped) or b"0" to the fd before any test code runs; (warm state, None): it purges.
    ``key``: the protocol's secret, wiped here first (a test must not be able to sign a reply)."""
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
        keep = swap[1] if swap else None
        if keep is None:
            os.closerange(3, 1 << 16)  # the server's protocol pipes and anything else it holds
        else:
            os.closerange(3, keep)
            os.closerange(keep + 1, 1 << 16)
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

        rc = pytest.main(list(request["args"]))
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


def _kill_rest():
    """Inside the sandbox's PID namespace: kill every process but this one and the namespace's init."""
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while True:  # reap the ones that were our children
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break


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
        swap_status = os.pipe() if mode == "swap" else None
        pid = os.fork()
        if pid == 0:
            proto.close()
            child_warm: tuple[_Warm, int | None] | None = None
            if swap_status is not None:
                os.close(swap_status[0])
                child_warm = (warm, swap_status[1])
            elif mode == "purge":
                child_warm = (warm, None)
            _child(request, child_warm, key)
        if swap_status is not None:
            os.close(swap_status[1])
        channel.send({"pid": pid})
        status = _wait(pid, float(request.get("timeout") or 1e9))
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
        if sandboxed:
            _kill_rest()
            _wipe_tmp(keep, home, tests_tmp)
        rc = None if timed_out else _exit_code(status)
        swapped = False
        if swap_status is not None:
            swapped = os.read(swap_status[0], 1) == b"1"
            os.close(swap_status[0])
        warmed = mode == "warm" or swapped
        channel.send({"rc": rc, "timed_out": timed_out, "warm": warmed, "swapped": swapped})


if __name__ == "__main__":
    main()
